"""Calibration of an arm of Feetech servos: ticks <-> joint angles, gripper ticks <-> closure.

Per joint (:class:`JointCalibration`): the servo id, ``offset_ticks`` (the tick of the calibrated
zero), ``direction`` (+1: the joint angle grows with the ticks, -1: it shrinks), and the
``min_ticks`` / ``max_ticks`` limits. An arm joint's angle is

    q_rad = direction * (ticks - offset_ticks) * 2 pi / 4096

and the gripper's closure (0 open, 1 closed) is ``direction * (ticks - offset_ticks) /
(max_ticks - min_ticks)``, its ``offset_ticks`` being the open end of its range.

:func:`calibrate_from_recording` computes a calibration from ticks recorded while a person moves
each joint through its whole range (torque off): the extremes become the limits and the middle
of the range becomes zero, as in LeRobot's SO-101 calibration. Where ours differs from LeRobot's
(``robots/so101_follower/so101_follower.py``, ``motors/motors_bus.py``):

- LeRobot writes ``Homing_Offset`` (so that the pose at the start of its calibration reads 2047)
  and the ``Min/Max_Position_Limit`` registers into each servo's EEPROM; we keep it all in the
  file and write nothing to the servos, so a file describes the arm completely and swapping a
  servo needs a new recording, not a flash. As a consequence a joint whose range crosses the
  encoder's 4095 -> 0 seam cannot be calibrated here (LeRobot's homing offset moves the seam
  away); :func:`calibrate_from_recording` refuses it and says so.
- LeRobot's degrees mode scales by 360 / 4095 around the middle of the range; ours by
  2 pi / 4096 (one turn is 4096 ticks), also around the middle.
- LeRobot normalises to -100..100 over the range by default (the gripper 0..100) and its
  SO-101 ``drive_mode`` is always 0; ours gives rad and a [0, 1] closure, and ``direction``
  lets a joint follow the sign of the kinematic model's axis.

Files are JSON, versioned by ``schema_version`` (:data:`SCHEMA_VERSION`); :func:`load` refuses a
file with a missing joint, ``min_ticks >= max_ticks``, a direction other than +-1, a zero outside
the limits, or ticks outside 0..4095, with a message naming the joint and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from drivers.feetech.protocol import TICKS_PER_TURN

SCHEMA_VERSION = 1
"""Version of the calibration file's layout; bumped on any incompatible change."""
RAD_PER_TICK = 2 * math.pi / TICKS_PER_TURN
SO101_ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
"""The SO-101's arm joints (LeRobot's motor names), servo ids 1..5 in this order."""
SO101_GRIPPER = "gripper"
"""The SO-101's gripper servo, id 6."""
MIN_RANGE_TICKS = 100
"""A recorded range narrower than this (about 9 degrees) means the joint was not moved."""


