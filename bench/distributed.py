"""Actor -> learner over gRPC on 127.0.0.1: the transport alone, and real learner/actor processes.

``--part transport`` (default) measures the transport (robot_rl/transport) in this process,
without the actor loop and the learner's updates. Per benchmark:

- ``transitions``: one or two actors (threads, each with its own LearnerClient) push
  ``--transitions`` transitions with two 128 x 128 cameras (frames rendered by the twin's
  scripted expert on pick_cube, cycled) in batches of ``--batch`` through a LearnerServer into a
  LogSink (zarr on disk, acked after flush, as the learner will run): acked transitions/s,
  payload bytes per transition (zlib and raw);
- ``weights``: the SAC actor's trainable parameters (state policy, and pixels with the conv
  encoder) published ``--weights-rounds`` times: bytes per broadcast and the latency from
  ``publish_weights`` to the client's callback, p50 / p95.

``--part e2e`` runs real processes (``python -m robot_rl.cli.main learner ...`` and ``actor
...``, MuJoCo twin, MUJOCO_GL=osmesa, unpaced actors: the twin steps as fast as it can) in a
temporary directory and watches them from outside: the commit records of the logs
(``log.zarr/commit``: what each actor logged, and the learner's per-actor log, i.e. what it
acknowledged), ``weights_version.json``, ``server.json``, /proc CPU times, and a weights
subscriber of its own (Subscribe without Hello, so it is not an actor). One JSON object per run
(``--e2e-runs``):

- ``e2e`` ``pixels_idle_learner`` / ``pixels_idle_learner_2_actors``: two 128 x 128 cameras,
  learner with ``--learning-starts`` above the budget (no updates: transport, logging and the
  actors' rendering alone), one then two actors: transitions/s into the learner (steady window,
  from the learner's log), each actor's env steps/s, backlog, ticks;
- ``e2e`` ``pixels_learning``: the same with a learner that updates (small networks, batch 64):
  ingest and actor tick overruns while the learner is busy on pixels. The learner owes one
  update per received step and pays them after STOP (not interruptible), so the bench stops it
  after ``--learner-exit-timeout-s`` (SIGTERM, then SIGKILL) and says so (``learner.exit``);
- ``e2e`` ``state_learning``: state obs, learner updating from ``--learning-starts 200`` with the
  default networks: actor tick overruns and max_tick_work_s while the learner is busy;
- every ``e2e`` run reports the weights: versions the actors loaded, bytes, and a broadcast
  latency from ``weights_version.json``'s mtime (written just after ``publish_weights`` returns)
  to this bench's subscriber receiving it; it excludes encoding and can be slightly negative;
  ``first_step_policy_version`` > 0 means the actor never acted before weights arrived;
- ``e2e_recovery``: state obs, one actor; once the learner acknowledged ``--kill-after``
  transitions it is SIGKILLed, restarted ``--away-s`` later with ``--resume`` on the same port:
  time from the restart to serving, to the first new acknowledgement, until the learner holds
  everything the actor had logged at the restart (``caught_up``) and what it logs now
  (``caught_up_live``); at the end the learner's log of that actor is compared row by row with
  the actor's log (no transition lost or duplicated; ``truncated`` differs where the crash cut an
  episode, by design).

Pixel learners: the default replay capacity (1M transitions) needs a 50 GiB array per
128 x 128 camera, which a 23 GB machine refuses; the bench passes ``--buffer-capacity
--pixel-buffer-capacity``.

The machine has 2 cores: a learner and one or two actors (plus this bench, mostly asleep)
contend for them; each object reports the processes' CPU use (``contention``) and a timeline.

    python bench/distributed.py                   # transport, about a minute
    python bench/distributed.py --part e2e --out bench/results/distributed_e2e.jsonl  # ~5 min
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_efficiency import machine_info  # noqa: E402

CAMERAS = ("front", "wrist")
STATE_DIM, ACTION_DIM, EP_LEN = 27, 4, 50


@dataclass(frozen=True)
class DistributedBenchConfig:
    """What to measure."""

    transitions: int = 2_000
    """Transitions per actor."""
    batch: int = 10
    """Transitions per pushed batch (1 s of control at 10 Hz)."""
    image_size: int = 128
    """Camera frames are image_size x image_size."""
    frames: int = 200
    """Distinct twin frames per camera, cycled."""
    weights_rounds: int = 20
    """Weights broadcasts timed per policy."""
    part: Literal["transport", "e2e", "all"] = "transport"
    """transport: in-process transport benchmarks; e2e: real learner and actor processes."""
    pixel_steps: int = 1500
    """e2e: the learner's --steps (all actors together) of the pixel runs without updates."""
    pixel_learning_steps: int = 1000
    """e2e: the learner's --steps of the pixel run with updates."""
    state_steps: int = 1500
    """e2e: the learner's --steps of the state run with updates."""
    recovery_steps: int = 2000
    """e2e_recovery: the learner's --steps (over the restart)."""
    kill_after: int = 500
    """e2e_recovery: SIGKILL the learner once it acknowledged this many transitions."""
    away_s: float = 3.0
    """e2e_recovery: seconds between the SIGKILL and the restart."""
    random_steps: int = 100
    """e2e: the actors' --random-steps."""
    tick_budget_s: float = 0.1
    """e2e: the actors' --tick-budget-s."""
    run_timeout_s: float = 300.0
    """e2e: give up on a run (and kill its processes) after this long, seconds."""
    learner_exit_timeout_s: float = 20.0
    """e2e: after the actors ended, wait this long for the learner to exit, then SIGTERM (and
    SIGKILL 10 s later), seconds."""
    pixel_buffer_capacity: int = 20_000
    """e2e: the pixel learners' --buffer-capacity (the default 1M transitions, plus as many for
    interventions, is one 50 GiB array per 128 x 128 camera, which this machine refuses)."""
    e2e_runs: tuple[str, ...] = (
        "pixels_idle_learner",
        "pixels_idle_learner_2_actors",
        "pixels_learning",
        "state_learning",
        "recovery",
    )
    """e2e: which runs, in order."""
    e2e_dir: Path | None = None
    """e2e: keep the run directories here (None: a temporary directory, removed afterwards)."""
    out: Path | None = None
    """Also write the JSON objects here (one per line)."""


