"""Gamepad over Linux evdev: ``(type, code, value)`` events -> twist, gripper and buttons.

Events are the kernel's ``input_event`` triples: ``EV_ABS`` (sticks, triggers, d-pad hat) with
the axis position, ``EV_KEY`` (buttons) with 1 press / 0 release / 2 autorepeat, ``EV_SYN``
frame markers (ignored: each event is applied as it arrives). Codes and default ranges below
are those of an Xbox-style pad under the ``xpad`` / ``hid-generic`` drivers; the device's own
``absinfo`` ranges override the defaults at connect (and are stored in a recording's header).

Default layout (robot base frame, x forward, y left, z up):

- left stick: up -> +vx, left -> +vy; right stick: up -> +vz, left -> +wz (yaw);
- d-pad: right -> +wx (roll), up -> +wy (pitch) (:data:`DEFAULT_AXIS_MAP`);
- right trigger closes, left trigger opens the gripper;
- RB held: intervene; A: success; B: failure; Start: reset; Back/Select: discard.

There is no /dev/input on CI machines: tests feed recorded event tuples to the parser, the
lowest boundary of the device. The device itself is read with python-evdev.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import DeviceTeleop
from .events import EV_ABS, EV_KEY, check_event
from .mapping import DeviceReading, TeleopMapConfig, TeleopMapper, check_action

ABS_X, ABS_Y, ABS_Z, ABS_RX, ABS_RY, ABS_RZ = 0, 1, 2, 3, 4, 5
ABS_HAT0X, ABS_HAT0Y = 16, 17
BTN_SOUTH, BTN_EAST, BTN_NORTH, BTN_WEST = 304, 305, 307, 308
BTN_TL, BTN_TR, BTN_SELECT, BTN_START, BTN_MODE = 310, 311, 314, 315, 316

STICK_RANGE = (-32768, 32767)
TRIGGER_RANGE = (0, 1023)
HAT_RANGE = (-1, 1)


def _default_abs_ranges() -> dict[int, tuple[int, int]]:
    return {
        ABS_X: STICK_RANGE,
        ABS_Y: STICK_RANGE,
        ABS_RX: STICK_RANGE,
        ABS_RY: STICK_RANGE,
        ABS_Z: TRIGGER_RANGE,
        ABS_RZ: TRIGGER_RANGE,
        ABS_HAT0X: HAT_RANGE,
        ABS_HAT0Y: HAT_RANGE,
    }


DEFAULT_AXIS_MAP: dict[int, tuple[int, float]] = {
    ABS_Y: (0, -1.0),  # left stick up (negative) -> +vx
    ABS_X: (1, -1.0),  # left stick left (negative) -> +vy
    ABS_RY: (2, -1.0),  # right stick up -> +vz
    ABS_HAT0X: (3, 1.0),  # d-pad right -> +wx
    ABS_HAT0Y: (4, -1.0),  # d-pad up (negative) -> +wy
    ABS_RX: (5, -1.0),  # right stick left -> +wz
}
"""Centred axis code -> (twist index, sign)."""


def _default_axis_map() -> dict[int, tuple[int, float]]:
    return dict(DEFAULT_AXIS_MAP)


def _default_gripper_axes() -> dict[int, float]:
    return {ABS_RZ: 1.0, ABS_Z: -1.0}  # right trigger closes, left trigger opens


def _default_button_map() -> dict[int, str]:
    return {
        BTN_TR: "intervene",
        BTN_SOUTH: "success",
        BTN_EAST: "failure",
        BTN_START: "reset",
        BTN_SELECT: "discard",
    }


@dataclass(frozen=True)
class GamepadConfig:
    """Gamepad parsing settings.

    Attributes:
        abs_ranges: Axis code -> (min, max) raw value; overridden by the device's absinfo.
        axis_map: Centred axis code -> (twist index 0..5, sign); read in [-1, 1].
        gripper_axes: Trigger axis code -> sign; read in [0, 1], summed into the gripper axis.
        button_map: Key code -> logical action (:data:`drivers.teleop.mapping.ACTIONS`).
        path: ``/dev/input/event*`` to open, or None for the first device with sticks and an
            A/South button.
    """

    abs_ranges: Mapping[int, tuple[int, int]] = field(default_factory=_default_abs_ranges)
    axis_map: Mapping[int, tuple[int, float]] = field(default_factory=_default_axis_map)
    gripper_axes: Mapping[int, float] = field(default_factory=_default_gripper_axes)
    button_map: Mapping[int, str] = field(default_factory=_default_button_map)
    path: str | None = None

    def __post_init__(self) -> None:
        for code, (lo, hi) in self.abs_ranges.items():
            if not lo < hi:
                raise ValueError(f"abs_ranges[{code}] = ({lo}, {hi}) needs min < max")
        for code, (idx, sign) in self.axis_map.items():
            if idx not in range(6) or sign not in (1.0, -1.0):
                raise ValueError(f"axis_map[{code}] = ({idx}, {sign}): need index 0..5, sign +-1")
            if code not in self.abs_ranges:
                raise ValueError(f"axis_map uses axis {code} without an abs_ranges entry")
        for code in self.gripper_axes:
            if code not in self.abs_ranges:
                raise ValueError(f"gripper_axes uses axis {code} without an abs_ranges entry")
        for code, action in self.button_map.items():
            check_action(action, f"GamepadConfig.button_map[{code}]")


class GamepadParser:
    """Keeps the latest axis values and pressed keys."""

    def __init__(self, config: GamepadConfig | None = None) -> None:
        self.config = config or GamepadConfig()
        self._ranges: dict[int, tuple[int, int]] = dict(self.config.abs_ranges)
        self._abs: dict[int, int] = {}
        self._keys: set[int] = set()
        self._pressed: set[str] = set()

    def configure(self, info: Mapping[str, Any]) -> None:
        """Take ``info["abs_ranges"]`` (``{code: [min, max]}``, keys may be strings)."""
        for code, (lo, hi) in dict(info.get("abs_ranges", {})).items():
            if not int(lo) < int(hi):
                raise ValueError(f"device reports abs range ({lo}, {hi}) for axis {code}")
            self._ranges[int(code)] = (int(lo), int(hi))

    def feed(self, raw: Any, t_s: float) -> None:
        etype, code, value = check_event(raw)
        if etype == EV_ABS:
            self._abs[code] = value
        elif etype == EV_KEY:
            if value == 0:
                self._keys.discard(code)
            else:
                if value == 1 and code not in self._keys and code in self.config.button_map:
                    self._pressed.add(self.config.button_map[code])
                self._keys.add(code)

    def _centred(self, code: int) -> float:
        lo, hi = self._ranges[code]
        v = self._abs.get(code)
        if v is None:
            return 0.0
        return float(np.clip(2.0 * (v - lo) / (hi - lo) - 1.0, -1.0, 1.0))

    def _unit(self, code: int) -> float:
        lo, hi = self._ranges[code]
        v = self._abs.get(code, lo)
        return float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))

    def reading(self, now_s: float) -> DeviceReading:
        axes = np.zeros(6)
        for code, (idx, sign) in self.config.axis_map.items():
            axes[idx] += sign * self._centred(code)
        g = sum(sign * self._unit(code) for code, sign in self.config.gripper_axes.items())
        bm = self.config.button_map
        held = frozenset(bm[k] for k in self._keys if k in bm)
        pressed = frozenset(self._pressed)
        self._pressed.clear()
        return DeviceReading(
            axes=np.clip(axes, -1.0, 1.0),
            gripper_axis=float(np.clip(g, -1.0, 1.0)),
            held=held,
            pressed=pressed,
        )


class EvdevSource:
    """Raw events from ``/dev/input/event*`` through python-evdev (non-blocking)."""

    kind = "gamepad"

    def __init__(self, config: GamepadConfig | None = None) -> None:
        self.config = config or GamepadConfig()
        self._dev: Any = None
        self._info: dict[str, Any] = {}

    @property
    def info(self) -> Mapping[str, Any]:
        return self._info

    def open(self) -> None:
        import evdev  # python-evdev; imported here so that parsing works without it

        path = self.config.path
        if path is None:
            for p in evdev.list_devices():
                caps = evdev.InputDevice(p).capabilities()
                if ABS_X in [c for c, _ in caps.get(EV_ABS, [])] and BTN_SOUTH in caps.get(
                    EV_KEY, []
                ):
                    path = p
                    break
        if path is None:
            raise RuntimeError(
                "no gamepad found under /dev/input (need read access to event devices: add "
                "the user to group 'input', or set GamepadConfig.path)"
            )
        dev = evdev.InputDevice(path)
        ranges = {str(code): [ai.min, ai.max] for code, ai in dev.capabilities().get(EV_ABS, [])}
        self._info = {"name": dev.name, "abs_ranges": ranges}
        self._dev = dev

    def close(self) -> None:
        if self._dev is not None:
            self._dev.close()
            self._dev = None

    def poll(self) -> list[tuple[float, tuple[int, int, int]]]:
        if self._dev is None:
            raise RuntimeError("gamepad is not open")
        try:
            events = list(self._dev.read())
        except BlockingIOError:
            return []
        now = time.monotonic()
        return [(now, (int(e.type), int(e.code), int(e.value))) for e in events]


def gamepad_teleop(
    config: GamepadConfig | None = None,
    map_config: TeleopMapConfig | None = None,
    record_path: str | None = None,
) -> DeviceTeleop:
    """A gamepad :class:`robot_rl.core.protocols.Teleop` via python-evdev."""
    config = config or GamepadConfig()
    return DeviceTeleop(
        EvdevSource(config),
        GamepadParser(config),
        TeleopMapper(map_config or TeleopMapConfig()),
        record_path=record_path,
    )
