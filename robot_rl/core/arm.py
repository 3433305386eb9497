"""An arm as data: :class:`ArmDescription` (joint names, limits, home, tool frame, gripper kind,
backend), and the built-in arm kinds.

The safety core, the env, the observation schema and the learner never branch on an arm's
name: they read its description. The Cartesian observation (``tcp_pose``, ``tcp_vel``,
``tcp_wrench``, ``gripper_pos``) is the same for every arm; only the optional joint parts
(``joint_pos``, ``joint_vel``) and the ``robot_state`` wire message are sized by
``num_joints`` (``drivers/CONTRACT.md``).

A setup YAML names an arm with ``arm: <kind>`` (a built-in, :data:`BUILTIN_ARMS`) or describes
it (``arm: {kind: ur5e, home_q_rad: [...]}`` overrides fields of a built-in; a mapping without
``kind`` is a whole new description); :mod:`drivers.setup` reads it. Every check is in
:meth:`ArmDescription.__post_init__`, with a message that says what to change.

Frames: joint positions in rad, ``joint_low_rad <= q <= joint_high_rad``; the tool frame is the
TCP whose pose is ``tcp_pose`` (``T_base_tcp``) in the arm's base frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from robot_rl.core import kinematics as kin

GRIPPER_KINDS = ("parallel", "jaw", "none")
"""``parallel``: two fingers closing symmetrically (Franka Hand, Robotiq 2F); ``jaw``: one moving
jaw against a fixed one (SO-101); ``none``: no gripper (closure reads 0, commands are ignored)."""

BACKENDS = ("twin", "franka", "ros2_cartesian", "ros2_joint", "feetech")
"""How the arm is reached: ``twin`` (the MuJoCo twin), ``franka`` (libfranka / FCI),
``ros2_cartesian`` (a vendor ROS 2 driver with a compliant Cartesian controller taking a
``PoseStamped`` target), ``ros2_joint`` (a vendor ROS 2 driver with ros2_control joint
controllers; IK on our side), ``feetech`` (Feetech STS servos on a serial bus, e.g. SO-101)."""


@dataclass(frozen=True)
class ArmDescription:
    """Static facts about one arm kind, readable before anything connects.

    Attributes:
        name: The arm kind, e.g. ``"fr3"``, ``"ur5e"``, ``"so101"`` (free text for a user's arm).
        joint_names: The arm joints in chain order, as the arm's driver names them in
            ``joint_states`` (gripper joints excluded).
        joint_low_rad: (N,) lower joint limits, rad.
        joint_high_rad: (N,) upper joint limits, rad.
        joint_vel_max_rad_s: (N,) joint speed limits, rad/s (joint mode bounds each tick's joint
            step by these).
        home_q_rad: (N,) home configuration, rad, inside the limits.
        tool_frame: Name of the TCP frame in the kinematics file (site or link).
        base_frame: ``header.frame_id`` of poses on the wire (the arm's base frame).
        kinematics: URDF or MJCF file of the arm (absolute, or relative to the setup file that
            names it); None: the built-in model of this kind.
        gripper: One of :data:`GRIPPER_KINDS`.
        backend: One of :data:`BACKENDS`.
    """

    name: str
    joint_names: tuple[str, ...]
    joint_low_rad: tuple[float, ...]
    joint_high_rad: tuple[float, ...]
    joint_vel_max_rad_s: tuple[float, ...]
    home_q_rad: tuple[float, ...]
    tool_frame: str = "tcp"
    base_frame: str = "base"
    kinematics: str | None = None
    gripper: str = "parallel"
    backend: str = "twin"

    def __post_init__(self) -> None:
        for f in ("joint_names", "joint_low_rad", "joint_high_rad", "joint_vel_max_rad_s"):
            object.__setattr__(self, f, tuple(getattr(self, f)))
        object.__setattr__(self, "home_q_rad", tuple(float(q) for q in self.home_q_rad))
        if not self.name:
            raise ValueError("arm name must not be empty (e.g. 'ur5e')")
        n = len(self.joint_names)
        if n < 1:
            raise ValueError(f"arm {self.name!r}: joint_names is empty; list the arm's joints")
        if len(set(self.joint_names)) != n:
            dup = sorted({j for j in self.joint_names if self.joint_names.count(j) > 1})
            raise ValueError(f"arm {self.name!r}: joint names {dup} appear more than once")
        for f in ("joint_low_rad", "joint_high_rad", "joint_vel_max_rad_s", "home_q_rad"):
            values = getattr(self, f)
            if len(values) != n:
                raise ValueError(
                    f"arm {self.name!r}: {f} has {len(values)} values for {n} joints "
                    f"{list(self.joint_names)}; give one per joint"
                )
            bad = [self.joint_names[i] for i, v in enumerate(values) if not math.isfinite(v)]
            if bad:
                raise ValueError(f"arm {self.name!r}: {f} is not finite for joints {bad}")
        for i, j in enumerate(self.joint_names):
            lo, hi = self.joint_low_rad[i], self.joint_high_rad[i]
            if not lo < hi:
                raise ValueError(
                    f"arm {self.name!r}: joint {j!r} has joint_low_rad {lo} >= joint_high_rad "
                    f"{hi}; the lower limit must be below the upper one"
                )
            if not lo <= self.home_q_rad[i] <= hi:
                raise ValueError(
                    f"arm {self.name!r}: home_q_rad of joint {j!r} is {self.home_q_rad[i]}, "
                    f"outside its limits [{lo}, {hi}]; choose a home inside them"
                )
            if self.joint_vel_max_rad_s[i] <= 0:
                raise ValueError(
                    f"arm {self.name!r}: joint_vel_max_rad_s of joint {j!r} is "
                    f"{self.joint_vel_max_rad_s[i]}; it must be positive"
                )
        if self.gripper not in GRIPPER_KINDS:
            raise ValueError(
                f"arm {self.name!r}: gripper {self.gripper!r} is not one of {GRIPPER_KINDS}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"arm {self.name!r}: backend {self.backend!r} is not one of {BACKENDS}"
            )
        if not self.tool_frame or not self.base_frame:
            raise ValueError(f"arm {self.name!r}: tool_frame and base_frame must not be empty")

    @property
    def num_joints(self) -> int:
        """N, the number of arm joints."""
        return len(self.joint_names)

    def with_overrides(self, **changes: Any) -> ArmDescription:
        """A copy with ``changes`` applied (and checked again).

        Raises:
            ValueError: A name that is not a field, or the result is inconsistent.
        """
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"arm fields {unknown} do not exist; choose from {sorted(known)}")
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (lists for tuples), e.g. for a bridge's status or a run's config."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArmDescription:
        """The inverse of :meth:`as_dict` (unknown keys are an error)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"arm fields {unknown} do not exist; choose from {sorted(known)}")
        return cls(**data)


# FR3: joint speed limits from Franka's FR3 datasheet (rad/s).
FR3_JOINT_VEL_MAX_RAD_S = (2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26)

FR3 = ArmDescription(
    name="fr3",
    joint_names=tuple(f"joint{i}" for i in range(1, 8)),
    joint_low_rad=kin.FR3_JOINT_LOW_RAD,
    joint_high_rad=kin.FR3_JOINT_HIGH_RAD,
    joint_vel_max_rad_s=FR3_JOINT_VEL_MAX_RAD_S,
    home_q_rad=kin.FR3_HOME_RAD,
    gripper="parallel",
    backend="twin",
)
"""The 7-DoF Franka FR3-class arm of the twin and of the Franka driver (``joint1..joint7``)."""

_TWO_PI = 2 * math.pi

UR5E = ArmDescription(
    name="ur5e",
    joint_names=(
        "shoulder_pan_joint",
        "shoulder_lift_joint",
        "elbow_joint",
        "wrist_1_joint",
        "wrist_2_joint",
        "wrist_3_joint",
    ),
    joint_low_rad=(-_TWO_PI, -_TWO_PI, -math.pi, -_TWO_PI, -_TWO_PI, -_TWO_PI),
    joint_high_rad=(_TWO_PI, _TWO_PI, math.pi, _TWO_PI, _TWO_PI, _TWO_PI),
    joint_vel_max_rad_s=(math.pi,) * 6,
    home_q_rad=(
        math.pi,
        -math.pi / 2,
        7 * math.pi / 12,
        -7 * math.pi / 12,
        -math.pi / 2,
        -math.pi / 2,
    ),
    gripper="parallel",
    backend="ros2_joint",
)
"""A 6-DoF arm with UR5e kinematics (Universal Robots' ROS 2 driver's joint names; limits from
Universal_Robots_ROS2_Description ``config/ur5e/joint_limits.yaml``: +-2 pi, the elbow +-pi,
180 deg/s). Home: upper arm vertical, tool pointing down in front of the base (tcp at about
(0.48, 0.13, 0.24) m with the twin's 0.15 m tool). Base frame: UR's DH base (the controller's
``base``; ROS ``base_link`` is it turned by pi about z)."""

SO101 = ArmDescription(
    name="so101",
    joint_names=("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"),
    joint_low_rad=tuple(-x for x in (math.radians(110), math.radians(100), 1.69, math.radians(95)))
    + (-math.radians(160),),
    joint_high_rad=(
        math.radians(110),
        math.radians(100),
        1.69,
        math.radians(95),
        math.radians(160),
    ),
    joint_vel_max_rad_s=(4.7,) * 5,
    home_q_rad=(0.0, 0.0, 0.0, math.pi / 2, 0.0),
    gripper="jaw",
    backend="feetech",
)
"""A 5-DoF low-cost arm with SO-101 kinematics (TheRobotStudio SO-ARM100
``Simulation/SO101/so101_new_calib.urdf``: joint names and limits; Feetech STS3215 servos at
45 rpm = 4.7 rad/s) and a one-jaw gripper (its own servo, not an arm joint). Home: the jaws
pointing down, tcp at about (0.185, 0, 0.108) m. Five joints cannot reach every 6-D pose: the
tool's yaw about its approach axis follows from the position (see docs/arms.md)."""

BUILTIN_ARMS: dict[str, ArmDescription] = {"fr3": FR3, "ur5e": UR5E, "so101": SO101}
"""Arm kinds a setup can name with ``arm: <kind>``."""


def builtin_arm(kind: str) -> ArmDescription:
    """The built-in description of ``kind``.

    Raises:
        ValueError: No such built-in (the message lists them).
    """
    try:
        return BUILTIN_ARMS[kind]
    except KeyError:
        raise ValueError(
            f"no built-in arm kind {kind!r}; choose from {sorted(BUILTIN_ARMS)} or describe the "
            "arm in full (see docs/arms.md)"
        ) from None