def twin_frames(cfg: DistributedBenchConfig) -> dict[str, np.ndarray]:
    """Camera -> (F, H, W, 3) frames of the scripted expert on pick_cube."""
    from robot_rl.cli.collect import LearnerEnvConfig
    from robot_rl.cli.factory import base_to_policy_action, make_env_from_setup
    from robot_rl.core import keys

    lenv = LearnerEnvConfig(
        task="pick_cube", obs="pixels", cameras=CAMERAS, image_size=cfg.image_size
    )
    env, backend = make_env_from_setup(lenv.env_setup())
    out: dict[str, list] = {c: [] for c in CAMERAS}
    try:
        to_policy = base_to_policy_action(env)
        seed = 0
        while len(out[CAMERAS[0]]) < cfg.frames:
            expert = backend.make_expert()
            expert.reset(np.random.default_rng(seed))
            obs, info = env.reset(seed=seed)
            for _ in range(40):
                for c in CAMERAS:
                    out[c].append(obs[keys.IMAGES][c])
                obs, _, term, trunc, info = env.step(to_policy(expert.act(obs, info)))
                if term or trunc:
                    break
            seed += 1
    finally:
        env.close()
        backend.close()
    return {c: np.stack(v[: cfg.frames]) for c, v in out.items()}


def layout(cfg: DistributedBenchConfig):
    from robot_rl.core.batch import ObsLayout
    from robot_rl.core.specs import ArraySpec

    spec = ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8")
    return ObsLayout(state_dim=STATE_DIM, images={c: spec for c in CAMERAS})


def rows(first: int, n: int, frames: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Transitions first .. first + n - 1 in the codec's format (episodes of EP_LEN steps)."""
    seqs = np.arange(first, first + n)
    ep, t = np.divmod(seqs, EP_LEN)
    nf = len(next(iter(frames.values())))
    rng = np.random.default_rng(first)
    out: dict[str, np.ndarray] = {}
    for prefix, shift in (("obs/", 0), ("next_obs/", 1)):
        idx = (seqs + shift) % nf
        out[prefix + "state"] = np.sin(0.01 * (seqs[:, None] + shift + np.arange(STATE_DIM)))
        out[prefix + "state"] = out[prefix + "state"].astype(np.float32)
        for c, f in frames.items():
            out[f"{prefix}images/{c}"] = f[idx]
    act = rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32)
    last = t == EP_LEN - 1
    out.update(
        action=act, policy_action=act.copy(), reward=-np.ones(n, np.float32),
        terminated=np.zeros(n, bool), truncated=last, intervened=np.zeros(n, bool),
        policy_version=np.zeros(n, np.int64), stamp_s=seqs * 0.1 + 0.1,
        episode=ep.astype(np.int64), step=t.astype(np.int64),
    )  # fmt: skip
    return out


def bench_transitions(cfg: DistributedBenchConfig, actors: int, frames, compress: bool) -> dict:
    from robot_rl.transport.client import LearnerClient, LearnerClientConfig
    from robot_rl.transport.codec import encode_transitions, layout_fingerprint
    from robot_rl.transport.log_sink import LogSink
    from robot_rl.transport.server import LearnerServer, LearnerServerConfig

    lay = layout(cfg)
    sample = rows(0, cfg.batch, frames)
    payload, _, _ = encode_transitions(sample, compress=compress)
    with tempfile.TemporaryDirectory() as tmp:
        sink = LogSink(Path(tmp) / "actors", lay, ACTION_DIM)
        srv = LearnerServer(sink, lay, ACTION_DIM, LearnerServerConfig(bind="127.0.0.1:0"))
        fp = layout_fingerprint(lay, ACTION_DIM)
        clients = [
            LearnerClient(
                LearnerClientConfig(target=srv.address, actor_id=f"actor-{i}", compress=compress),
                fp,
            )
            for i in range(actors)
        ]
        try:
            for c in clients:
                assert c.wait_connected(30.0), c.last_error
            t0 = time.perf_counter()

            def run(c) -> None:
                while c.acked_through < cfg.transitions - 1:
                    s = c.next_seq
                    if s is not None and s < cfg.transitions:
                        n = min(cfg.batch, cfg.transitions - s)
                        if c.push(s, rows(s, n, frames)):
                            continue
                    time.sleep(0.001)  # queue full: the actor would go on with its control tick

            threads = [threading.Thread(target=run, args=(c,)) for c in clients]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall = time.perf_counter() - t0
        finally:
            for c in clients:
                c.close()
            srv.stop(0)
            sink.close()
    total = actors * cfg.transitions
    return {
        "benchmark": "transitions",
        "actors": actors,
        "compress": compress,
        "transitions": total,
        "acked_transitions_per_s": total / wall,
        "payload_bytes_per_transition": len(payload) / cfg.batch,
        "wall_s": wall,
    }


