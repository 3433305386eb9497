"""Typed values that cross module boundaries: robot state, commands, frames, observations,
transitions. All frozen; arrays inside are owned (copied on construction by producers).

Frames: poses are 7-vectors in the robot base frame, quaternion ``(w, x, y, z)``
(see :mod:`robot_rl.core.frames`). Times are monotonic seconds from the backend's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from robot_rl.core import keys


class RobotFaultError(RuntimeError):
    """A fault of the robot that passes: the episode ends where it is and the next one starts
    once the fault has cleared (the actor and a ROS evaluation wait it out, up to a limit)."""


class StaleSensorError(RobotFaultError):
    """A robot state or camera frame is older than its freshness limit; never reused silently."""


class ArmFaultError(RobotFaultError):
    """The arm's driver refused or ended a reset for an error of its own (a servo that did not
    answer, a hole in its joint states), not an e-stop: the arm holds and moves again once the
    error is cleared (by its bridge's ``auto_recover``, or a person's ``clear_error``)."""


class UnsafeCommandError(ValueError):
    """A command or action is malformed (NaN, inf, wrong shape); the robot has been told to hold."""


@dataclass(frozen=True)
class RobotState:
    """One reading of the arm and gripper.

    Attributes:
        stamp_s: Monotonic time the reading was taken.
        tcp_pose: (7,) ``T_base_tcp`` as ``[x, y, z, qw, qx, qy, qz]``.
        tcp_vel: (6,) TCP twist in the base frame, ``[v (m/s), w (rad/s)]``.
        tcp_wrench: (6,) external wrench at the TCP in the base frame, ``[f (N), tau (N m)]``.
        gripper_pos: Closure in [0, 1]: 0 fully open, 1 fully closed.
        joint_pos: (7,) rad.
        joint_vel: (7,) rad/s.
    """

    stamp_s: float
    tcp_pose: np.ndarray
    tcp_vel: np.ndarray
    tcp_wrench: np.ndarray
    gripper_pos: float
    joint_pos: np.ndarray
    joint_vel: np.ndarray

    def part(self, name: str) -> np.ndarray:
        """A named state part (see :mod:`robot_rl.core.keys`) as float32."""
        if name == keys.GRIPPER_POS:
            return np.array([self.gripper_pos], dtype=np.float32)
        if name not in keys.STATE_PARTS:
            raise KeyError(f"unknown state part {name!r}; choose from {keys.STATE_PARTS}")
        return np.asarray(getattr(self, name), dtype=np.float32).copy()


@dataclass(frozen=True)
class ArmCommand:
    """What the env asks the arm to do for one control period.

    Attributes:
        target_pose: (7,) absolute ``T_base_tcp`` target.
        gripper: Gripper closure target in [0, 1] (0 open, 1 closed).
    """

    target_pose: np.ndarray
    gripper: float

    def as_array(self) -> np.ndarray:
        """(8,) ``[target_pose, gripper]``."""
        return np.concatenate([self.target_pose, [self.gripper]]).astype(np.float64)


@dataclass(frozen=True)
class SafetyReport:
    """Which safety limits changed a command (all False: passed unchanged)."""

    workspace_clipped: bool = False
    step_clipped: bool = False
    orientation_clipped: bool = False
    gripper_clipped: bool = False

    def as_dict(self) -> dict[str, bool]:
        return {
            "workspace_clipped": self.workspace_clipped,
            "step_clipped": self.step_clipped,
            "orientation_clipped": self.orientation_clipped,
            "gripper_clipped": self.gripper_clipped,
        }


@dataclass(frozen=True)
class Frame:
    """One camera image.

    Attributes:
        image: (H, W, 3) uint8 RGB.
        stamp_s: Monotonic time of capture.
        seq: Frame counter; equal ``seq`` twice means the camera delivered nothing new.
    """

    image: np.ndarray
    stamp_s: float
    seq: int


@dataclass(frozen=True)
class TeleopState:
    """One reading of a teleop device, already mapped to robot_rl's meaning.

    Attributes:
        stamp_s: Monotonic time of the reading.
        twist: (6,) commanded TCP twist in the base frame, each in [-1, 1] (scaled by the env's
            per-step limits), ``[v, w]``.
        gripper: Gripper closure target in [0, 1], or ``None`` for "no change".
        buttons: Events pressed since the last read: subset of
            ``{"intervene", "success", "failure", "discard", "reset"}``.
    """

    stamp_s: float
    twist: np.ndarray
    gripper: float | None = None
    buttons: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TaskStatus:
    """What a task says about the current scene.

    Attributes:
        reward: Dense shaped reward for this step.
        success: Task solved; None where nothing knows (a real robot, or a twin run kept from
            its truth): success then comes from a reward model or a person's buttons.
        failure: Task failed irrecoverably (episode should end).
        privileged: Sim-only truth (object poses, ...); policies never read it.
    """

    reward: float
    success: bool | None
    failure: bool = False
    privileged: Mapping[str, np.ndarray] = field(default_factory=dict)


def truth_numbers(privileged: Mapping | None) -> dict[str, float]:
    """The one-number, finite fields of a task's privileged truth (``TaskStatus.privileged``,
    ``info["privileged"]``; pick_cube's ``grasped``, ``cube_lift_m``), rounded to 5 places:
    what the twin's scores and an evaluation keep of it (``sim.scoring``, ``sim.diagnosis``)."""
    out = {}
    for name, value in (privileged or {}).items():
        v = np.asarray(value)
        numeric = np.issubdtype(v.dtype, np.number) or v.dtype == np.bool_
        if v.size != 1 or not numeric or not np.isfinite(v).all():
            continue
        out[name] = round(float(v.reshape(-1)[0]), 5)
    return out