class CalibrationError(ValueError):
    """A calibration (file or recording) that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class JointCalibration:
    """One servo's calibration.

    Attributes:
        servo_id: The servo's bus id.
        offset_ticks: Arm joint: the tick where the angle is 0 rad. Gripper: the open end.
        direction: +1 or -1: the sign of d(angle or closure) / d(ticks).
        min_ticks: Lower limit, ticks (0..4095).
        max_ticks: Upper limit, ticks; greater than ``min_ticks``.
    """

    servo_id: int
    offset_ticks: int
    direction: int
    min_ticks: int
    max_ticks: int

    def __post_init__(self) -> None:
        for field in ("servo_id", "offset_ticks", "direction", "min_ticks", "max_ticks"):
            if isinstance(getattr(self, field), np.integer):
                object.__setattr__(self, field, int(getattr(self, field)))

    def check(self, name: str, gripper: bool = False) -> None:
        """Raise :class:`CalibrationError` naming ``name`` if this calibration is unusable."""
        if self.direction not in (1, -1):
            raise CalibrationError(f"joint {name!r}: direction {self.direction} is not +1 or -1")
        for field in ("offset_ticks", "min_ticks", "max_ticks", "servo_id"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise CalibrationError(f"joint {name!r}: {field} {value!r} is not a whole number")
        if not 0 <= self.min_ticks < TICKS_PER_TURN or not 0 <= self.max_ticks < TICKS_PER_TURN:
            raise CalibrationError(
                f"joint {name!r}: limits {self.min_ticks}..{self.max_ticks} must be in "
                f"0..{TICKS_PER_TURN - 1}"
            )
        if self.min_ticks >= self.max_ticks:
            raise CalibrationError(
                f"joint {name!r}: min_ticks {self.min_ticks} >= max_ticks {self.max_ticks}; "
                "record the joint's range again"
            )
        if gripper:
            open_end = self.min_ticks if self.direction == 1 else self.max_ticks
            if self.offset_ticks != open_end:
                raise CalibrationError(
                    f"gripper {name!r}: offset_ticks {self.offset_ticks} must be its open end "
                    f"({open_end}: min_ticks for direction +1, max_ticks for -1)"
                )
        elif not self.min_ticks <= self.offset_ticks <= self.max_ticks:
            raise CalibrationError(
                f"joint {name!r}: offset_ticks {self.offset_ticks} is outside its limits "
                f"{self.min_ticks}..{self.max_ticks}"
            )


@dataclass(frozen=True)
class ArmCalibration:
    """The calibration of an arm's joints and (optionally) its gripper.

    Attributes:
        joints: Arm joint name -> calibration, in chain order (the order of every array).
        gripper: The gripper's name and calibration; None: no gripper.
    """

    joints: Mapping[str, JointCalibration]
    gripper: tuple[str, JointCalibration] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "joints", dict(self.joints))
        if not self.joints:
            raise CalibrationError("a calibration needs at least one arm joint")
        for name, joint in self.joints.items():
            joint.check(name)
        if self.gripper is not None:
            self.gripper[1].check(self.gripper[0], gripper=True)
            if self.gripper[0] in self.joints:
                raise CalibrationError(f"{self.gripper[0]!r} is both an arm joint and the gripper")
        ids = [j.servo_id for j in self.joints.values()] + (
            [self.gripper[1].servo_id] if self.gripper else []
        )
        if len(set(ids)) != len(ids):
            raise CalibrationError(f"servo ids {ids} are not distinct")

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Arm joint names in chain order."""
        return tuple(self.joints)

    @property
    def joint_ids(self) -> tuple[int, ...]:
        """Servo ids of the arm joints, in chain order."""
        return tuple(j.servo_id for j in self.joints.values())

    def _arrays(self) -> tuple[np.ndarray, ...]:
        js = self.joints.values()
        return tuple(
            np.array([getattr(j, f) for j in js], dtype=float)
            for f in ("offset_ticks", "direction", "min_ticks", "max_ticks")
        )

    def ticks_to_rad(self, ticks: np.ndarray) -> np.ndarray:
        """(N,) arm-joint ticks -> (N,) angles, rad (not clipped: a reading is what it is)."""
        ticks = np.asarray(ticks, dtype=float)
        offset, direction, _, _ = self._arrays()
        if ticks.shape != offset.shape:
            raise ValueError(f"ticks shape {ticks.shape} != ({offset.size},) arm joints")
        return direction * (ticks - offset) * RAD_PER_TICK

    def rad_to_ticks(self, q_rad: np.ndarray, clip: bool = True) -> np.ndarray:
        """(N,) angles, rad -> (N,) whole ticks, clipped to each joint's limits.

        The clip is the calibrated range: a caller that must know whether a command was cut
        compares ``ticks_to_rad(rad_to_ticks(q))`` with ``q``. ``clip=False``: not clipped (a
        servo's reading of an angle, as a simulated servo reports it).
        """
        q_rad = np.asarray(q_rad, dtype=float)
        offset, direction, low, high = self._arrays()
        if q_rad.shape != offset.shape:
            raise ValueError(f"q_rad shape {q_rad.shape} != ({offset.size},) arm joints")
        if not np.all(np.isfinite(q_rad)):
            raise ValueError(f"q_rad must be finite: {q_rad}")
        ticks = np.round(offset + direction * q_rad / RAD_PER_TICK)
        return (np.clip(ticks, low, high) if clip else ticks).astype(np.int64)

    def _gripper(self) -> JointCalibration:
        if self.gripper is None:
            raise CalibrationError("this calibration has no gripper")
        return self.gripper[1]

    def gripper_ticks_to_closure(self, ticks: float) -> float:
        """Gripper ticks -> closure in [0, 1] (0 open, 1 closed), clipped."""
        g = self._gripper()
        closure = g.direction * (float(ticks) - g.offset_ticks) / (g.max_ticks - g.min_ticks)
        return float(np.clip(closure, 0.0, 1.0))

    def gripper_closure_to_ticks(self, closure: float) -> int:
        """Closure in [0, 1] (clipped) -> whole gripper ticks."""
        g = self._gripper()
        closure = float(np.clip(closure, 0.0, 1.0))
        return int(round(g.offset_ticks + g.direction * closure * (g.max_ticks - g.min_ticks)))

    def to_json(self) -> dict:
        """The file's content (see :func:`load`)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "joints": {name: asdict(j) for name, j in self.joints.items()},
            "gripper": (
                None
                if self.gripper is None
                else {"name": self.gripper[0], **asdict(self.gripper[1])}
            ),
        }


def save(calibration: ArmCalibration, path: str | Path) -> None:
    """Write ``calibration`` as JSON to ``path`` (whole file replaced atomically)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(calibration.to_json(), indent=2) + "\n")
    tmp.replace(path)


