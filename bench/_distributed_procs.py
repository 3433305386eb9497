"""Process harness of the end-to-end part of bench/distributed.py (bench/distributed_e2e.py).

``robot-rl`` children in their own sessions, killed by pid on exit; polling; and watchers that
read the runs from outside: the logs' commit records, ``server.json``, ``weights_version.json``,
/proc CPU times, and a weights subscriber of the bench's own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robot_rl.app.nodes.proc_cpu import process_cpu_s

POLL_S = 0.1


def say(msg: str) -> None:
    """Progress on stderr."""
    print(f"[distributed e2e {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Child:
    """One ``robot-rl`` subprocess (own session: a Ctrl-C here does not reach it; the bench kills
    it by pid), its stdout / stderr in files, its CPU time sampled from /proc."""

    def __init__(self, name: str, args: list[str], logs: Path, python_args: list[str]) -> None:
        self.name = name
        self.out_path, self.err_path = logs / f"{name}.out", logs / f"{name}.err"
        env = {"MUJOCO_GL": "osmesa", **os.environ, "PYTHONUNBUFFERED": "1"}
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
            self.cpu_s = process_cpu_s(self.pid)
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