def bench_weights(cfg: DistributedBenchConfig, obs: str) -> dict:
    import torch

    from policies.config import SACConfig
    from policies.sac import SACAgent
    from robot_rl.core.batch import ObsLayout
    from robot_rl.transport.client import LearnerClient, LearnerClientConfig
    from robot_rl.transport.codec import layout_fingerprint
    from robot_rl.transport.server import LearnerServer, LearnerServerConfig
    from robot_rl.transport.sink import MemorySink
    from robot_rl.transport.weights import trainable_state

    lay = ObsLayout(state_dim=STATE_DIM, images={}) if obs == "state" else layout(cfg)
    agent = SACAgent(lay, ACTION_DIM, SACConfig(), seed=0)
    # What an actor needs to act: the observation encoder and the actor head.
    policy = torch.nn.ModuleDict({"encoder": agent.encoder, "actor": agent.actor})
    state = trainable_state(policy)
    got: dict[int, float] = {}
    arrived = threading.Condition()

    def on_weights(version: int, _: dict) -> None:
        with arrived:
            got[version] = time.perf_counter()
            arrived.notify_all()

    srv = LearnerServer(MemorySink(), lay, ACTION_DIM, LearnerServerConfig(bind="127.0.0.1:0"))
    client = LearnerClient(
        LearnerClientConfig(target=srv.address, actor_id="actor-0"),
        layout_fingerprint(lay, ACTION_DIM),
        on_weights=on_weights,
    )
    lat, size = [], 0
    try:
        assert client.wait_connected(30.0), client.last_error
        for v in range(1, cfg.weights_rounds + 1):
            with torch.no_grad():
                next(iter(state.values())).add_(1e-3)
            t0 = time.perf_counter()
            size = srv.publish_weights(v, state)
            with arrived:
                assert arrived.wait_for(lambda v=v: v in got, 30.0), f"weights {v} never arrived"
            lat.append(got[v] - t0)
    finally:
        client.close()
        srv.stop(0)
    return {
        "benchmark": "weights",
        "obs": obs,
        "parameters": int(sum(t.numel() for t in state.values())),
        "bytes_per_broadcast": size,
        "latency_ms_p50": 1e3 * float(np.percentile(lat, 50)),
        "latency_ms_p95": 1e3 * float(np.percentile(lat, 95)),
    }


# -- end to end: real learner and actor processes ----------------------------------------------

POLL_S = 0.1
SMALL_SAC = ("--sac.hidden-dims", "64", "64", "--batch-size", "64")


def say(msg: str) -> None:
    """Progress on stderr."""
    print(f"[distributed e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_args(obs: str, image_size: int) -> list[str]:
    """The env flags, the same for learner and actors."""
    args = ["--task", "pick_cube", "--obs", obs]
    if obs == "pixels":
        args += ["--cameras", *CAMERAS, "--image-size", str(image_size)]
    return args


class Child:
    """One ``robot-rl`` subprocess (own session: a Ctrl-C here does not reach it; the bench kills
    it by pid), its stdout / stderr in files, its CPU time sampled from /proc."""

    def __init__(self, name: str, args: list[str], logs: Path, python_args: list[str]) -> None:
        self.name = name
        self.out_path, self.err_path = logs / f"{name}.out", logs / f"{name}.err"
        env = {**os.environ, "MUJOCO_GL": "osmesa", "PYTHONUNBUFFERED": "1"}
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *python_args, *args],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
        self.t0 = time.monotonic()
        self.t_end: float | None = None
        self.cpu_s = 0.0
        self.signals: list[str] = []  # sent by the bench, in order

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """Samples the CPU time first (a zombie still has it), then polls."""
        if self.t_end is not None:
            return False
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            self.cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
        if self.proc.poll() is None:
            return True
        self.t_end = time.monotonic()
        return False

    @property
    def how_ended(self) -> str:
        """ "exit N" or "killed by SIGx", and the signals the bench sent."""
        rc = self.proc.returncode
        ended = (
            "running" if rc is None
            else f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
        )  # fmt: skip
        return f"{ended}; the bench sent {' then '.join(self.signals)}" if self.signals else ended

    def signal(self, sig: int) -> None:
        if self.alive():
            self.signals.append(signal.Signals(sig).name)
            self.proc.send_signal(sig)

    def stop(self, term_after_s: float, kill_after_s: float = 10.0) -> str:
        """Wait for a clean exit, then SIGTERM, then SIGKILL; returns how it ended."""
        for sig, wait_s in (
            (None, term_after_s),
            (signal.SIGTERM, kill_after_s),
            (signal.SIGKILL, 30.0),
        ):
            if sig is not None:
                say(f"{self.name} still running: {signal.Signals(sig).name}")
                self.signal(sig)
            if poll_until(lambda: not self.alive(), wait_s):
                break
        return self.how_ended

    def result(self) -> dict | None:
        """The JSON object the command printed (--json), or None."""
        lines = [s for s in self.out_path.read_text().splitlines() if s.startswith("{")]
        return json.loads(lines[-1]) if lines else None

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.err_path.read_text(errors="replace").splitlines()[-n:])

    def figures(self) -> dict:
        wall = (self.t_end or time.monotonic()) - self.t0
        return {
            "wall_s": round(wall, 2),
            "cpu_s": round(self.cpu_s, 2),
            "cpu_util": round(self.cpu_s / wall, 2) if wall > 0 else None,
            "ended": self.how_ended,
        }


