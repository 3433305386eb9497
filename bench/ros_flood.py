"""Service latency of the twin while a publisher floods every inbound topic. JSON lines.

    MUJOCO_GL=osmesa python bench/ros_flood.py                       # both modes, flood off/on
    MUJOCO_GL=egl python bench/ros_flood.py --rounds 20 --modes lockstep --out /tmp/x.jsonl

For each twin mode (lockstep, realtime) and flood off / on, starts the twin node
(``sim.ros_node``, one 64x64 camera, pick_cube) and, with the flood on, the flooder
(``tests/drivers/flooder.py``: garbage and unsafe messages on ``target_pose``,
``gripper/command``, ``teleop/twist``, ``teleop/joy`` as fast as one publisher can). The env side
is a :class:`drivers.ros_session.RosSession` with a connected :class:`drivers.ros_teleop.RosTeleop`
(which reads the teleop topics). Per round it calls ``estop``, ``clear_error``, ``hold``,
``reset`` and, in lockstep, ``sim/step`` three times, timing each call (wall clock, call to
answer). Real time: also the largest gap between consecutive ``ee_pose`` arrivals (state
publishing keeps going) over the run.

One JSON object per (mode, flood): config, machine, per-service latency p50/p90/p99/max in ms,
the flooder's publish rate, the bridge's rejected / clipped counts, the state gap.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tyro
from geometry_msgs.msg import PoseStamped
from std_msgs.msg import String

from drivers.ros import convert, qos
from drivers.ros.env import ros_env
from drivers.ros_session import RosSession
from drivers.ros_teleop import RosTeleop

REPO = Path(__file__).resolve().parents[1]
FLOODER = REPO / "tests/drivers/flooder.py"


@dataclass(frozen=True)
class BenchConfig:
    """Twin service latencies with and without a flooding publisher."""

    rounds: int = 50
    """Rounds of service calls per (mode, flood)."""
    modes: tuple[str, ...] = ("lockstep", "realtime")
    """Twin modes to measure."""
    domain_id: int = 77
    """ROS_DOMAIN_ID of the benchmark graph."""
    out: Path | None = REPO / "bench/results/ros_flood.jsonl"
    """Append the JSON lines here too (None: print only)."""


def _machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
    }


def _stats_ms(xs: list[float]) -> dict:
    a = np.asarray(xs) * 1e3
    return {
        "n": len(xs),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p90": round(float(np.percentile(a, 90)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "max": round(float(a.max()), 2),
    }


def _decode_status(msg: String) -> tuple[dict, float]:
    data = json.loads(msg.data)
    return data, float(data["stamp_s"])


def _start(args: list[str], domain: int, log: Path) -> subprocess.Popen:
    env = ros_env(domain, extra={"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")})
    out = open(log, "wb")  # noqa: SIM115 - the child writes it; closed with the process
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run_one(cfg: BenchConfig, mode: str, flood: bool, tmp: Path) -> dict:
    twin_args = [
        sys.executable, "-m", "sim.ros_node", "--task", "pick_cube", "--ns", "arm", "--mode",
        mode, "--control-hz", "10", "--image-size", "64", "--cameras", "front",
    ]  # fmt: skip
    twin = _start(twin_args, cfg.domain_id, tmp / f"twin_{mode}_{flood}.log")
    flooder = None
    session = RosSession("arm", node_name="bench_env", domain_id=cfg.domain_id)
    arrivals: list[float] = []
    try:
        pose, _ = session.subscribe("ee_pose", PoseStamped, qos.SENSOR, convert.msg_to_pose_stamped)
        status, _ = session.subscribe("status", String, qos.STATUS, _decode_status)
        session.arrival_hooks.append(
            lambda slot: arrivals.append(time.monotonic()) if slot is pose else None
        )
        teleop = RosTeleop(session=session)
        teleop.connect()
        if not session.wait_until(lambda: status.count > 0, 60.0):
            raise RuntimeError(f"the twin did not start; log: {tmp}")
        flood_log = tmp / f"flood_{mode}.log"
        if flood:
            flood_args = [sys.executable, str(FLOODER), "--ns", "arm"]
            flooder = _start(flood_args, cfg.domain_id, flood_log)
            if not session.wait_until(lambda: teleop.status().rejected > 20, 60.0):
                raise RuntimeError("the flood did not reach the env")
        lat: dict[str, list[float]] = {}

        def call(name: str) -> None:
            t0 = time.monotonic()
            session.trigger(name, 30.0)
            lat.setdefault(name, []).append(time.monotonic() - t0)

        arrivals.clear()
        t_start = time.monotonic()
        for _ in range(cfg.rounds):
            call("estop")
            call("clear_error")
            call("hold")
            call("reset")
            if mode == "lockstep":
                for _ in range(3):
                    call("sim/step")
        wall_s = time.monotonic() - t_start
        gaps = np.diff(arrivals) if len(arrivals) > 1 else np.zeros(1)
        rate = None
        if flooder is not None:
            lines = [ln for ln in flood_log.read_text().splitlines() if ln.startswith("{")]
            rates = [json.loads(ln)["rate_hz"] for ln in lines]
            rate = round(float(np.median(rates))) if rates else None
        s = status.value
        return {
            "benchmark": "ros_flood",
            "config": {**asdict(cfg), "out": str(cfg.out), "mode": mode, "flood": flood},
            "machine": _machine(),
            "latency_ms": {k: _stats_ms(v) for k, v in lat.items()},
            "flood_publish_rate_hz": rate,
            "bridge_rejected": s["rejected"],
            "bridge_clipped": s["clipped"],
            "teleop_rejected": teleop.status().rejected,
            "max_state_gap_ms": round(float(gaps.max()) * 1e3, 1) if mode == "realtime" else None,
            "wall_s": round(wall_s, 1),
        }
    finally:
        session.close()
        if flooder is not None:
            _stop(flooder)
        _stop(twin)


def main(cfg: BenchConfig) -> list[dict]:
    from rich.progress import track

    out = []
    with tempfile.TemporaryDirectory() as d:
        runs = [(m, f) for m in cfg.modes for f in (False, True)]
        for mode, flood in track(runs, description="twin under flood"):
            row = run_one(cfg, mode, flood, Path(d))
            print(json.dumps(row), flush=True)
            out.append(row)
    if cfg.out is not None:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        with open(cfg.out, "a") as f:
            for row in out:
                f.write(json.dumps(row) + "\n")
    return out


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
