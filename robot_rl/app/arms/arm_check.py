"""``robot-rl arm check``: bring up a new arm: connect through the setup, read, move a few
centimetres inside the safety box and back, and say what was measured.

It talks to the arm only through the ROS 2 contract (``drivers/CONTRACT.md``), as training will:
the setup's ``arm:`` description must match what the bridge serves (joint count, names), the
state must arrive faster than the control rate, and each test move must arrive. Steps:

1. connect (``--launch`` starts the setup's nodes first) and reset to the setup's start pose;
2. count ``robot_state`` messages for ``read_s`` (the state rate) and check the joint count;
3. for each axis x, y, z: command a target ``distance_m`` away (inside the box, the per-step
   limit applies) once per control tick for ``move_s`` worth of ticks (the env clock's: wall
   time on a robot, sim time on a lockstep twin), then back; per move: the final tracking
   error, the time until the TCP covered half the distance (latency + motion; in control
   ticks), and the largest per-tick motion of the TCP;
4. a report (JSON-able dict); ``ok`` is False with the reasons when a check failed.

On a real arm, keep the e-stop in reach: the moves are small and slow (the per-step limit), but
they are real motion.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.types import ArmCommand, StaleSensorError


@dataclass(frozen=True)
class ArmCheckConfig:
    """Check a new arm through its setup."""

    setup: Path
    """The setup YAML (``arm:``, namespace, safety; see docs/arms.md)."""
    launch: bool = False
    """Start the setup's nodes here (otherwise they run under ``robot-rl up``)."""
    distance_m: float = 0.03
    """Length of each test move, metres (clipped into the safety box)."""
    move_s: float = 2.0
    """Time allowed for each move, seconds."""
    read_s: float = 1.0
    """Time spent counting state messages, seconds."""
    tolerance_m: float = 0.005
    """A move arrived when the TCP is this close to its target, metres."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID (None: $ROS_DOMAIN_ID, else 0)."""
    progress: bool = True
    """Print each step as it happens."""
    json: bool = False
    """Print the report as one JSON object."""

    def __post_init__(self) -> None:
        if not 0.0 < self.distance_m <= 0.1:
            raise ValueError(f"distance_m {self.distance_m} must be in (0, 0.1] metres")
        for name in ("move_s", "read_s", "tolerance_m"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def _say(cfg: ArmCheckConfig, text: str) -> None:
    if cfg.progress:
        print(f"[arm check] {text}", flush=True)


def _move(
    backend: Any, target: np.ndarray, cfg: ArmCheckConfig, start: np.ndarray, hz: float
) -> dict:
    """Command ``target`` once per control tick for ``move_s`` worth of ticks (the env clock's:
    wall time on a robot, sim time on a lockstep twin); what the TCP did."""
    robot, clock = backend.robot, backend.clock
    gripper = float(robot.read_state().gripper_pos)
    half = 0.5 * float(np.linalg.norm(target[:3] - start[:3]))
    t_half = None
    prev = start[:3].copy()
    max_step = 0.0
    for tick in range(1, max(1, round(cfg.move_s * hz)) + 1):
        robot.send_command(ArmCommand(target, gripper))
        clock.tick()
        pos = robot.read_state().tcp_pose[:3]
        max_step = max(max_step, float(np.linalg.norm(pos - prev)))
        prev = pos
        if t_half is None and np.linalg.norm(pos - start[:3]) >= half:
            t_half = tick / hz
        if np.linalg.norm(pos - target[:3]) < 0.2 * cfg.tolerance_m:
            break
    error = float(np.linalg.norm(robot.read_state().tcp_pose[:3] - target[:3]))
    return {
        "error_mm": 1e3 * error,
        "arrived": error <= cfg.tolerance_m,
        "half_way_s": t_half,
        "max_tcp_step_mm": 1e3 * max_step,
    }


def run_arm_check(cfg: ArmCheckConfig) -> dict:
    """Run the check (see the module docstring); the report.

    Raises:
        drivers.setup.SetupError: Invalid setup file.
        drivers.ros_session.RosTimeoutError: The bridge is not reachable.
    """
    from drivers.setup import load_setup
    from robot_rl.app.nodes.ros_env import make_ros_env

    setup = load_setup(cfg.setup)
    arm = setup.arm
    problems: list[str] = []
    _say(cfg, f"{setup.source}: arm {arm.name} ({arm.num_joints} joints), ns /{setup.namespace}")
    env, backend = make_ros_env(
        setup, launch=cfg.launch, needs_task_reward=False, domain_id=cfg.domain_id
    )
    try:
        robot = backend.robot
        try:
            env.reset(seed=0)
            start = robot.read_state()
        except StaleSensorError as e:  # e.g. the bridge serves another arm than described
            return {
                "setup": str(setup.source),
                "arm": arm.name,
                "joint_names": list(arm.joint_names),
                "moves": [],
                "ok": False,
                "problems": [f"no usable state from the arm: {e}"],
            }
        _say(cfg, f"connected; TCP at {np.round(start.tcp_pose[:3], 4).tolist()} m")
        rate = None
        if setup.clock == "realtime":  # a lockstep twin publishes once per step
            slot = robot._slot
            assert slot is not None
            n0, t0 = slot.count, time.monotonic()
            time.sleep(cfg.read_s)  # counting arrivals over a window, not waiting for an event
            rate = (slot.count - n0) / (time.monotonic() - t0)
            _say(cfg, f"state rate {rate:.1f} Hz (control {setup.control_hz:g} Hz)")
            if rate < setup.control_hz:
                problems.append(f"state rate {rate:.1f} Hz is below the control rate")
        joints = int(start.joint_pos.size)
        if joints != arm.num_joints:  # the receiver refuses this; kept for a clear report
            problems.append(f"{joints} joints on the wire, {arm.num_joints} in the description")
        safety = backend.safety
        lo, hi = np.asarray(safety.workspace_low_m), np.asarray(safety.workspace_high_m)
        moves = []
        for axis, name in enumerate("xyz"):
            here = robot.read_state().tcp_pose
            target = here.copy()
            room_up, room_down = hi[axis] - here[axis], here[axis] - lo[axis]
            sign = 1.0 if room_up >= room_down else -1.0
            target[axis] += sign * min(cfg.distance_m, max(room_up, room_down) - 0.005)
            hz = setup.control_hz
            out = _move(backend, target, cfg, here, hz)
            back = _move(backend, here, cfg, robot.read_state().tcp_pose, hz)
            moves.append({"axis": name, "out": out, "back": back})
            _say(
                cfg,
                f"{name}: {1e3 * (target[axis] - here[axis]):+.0f} mm -> error "
                f"{out['error_mm']:.1f} mm, back {back['error_mm']:.1f} mm, half-way "
                f"{(out['half_way_s'] or float('nan')):.2f} s",
            )
            for leg in ("out", "back"):
                if not moves[-1][leg]["arrived"]:
                    problems.append(
                        f"{name} move {leg} ended {moves[-1][leg]['error_mm']:.1f} mm from its "
                        f"target (tolerance {1e3 * cfg.tolerance_m:g} mm)"
                    )
        legs = [m[leg] for m in moves for leg in ("out", "back")]
        half = [leg["half_way_s"] for leg in legs if leg["half_way_s"] is not None]
        return {
            "setup": str(setup.source),
            "arm": arm.name,
            "joint_names": list(arm.joint_names),
            "state_rate_hz": rate,
            "control_hz": setup.control_hz,
            "moves": moves,
            "tracking_error_mm_max": max(leg["error_mm"] for leg in legs),
            "half_way_s_median": float(np.median(half)) if half else None,
            "tick_overruns": int(getattr(backend.clock, "overruns", 0)),
            "ok": not problems,
            "problems": problems,
        }
    finally:
        env.close()
        backend.close()
