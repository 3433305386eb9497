"""Soak test: a distributed run with faults injected for minutes. One JSON object.

    MUJOCO_GL=osmesa python bench/soak.py         # 10 minutes; bench/results/soak.json
    python bench/soak.py --duration-s 120 --fault-every-s 15 --no-train-reward --out None

What runs (every process a real ``robot-rl`` command, on 127.0.0.1, tokens on both servers):

- ``reward serve``: a reward classifier (trained here first with ``reward frames`` +
  ``reward train`` on twin frames, front + wrist at 64 x 64; ``--no-train-reward``: an untrained
  head on the pretrained EfficientNet-Lite0, which exercises the same path in seconds);
- ``learner`` (pick_cube from state, 10 scripted demos, ``--learned-reward``, evaluations on the
  twin's truth);
- actor ``direct``: the direct twin paced at 10 Hz, the simulated human taking over, rewards
  from the reward server;
- ``up`` of a real-time twin behind ROS 2 (cameras front + wrist 64 x 64), and actor ``ros``
  acting on it through the ROS 2 topics, rewards from the reward server.

After ``first_fault_s``, every ``fault_every_s`` one fault, in a random order (seeded) that goes
through every kind before repeating:

- ``kill_learner`` / ``kill_actor_direct`` / ``kill_actor_ros`` / ``kill_reward_server``: SIGKILL,
  ``away_s`` later the same command again (the learner with ``--resume`` on the same port, an actor
  on its own run directory, the reward server on the same port); recovered when the restarted
  process makes progress past the kill (learner: every actor's transitions held again grow;
  actor: its log and the learner's copy grow; reward server: it answers and both actors' logs
  grow);
- ``flood``: tests/drivers/flooder.py floods every command and teleop topic of the ROS twin for
  ``flood_s``; recovered when actor ``ros`` kept logging during the flood and after it;
- ``stall_twin``: the ROS twin node stopped (SIGSTOP) for ``stall_s`` and continued: no state
  or frame meanwhile, as when a driver hangs; recovered when actor ``ros`` (which ends the
  episode on the stale sensor and resets) logs again;
- ``bad_rpcs``: bytes that are not the message, wrong and missing tokens, oversized metadata and
  a burst of 64 connections, to the learner and to the reward server (bench/_soak_rpc.py);
  recovered when none was answered OK and both actors' transitions held by the learner grow.

At the end: STOP through the learner's control file; the actors drain and exit, then the
learner. The report: faults with their recovery times, every actor's log compared row by row with
the learner's copy (nothing lost, nothing duplicated), steps whose label failed while the reward
server was away (dropped by design, counted), the learner's evaluations (success on the twin's
truth) and the processes' CPU times.
"""

from __future__ import annotations

import json
import os
import platform
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tyro
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _distributed_procs import (  # noqa: E402
    Child,
    Children,
    Watch,
    poll_until,
    read_json,
    serving,
    wait_for,
)
from _soak_rpc import answered_ok, bad_rpcs, reward_server_answers  # noqa: E402
from distributed_e2e import compare_logs, contention  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FLOODER = REPO / "tests/drivers/flooder.py"
FAULTS = (
    "kill_learner",
    "kill_actor_direct",
    "kill_actor_ros",
    "kill_reward_server",
    "flood",
    "stall_twin",
    "bad_rpcs",
)
ACTORS = ("direct", "ros")
ACTOR_KEYS = ("env_steps", "episodes", "logged_transitions", "acked_through", "dropped_steps",
              "sensor_faults", "tick_overruns", "late_ticks", "interventions", "intervened_steps",
              "weights_loaded", "stopped_by")  # fmt: skip


@dataclass(frozen=True)
class SoakConfig:
    """A distributed run with faults injected."""

    duration_s: float = 600.0
    """How long the faults go on (from the first fault), seconds."""
    first_fault_s: float = 30.0
    """Run without faults this long once every process is up, seconds."""
    fault_every_s: float = 60.0
    """One fault this often, seconds (a fault's recovery may push the next one later)."""
    max_faults: int | None = None
    """Stop after this many faults even before duration_s (None: duration_s decides)."""
    faults: tuple[str, ...] = FAULTS
    """The kinds of fault to inject (each round goes through all of them in a random order)."""
    away_s: float = 3.0
    """A killed process is restarted this long after its SIGKILL, seconds."""
    flood_s: float = 20.0
    """How long a flood lasts, seconds."""
    stall_s: float = 2.0
    """How long the twin node is stopped (SIGSTOP ... SIGCONT) in a stall, seconds."""
    recovery_timeout_s: float = 180.0
    """A fault not recovered from within this long is reported unrecovered, seconds."""
    seed: int = 0
    """Seed of the fault order (and of the actors)."""
    train_reward: bool = True
    """Train the reward classifier on twin frames first (about 2 minutes); else an untrained
    head (the same serving path, a meaningless reward)."""
    demos: int = 10
    """Scripted demos for the learner."""
    eval_every_steps: int = 2000
    """The learner evaluates (on the twin's truth) every this many env steps."""
    eval_episodes: int = 10
    """Episodes per evaluation."""
    domain_id: int = 78
    """ROS_DOMAIN_ID of the soak's ROS 2 graph."""
    work: Path | None = None
    """Keep every run, log and model here (None: a temporary directory, removed)."""
    out: Path | None = REPO / "bench/results/soak.json"
    """Write the JSON here too (None: print only)."""


