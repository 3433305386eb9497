"""3Dconnexion SpaceMouse: raw HID report parser and hidapi device source.

HID input reports (first byte = report id; values little-endian signed 16 bit; layout as in
pyspacemouse's device table and spacenavd, observed on SpaceNavigator / Compact / Wireless /
Pro):

- id 1, 7 bytes: translation ``tx, ty, tz`` (bytes 1-2, 3-4, 5-6) of older wired models
  (SpaceNavigator, SpaceMouse Compact, SpaceMouse Pro), which send rotation separately;
- id 1, 13 bytes: translation then rotation ``rx, ry, rz`` (bytes 7-8, 9-10, 11-12): newer and
  wireless models (SpaceMouse Wireless, Pro Wireless, Enterprise, Universal Receiver);
- id 2, 7 bytes: rotation ``rx, ry, rz`` (bytes 1-6);
- id 3, >= 2 bytes: button bitmask from byte 1 on; button ``n`` is bit ``n % 8`` of byte
  ``1 + n // 8`` (two-button models: 0 left, 1 right; SpaceMouse Pro: 12..15 are buttons 1..4,
  22 is Esc);
- other ids (LED state 4, battery 0x17 of wireless models, ...) carry no motion and are ignored.

Device axes: x right, y towards the user, z down (right-handed). The parser reports them in a
right / forward / up frame (``[tx, -ty, -tz, rx, -ry, -rz]``) divided by the full scale (about
350 counts at full deflection); :class:`drivers.teleop.mapping.TeleopMapConfig` maps that frame
onto the robot base.

There is no USB device on CI machines: tests feed recorded report bytes to the parser (and to
:class:`drivers.teleop.recording.ReplaySource`), which is the lowest boundary of the device.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import DeviceTeleop
from .mapping import DeviceReading, TeleopMapConfig, TeleopMapper, check_action

VENDOR_IDS = (0x256F, 0x046D)
"""3Dconnexion, and Logitech (older 3Dconnexion models)."""

PRODUCT_IDS = {
    0xC625: "SpacePilot",
    0xC626: "SpaceNavigator",
    0xC627: "SpaceExplorer",
    0xC629: "SpacePilot Pro",
    0xC62B: "SpaceMouse Pro",
    0xC62E: "SpaceMouse Wireless (cabled)",
    0xC62F: "SpaceMouse Wireless",
    0xC631: "SpaceMouse Pro Wireless (cabled)",
    0xC632: "SpaceMouse Pro Wireless",
    0xC633: "SpaceMouse Enterprise",
    0xC635: "SpaceMouse Compact",
    0xC638: "SpaceMouse Pro Wireless Bluetooth",
    0xC63A: "SpaceMouse Wireless BT",
    0xC641: "SpaceMouse USB",
    0xC652: "3Dconnexion Universal Receiver",
}
"""Known product ids -> model names."""

FULL_SCALE = 350.0
"""Counts at full deflection (values may exceed it a little; the mapper clips)."""


class MalformedReportError(ValueError):
    """A HID report is too short or has an impossible length for its report id."""


@dataclass(frozen=True)
class SpaceMouseReport:
    """One parsed HID report; fields not carried by the report are ``None``.

    Attributes:
        report_id: First byte.
        translation: ``(tx, ty, tz)`` raw counts, device frame.
        rotation: ``(rx, ry, rz)`` raw counts, device frame.
        buttons: Indices of pressed buttons (bit ``n % 8`` of byte ``1 + n // 8``).
    """

    report_id: int
    translation: tuple[int, int, int] | None = None
    rotation: tuple[int, int, int] | None = None
    buttons: frozenset[int] | None = None


def _int16s(data: bytes, start: int) -> tuple[int, int, int]:
    v = np.frombuffer(bytes(data[start : start + 6]), dtype="<i2")
    return int(v[0]), int(v[1]), int(v[2])


def parse_report(data: bytes | bytearray | list[int]) -> SpaceMouseReport:
    """Parse one raw HID input report (report id first).

    Raises:
        MalformedReportError: Empty, or too short / odd length for a motion or button report.
    """
    try:
        b = bytes(data)
    except (TypeError, ValueError) as e:
        raise MalformedReportError(f"HID report must be bytes or ints 0..255: {e}") from e
    if not b:
        raise MalformedReportError("empty HID report (no report id)")
    rid, n = b[0], len(b)
    if rid == 1:
        if n == 7:
            return SpaceMouseReport(1, translation=_int16s(b, 1))
        if n >= 13:
            return SpaceMouseReport(1, translation=_int16s(b, 1), rotation=_int16s(b, 7))
        raise MalformedReportError(
            f"translation report (id 1) has {n} bytes ({b.hex()}); expected 7 (translation "
            "only) or 13 (translation + rotation): check the device model and read size"
        )
    if rid == 2:
        if n < 7:
            raise MalformedReportError(
                f"rotation report (id 2) has {n} bytes ({b.hex()}); expected 7"
            )
        return SpaceMouseReport(2, rotation=_int16s(b, 1))
    if rid == 3:
        if n < 2:
            raise MalformedReportError(f"button report (id 3) has {n} byte; expected >= 2")
        bits = np.unpackbits(np.frombuffer(b[1:], dtype=np.uint8), bitorder="little")
        return SpaceMouseReport(3, buttons=frozenset(int(i) for i in np.flatnonzero(bits)))
    return SpaceMouseReport(rid)


def _default_button_map() -> dict[int, str]:
    return {
        0: "gripper_close",  # left button (two-button models); Menu on the Pro
        1: "gripper_open",  # right button (two-button models); Fit on the Pro
        12: "intervene",  # Pro: button 1
        13: "success",  # Pro: button 2
        14: "failure",  # Pro: button 3
        15: "reset",  # Pro: button 4
        22: "discard",  # Pro: Esc
    }


@dataclass(frozen=True)
class SpaceMouseConfig:
    """SpaceMouse parsing settings.

    Attributes:
        full_scale: Counts that read as 1.0.
        button_map: Button index (see :class:`SpaceMouseReport`) -> logical action
            (:data:`drivers.teleop.mapping.ACTIONS`). Unmapped buttons are ignored.
        vendor_id: USB vendor id to open, or None to take the first known device.
        product_id: USB product id to open, or None for any known model.
        path: hidraw path to open instead of ids (e.g. ``/dev/hidraw3``).
    """

    full_scale: float = FULL_SCALE
    button_map: Mapping[int, str] = field(default_factory=_default_button_map)
    vendor_id: int | None = None
    product_id: int | None = None
    path: str | None = None

    def __post_init__(self) -> None:
        if not self.full_scale > 0:
            raise ValueError(f"full_scale {self.full_scale} must be > 0")
        for idx, action in self.button_map.items():
            check_action(action, f"SpaceMouseConfig.button_map[{idx}]")


class SpaceMouseParser:
    """Accumulates reports into the current translation, rotation and buttons."""

    def __init__(self, config: SpaceMouseConfig | None = None) -> None:
        self.config = config or SpaceMouseConfig()
        self._t = (0, 0, 0)
        self._r = (0, 0, 0)
        self._buttons: frozenset[int] = frozenset()
        self._pressed: set[str] = set()

    def configure(self, info: Mapping[str, Any]) -> None:
        """Nothing to take from the device: the report layout is fixed."""

    def feed(self, raw: bytes | list[int], t_s: float) -> None:
        """Consume one report (bytes or a list of ints, report id first)."""
        report = parse_report(raw)
        if report.translation is not None:
            self._t = report.translation
        if report.rotation is not None:
            self._r = report.rotation
        if report.buttons is not None:
            for idx in report.buttons - self._buttons:
                if idx in self.config.button_map:
                    self._pressed.add(self.config.button_map[idx])
            self._buttons = report.buttons

    def reading(self, now_s: float) -> DeviceReading:
        tx, ty, tz = self._t
        rx, ry, rz = self._r
        axes = np.array([tx, -ty, -tz, rx, -ry, -rz], dtype=np.float64) / self.config.full_scale
        held = frozenset(
            self.config.button_map[i] for i in self._buttons if i in self.config.button_map
        )
        pressed = frozenset(self._pressed)
        self._pressed.clear()
        return DeviceReading(axes=axes, held=held, pressed=pressed)


class HidSource:
    """Raw reports from a SpaceMouse through hidapi (the ``hidapi`` package, module ``hid``).

    Needs read access to the hidraw node (a udev rule such as
    ``KERNEL=="hidraw*", ATTRS{idVendor}=="256f", MODE="0666"``).
    """

    kind = "spacemouse"
    READ_SIZE = 64
    MAX_REPORTS_PER_POLL = 256

    def __init__(self, config: SpaceMouseConfig | None = None) -> None:
        self.config = config or SpaceMouseConfig()
        self._dev: Any = None
        self._model = "unknown"

    @property
    def info(self) -> Mapping[str, Any]:
        return {"model": self._model}

    def _find(self, hid: Any) -> dict[str, Any]:
        c = self.config
        found = []
        for d in hid.enumerate():
            vid, pid = d.get("vendor_id"), d.get("product_id")
            if c.vendor_id is not None and vid != c.vendor_id:
                continue
            if c.product_id is not None and pid != c.product_id:
                continue
            if c.vendor_id is None and (vid not in VENDOR_IDS or pid not in PRODUCT_IDS):
                continue
            found.append(d)
        if not found:
            raise RuntimeError(
                "no SpaceMouse found by hidapi (known vendor ids "
                f"{[hex(v) for v in VENDOR_IDS]}); plug it in, check permissions on "
                "/dev/hidraw*, or set vendor_id/product_id/path"
            )
        return found[0]

    def open(self) -> None:
        import hid  # hidapi; imported here so that parsing works without it

        dev = hid.device()
        if self.config.path is not None:
            dev.open_path(self.config.path.encode())
        else:
            d = self._find(hid)
            dev.open_path(d["path"])
            self._model = PRODUCT_IDS.get(d.get("product_id"), d.get("product_string") or "?")
        dev.set_nonblocking(1)
        self._dev = dev

    def close(self) -> None:
        if self._dev is not None:
            self._dev.close()
            self._dev = None

    def poll(self) -> list[tuple[float, bytes]]:
        if self._dev is None:
            raise RuntimeError("SpaceMouse is not open")
        out = []
        for _ in range(self.MAX_REPORTS_PER_POLL):
            data = self._dev.read(self.READ_SIZE)
            if not data:
                break
            out.append((time.monotonic(), bytes(data)))
        return out


def spacemouse_teleop(
    config: SpaceMouseConfig | None = None,
    map_config: TeleopMapConfig | None = None,
    record_path: str | None = None,
) -> DeviceTeleop:
    """A connected-on-demand SpaceMouse :class:`robot_rl.core.protocols.Teleop` via hidapi."""
    config = config or SpaceMouseConfig()
    return DeviceTeleop(
        HidSource(config),
        SpaceMouseParser(config),
        TeleopMapper(map_config or TeleopMapConfig()),
        record_path=record_path,
    )
