"""The safety layer every backend shares (twin, ROS 2 arm bridge, Franka driver).

Applied to every absolute target pose before it reaches a controller:

1. validation: finite numbers, right shapes, else :class:`UnsafeCommandError` (caller holds);
2. workspace box on the commanded TCP position, and a cone on its orientation around a
   nominal orientation;
3. per-step motion limit: the target may be at most ``max_step_m`` / ``max_step_rad`` from the
   current measured TCP pose.

Order matters and is chosen so that both limits hold whenever the arm is inside the box: the
box (a convex set) is applied first, then the step limit pulls the target along the segment
towards the current pose, which stays inside the box. If the arm is outside the box (pushed by
a person), the step limit still holds and the target moves towards the box.

:class:`CommandWatchdog` turns a silent command stream into a hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.core import frames
from robot_rl.core.types import ArmCommand, SafetyReport, UnsafeCommandError

# TCP pointing straight down (z axis of the TCP along -z of the base): 180 deg about x.
DOWN_QUAT = (0.0, 1.0, 0.0, 0.0)


@dataclass(frozen=True)
class SafetyConfig:
    """Limits applied to every commanded pose.

    Attributes:
        workspace_low_m: (x, y, z) lower corner of the TCP box in the base frame, metres.
        workspace_high_m: (x, y, z) upper corner of the TCP box in the base frame, metres.
        orientation_center_quat: (w, x, y, z) nominal TCP orientation.
        orientation_max_rad: Largest allowed rotation angle away from the nominal orientation.
        max_step_m: Largest distance of a target from the current TCP position, metres.
        max_step_rad: Largest rotation angle of a target from the current TCP orientation.
        watchdog_timeout_s: Without a fresh command for this long, the arm holds its pose.
    """

    workspace_low_m: tuple[float, float, float] = (0.25, -0.35, 0.0)
    workspace_high_m: tuple[float, float, float] = (0.75, 0.35, 0.45)
    orientation_center_quat: tuple[float, float, float, float] = DOWN_QUAT
    orientation_max_rad: float = 0.8
    max_step_m: float = 0.05
    max_step_rad: float = 0.3
    watchdog_timeout_s: float = 0.5

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.workspace_low_m), np.asarray(self.workspace_high_m)
        if lo.shape != (3,) or hi.shape != (3,) or np.any(lo >= hi):
            pairs = zip("xyz", lo.ravel(), hi.ravel(), strict=False)
            bad = [axis for axis, lo_a, hi_a in pairs if lo_a >= hi_a]
            axes = f" (not on {', '.join(bad)})" if bad and lo.shape == hi.shape == (3,) else ""
            raise ValueError(
                f"workspace_low_m {self.workspace_low_m} must be below workspace_high_m "
                f"{self.workspace_high_m} on every axis{axes}"
            )
        for name in ("max_step_m", "max_step_rad", "watchdog_timeout_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if not 0 < self.orientation_max_rad <= np.pi:
            raise ValueError(
                f"orientation_max_rad must be in (0, pi], got {self.orientation_max_rad}"
            )
        try:
            frames.quat_normalize(np.asarray(self.orientation_center_quat))
        except ValueError as e:
            raise ValueError(f"orientation_center_quat: {e}") from e


def validate_command(command: ArmCommand) -> None:
    """Raise :class:`UnsafeCommandError` on a malformed command."""
    target = np.asarray(command.target_pose)
    if target.shape != (7,):
        raise UnsafeCommandError(
            f"target_pose must have shape (7,) [x, y, z, qw, qx, qy, qz], got {target.shape}"
        )
    if not np.all(np.isfinite(target)) or not np.isfinite(command.gripper):
        raise UnsafeCommandError(
            f"command contains NaN or inf (target_pose={target}, gripper={command.gripper}); "
            "the robot holds its pose. Check the policy output or the teleop device."
        )
    if np.linalg.norm(target[3:7]) < 1e-6:
        raise UnsafeCommandError("target_pose quaternion is zero")


class SafetyLayer:
    """Applies :class:`SafetyConfig` to commands. Pure numpy; shared by every backend."""

    def __init__(self, config: SafetyConfig) -> None:
        self.config = config
        self._lo = np.asarray(config.workspace_low_m, dtype=np.float64)
        self._hi = np.asarray(config.workspace_high_m, dtype=np.float64)
        self._q_center = frames.quat_normalize(np.asarray(config.orientation_center_quat))

    def in_workspace(self, position_m: np.ndarray, atol: float = 1e-9) -> bool:
        """Whether a TCP position lies inside the workspace box."""
        p = np.asarray(position_m)
        return bool(np.all(p >= self._lo - atol) and np.all(p <= self._hi + atol))

    def apply(
        self, command: ArmCommand, current_pose: np.ndarray
    ) -> tuple[ArmCommand, SafetyReport]:
        """Clip ``command`` against the limits, given the current measured TCP pose (7,)."""
        validate_command(command)
        cfg = self.config
        target_p = np.asarray(command.target_pose[:3], dtype=np.float64)
        target_q = frames.quat_normalize(command.target_pose[3:7])
        cur_p = np.asarray(current_pose[:3], dtype=np.float64)
        cur_q = frames.quat_normalize(current_pose[3:7])

        # 1. Workspace box and orientation cone.
        boxed_p = np.clip(target_p, self._lo, self._hi)
        workspace_clipped = not np.allclose(boxed_p, target_p, atol=1e-12, rtol=0)
        e_center = frames.quat_error(target_q, self._q_center)
        angle = float(np.linalg.norm(e_center))
        orientation_clipped = angle > cfg.orientation_max_rad
        if orientation_clipped:
            e_center = e_center * (cfg.orientation_max_rad / angle)
            target_q = frames.quat_mul(frames.quat_from_rotvec(e_center), self._q_center)

        # 2. Per-step motion limit relative to the measured pose.
        dp = boxed_p - cur_p
        dist = float(np.linalg.norm(dp))
        step_clipped = dist > cfg.max_step_m
        if step_clipped:
            boxed_p = cur_p + dp * (cfg.max_step_m / dist)
        e_step = frames.quat_error(target_q, cur_q)
        step_angle = float(np.linalg.norm(e_step))
        if step_angle > cfg.max_step_rad:
            step_clipped = True
            e_step = e_step * (cfg.max_step_rad / step_angle)
            target_q = frames.quat_mul(frames.quat_from_rotvec(e_step), cur_q)

        gripper = float(np.clip(command.gripper, 0.0, 1.0))
        report = SafetyReport(
            workspace_clipped=workspace_clipped,
            step_clipped=step_clipped,
            orientation_clipped=orientation_clipped,
            gripper_clipped=gripper != command.gripper,
        )
        return ArmCommand(frames.pose(boxed_p, target_q), gripper), report


class CommandWatchdog:
    """Tracks command freshness. ``expired(now)`` is True once no command arrived for the
    timeout; the backend must then hold the current pose until a new command comes."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.timeout_s = timeout_s
        self._last_s: float | None = None

    def feed(self, now_s: float) -> None:
        """Record a fresh command at ``now_s``."""
        self._last_s = now_s

    def reset(self) -> None:
        """Forget the last command (after a reset nothing is pending)."""
        self._last_s = None

    def expired(self, now_s: float) -> bool:
        """True if a command was received but none within ``timeout_s`` before ``now_s``."""
        return self._last_s is not None and now_s - self._last_s > self.timeout_s