def say(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def robot_rl(*args: str, timeout_s: float = 900) -> dict:
    """Run a preparation command to its end; its --json result."""
    say("robot-rl " + " ".join(args))
    proc = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli.main", *args],
        capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"robot-rl {args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [s for s in proc.stdout.splitlines() if s.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def untrained_classifier(out: Path) -> Path:
    """An untrained head on the pretrained EfficientNet-Lite0 (front + wrist, 64 x 64); its
    threshold so high that it never confirms a success (episodes run to their time limit)."""
    from rewards.classifier import ClassifierCard, ClassifierHead, save_classifier

    cams = ("front", "wrist")
    head = ClassifierHead(cams, 1280)
    card = ClassifierCard(
        encoder="efficientnet_lite0", cameras=cams, image_size=(64, 64), feature_dim=1280,
        hidden=64, dropout=0.3, threshold=0.999, target_precision=0.95, temperature=1.0,
        label_set_hash="untrained-soak", model_version="untrained",
    )  # fmt: skip
    return save_classifier(out, head, card)


def ros_setup(path: Path, cameras: tuple[str, ...], image: int) -> Path:
    """A real-time twin (pick_cube) behind ROS 2, only the twin node."""
    raw = {
        "name": "soak",
        "namespace": "arm",
        "robot": "twin",
        "task": "pick_cube",
        "clock": "realtime",
        "control_hz": 10.0,
        "max_state_age_s": 0.3,
        "max_image_age_s": 0.3,
        "cameras": [{"name": c, "height": image, "width": image} for c in cameras],
        "nodes": [
            {
                "name": "twin",
                "module": "sim.ros_node",
                "args": [
                    "--task",
                    "${task}",
                    "--ns",
                    "${namespace}",
                    "--cameras",
                    *cameras,
                    "--image-size",
                    str(image),
                    "--mode",
                    "${clock}",
                    "--control-hz",
                    "${control_hz}",
                    "--state-hz",
                    "50",
                    "--camera-hz",
                    "15",
                ],  # fmt: skip
                "restart": {"policy": "never"},
                "required": True,
            }
        ],
    }
    path.write_text(yaml.safe_dump(raw))
    return path


class Soak:
    """The processes of the soak, their commands, and how to restart each."""

    def __init__(self, cfg: SoakConfig, work: Path, kids: Children) -> None:
        self.cfg, self.work, self.kids = cfg, work, kids
        self.lrun = work / "learner"
        self.runs = {a: work / f"actor-{a}" for a in ACTORS}
        self.watch = Watch(self.lrun, self.runs)
        self.ltoken, self.rtoken = secrets.token_hex(8), secrets.token_hex(8)
        self.reward_addr = f"127.0.0.1:{free_port()}"
        self.addr = "127.0.0.1:0"
        self.procs: dict[str, Child] = {}
        self.starts: dict[str, int] = {}
        self.model = work / "rm"
        self.setup = work / "setup.yaml"
        self.demos = work / "demos.zarr"

    # -- commands --------------------------------------------------------------------------------
    def _learner_args(self, resume: bool) -> list[str]:
        c = self.cfg
        args = [
            "learner",
            "--run",
            str(self.lrun),
            "--bind",
            self.addr,
            "--token",
            self.ltoken,
            "--no-progress",
            "--json",
            "--num-threads",
            "1",
            "--stop-grace-s",
            "60",
            "--steps",
            "1000000",
        ]  # fmt: skip  (the end is the soak's STOP)
        if resume:  # the run's own settings, this call's budget, address and token
            return [*args, "--resume"]
        return [*args, "--task", "pick_cube", "--obs", "state", "--demos", str(self.demos),
                "--learned-reward", "--eval-every-steps",
                str(c.eval_every_steps), "--eval-episodes", str(c.eval_episodes)]  # fmt: skip

    def _actor_args(self, name: str) -> list[str]:
        args = ["actor", "--run", str(self.runs[name]), "--learner", self.addr, "--actor-id",
                name, "--token", self.ltoken, "--seed", str(self.cfg.seed + ACTORS.index(name) + 1),
                "--reward", str(self.model), "--reward-server", self.reward_addr,
                "--reward-token", self.rtoken, "--no-progress", "--json"]  # fmt: skip
        if name == "direct":
            return [*args, "--human", "sim", "--control-hz", "10"]
        return [*args, "--setup", str(self.setup), "--domain-id", str(self.cfg.domain_id)]

    def _reward_args(self) -> list[str]:
        return ["reward", "serve", "--model", str(self.model), "--bind", self.reward_addr,
                "--token", self.rtoken]  # fmt: skip

    # -- processes -------------------------------------------------------------------------------
    def start(self, name: str) -> Child:
        n = self.starts.get(name, 0)
        self.starts[name] = n + 1
        label = name if n == 0 else f"{name}#{n}"
        if name == "learner":
            args = self._learner_args(resume=n > 0)
        elif name == "reward_server":
            args = self._reward_args()
        else:
            args = self._actor_args(name)
        child = self.kids.start(label, args)
        self.procs[name] = child
        if name == "learner":
            self.addr = wait_for(
                lambda: serving(self.lrun, child.pid), 180, "learner serving", self.kids, child
            )
        elif name == "reward_server":
            wait_for(
                lambda: reward_server_answers(self.reward_addr, self.rtoken), 120,
                "reward server answering", self.kids, child,
            )  # fmt: skip
        return child

    def alive(self) -> list[Child]:
        return [c for c in self.procs.values() if c.alive()]

    def sample(self) -> tuple[dict[str, int], dict[str, int]]:
        held, logs = self.watch.sample(*self.procs.values())
        for name, c in self.procs.items():
            if not c.alive() and name != "flooder" and c.signals[-1:] != ["SIGKILL"]:
                raise RuntimeError(f"{c.name} ended on its own ({c.how_ended}):\n{c.tail(30)}")
        return held, logs

    def until(self, cond: Any, what: str, timeout_s: float | None = None) -> float | None:
        """Seconds until ``cond(held, logged)`` holds for a sample (one per poll), or None after
        the timeout."""
        t0 = time.monotonic()
        got = poll_until(lambda: cond(*self.sample()), timeout_s or self.cfg.recovery_timeout_s)
        if not got:
            say(f"not recovered: {what}")
            return None
        return round(time.monotonic() - t0, 2)

    def idle_until(self, t: float) -> None:
        """Sample (and check every process) until time.monotonic() reaches t."""
        while time.monotonic() < t:
            self.sample()
            time.sleep(0.2)

    def grows(self, which: int, names: tuple[str, ...]) -> Any:
        """cond for :meth:`until`: every named actor's held (which=0) or logged (1) count passed
        its value now."""
        now = self.sample()[which]
        return lambda *sample: all(sample[which][a] > now[a] for a in names)

    # -- faults ----------------------------------------------------------------------------------
    def kill(self, name: str) -> dict:
        child = self.procs[name]
        held, logs = self.sample()
        child.signal(signal.SIGKILL)
        child.proc.wait(30)
        child.alive()
        time.sleep(self.cfg.away_s)
        t0 = time.monotonic()
        self.start(name)
        out: dict[str, Any] = {"at_kill": {"held": held, "logged": logs}}
        out["restart_to_serving_s"] = round(time.monotonic() - t0, 2)
        if name == "learner":
            cond = lambda h, _: all(h[a] > held[a] for a in ACTORS)  # noqa: E731
            what = "every actor's transitions reaching the restarted learner"
        elif name == "reward_server":
            cond = self.grows(0, ACTORS)
            what = "both actors' transitions (labelled again) reaching the learner"
        else:
            cond = lambda h, lg: lg[name] > logs[name] and h[name] > held[name]  # noqa: E731
            what = f"actor {name} logging and its transitions reaching the learner"
        out["restart_to_recovered_s"] = self.until(cond, what)
        out["recovered"] = out["restart_to_recovered_s"] is not None
        return out

    def flood(self) -> dict:
        logs0 = self.sample()[1]["ros"]
        flooder = Child("flooder", [str(FLOODER), "--ns", "arm"], self.kids.logs, [])
        self.kids.all.append(flooder)
        self.procs["flooder"] = flooder
        deadline = time.monotonic() + self.cfg.flood_s
        self.idle_until(deadline)
        during = self.sample()[1]["ros"] - logs0
        flooder.signal(signal.SIGINT)
        if not poll_until(lambda: not flooder.alive(), 10):
            flooder.signal(signal.SIGKILL)
            flooder.proc.wait(10)
        del self.procs["flooder"]
        rates = [json.loads(s)["rate_hz"] for s in flooder.out_path.read_text().splitlines()
                 if s.startswith("{")]  # fmt: skip
        after = self.until(self.grows(1, ("ros",)), "actor ros logging after the flood")
        return {
            "flood_s": self.cfg.flood_s,
            "flooder_msgs_per_s": round(sum(rates) / len(rates)) if rates else None,
            "ros_actor_logged_during_flood": during,
            "after_flood_to_logging_s": after,
            "recovered": during > 0 and after is not None,
        }

    def stall_twin(self) -> dict:
        up = read_json(self.work / "logs/up/up.json") or {}
        (pid,) = [n["pid"] for n in up.get("nodes", []) if n["name"] == "twin"]
        logs0 = self.sample()[1]["ros"]
        os.kill(pid, signal.SIGSTOP)
        try:
            self.idle_until(time.monotonic() + self.cfg.stall_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        during = self.sample()[1]["ros"] - logs0
        after = self.until(self.grows(1, ("ros",)), "actor ros logging after the stall")
        stats = lambda: read_json(self.runs["ros"] / "actor.json") or {}  # noqa: E731
        faults = poll_until(lambda: stats().get("sensor_faults"), 10)  # written at episode ends
        return {
            "ros_actor_sensor_faults": faults,
            "stall_s": self.cfg.stall_s,
            "ros_actor_logged_during_stall": during,
            "after_stall_to_logging_s": after,
            "recovered": after is not None,
        }

    def bad_rpcs(self) -> dict:
        counts = bad_rpcs(self.addr, self.ltoken, self.reward_addr, self.rtoken)
        ok = answered_ok(counts)
        after = self.until(self.grows(0, ACTORS), "good clients served after the bad requests")
        return {
            "status_codes": counts,
            "answered_ok": ok,
            "then_good_clients_progress_s": after,
            "recovered": ok == 0 and after is not None,
        }

    def inject(self, kind: str) -> dict:
        if kind.startswith("kill_"):
            target = kind.removeprefix("kill_").removeprefix("actor_")
            return self.kill(target)
        return {"flood": self.flood, "stall_twin": self.stall_twin, "bad_rpcs": self.bad_rpcs}[
            kind
        ]()


def _machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
    }


def _fault_order(cfg: SoakConfig) -> Any:
    rng = random.Random(cfg.seed)
    while True:
        kinds = list(cfg.faults)
        rng.shuffle(kinds)
        yield from kinds


def prepare(cfg: SoakConfig, s: Soak) -> dict:
    """Demos, the reward classifier, the ROS setup."""
    t0 = time.monotonic()
    robot_rl("collect", "--out", str(s.demos), "--episodes", str(cfg.demos), "--json")
    card: dict[str, Any] = {}
    if cfg.train_reward:
        frames = s.work / "frames.zarr"
        robot_rl("reward", "frames", "--task", "pick_cube", "--out", str(frames), "--json")
        res = robot_rl("reward", "train", "--frames", str(frames), "--out", str(s.model),
                       "--augment-copies", "1", "--json")  # fmt: skip
        card = {k: res.get(k) for k in ("threshold", "metrics") if k in res}
    else:
        untrained_classifier(s.model)
    cams = tuple(json.loads((s.model / "card.json").read_text())["cameras"])
    ros_setup(s.setup, cams, 64)
    return {"prepare_s": round(time.monotonic() - t0, 1), "classifier": card, "cameras": cams}


def run(cfg: SoakConfig, work: Path) -> dict:
    os.environ["ROS_DOMAIN_ID"] = str(cfg.domain_id)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    (work / "logs").mkdir(parents=True, exist_ok=True)
    with Children(work / "logs") as kids:
        try:
            return _soak(cfg, Soak(cfg, work, kids))
        finally:
            _stop_setup(kids, work)


def _stop_setup(kids: Children, work: Path) -> None:
    """Stop ``up`` with SIGINT (it stops its nodes) before the children are killed; kill any node
    it left (a SIGKILLed ``up`` cannot stop its nodes, which would stay in the ROS domain)."""
    for c in kids.all:
        if c.name == "up" and c.alive():
            c.signal(signal.SIGINT)
            poll_until(lambda c=c: not c.alive(), 30)
    for node in (read_json(work / "logs/up/up.json") or {}).get("nodes", []):
        if node.get("pid"):
            try:
                os.killpg(node["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _soak(cfg: SoakConfig, s: Soak) -> dict:
    """Start everything, inject the faults, STOP, compare; the report."""
    work, kids = s.work, s.kids
    faults: list[dict] = []
    prep = prepare(cfg, s)
    up = kids.start("up", ["up", str(s.setup), "--log-dir", str(work / "logs/up"),
                           "--domain-id", str(cfg.domain_id), "--no-live"])  # fmt: skip
    s.start("reward_server")
    s.start("learner")
    for a in ACTORS:
        s.start(a)
    t_up = time.monotonic()
    if s.until(s.grows(0, ACTORS), "both actors' transitions at the learner", 300) is None:
        raise RuntimeError("the run did not start:\n" + "\n".join(c.tail() for c in s.alive()))
    say(f"every process up; faults from {cfg.first_fault_s:.0f} s for {cfg.duration_s:.0f} s")
    s.idle_until(t_up + cfg.first_fault_s)
    t_faults = time.monotonic()
    order = _fault_order(cfg)
    while time.monotonic() - t_faults < cfg.duration_s and len(faults) < (
        cfg.max_faults if cfg.max_faults is not None else len(faults) + 1
    ):
        kind = next(order)
        t = time.monotonic() - t_faults
        held = sum(s.sample()[0].values())
        say(f"fault {len(faults) + 1} at {t:.0f} s: {kind} (learner holds {held})")
        rec = {"kind": kind, "t_s": round(t, 1), **s.inject(kind)}
        say(f"  {'recovered' if rec['recovered'] else 'NOT RECOVERED'}: {rec}")
        faults.append(rec)
        s.idle_until(t_faults + len(faults) * cfg.fault_every_s)
    say("STOP through the learner's control file")
    tmp = s.lrun / "control.tmp"
    tmp.write_text("STOP\n")
    os.replace(tmp, s.lrun / "control")
    actors = [s.procs[a] for a in ACTORS]
    if not poll_until(lambda: (s.watch.sample(), not any(a.alive() for a in actors))[1], 300):
        raise TimeoutError("actors still running 300 s after STOP")
    learner_end = s.procs["learner"].stop(120)
    for name in ("reward_server",):
        s.procs[name].signal(signal.SIGINT)
    up.signal(signal.SIGINT)
    poll_until(lambda: not up.alive() and not s.procs["reward_server"].alive(), 30)
    results = {a: s.procs[a].result() for a in ACTORS}
    lres = s.procs["learner"].result()
    logs = {
        a: compare_logs(s.runs[a] / "log.zarr", s.lrun / "actors" / a / "log.zarr") for a in ACTORS
    }
    evals = [json.loads(x) for x in (s.lrun / "eval.jsonl").read_text().splitlines() if x]
    return {
        "benchmark": "soak",
        "config": {**asdict(cfg), "work": str(cfg.work), "out": str(cfg.out)},
        "machine": _machine(),
        "prepare": prep,
        "faults_injected": len(faults),
        "faults_by_kind": {k: sum(f["kind"] == k for f in faults) for k in cfg.faults},
        "recovered": sum(f["recovered"] for f in faults),
        "faults": faults,
        "nothing_lost": all(c["identical"] for c in logs.values()),
        "logs_actor_vs_learner": logs,
        "actors": {
            a: None if r is None else {k: r.get(k) for k in ACTOR_KEYS} for a, r in results.items()
        },
        "actor_exits": {a: s.procs[a].how_ended for a in ACTORS},
        "learner": {
            "exit": learner_end,
            "env_steps": (lres or {}).get("env_steps"),
            "updates": (lres or {}).get("updates"),
        },
        "evaluations": [(e["env_steps"], e["success_rate"]) for e in evals],
        "final_success": evals[-1]["success_rate"] if evals else None,
        "timeline_s_held_logged": s.watch.timeline(t_up, every_s=10.0),
        "contention": contention(kids.all),
        "wall_s": round(time.monotonic() - t_up, 1),
    }


def main(cfg: SoakConfig) -> dict:
    unknown = set(cfg.faults) - set(FAULTS)
    if unknown:
        raise SystemExit(f"unknown faults {sorted(unknown)}; choose from {list(FAULTS)}")
    if cfg.work is not None:
        cfg.work.mkdir(parents=True, exist_ok=True)
        res = run(cfg, cfg.work)
    else:
        with tempfile.TemporaryDirectory(prefix="soak-") as d:
            res = run(cfg, Path(d))
    line = json.dumps(res)
    print(line, flush=True)
    if cfg.out is not None:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        cfg.out.write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main(tyro.cli(SoakConfig))