class Children:
    """Every child started; all killed (by pid) on exit, even on error."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.all: list[Child] = []

    def start(self, name: str, args: list[str]) -> Child:
        """``robot-rl *args`` (``python -m robot_rl.cli.main``)."""
        python_args = ["-m", "robot_rl.cli.main"]
        say(f"start {name}: robot-rl {' '.join(args)}")
        child = Child(name, args, self.logs, python_args)
        self.all.append(child)
        return child

    def check(self, *expected_alive: Child) -> None:
        """Raise (with its stderr) if one of these ended."""
        for c in expected_alive:
            if not c.alive():
                raise RuntimeError(f"{c.name} ended early ({c.how_ended}):\n{c.tail()}")

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        for c in self.all:
            if c.alive():
                c.signal(signal.SIGKILL)
                c.proc.wait(30)


def poll_until(ready: Callable[[], Any], timeout_s: float, every_s: float = POLL_S) -> Any:
    """ready()'s first truthy value within timeout_s, else None."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = ready()
        if got or time.monotonic() >= deadline:
            return got or None
        time.sleep(every_s)


def wait_for(
    ready: Callable[[], Any], timeout_s: float, what: str, kids: Children, *alive: Child
) -> Any:
    """Poll ready() while the given children live; raise on timeout or a death."""

    def step() -> Any:
        kids.check(*alive)
        return ready()

    got = poll_until(step, timeout_s)
    if not got:
        raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
    return got


def logged(log_zarr: Path) -> int:
    """Committed transitions of an EpisodeLog, read from its commit record (the store layout of
    robot_rl.replay.log; atomic file replacement makes this safe while its owner writes)."""
    try:
        attrs = json.loads((log_zarr / "commit" / "zarr.json").read_text())["attributes"]
        return int(attrs["num_steps"])
    except (OSError, ValueError, KeyError):
        return 0


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def serving(run: Path, pid: int) -> str | None:
    """The address in run/server.json once written by process ``pid``."""
    info = read_json(run / "server.json")
    return info["address"] if info and info.get("pid") == pid else None


class WeightsProbe:
    """Subscribes to the learner as an actor would (no Hello: not counted as an actor) and
    timestamps (time.time()) each weights version; keeps the newest learner stats."""

    def __init__(self, address: str) -> None:
        self.arrivals: dict[int, float] = {}  # version -> arrival, published while subscribed
        self.initial: set[int] = set()  # versions received on subscribing (published before)
        self.bytes: dict[int, int] = {}
        self.stats: Any = None
        self._stop = threading.Event()
        self._call: Any = None
        self._thread = threading.Thread(target=self._run, args=(address,), daemon=True)
        self._thread.start()

    def _run(self, address: str) -> None:
        import grpc

        from robot_rl.transport import transport_pb2 as pb
        from robot_rl.transport import transport_pb2_grpc as pb_grpc

        while not self._stop.is_set():
            channel = grpc.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 256 << 20)]
            )
            try:
                have = max([*self.arrivals, *self.initial], default=0)
                self._call = pb_grpc.LearnerStub(channel).Subscribe(
                    pb.SubscribeRequest(actor_id="bench-probe", have_weights_version=have)
                )
                first = True
                for event in self._call:
                    now = time.time()
                    kind = event.WhichOneof("event")
                    if kind == "weights":
                        v = event.weights.version
                        self.bytes[v] = len(event.weights.payload)
                        if first:  # published before this subscription: no latency
                            self.initial.add(v)
                        else:
                            self.arrivals.setdefault(v, now)
                        first = False
                    elif kind == "stats":
                        self.stats = event.stats
            except grpc.RpcError:
                pass
            finally:
                channel.close()
            self._stop.wait(0.2)  # the learner went away: resubscribe

    def close(self) -> None:
        self._stop.set()
        if self._call is not None:
            self._call.cancel()
        self._thread.join(5.0)


