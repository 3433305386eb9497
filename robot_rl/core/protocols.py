"""The narrow Protocols through which the runtime sees hardware, the twin, tasks and rewards.

Implementations: the MuJoCo twin (``sim``), ROS 2 drivers (``drivers``), reward models
(``rewards``). The runtime (``robot_rl.envs`` and friends) imports only these Protocols; the CLI
composition root picks concrete classes (STYLE.md #3, #11).

Lifecycle for hardware: construct (no I/O; specs readable) -> ``connect()`` -> use ->
``disconnect()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from robot_rl.core.arm import ArmDescription
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import (
    ArmCommand,
    Frame,
    RobotState,
    SafetyReport,
    TaskStatus,
    TeleopState,
)


@dataclass(frozen=True)
class RobotSpec:
    """Static facts about an arm, readable before ``connect()``.

    Attributes:
        name: Human-readable model name, e.g. ``"fr3-twin"``.
        num_joints: Arm joints (7 for Franka).
        joint_low_rad: (num_joints,) lower joint limits.
        joint_high_rad: (num_joints,) upper joint limits.
        home_joint_pos_rad: (num_joints,) home configuration.
        joint_names: (num_joints,) joint names in chain order (as in ``joint_states``).
    """

    name: str
    num_joints: int
    joint_low_rad: tuple[float, ...]
    joint_high_rad: tuple[float, ...]
    home_joint_pos_rad: tuple[float, ...]
    joint_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in ("joint_low_rad", "joint_high_rad", "home_joint_pos_rad", "joint_names"):
            n = len(getattr(self, f))
            if n != self.num_joints and not (f == "joint_names" and n == 0):
                raise ValueError(f"RobotSpec.{f} has {n} values for {self.num_joints} joints")

    @classmethod
    def from_arm(cls, arm: ArmDescription, name: str | None = None) -> RobotSpec:
        """The spec of an arm description (``name`` defaults to the arm kind)."""
        return cls(
            name=name or arm.name,
            num_joints=arm.num_joints,
            joint_low_rad=arm.joint_low_rad,
            joint_high_rad=arm.joint_high_rad,
            home_joint_pos_rad=arm.home_q_rad,
            joint_names=arm.joint_names,
        )


@runtime_checkable
class Robot(Protocol):
    """An arm with a gripper, commanded by absolute TCP target poses.

    The implementation owns safety: ``send_command`` clips to the workspace box and the per-step
    motion limit and returns the command as actually sent. A command watchdog holds the arm if
    no fresh command arrives within its timeout.
    """

    @property
    def spec(self) -> RobotSpec: ...

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def reset(self, start_pose: np.ndarray, gripper: float = 0.0) -> None:
        """Bring the arm to ``start_pose`` (7,) and the gripper to ``gripper``; blocks until
        there."""
        ...

    def read_state(self) -> RobotState: ...

    def send_command(self, command: ArmCommand) -> tuple[ArmCommand, SafetyReport]:
        """Send one command; returns (command as executed after safety clipping, report)."""
        ...

    def hold(self) -> None:
        """Stop and hold the current pose until the next valid command."""
        ...


@runtime_checkable
class Camera(Protocol):
    """An RGB camera. ``read()`` returns the newest frame; ``Frame.seq`` tells new from old."""

    @property
    def name(self) -> str: ...

    @property
    def image_spec(self) -> ArraySpec:
        """(H, W, 3) uint8 spec of the frames this camera delivers."""
        ...

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read(self) -> Frame: ...


@runtime_checkable
class Teleop(Protocol):
    """A teleoperation device (SpaceMouse, gamepad, keyboard, recorded event file)."""

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read(self) -> TeleopState: ...


@runtime_checkable
class Clock(Protocol):
    """Paces the control loop. ``tick()`` returns at the start of the next control period.

    On a real robot this sleeps on the wall clock; in the twin it advances physics.
    """

    period_s: float
    overruns: int

    def now_s(self) -> float: ...

    def reset(self) -> None: ...

    def tick(self) -> None: ...


@runtime_checkable
class Task(Protocol):
    """What the robot should do: scene setup, reward, success. Reads the world, never owns it.

    In the twin a task reads physics (dm_control style); on a real robot a task may prompt a
    person to set the scene and get success from a reward model.
    """

    @property
    def name(self) -> str: ...

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        """Spec of ``TaskStatus.privileged`` (empty on a real robot)."""
        ...

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        """Set up a new episode's scene; return the arm start pose (7,) in the base frame."""
        ...

    def evaluate(self) -> TaskStatus: ...


@dataclass(frozen=True)
class RewardQuery:
    """A batch for a reward model.

    Attributes:
        images: Camera name -> (B, H, W, 3) uint8.
        state: Optional (B, S) float32 flat state.
        task_text: Optional natural-language task description.
    """

    images: Mapping[str, np.ndarray]
    state: np.ndarray | None = None
    task_text: str | None = None


@dataclass(frozen=True)
class RewardResult:
    """Reward model output for a batch.

    Attributes:
        success_prob: (B,) probability that the task is solved.
        reward: (B,) reward.
        model_id: Which model produced it (so data can be relabelled).
        model_version: Version of that model.
    """

    success_prob: np.ndarray
    reward: np.ndarray
    model_id: str
    model_version: str


@runtime_checkable
class RewardModel(Protocol):
    """Batch reward model: images (and optional state / text) -> success probability, reward."""

    @property
    def model_id(self) -> str: ...

    @property
    def model_version(self) -> str: ...

    def predict(self, query: RewardQuery) -> RewardResult: ...
