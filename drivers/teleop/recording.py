"""Recorded teleop event files (JSON lines): format, recorder, loader, replay source.

Format (UTF-8, one JSON object per line)::

    {"format": "robot_rl.teleop_events", "version": 1, "device": "spacemouse", "info": {...}}
    {"t_s": 0.0, "raw": "0100000a00f6ff"}
    {"t_s": 0.008, "raw": "03010000"}

- line 1, the header: ``device`` is one of :data:`drivers.teleop.base.DEVICE_KINDS`; ``info``
  holds the device facts the parser needs (gamepad ``abs_ranges`` ``{code: [min, max]}``,
  SpaceMouse ``model``), as the device source reported them;
- every other line is one raw item as the device delivered it: ``t_s`` seconds since the start
  of the recording (non-decreasing), ``raw`` the HID report as a hex string (spacemouse), the
  evdev event as ``[type, code, value]`` (gamepad), or the key name (keyboard).

Replaying a file through the same parser as the live device (:func:`replay_teleop`) gives the
same TeleopStates the device gave, up to when the reads happen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import DEVICE_KINDS, DeviceTeleop, Parser, Raw
from .gamepad import GamepadConfig, GamepadParser, check_event
from .keyboard import KeyboardConfig, KeyboardParser
from .mapping import TeleopMapConfig, TeleopMapper
from .spacemouse import SpaceMouseConfig, SpaceMouseParser

FORMAT = "robot_rl.teleop_events"
VERSION = 1


class RecordingFormatError(ValueError):
    """A teleop event file does not follow the format; the message names the line."""


def encode_raw(kind: str, raw: Raw) -> Any:
    """Raw item -> its JSON value for ``kind``."""
    if kind == "spacemouse":
        return bytes(raw).hex()
    if kind == "gamepad":
        return list(check_event(raw))
    if kind == "keyboard":
        if not isinstance(raw, str) or not raw:
            raise ValueError(f"keyboard raw item must be a key name, got {raw!r}")
        return raw
    raise ValueError(f"unknown device kind {kind!r}; choose from {DEVICE_KINDS}")


def decode_raw(kind: str, value: Any) -> Raw:
    """JSON value -> raw item for ``kind`` (the inverse of :func:`encode_raw`)."""
    if kind == "spacemouse":
        if not isinstance(value, str):
            raise ValueError(f"spacemouse raw must be a hex string, got {value!r}")
        return bytes.fromhex(value)
    if kind == "gamepad":
        return check_event(value)
    if kind == "keyboard":
        if not isinstance(value, str) or not value:
            raise ValueError(f"keyboard raw must be a key name, got {value!r}")
        return value
    raise ValueError(f"unknown device kind {kind!r}; choose from {DEVICE_KINDS}")


@dataclass(frozen=True)
class Recording:
    """A loaded event file.

    Attributes:
        device: Device kind.
        info: Device facts from the header.
        events: ``(t_s since start, raw item)``, in file order.
    """

    device: str
    info: Mapping[str, Any]
    events: tuple[tuple[float, Raw], ...]

    @property
    def duration_s(self) -> float:
        return self.events[-1][0] if self.events else 0.0


def load_recording(path: str | Path) -> Recording:
    """Read and validate an event file.

    Raises:
        RecordingFormatError: Bad header, bad JSON, unknown device, malformed raw item or
            decreasing time, with the file name and line number.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise RecordingFormatError(f"{path}: empty file; expected a header line")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as e:
        raise RecordingFormatError(f"{path}:1: header is not JSON: {e}") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordingFormatError(f"{path}:1: header must have format {FORMAT!r}, got {header}")
    if header.get("version") != VERSION:
        raise RecordingFormatError(f"{path}:1: version {header.get('version')} != {VERSION}")
    kind = header.get("device")
    if kind not in DEVICE_KINDS:
        raise RecordingFormatError(f"{path}:1: device {kind!r} not in {DEVICE_KINDS}")
    info = header.get("info", {})
    if not isinstance(info, dict):
        raise RecordingFormatError(f"{path}:1: info must be an object")
    events: list[tuple[float, Raw]] = []
    last_t = 0.0
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            t = float(obj["t_s"])
            raw = decode_raw(kind, obj["raw"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise RecordingFormatError(
                f'{path}:{n}: expected {{"t_s": seconds, "raw": ...}} for a {kind}: {e}'
            ) from e
        if not t >= last_t:  # also catches NaN
            raise RecordingFormatError(f"{path}:{n}: t_s {t} is before the previous {last_t}")
        last_t = t
        events.append((t, raw))
    return Recording(kind, info, tuple(events))


class Recorder:
    """Appends raw items to an event file as they are read (one flushed line per item).

    Args:
        path: File to create (overwritten).
        device: Device kind.
        info: Device facts for the header.
        t0_s: Monotonic time of the recording start; default: now.
    """

    def __init__(
        self, path: str | Path, device: str, info: Mapping[str, Any], t0_s: float | None = None
    ) -> None:
        if device not in DEVICE_KINDS:
            raise ValueError(f"unknown device kind {device!r}; choose from {DEVICE_KINDS}")
        self.device = device
        self._t0 = time.monotonic() if t0_s is None else t0_s
        self._last = 0.0
        self._f = Path(path).open("w", encoding="utf-8")
        header = {"format": FORMAT, "version": VERSION, "device": device, "info": dict(info)}
        self._f.write(json.dumps(header) + "\n")
        self._f.flush()

    def write(self, t_s: float, raw: Raw) -> None:
        """Record one item received at monotonic time ``t_s``."""
        self._last = max(self._last, t_s - self._t0)
        line = {"t_s": round(self._last, 6), "raw": encode_raw(self.device, raw)}
        self._f.write(json.dumps(line) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class ReplaySource:
    """A :class:`drivers.teleop.base.RawSource` that plays a recording back in real time.

    Args:
        recording: A loaded recording, or a path to load.
        now_fn: Monotonic clock (seconds); injectable for tests.
        speed: Playback speed factor (2.0 plays twice as fast).
    """

    def __init__(
        self,
        recording: Recording | str | Path,
        now_fn: Callable[[], float] = time.monotonic,
        speed: float = 1.0,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed {speed} must be > 0")
        rec = recording if isinstance(recording, Recording) else load_recording(recording)
        self.recording = rec
        self._now = now_fn
        self._speed = speed
        self._t0: float | None = None
        self._next = 0

    @property
    def kind(self) -> str:
        return self.recording.device

    @property
    def info(self) -> Mapping[str, Any]:
        return self.recording.info

    @property
    def finished(self) -> bool:
        """Every event has been delivered."""
        return self._next >= len(self.recording.events)

    def open(self) -> None:
        """Start playback now."""
        self._t0 = self._now()
        self._next = 0

    def close(self) -> None:
        self._t0 = None

    def poll(self) -> list[tuple[float, Raw]]:
        if self._t0 is None:
            raise RuntimeError("replay source is not open")
        now = self._now()
        out = []
        events = self.recording.events
        while self._next < len(events):
            t_rel, raw = events[self._next]
            t = self._t0 + t_rel / self._speed
            if t > now:
                break
            out.append((t, raw))
            self._next += 1
        return out


def make_parser(kind: str, device_config: Any = None) -> Parser:
    """The parser for a device kind, with its device config (default if None)."""
    if kind == "spacemouse":
        return SpaceMouseParser(device_config or SpaceMouseConfig())
    if kind == "gamepad":
        return GamepadParser(device_config or GamepadConfig())
    if kind == "keyboard":
        return KeyboardParser(device_config or KeyboardConfig())
    raise ValueError(f"unknown device kind {kind!r}; choose from {DEVICE_KINDS}")


def replay_teleop(
    path: str | Path,
    map_config: TeleopMapConfig | None = None,
    device_config: Any = None,
    now_fn: Callable[[], float] = time.monotonic,
    speed: float = 1.0,
) -> DeviceTeleop:
    """A :class:`robot_rl.core.protocols.Teleop` replaying a recorded event file through the
    device's own parser. ``source.finished`` tells when the file is exhausted."""
    source = ReplaySource(path, now_fn=now_fn, speed=speed)
    return DeviceTeleop(
        source,
        make_parser(source.kind, device_config),
        TeleopMapper(map_config or TeleopMapConfig()),
        now_fn=now_fn,
    )