class Watch:
    """Samples, every POLL_S, the learner's and each actor's committed transitions, the learner's
    weights_version.json, and the children's CPU times."""

    def __init__(self, learner_run: Path, actor_runs: dict[str, Path]) -> None:
        self.learner_run, self.actor_runs = learner_run, actor_runs
        self.samples: list[tuple[float, dict[str, int], dict[str, int]]] = []
        self.published: dict[int, float] = {}  # weights version -> weights_version.json mtime
        self._mtime = 0

    def held(self, actor_id: str) -> int:
        return logged(self.learner_run / "actors" / actor_id / "log.zarr")

    def sample(self, *kids: Child) -> tuple[dict[str, int], dict[str, int]]:
        for k in kids:
            k.alive()
        held = {a: self.held(a) for a in self.actor_runs}  # first: held <= logged
        logs = {a: logged(p / "log.zarr") for a, p in self.actor_runs.items()}
        self.samples.append((time.monotonic(), held, logs))
        try:
            st = (self.learner_run / "weights_version.json").stat()
            if st.st_mtime_ns != self._mtime:
                self._mtime = st.st_mtime_ns
                v = read_json(self.learner_run / "weights_version.json")
                if v:
                    self.published.setdefault(int(v["version"]), st.st_mtime_ns / 1e9)
        except OSError:
            pass
        return held, logs

    def rate(self, which: int, actor: str | None = None, until: int | None = None) -> dict:
        """Transitions/s of the learner's (which=1) or the actors' (2) logs over the steady
        window: first sample above 0 to the first sample reaching ``until`` (else the last)."""
        pts = [
            (t, sum(d.values()) if actor is None else d[actor])
            for t, *ds in self.samples
            for d in [ds[which - 1]]
        ]
        pts = [p for p in pts if p[1] > 0]
        if until is not None:
            end = next((i for i, p in enumerate(pts) if p[1] >= until), len(pts) - 1)
            pts = pts[: end + 1]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return {"per_s": None, "window_s": 0.0, "transitions": 0}
        n, dt = pts[-1][1] - pts[0][1], pts[-1][0] - pts[0][0]
        return {"per_s": round(n / dt, 2), "window_s": round(dt, 2), "transitions": n}

    def timeline(self, t0: float, every_s: float = 1.0) -> list[list]:
        """[seconds since t0, learner held, actors logged] about every ``every_s``."""
        out: list[list] = []
        for t, held, logs in self.samples:
            if not out or t - t0 >= out[-1][0] + every_s:
                out.append([round(t - t0, 1), sum(held.values()), sum(logs.values())])
        return out

    def max_backlog(self) -> dict[str, int]:
        """Most transitions an actor had logged and the learner did not hold yet."""
        return {
            a: max((lg[a] - h[a] for _, h, lg in self.samples), default=0) for a in self.actor_runs
        }


def latency_ms(published: dict[int, float], arrivals: dict[int, float]) -> dict:
    lat = [1e3 * (arrivals[v] - t) for v, t in published.items() if v in arrivals]
    if not lat:
        return {"n": 0}
    return {
        "n": len(lat),
        "p50": round(float(np.percentile(lat, 50)), 2),
        "p95": round(float(np.percentile(lat, 95)), 2),
        "max": round(max(lat), 2),
    }


ACTOR_KEYS = ("env_steps", "episodes", "ticks", "tick_overruns", "max_tick_work_s",
              "weights_loaded", "weights_version", "weights_refused", "pushed_batches",
              "push_refused", "acked_through", "logged_transitions", "stopped_by")  # fmt: skip


def first_policy_version(actor_run: Path) -> int | None:
    """Weights version of the actor's first logged step (0: acted before any weights arrived,
    i.e. uniformly random for --random-steps), from its log's episode table."""
    from robot_rl.replay import EpisodeLog

    try:
        elog = EpisodeLog.open(actor_run / "log.zarr", mode="r")
    except (OSError, ValueError, RuntimeError):
        return None
    try:
        return elog.episodes[0].policy_version_min if elog.episodes else None
    finally:
        elog.close()


def actor_figures(res: dict | None, cfg: DistributedBenchConfig, run: Path) -> dict:
    if res is None:
        return {"result": None}
    out = {k: res.get(k) for k in ACTOR_KEYS}
    out["tick_budget_s"] = cfg.tick_budget_s
    out["overrun_fraction"] = round(res["tick_overruns"] / max(res["ticks"], 1), 4)
    out["random_steps"] = cfg.random_steps
    out["first_step_policy_version"] = first_policy_version(run)
    return out


def learner_figures(res: dict | None) -> dict:
    if res is None:
        return {"result": None}
    keys = ("env_steps", "updates", "weights_version", "stopped_by")
    return {**{k: res.get(k) for k in keys}, "actors": res.get("actors")}


def contention(kids: list[Child]) -> dict:
    return {
        "cpu_cores": os.cpu_count(),
        "processes": {k.name: k.figures() for k in kids},
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "note": f"{len(kids)} robot-rl processes (+ this bench polling every {POLL_S} s) on "
        f"{os.cpu_count()} cores",
    }


def actor_cmd(
    cfg: DistributedBenchConfig, run: Path, addr: str, actor_id: str, seed: int, env: list[str]
) -> list[str]:
    return ["actor", "--run", str(run), "--learner", addr, "--actor-id", actor_id, "--seed",
            str(seed), "--random-steps", str(cfg.random_steps), "--tick-budget-s",
            str(cfg.tick_budget_s), *env, "--no-progress", "--json"]  # fmt: skip


def pixel_capacity(cfg: DistributedBenchConfig, obs: str) -> tuple[list[str], dict]:
    """(learner flags, report) for the pixel learners' replay capacity (the default 1M
    transitions of two 128x128 cameras would not fit in RAM here)."""
    if obs != "pixels":
        return [], {"value": "default"}
    n = cfg.pixel_buffer_capacity
    return ["--buffer-capacity", str(n)], {"value": n, "set_by": "--buffer-capacity"}


