"""Common mapping from a device reading to :class:`robot_rl.core.types.TeleopState`.

Every device parser (SpaceMouse HID reports, gamepad evdev events, terminal keys) reduces its
raw input to a :class:`DeviceReading`: six axes already in robot order ``[vx, vy, vz, wx, wy,
wz]`` and normalised to [-1, 1] by the device's full scale, a gripper axis in [-1, 1] and the
logical actions currently held or pressed since the last reading. :class:`TeleopMapper` then
applies what is common to all devices: axis permutation and signs (device frame -> robot base
frame), deadzone, scaling, clipping, the gripper rule and "motion means intervention".

Logical actions (:data:`ACTIONS`): the TeleopState buttons ``intervene``, ``success``,
``failure``, ``discard``, ``reset`` plus ``gripper_close`` / ``gripper_open``, which drive the
gripper axis (+1 close, -1 open) instead of appearing as buttons.

Button semantics: a button is in ``TeleopState.buttons`` if it was down at any moment since the
previous read (held, or pressed and released in between), so a short tap is never lost and a
held intervene button shows in every read while held.

Gripper rule: gripper axis >= :attr:`TeleopMapConfig.gripper_threshold` -> closure target 1
(closed); <= -threshold -> 0 (open); otherwise ``None`` (no change).

On ``teleop/joy`` (``drivers/CONTRACT.md``) the same reading travels as ``axes = twist (6) +
[gripper axis]`` and ``buttons = [intervene, success, failure, reset, discard]`` (messages with
the first four only, from older publishers, are still accepted); :func:`joy_from_state` and
:func:`state_from_joy` convert both ways (no ROS types here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from robot_rl.core.types import TeleopState

BUTTONS = ("intervene", "success", "failure", "discard", "reset")
"""Logical buttons of :class:`TeleopState` (see its docstring)."""

GRIPPER_ACTIONS = ("gripper_close", "gripper_open")
"""Logical actions that drive the gripper axis."""

ACTIONS = BUTTONS + GRIPPER_ACTIONS
"""Every logical action a device button or key can be mapped to."""

JOY_BUTTONS = ("intervene", "success", "failure", "reset", "discard")
"""Order of ``sensor_msgs/Joy.buttons`` on ``teleop/joy`` (``drivers/CONTRACT.md``)."""

JOY_BUTTONS_V1 = JOY_BUTTONS[:4]
"""The first four slots only (before ``discard`` had a slot); still accepted on input."""

TWIST_AXES = ("vx", "vy", "vz", "wx", "wy", "wz")
"""Order of the six twist axes (base frame, unit-less [-1, 1])."""


def check_action(name: str, where: str) -> str:
    """Return ``name`` if it is a logical action, else raise a ValueError naming ``where``."""
    if name not in ACTIONS:
        raise ValueError(f"{where}: unknown action {name!r}; choose from {ACTIONS}")
    return name


@dataclass(frozen=True)
class DeviceReading:
    """What a device parser reports at one instant.

    Attributes:
        axes: (6,) ``[vx, vy, vz, wx, wy, wz]`` in the device's own frame, each normalised by
            the device's full scale (may slightly exceed [-1, 1]; the mapper clips).
        gripper_axis: In [-1, 1]: +1 close, -1 open, 0 no request.
        held: Logical actions whose button or key is down now.
        pressed: Logical actions pressed since the previous reading (including taps that were
            already released).
    """

    axes: np.ndarray
    gripper_axis: float = 0.0
    held: frozenset[str] = frozenset()
    pressed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TeleopMapConfig:
    """Device-independent mapping settings.

    Attributes:
        deadzone: Fraction of full scale in [0, 1) below which an axis reads 0; above it the
            axis is rescaled so the output is continuous: ``sign(x) (|x| - d) / (1 - d)``.
        translation_scale: Gain on ``vx, vy, vz`` after the deadzone (output clipped to
            [-1, 1]).
        rotation_scale: Gain on ``wx, wy, wz`` after the deadzone (output clipped to [-1, 1]).
        axis_order: Robot axis ``i`` reads device axis ``axis_order[i]`` (a permutation of
            0..5), for a device mounted rotated with respect to the robot base.
        axis_signs: Per robot axis sign (+1 or -1), applied after ``axis_order``.
        gripper_threshold: |gripper axis| at or above which the gripper target is set.
        intervene_on_motion: Any non-zero twist after the deadzone also counts as
            ``intervene`` (a person touching the device takes over, as in HIL-SERL).
    """

    deadzone: float = 0.1
    translation_scale: float = 1.0
    rotation_scale: float = 1.0
    axis_order: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
    axis_signs: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    gripper_threshold: float = 0.5
    intervene_on_motion: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.deadzone < 1.0:
            raise ValueError(f"deadzone {self.deadzone} must be in [0, 1)")
        for name in ("translation_scale", "rotation_scale"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} {v} must be finite and > 0")
        if sorted(self.axis_order) != list(range(6)):
            raise ValueError(f"axis_order {self.axis_order} must be a permutation of 0..5")
        if len(self.axis_signs) != 6 or any(s not in (1.0, -1.0) for s in self.axis_signs):
            raise ValueError(f"axis_signs {self.axis_signs} must be six values of +1 or -1")
        if not 0.0 < self.gripper_threshold <= 1.0:
            raise ValueError(f"gripper_threshold {self.gripper_threshold} must be in (0, 1]")


def apply_deadzone(x: np.ndarray, deadzone: float) -> np.ndarray:
    """Zero ``|x| < deadzone`` and rescale the rest to stay continuous; input clipped to [-1, 1]."""
    x = np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0)
    mag = np.maximum(np.abs(x) - deadzone, 0.0) / (1.0 - deadzone)
    return np.sign(x) * mag


@dataclass
class TeleopMapper:
    """DeviceReading -> TeleopState (pure; no state besides the config)."""

    config: TeleopMapConfig = field(default_factory=TeleopMapConfig)

    def twist(self, axes: np.ndarray) -> np.ndarray:
        """(6,) device axes -> (6,) robot twist in [-1, 1]."""
        a = np.asarray(axes, dtype=np.float64)
        if a.shape != (6,):
            raise ValueError(f"device axes must have shape (6,), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"device axes contain NaN or inf: {a}")
        c = self.config
        a = a[list(c.axis_order)] * np.asarray(c.axis_signs)
        t = apply_deadzone(a, c.deadzone)
        t[:3] *= c.translation_scale
        t[3:] *= c.rotation_scale
        return np.clip(t, -1.0, 1.0) + 0.0  # + 0.0 turns -0.0 into 0.0

    def gripper_target(self, gripper_axis: float) -> float | None:
        """Gripper axis in [-1, 1] -> closure target 1.0 / 0.0, or None for no change."""
        if not math.isfinite(gripper_axis):
            raise ValueError(f"gripper axis {gripper_axis} is not finite")
        if gripper_axis >= self.config.gripper_threshold:
            return 1.0
        if gripper_axis <= -self.config.gripper_threshold:
            return 0.0
        return None

    def map(self, reading: DeviceReading, stamp_s: float) -> TeleopState:
        """One TeleopState from one reading, stamped ``stamp_s`` (monotonic seconds)."""
        twist = self.twist(reading.axes)
        actions = reading.held | reading.pressed
        g = float(reading.gripper_axis)
        close, open_ = "gripper_close" in actions, "gripper_open" in actions
        if close != open_:  # both at once cancel out: keep the analog axis
            g = 1.0 if close else -1.0
        buttons = {b for b in actions if b in BUTTONS}
        if self.config.intervene_on_motion and np.any(twist != 0.0):
            buttons.add("intervene")
        return TeleopState(
            stamp_s=float(stamp_s),
            twist=twist,
            gripper=self.gripper_target(float(np.clip(g, -1.0, 1.0))),
            buttons=frozenset(buttons),
        )


# -- teleop/joy ------------------------------------------------------------------------------


def joy_from_state(state: TeleopState) -> tuple[list[float], list[int]]:
    """TeleopState -> (axes, buttons) of ``teleop/joy``.

    ``axes`` = the six twist values + the gripper axis (+1 close, -1 open, 0 no change);
    ``buttons`` = :data:`JOY_BUTTONS` as 1/0 (five slots, ``discard`` last).
    """
    g = 0.0 if state.gripper is None else (1.0 if state.gripper >= 0.5 else -1.0)
    axes = [float(v) for v in np.asarray(state.twist, dtype=np.float64)] + [g]
    buttons = [1 if b in state.buttons else 0 for b in JOY_BUTTONS]
    return axes, buttons


def state_from_joy(
    axes: list[float], buttons: list[int], stamp_s: float, gripper_threshold: float = 0.5
) -> TeleopState:
    """``teleop/joy`` (axes, buttons) -> TeleopState; the inverse of :func:`joy_from_state`.

    Accepts five buttons (:data:`JOY_BUTTONS`) or the older four (:data:`JOY_BUTTONS_V1`, no
    ``discard``).

    Raises:
        ValueError: Not 7 axes / 4 or 5 buttons, or a non-finite or out-of-range axis.
    """
    if len(axes) != 7 or len(buttons) not in (len(JOY_BUTTONS_V1), len(JOY_BUTTONS)):
        raise ValueError(
            f"teleop/joy needs 7 axes (twist + gripper) and {len(JOY_BUTTONS)} buttons "
            f"{JOY_BUTTONS} (or the first {len(JOY_BUTTONS_V1)}), got {len(axes)} axes and "
            f"{len(buttons)} buttons"
        )
    a = np.asarray(axes, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(np.abs(a) > 1.0 + 1e-6):
        raise ValueError(f"teleop/joy axes must be finite and in [-1, 1], got {a}")
    g = float(a[6])
    gripper = 1.0 if g >= gripper_threshold else (0.0 if g <= -gripper_threshold else None)
    names = JOY_BUTTONS[: len(buttons)]
    pressed = frozenset(b for b, v in zip(names, buttons, strict=True) if v)
    return TeleopState(stamp_s=float(stamp_s), twist=a[:6].copy(), gripper=gripper, buttons=pressed)