@dataclass(frozen=True)
class Observation:
    """One observation as assembled by the env.

    Attributes:
        state: Named state parts (see :mod:`robot_rl.core.keys`), float32 1-D arrays.
        images: Camera name -> (H, W, 3) uint8.
        stamps: Sensor name (``"state"`` or a camera) -> monotonic capture time.
    """

    state: Mapping[str, np.ndarray]
    images: Mapping[str, np.ndarray]
    stamps: Mapping[str, float]

    def to_dict(self) -> dict:
        """The gymnasium observation dict (arrays are not copied)."""
        out: dict = {
            keys.STATE: dict(self.state),
            keys.STAMPS: {k: np.array(v, dtype=np.float64) for k, v in self.stamps.items()},
        }
        if self.images:
            out[keys.IMAGES] = dict(self.images)
        return out


@dataclass(frozen=True)
class Transition:
    """One environment step as the learner sees it. No side channels through ``info``.

    Attributes:
        obs: Observation dict before the step (policy's observation space).
        action: (A,) action as executed, in the policy's action space (the human's action,
            mapped through the action wrappers' inverses, when ``intervened``).
        policy_action: (A,) what the policy proposed (equal to ``action`` unless intervened).
        reward: Reward for this step.
        next_obs: Observation dict after the step.
        terminated: Episode ended by the task (success or failure): no bootstrapping.
        truncated: Episode cut by a time limit: bootstrap from ``next_obs``.
        intervened: A person (or simulated human) chose ``action``.
        policy_version: Version of the weights that produced ``policy_action``.
        obs_stamp_s: Monotonic time of ``obs``.
        next_obs_stamp_s: Monotonic time of ``next_obs``.
    """

    obs: Mapping
    action: np.ndarray
    policy_action: np.ndarray
    reward: float
    next_obs: Mapping
    terminated: bool
    truncated: bool
    intervened: bool
    policy_version: int
    obs_stamp_s: float
    next_obs_stamp_s: float

    def __post_init__(self) -> None:
        if self.action.shape != self.policy_action.shape:
            raise ValueError(
                f"action {self.action.shape} and policy_action {self.policy_action.shape} "
                "must have the same shape"
            )
        if not self.intervened and not np.array_equal(self.action, self.policy_action):
            raise ValueError("action differs from policy_action but intervened is False")
        if self.next_obs_stamp_s < self.obs_stamp_s:
            raise ValueError("next_obs_stamp_s is earlier than obs_stamp_s")