def code_state() -> dict:
    """HEAD and the files modified in robot_rl/ (the processes run the working tree)."""

    def git(*args: str) -> str:
        root = Path(__file__).resolve().parent.parent
        try:
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    modified = [s[3:] for s in git("status", "--porcelain", "robot_rl").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD"), "robot_rl_modified": modified}


def run_e2e(
    cfg: DistributedBenchConfig,
    root: Path,
    variant: str,
    obs: str,
    actors: int,
    steps: int,
    learner_extra: list[str],
) -> dict:
    """Learner + ``actors`` actor processes until the learner's ``steps``; see the docstring."""
    work = root / variant
    (work / "logs").mkdir(parents=True)
    lrun = work / "learner"
    env = env_args(obs, cfg.image_size)
    cap_args, cap_report = pixel_capacity(cfg, obs)
    largs = ["learner", "--run", str(lrun), "--bind", "127.0.0.1:0", *env, "--steps", str(steps),
             "--eval-episodes", "0", "--no-progress", "--json", *learner_extra,
             *cap_args]  # fmt: skip
    ids = [f"actor-{i}" for i in range(actors)]
    watch = Watch(lrun, {a: work / a for a in ids})
    probe = None
    with Children(work / "logs") as kids:
        try:
            t0 = time.monotonic()
            learner = kids.start("learner", largs)
            addr = wait_for(
                lambda: serving(lrun, learner.pid), 180, "learner serving", kids, learner
            )
            startup = time.monotonic() - t0
            say(f"learner serving on {addr} after {startup:.1f} s")
            probe = WeightsProbe(addr)
            acts = [
                kids.start(a, actor_cmd(cfg, work / a, addr, a, i + 1, env))
                for i, a in enumerate(ids)
            ]
            deadline = time.monotonic() + cfg.run_timeout_s
            next_say = 0.0
            while any(a.alive() for a in acts):
                held, logs = watch.sample(learner, *acts)
                if time.monotonic() > next_say:
                    say(
                        f"{variant}: learner holds {sum(held.values())}/{steps}, actors logged "
                        f"{sum(logs.values())}"
                    )
                    next_say = time.monotonic() + 10.0
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{variant}: actors still running after {cfg.run_timeout_s:.0f} s"
                    )
                time.sleep(POLL_S)
            watch.sample(learner)
            t_actors_done = time.monotonic()
            say(f"{variant}: actors done; waiting for the learner")
            learner_end = learner.stop(cfg.learner_exit_timeout_s)
            watch.sample()
            say(f"{variant}: learner {learner_end}")
        finally:
            if probe is not None:
                probe.close()
        lres = learner.result()
        ares = {a.name: a.result() for a in acts}
        for a in acts:
            if ares[a.name] is None:
                raise RuntimeError(f"{a.name} printed no result ({a.how_ended}):\n{a.tail()}")
    stats = probe.stats if probe is not None else None
    return {
        "benchmark": "e2e",
        "variant": variant,
        "obs": obs,
        "cameras": list(CAMERAS) if obs == "pixels" else [],
        "image_size": cfg.image_size if obs == "pixels" else None,
        "actors": actors,
        "learner_args": largs[5:],
        "transitions_per_s_into_learner": watch.rate(1, until=steps),
        "actor_env_steps_per_s": {
            a: watch.rate(2, a, until=r["logged_transitions"]) for a, r in ares.items()
        },
        "max_backlog_transitions": watch.max_backlog(),
        "learner_startup_s": round(startup, 2),
        "learner_buffer_capacity": cap_report,
        "learner": {
            **learner_figures(lres),
            "exit": learner_end,
            "exit_after_actors_s": round((learner.t_end or time.monotonic()) - t_actors_done, 2),
            "last_stats": None
            if stats is None
            else {"updates": stats.updates, "replay_size": stats.replay_size},
        },
        "actor": {a: actor_figures(r, cfg, work / a) for a, r in ares.items()},
        "weights": {
            "published_versions_seen": len(watch.published),
            "received_by_bench": len(probe.arrivals) + len(probe.initial) if probe else 0,
            "bytes_per_broadcast": max(probe.bytes.values(), default=None) if probe else None,
            "latency_ms": latency_ms(watch.published, probe.arrivals if probe else {}),
            "actor_weights_version": {a: r["weights_version"] for a, r in ares.items()},
            "actor_weights_loaded": {a: r["weights_loaded"] for a, r in ares.items()},
        },
        "held_equals_logged": {a: watch.held(a) == ares[a]["logged_transitions"] for a in ids},
        "timeline_s_held_logged": watch.timeline(t0),
        "contention": contention(kids.all),
        "code": code_state(),
    }


