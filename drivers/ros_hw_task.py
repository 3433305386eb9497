"""HardwareTask: the :class:`robot_rl.core.protocols.Task` of a real robot (``robot: hardware``).

A real robot has no ``task/status`` and no ``task/reset`` (those are the twin's): nothing on
the robot knows whether the task is solved. So this task only places the arm:

- :meth:`HardwareTask.reset` returns the start pose of the setup (``reset_pose`` [x, y, z,
  qw, qx, qy, qz] in the base frame), its position moved by a uniform offset in
  ``[-reset_jitter_m, +reset_jitter_m]`` per axis drawn from the env's Generator (the same
  seed gives the same start pose) and clipped into the safety box. The env then sends the
  arm there through the bridge's ``reset`` service. The scene (objects) is set by the person.
- :meth:`HardwareTask.evaluate` returns reward 0.0, success False, failure False and no
  privileged state, always. Success on a real robot comes from the person's buttons
  (``robot-rl record --success-from buttons``, the default on hardware; ``robot-rl label``)
  or, from stage 5, from a reward model. Commands that need a task reward (``rollout``,
  ``train``) refuse a hardware setup (:func:`robot_rl.app.nodes.ros_env.make_ros_env`).

Plain Python (no ROS): the arm moves through :class:`drivers.ros_robot.RosRobot`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from robot_rl.core import frames
from robot_rl.core.safety import SafetyConfig, SafetyLayer
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import ArmCommand, TaskStatus


def check_reset_pose(
    reset_pose: Sequence[float], reset_jitter_m: Sequence[float], safety: SafetyConfig
) -> np.ndarray:
    """Validate a start pose and its jitter against the safety limits.

    Args:
        reset_pose: [x, y, z, qw, qx, qy, qz], metres and a unit quaternion, base frame.
        reset_jitter_m: Per-axis (x, y, z) half-width of the uniform start position offset,
            metres, >= 0.
        safety: The bridge's limits (the bridge refuses a reset outside them).

    Returns:
        The pose (7,) with its quaternion normalised (w >= 0).

    Raises:
        ValueError: Wrong length, not finite, a quaternion that is not unit norm, a negative
            jitter, or a pose outside the workspace box or orientation cone (the message says
            which limit and by how much).
    """
    pose = np.asarray(reset_pose, dtype=np.float64)
    jitter = np.asarray(reset_jitter_m, dtype=np.float64)
    if pose.shape != (7,) or not np.all(np.isfinite(pose)):
        raise ValueError(
            f"reset_pose must be 7 finite numbers [x, y, z, qw, qx, qy, qz] (metres, base "
            f"frame), got {list(reset_pose)}"
        )
    norm = float(np.linalg.norm(pose[3:]))
    if abs(norm - 1.0) > 1e-3:
        raise ValueError(
            f"reset_pose quaternion {pose[3:].tolist()} (qw, qx, qy, qz) has norm {norm:.4f}; "
            "write a unit quaternion, e.g. [0, 1, 0, 0] for the gripper pointing down"
        )
    if jitter.shape != (3,) or not np.all(np.isfinite(jitter)) or np.any(jitter < 0):
        raise ValueError(
            f"reset_jitter_m must be 3 finite numbers >= 0 (x, y, z half-widths, metres), got "
            f"{list(reset_jitter_m)}"
        )
    pose = frames.pose(pose[:3], frames.quat_normalize(pose[3:]))
    lo, hi = np.asarray(safety.workspace_low_m), np.asarray(safety.workspace_high_m)
    _, report = SafetyLayer(safety).apply(ArmCommand(pose, 0.0), pose)
    if report.workspace_clipped:
        raise ValueError(
            f"reset_pose position {pose[:3].tolist()} m is outside the safety box "
            f"[{lo.tolist()}, {hi.tolist()}] m; move it inside (or widen safety.workspace_*_m, "
            "which the bridge gets too)"
        )
    if report.orientation_clipped:
        angle = float(
            np.linalg.norm(frames.quat_error(pose[3:], np.asarray(safety.orientation_center_quat)))
        )
        raise ValueError(
            f"reset_pose orientation {pose[3:].tolist()} is {angle:.3f} rad from the safety "
            f"cone's centre {list(safety.orientation_center_quat)} (limit "
            f"{safety.orientation_max_rad} rad); choose an orientation inside the cone"
        )
    return pose


@dataclass(frozen=True)
class HardwareTaskConfig:
    """The task of a real-robot setup (see the module docstring).

    Attributes:
        name: Task name (free text on hardware; stored with the data).
        reset_pose: Start pose [x, y, z, qw, qx, qy, qz], metres, base frame.
        reset_jitter_m: Per-axis (x, y, z) half-width of the uniform start position offset,
            metres (0: always the same start).
        safety: The bridge's limits: the start pose must lie inside; jittered positions are
            clipped into the box.
    """

    name: str
    reset_pose: tuple[float, ...]
    reset_jitter_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    safety: SafetyConfig = field(default_factory=SafetyConfig)

    def __post_init__(self) -> None:
        check_reset_pose(self.reset_pose, self.reset_jitter_m, self.safety)


class HardwareTask:
    """Start pose from the setup; no reward, no success, no failure. See the module docstring.

    Args:
        config: Name, start pose, jitter and safety box.
    """

    def __init__(self, config: HardwareTaskConfig) -> None:
        self.config = config
        self._pose = check_reset_pose(config.reset_pose, config.reset_jitter_m, config.safety)
        self._jitter = np.asarray(config.reset_jitter_m, dtype=np.float64)
        self._lo = np.asarray(config.safety.workspace_low_m, dtype=np.float64)
        self._hi = np.asarray(config.safety.workspace_high_m, dtype=np.float64)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        """Empty: a real robot has no sim truth."""
        return {}

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        """The start pose (7,): ``reset_pose`` with its position jittered and clipped into the
        safety box (three uniform draws from ``rng``, also when the jitter is zero)."""
        offset_m = rng.uniform(-1.0, 1.0, size=3) * self._jitter
        position = np.clip(self._pose[:3] + offset_m, self._lo, self._hi)
        return frames.pose(position, self._pose[3:])

    def evaluate(self) -> TaskStatus:
        """Always reward 0.0, success None (unknown: the env's info has no success), failure
        False, no privileged state: success on a real robot comes from the person's buttons
        (record / label ``--success-from buttons``) or a reward model."""
        return TaskStatus(reward=0.0, success=None, failure=False, privileged={})
