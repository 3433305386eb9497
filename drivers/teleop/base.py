"""One Teleop implementation for every device: raw source -> parser -> mapper.

A device is three small parts:

- a :class:`RawSource` yields timestamped raw items: HID report bytes (SpaceMouse), evdev
  ``(type, code, value)`` tuples (gamepad), key names (keyboard), or the same items read back
  from a recorded file (:mod:`drivers.teleop.events`, :mod:`drivers.teleop.recording`);
- a :class:`Parser` turns raw items into a :class:`drivers.teleop.mapping.DeviceReading` (pure,
  unit-tested from recorded items);
- the common :class:`drivers.teleop.mapping.TeleopMapper` turns the reading into a
  :class:`robot_rl.core.types.TeleopState`.

:class:`DeviceTeleop` wires them and implements :class:`robot_rl.core.protocols.Teleop`;
optionally it records every raw item it reads to a JSON-lines file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from robot_rl.core.types import TeleopState

from .events import DEVICE_KINDS, Await, Raw, Recorder
from .mapping import DeviceReading, TeleopMapper

__all__ = ["DEVICE_KINDS", "DeviceTeleop", "Parser", "Raw", "RawSource"]


class RawSource(Protocol):
    """Where raw items come from: a device, or a recorded file."""

    @property
    def kind(self) -> str:
        """One of :data:`DEVICE_KINDS`."""
        ...

    @property
    def info(self) -> Mapping[str, Any]:
        """JSON-able facts the parser needs (e.g. gamepad axis ranges); recorded in a file's
        header and handed to the parser at connect."""
        ...

    def open(self) -> None: ...

    def close(self) -> None: ...

    def poll(self) -> list[tuple[float, Raw]]:
        """Every item available now, oldest first, as ``(monotonic time s, raw)``; never
        blocks."""
        ...


class Parser(Protocol):
    """Raw items -> DeviceReading."""

    def configure(self, info: Mapping[str, Any]) -> None:
        """Take device facts from the source (called once at connect)."""
        ...

    def feed(self, raw: Raw, t_s: float) -> None:
        """Consume one raw item received at ``t_s`` (monotonic s); raise ValueError if it is
        malformed."""
        ...

    def reading(self, now_s: float) -> DeviceReading:
        """The reading at ``now_s``; clears the "pressed since last reading" set."""
        ...


class DeviceTeleop:
    """:class:`robot_rl.core.protocols.Teleop` over a raw source, a parser and the mapper.

    Args:
        source: Raw item source (device or replay).
        parser: Parser for ``source.kind``.
        mapper: Common deadzone / scaling / button mapping.
        record_path: If set, every raw item read is appended to this JSON-lines file
            (:mod:`drivers.teleop.events` format).
        now_fn: Monotonic clock for stamps (seconds).
    """

    def __init__(
        self,
        source: RawSource,
        parser: Parser,
        mapper: TeleopMapper | None = None,
        record_path: str | Path | None = None,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.parser = parser
        self.mapper = mapper or TeleopMapper()
        self._record_path = None if record_path is None else Path(record_path)
        self._recorder: Any = None
        self._now = now_fn
        self._connected = False

    @property
    def kind(self) -> str:
        return self.source.kind

    def connect(self) -> None:
        """Open the source, configure the parser, start recording if asked."""
        self.source.open()
        self.parser.configure(self.source.info)
        if self._record_path is not None:
            self._recorder = Recorder(
                self._record_path, self.source.kind, self.source.info, t0_s=self._now()
            )
        self._connected = True

    def disconnect(self) -> None:
        """Close the source and the recording file."""
        self._connected = False
        if self._recorder is not None:
            self._recorder.close()
            self._recorder = None
        self.source.close()

    def episode_started(self, index: int, t_s: float) -> None:
        """The recorder started episode ``index`` at monotonic time ``t_s`` (its
        ``teleop/session`` announcement): a recording gets an await line there, and a replay
        whose playback holds at an await line goes on (:mod:`drivers.teleop.events`)."""
        if self._recorder is not None:
            self._recorder.write(t_s, Await("episode"))
        notify = getattr(self.source, "episode_started", None)
        if notify is not None:
            notify(index, t_s)

    def read(self) -> TeleopState:
        """Drain the source, parse, map. Raises ValueError on a malformed raw item."""
        if not self._connected:
            raise RuntimeError("teleop device is not connected; call connect() first")
        for t_s, raw in self.source.poll():
            if self._recorder is not None:
                self._recorder.write(t_s, raw)
            self.parser.feed(raw, t_s)
        now = self._now()
        return self.mapper.map(self.parser.reading(now), now)