def log_rows(path: Path, learner_side: bool) -> dict[str, np.ndarray]:
    """Every transition of a log in the codec's format: an actor's (its outbox) or the learner's
    log of one actor (rows as sent, see LogSink.iter_transitions), read-only."""
    from robot_rl.replay import EpisodeLog
    from robot_rl.transport.outbox import LogOutbox, concat_rows, episode_transitions

    elog = EpisodeLog.open(path, mode="r")
    try:
        if not learner_side:
            end = LogOutbox(elog).end_seq
            return LogOutbox(elog).read(0, end) if end else {}
        parts = [
            episode_transitions(
                elog.read_episode(em.index, 0, em.length),
                elog.layout,
                int(em.extra["actor_episode"]),
                int(em.extra["first_step"]),
            )
            for em in elog.durable_episodes()
            if em.length
        ]
        return concat_rows(parts) if parts else {}
    finally:
        elog.close()


def compare_logs(actor_log: Path, learner_log: Path) -> dict:
    """The learner's copy vs the actor's log: missing / duplicated / extra rows by (episode,
    step), and fields that differ row by row (``truncated`` apart: an episode cut by a learner
    crash reads truncated at the learner, by design)."""
    from robot_rl.transport.codec import EPISODE, STEP

    a, lrn = log_rows(actor_log, False), log_rows(learner_log, True)
    ka = list(zip(a[EPISODE].tolist(), a[STEP].tolist(), strict=True)) if a else []
    kl = list(zip(lrn[EPISODE].tolist(), lrn[STEP].tolist(), strict=True)) if lrn else []
    out: dict[str, Any] = {
        "actor_rows": len(ka),
        "learner_rows": len(kl),
        "missing": len(set(ka) - set(kl)),
        "duplicated": len(kl) - len(set(kl)),
        "extra": len(set(kl) - set(ka)),
    }
    if ka == kl and ka:
        out["fields_differing"] = sorted(
            k for k in a if k != "truncated" and not np.array_equal(a[k], lrn[k])
        )
        out["truncated_flags_differing"] = int(np.sum(a["truncated"] != lrn["truncated"]))
    out["identical"] = bool(ka == kl and not out.get("fields_differing") and not out["missing"])
    return out


def run_recovery(cfg: DistributedBenchConfig, root: Path) -> dict:
    """SIGKILL the learner mid-run, restart it with --resume on the same port; see the
    docstring."""
    work = root / "recovery"
    (work / "logs").mkdir(parents=True)
    lrun, arun, aid = work / "learner", work / "actor-0", "actor-0"
    env = env_args("state", cfg.image_size)
    tail = ["--steps", str(cfg.recovery_steps), "--no-progress", "--json"]
    largs = ["learner", "--run", str(lrun), "--bind", "127.0.0.1:0", *env, "--eval-episodes", "0",
             "--learning-starts", "200", *tail]  # fmt: skip
    watch = Watch(lrun, {aid: arun})
    with Children(work / "logs") as kids:
        learner = kids.start("learner", largs)
        addr = wait_for(lambda: serving(lrun, learner.pid), 180, "learner serving", kids, learner)
        actor = kids.start(aid, actor_cmd(cfg, arun, addr, aid, 1, env))
        wait_for(
            lambda: watch.sample(learner, actor)[0][aid] >= cfg.kill_after,
            cfg.run_timeout_s,
            f"learner holding {cfg.kill_after} transitions",
            kids,
            learner,
            actor,
        )
        held_kill, logged_kill = (d[aid] for d in watch.sample(learner, actor))
        version_kill = (read_json(lrun / "weights_version.json") or {}).get("version")
        say(f"recovery: SIGKILL the learner (holds {held_kill}, actor logged {logged_kill})")
        learner.signal(signal.SIGKILL)  # the crash
        learner.proc.wait(30)
        learner.alive()
        time.sleep(cfg.away_s)  # the learner is away
        kids.check(actor)
        logged_restart = watch.sample(actor)[1][aid]
        say(f"recovery: restart (actor logged {logged_restart} meanwhile)")
        t_restart = time.monotonic()
        learner2 = kids.start(
            "learner-resumed", ["learner", "--run", str(lrun), "--resume", "--bind", addr, *tail]
        )
        marks: dict[str, float] = {}

        def progress() -> bool:
            held, logs = watch.sample(learner2, actor)
            now = time.monotonic() - t_restart
            if "serving" not in marks and serving(lrun, learner2.pid):
                marks["serving"] = now
            if "first_ack" not in marks and held[aid] > held_kill:
                marks["first_ack"] = now
            if "caught_up" not in marks and held[aid] >= logged_restart:
                marks["caught_up"] = now
            if "caught_up_live" not in marks and held[aid] >= logs[aid] and "caught_up" in marks:
                marks["caught_up_live"] = now
            return len(marks) == 4

        wait_for(
            progress, cfg.run_timeout_s, "the resumed learner catching up", kids, learner2, actor
        )
        say(f"recovery: caught up {marks['caught_up']:.1f} s after the restart; run to the end")
        poll_until(lambda: not actor.alive() or (watch.sample(), False)[1], cfg.run_timeout_s)
        if actor.alive():
            raise TimeoutError(f"recovery: actor still running after {cfg.run_timeout_s:.0f} s")
        learner_end = learner2.stop(cfg.learner_exit_timeout_s)
        lres, ares = learner2.result(), actor.result()
        if ares is None:
            raise RuntimeError(f"actor printed no result ({actor.how_ended}):\n{actor.tail()}")
        check = compare_logs(arun / "log.zarr", lrun / "actors" / aid / "log.zarr")
    la = ((lres or {}).get("actors") or {}).get(aid, {})
    # learner ingest vs actor production between the first new ack and the live catch-up
    win = [
        (t, h[aid], lg[aid])
        for t, h, lg in watch.samples
        if marks["first_ack"] <= t - t_restart <= marks["caught_up_live"]
    ]
    dt = win[-1][0] - win[0][0] if len(win) > 1 else 0.0
    catch_up = {
        "window_s": round(dt, 2),
        "learner_ingest": round((win[-1][1] - win[0][1]) / dt, 1) if dt else None,
        "actor_production": round((win[-1][2] - win[0][2]) / dt, 1) if dt else None,
    }
    return {
        "benchmark": "e2e_recovery",
        "obs": "state",
        "actors": 1,
        "learner_args": largs[5:],
        "kill_after": cfg.kill_after,
        "away_s": cfg.away_s,
        "at_kill": {
            "learner_held": held_kill,
            "actor_logged": logged_kill,
            "weights_version": version_kill,
        },
        "actor_logged_while_away": logged_restart - logged_kill,
        "at_restart_actor_logged": logged_restart,
        "restart_to_serving_s": round(marks["serving"], 2),
        "restart_to_first_ack_s": round(marks["first_ack"], 2),
        "restart_to_caught_up_s": round(marks["caught_up"], 2),
        "restart_to_caught_up_live_s": round(marks["caught_up_live"], 2),
        "reconnect_after_serving_s": round(marks["first_ack"] - marks["serving"], 2),
        "catch_up_per_s": catch_up,
        "learner": {**learner_figures(lres), "exit": learner_end},
        "actor": actor_figures(ares, cfg, arun),
        "final": {
            "learner_log_transitions": watch.held(aid),
            "actor_logged_transitions": ares["logged_transitions"],
            "actor_acked_through": ares["acked_through"],
            "learner_reported_transitions": la.get("transitions"),
            "learner_reported_acked_through_seq": la.get("acked_through_seq"),
            "learner_reported_duplicates_dropped": la.get("duplicates_dropped"),
            "learner_env_steps": (lres or {}).get("env_steps"),
        },
        "log_comparison": check,
        "timeline_s_held_logged": watch.timeline(t_restart),
        "no_loss_no_duplicates": bool(
            check["identical"] and ares["acked_through"] + 1 == ares["logged_transitions"]
        ),
        "contention": contention(kids.all),
        "code": code_state(),
    }


