"""Recorded teleop event files (JSON lines): the format, its raw-item codec, the recorder and
the loader. Nothing here imports a device module, so that every device (and
:class:`drivers.teleop.base.DeviceTeleop`, which records) can import it.

Format (UTF-8, one JSON object per line)::

    {"format": "robot_rl.teleop_events", "version": 1, "device": "spacemouse", "info": {...}}
    {"t_s": 0.0, "raw": "0100000a00f6ff"}
    {"t_s": 0.008, "raw": "03010000"}

- line 1, the header: ``device`` is one of :data:`DEVICE_KINDS`; ``info`` holds the device
  facts the parser needs (gamepad ``abs_ranges`` ``{code: [min, max]}``, SpaceMouse ``model``),
  as the device source reported them;
- every other line is one raw item as the device delivered it: ``t_s`` seconds since the start
  of the recording (non-decreasing), ``raw`` the HID report as a hex string (spacemouse), the
  evdev event as ``[type, code, value]`` (gamepad), or the key name (keyboard);
- ``{"t_s": 3.0, "await": "episode"}`` (an await line): playback holds at file time ``t_s``
  until the recorder starts an episode it has not awaited yet (``record`` / ``label`` announce
  every episode start on ``teleop/session``, ``drivers/CONTRACT.md``); the rest of the file
  then plays with file time ``t_s`` at that start. A file that drives several episodes puts one
  await before each episode's presses, so a press never lands in a reset, however long the
  reset takes on a loaded machine. A recording of a live device writes one at every episode
  start it sees.

Replaying a file through the same parser as the live device
(:func:`drivers.teleop.recording.replay_teleop`) gives the same TeleopStates the device gave,
up to when the reads happen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "robot_rl.teleop_events"
VERSION = 1

Raw = Any
"""One raw item: ``bytes`` (spacemouse), ``tuple[int, int, int]`` (gamepad), ``str`` (keyboard)."""

AWAITS = ("episode",)
"""What an await line can wait for (see the module docstring)."""


@dataclass(frozen=True)
class Await:
    """An await line: hold playback until ``what`` happens (see the module docstring)."""

    what: str = "episode"


DEVICE_KINDS = ("spacemouse", "gamepad", "keyboard")
"""Device kinds with a parser (and a recording format)."""

EV_SYN, EV_KEY, EV_ABS = 0, 1, 3
"""evdev event types (linux/input-event-codes.h) a gamepad delivers."""


def check_event(raw: Any) -> tuple[int, int, int]:
    """Validate one event as three ints ``(type, code, value)``.

    Raises:
        ValueError: Not a triple of integers, or a key event with a value other than 0/1/2.
    """
    if not isinstance(raw, (tuple, list)) or len(raw) != 3:
        raise ValueError(f"evdev event must be (type, code, value), got {raw!r}")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in raw):
        raise ValueError(f"evdev event fields must be integers, got {raw!r}")
    etype, code, value = (int(v) for v in raw)
    if etype == EV_KEY and value not in (0, 1, 2):
        raise ValueError(f"key event {raw!r}: value must be 0 (up), 1 (down) or 2 (repeat)")
    return etype, code, value


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
        events: ``(t_s since start, raw item or Await)``, in file order.
    """

    device: str
    info: Mapping[str, Any]
    events: tuple[tuple[float, Raw | Await], ...]

    @property
    def awaits(self) -> int:
        """Await lines in the file."""
        return sum(isinstance(raw, Await) for _, raw in self.events)

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
    events: list[tuple[float, Raw | Await]] = []
    last_t = 0.0
    for n, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            t = float(obj["t_s"])
            if isinstance(obj, dict) and "await" in obj:
                if obj["await"] not in AWAITS:
                    raise ValueError(f"await {obj['await']!r} is not one of {AWAITS}")
                raw: Raw | Await = Await(obj["await"])
            else:
                raw = decode_raw(kind, obj["raw"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise RecordingFormatError(
                f'{path}:{n}: expected {{"t_s": seconds, "raw": ...}} for a {kind}, or '
                f'{{"t_s": seconds, "await": "episode"}}: {e}'
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

    def write(self, t_s: float, raw: Raw | Await) -> None:
        """Record one item (or an :class:`Await`) received at monotonic time ``t_s``."""
        self._last = max(self._last, t_s - self._t0)
        line: dict[str, Any] = {"t_s": round(self._last, 6)}
        if isinstance(raw, Await):
            line["await"] = raw.what
        else:
            line["raw"] = encode_raw(self.device, raw)
        self._f.write(json.dumps(line) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
