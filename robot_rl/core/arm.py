"""An arm as data: :class:`ArmDescription` (joint names, limits, home, tool frame, gripper kind,
backend), and the loader of the built-in arm kinds, which are data files
(``robot_rl/arms/<kind>.yaml``), not code.

The safety core, the env, the observation schema and the learner never branch on an arm's
name: they read its description. The Cartesian observation (``tcp_pose``, ``tcp_vel``,
``tcp_wrench``, ``gripper_pos``) is the same for every arm; only the optional joint parts
(``joint_pos``, ``joint_vel``) and the ``robot_state`` wire message are sized by
``num_joints`` (``drivers/CONTRACT.md``).

A setup YAML names an arm with ``arm: <kind>`` (a built-in, :func:`builtin_arm_kinds`) or describes
it (``arm: {kind: ur5e, home_q_rad: [...]}`` overrides fields of a built-in; a mapping without
``kind`` is a whole new description); :mod:`drivers.setup` reads it. Every check is in
:meth:`ArmDescription.__post_init__`, with a message that says what to change.

Frames: joint positions in rad, ``joint_low_rad <= q <= joint_high_rad``; the tool frame is the
TCP whose pose is ``tcp_pose`` (``T_base_tcp``) in the arm's base frame.
"""

from __future__ import annotations

import functools
import math
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

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
        name: The arm kind: a built-in's file name in ``robot_rl/arms`` (see
            :func:`builtin_arm_kinds`), or free text for a user's arm.
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
        object.__setattr__(self, "joint_names", tuple(self.joint_names))
        for f in ("joint_low_rad", "joint_high_rad", "joint_vel_max_rad_s", "home_q_rad"):
            try:
                object.__setattr__(self, f, tuple(float(v) for v in getattr(self, f)))
            except (TypeError, ValueError):
                raise ValueError(
                    f"arm {self.name!r}: {f} must be a list of numbers (rad or rad/s), got "
                    f"{getattr(self, f)!r}"
                ) from None
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


_BUILTIN_DIR = Path(__file__).resolve().parent.parent / "arms"
"""The built-in descriptions: one YAML file per kind, ``robot_rl/arms/<kind>.yaml``, with the same
keys as a setup's ``arm:`` mapping (docs/arms.md)."""


def load_arm_file(path: str | Path) -> ArmDescription:
    """An arm description from a YAML file whose keys are the :class:`ArmDescription` fields.

    Raises:
        ValueError: The file is missing, not a mapping, names an unknown or misses a required
            field, or the description is inconsistent (the message names the file).
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"arm file {path}: cannot read it ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"arm file {path}: expected a mapping of arm fields, got {data!r}")
    required = [f.name for f in fields(ArmDescription) if f.default is MISSING]
    missing = [k for k in required if k not in data]
    if missing:
        raise ValueError(f"arm file {path}: missing {missing}; an arm needs {required}")
    try:
        return ArmDescription.from_dict(data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"arm file {path}: {e}") from None


def builtin_arm_kinds() -> tuple[str, ...]:
    """Arm kinds a setup can name with ``arm: <kind>`` (the files in ``robot_rl/arms``)."""
    return tuple(sorted(p.stem for p in _BUILTIN_DIR.glob("*.yaml")))


@functools.cache
def builtin_arm(kind: str) -> ArmDescription:
    """The built-in description of ``kind`` (read once; the same object every call).

    Raises:
        ValueError: No such built-in (the message lists them).
    """
    kinds = builtin_arm_kinds()
    if kind not in kinds:
        raise ValueError(
            f"no built-in arm kind {kind!r}; choose from {list(kinds)} or describe the "
            "arm in full (see docs/arms.md)"
        )
    return load_arm_file(_BUILTIN_DIR / f"{kind}.yaml")