def bench_e2e(cfg: DistributedBenchConfig) -> list[dict]:
    """The e2e runs named in ``cfg.e2e_runs``; a run that fails is reported as an error."""
    root = Path(cfg.e2e_dir) if cfg.e2e_dir is not None else Path(tempfile.mkdtemp(prefix="e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    idle = [*SMALL_SAC, "--learning-starts", "100000"]
    learning = [*SMALL_SAC, "--learning-starts", "100", "--publish-every-updates", "5"]
    table: dict[str, tuple] = {  # variant -> (obs, actors, learner --steps, learner flags)
        "pixels_idle_learner": ("pixels", 1, cfg.pixel_steps, idle),
        "pixels_idle_learner_2_actors": ("pixels", 2, cfg.pixel_steps, idle),
        "pixels_learning": ("pixels", 1, cfg.pixel_learning_steps, learning),
        "state_learning": ("state", 1, cfg.state_steps, ["--learning-starts", "200"]),
    }
    unknown = set(cfg.e2e_runs) - {*table, "recovery"}
    if unknown:
        raise ValueError(f"e2e_runs: unknown {sorted(unknown)}; use {[*table, 'recovery']}")
    runs: list[tuple[str, Callable[[], dict]]] = [
        (name, (lambda: run_recovery(cfg, root)) if name == "recovery"
         else (lambda name=name: run_e2e(cfg, root, name, *table[name])))
        for name in cfg.e2e_runs
    ]  # fmt: skip
    results = []
    try:
        for name, run in runs:
            say(f"--- {name}")
            t0 = time.monotonic()
            try:
                r = run()
            except Exception as e:  # one failed run is reported, the others still run
                say(f"{name} failed: {e}")
                r = {"benchmark": "e2e", "variant": name, "error": f"{type(e).__name__}: {e}"}
            r["bench_wall_s"] = round(time.monotonic() - t0, 1)
            results.append(r)
    finally:
        if cfg.e2e_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return results


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the children are killed on the way out."""

    def handle(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def main(argv: list[str] | None = None) -> int:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    import torch
    import tyro

    torch.set_num_threads(1)
    cfg = tyro.cli(DistributedBenchConfig, args=argv)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}
    results = []
    if cfg.part in ("transport", "all"):
        frames = twin_frames(cfg)
        results += [
            bench_transitions(cfg, 1, frames, compress=True),
            bench_transitions(cfg, 1, frames, compress=False),
            bench_transitions(cfg, 2, frames, compress=True),
            bench_weights(cfg, "state"),
            bench_weights(cfg, "pixels"),
        ]
    if cfg.part in ("e2e", "all"):
        _exit_on_sigterm()
        results += bench_e2e(cfg)
    lines = [json.dumps({**r, "config": config, "machine": machine_info()}) for r in results]
    for line in lines:
        print(line, flush=True)
    if cfg.out is not None:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