def load(
    path: str | Path,
    joint_names: Sequence[str] = SO101_ARM_JOINTS,
    gripper: str | None = SO101_GRIPPER,
) -> ArmCalibration:
    """Read a calibration file and check it against the arm's joints.

    Args:
        path: The JSON file.
        joint_names: The arm joints the file must hold, in chain order (the result's order).
        gripper: The gripper it must hold; None: it must hold none.

    Raises:
        CalibrationError: Unreadable, another schema version, a missing or extra joint, or a
            joint whose values are unusable (see :meth:`JointCalibration.check`).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CalibrationError(f"no calibration file {path}; calibrate the arm first") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"calibration file {path} is not JSON: {e}") from None
    where = f"calibration file {path}"
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        version = data.get("schema_version") if isinstance(data, dict) else None
        raise CalibrationError(
            f"{where}: schema_version {version!r}, this code reads {SCHEMA_VERSION}"
        )
    joints = data.get("joints")
    if not isinstance(joints, dict):
        raise CalibrationError(f"{where}: no 'joints' mapping")
    missing = [n for n in joint_names if n not in joints]
    if missing:
        raise CalibrationError(f"{where}: missing joint(s) {missing}; recalibrate those joints")
    extra = [n for n in joints if n not in joint_names]
    if extra:
        raise CalibrationError(f"{where}: unknown joint(s) {extra}; expected {list(joint_names)}")
    try:
        arm = {n: _joint(joints[n], n, where) for n in joint_names}
        grip_data = data.get("gripper")
        if gripper is None and grip_data is not None:
            raise CalibrationError(f"{where}: has a gripper, but this arm has none")
        if gripper is not None:
            if not isinstance(grip_data, dict) or grip_data.get("name") != gripper:
                raise CalibrationError(f"{where}: missing gripper {gripper!r}; recalibrate it")
            fields = {k: v for k, v in grip_data.items() if k != "name"}
            return ArmCalibration(arm, (gripper, _joint(fields, gripper, where)))
        return ArmCalibration(arm, None)
    except CalibrationError as e:
        if str(e).startswith(where):
            raise
        raise CalibrationError(f"{where}: {e}") from None


def _joint(data: object, name: str, where: str) -> JointCalibration:
    keys = ("servo_id", "offset_ticks", "direction", "min_ticks", "max_ticks")
    if not isinstance(data, dict) or set(data) != set(keys):
        got = sorted(data) if isinstance(data, dict) else data
        raise CalibrationError(f"{where}: joint {name!r} needs exactly {list(keys)}, got {got}")
    return JointCalibration(**{k: data[k] for k in keys})


def calibrate_from_recording(
    recorded_ticks: np.ndarray,
    joint_names: Sequence[str] = SO101_ARM_JOINTS,
    joint_ids: Sequence[int] = (1, 2, 3, 4, 5),
    directions: Sequence[int] | None = None,
    gripper: tuple[str, int, int] | None = (SO101_GRIPPER, 6, 1),
) -> ArmCalibration:
    """A calibration from positions recorded while each joint was moved through its range.

    Args:
        recorded_ticks: (T, N) present positions over time (``FeetechBus.sync_read_positions``
            of ``joint_ids`` then the gripper's id), ticks; the columns follow that order.
        joint_names: The N arm joints (N = columns, less one with a gripper).
        joint_ids: Their servo ids.
        directions: Per arm joint, +1 or -1 (None: all +1); a recording cannot tell which way
            the kinematic model's axis points.
        gripper: ``(name, servo_id, direction)`` of the gripper, the last column, or None.
            Direction +1: the ticks grow as it closes (its open end is then the minimum).

    Returns:
        Limits = the extremes of each column; arm zero = the middle of its range (rounded).

    Raises:
        CalibrationError: A joint that did not move (range < :data:`MIN_RANGE_TICKS`), or one
            whose recording jumps across the encoder's 4095 -> 0 seam.
    """
    ticks = np.asarray(recorded_ticks)
    names = list(joint_names) + ([gripper[0]] if gripper else [])
    if ticks.ndim != 2 or ticks.shape[1] != len(names) or ticks.shape[0] < 2:
        raise CalibrationError(f"recorded ticks {ticks.shape} should be (T >= 2, {len(names)})")
    directions = tuple(directions) if directions is not None else (1,) * len(joint_names)
    if len(directions) != len(joint_names) or len(joint_ids) != len(joint_names):
        raise CalibrationError("joint_names, joint_ids and directions must have equal lengths")
    seam = np.abs(np.diff(ticks, axis=0)) > TICKS_PER_TURN // 2
    for i, name in enumerate(names):
        if seam[:, i].any():
            raise CalibrationError(
                f"joint {name!r} crossed the encoder's 4095 -> 0 seam while recording; its range "
                "cannot be a single interval. Move the seam out of its range (remount the horn "
                "or set the servo's homing offset, register 31) and record again"
            )
        if ticks[:, i].max() - ticks[:, i].min() < MIN_RANGE_TICKS:
            raise CalibrationError(
                f"joint {name!r} moved only {int(np.ptp(ticks[:, i]))} ticks while recording "
                f"(< {MIN_RANGE_TICKS}); move it through its whole range"
            )
    low, high = ticks.min(axis=0).astype(int), ticks.max(axis=0).astype(int)
    joints = {
        name: JointCalibration(
            servo_id=int(joint_ids[i]),
            offset_ticks=int(round((low[i] + high[i]) / 2)),
            direction=int(directions[i]),
            min_ticks=int(low[i]),
            max_ticks=int(high[i]),
        )
        for i, name in enumerate(joint_names)
    }
    grip = None
    if gripper is not None:
        name, servo_id, direction = gripper
        lo, hi = int(low[-1]), int(high[-1])
        grip = (name, JointCalibration(servo_id, lo if direction == 1 else hi, direction, lo, hi))
    return ArmCalibration(joints, grip)
