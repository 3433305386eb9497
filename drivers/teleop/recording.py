"""Replaying recorded teleop event files through the device's own parser.

The file format, its codec, the recorder and the loader are in :mod:`drivers.teleop.events`
(re-exported here); this module adds the replay source, the parser for each device kind and
:func:`build_teleop` (a device by name, for the teleop node and ``collect --teleop``), so it
imports every device module and no ROS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .base import DeviceTeleop, Parser
from .events import (
    DEVICE_KINDS,
    FORMAT,
    VERSION,
    Await,
    Raw,
    Recorder,
    Recording,
    RecordingFormatError,
    decode_raw,
    encode_raw,
    load_recording,
)
from .gamepad import GamepadConfig, GamepadParser, gamepad_teleop
from .keyboard import KeyboardConfig, KeyboardParser, keyboard_teleop
from .mapping import TeleopMapConfig, TeleopMapper
from .spacemouse import SpaceMouseConfig, SpaceMouseParser, spacemouse_teleop

__all__ = [
    "DEVICES",
    "FORMAT",
    "VERSION",
    "Recorder",
    "Recording",
    "RecordingFormatError",
    "ReplaySource",
    "build_teleop",
    "decode_raw",
    "encode_raw",
    "load_recording",
    "make_parser",
    "replay_teleop",
]


class ReplaySource:
    """A :class:`drivers.teleop.base.RawSource` that plays a recording back in real time.

    At an await line (:class:`drivers.teleop.events.Await`) playback holds until an episode
    not awaited before has started (:meth:`episode_started`, fed from the recorder's
    ``teleop/session`` announcements); file time then restarts at that start (or at the moment
    the await was reached, if the episode started earlier). Starts are counted by episode index,
    so one announcement received twice releases one await.

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
        self._starts: list[float] = []  # episode starts announced and not yet awaited
        self._last_index: int | None = None
        self._holding = False
        self.awaited = 0
        """Await lines passed so far."""

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

    @property
    def holding(self) -> bool:
        """The last :meth:`poll` stopped at an await line with no episode start to go on."""
        return self._holding

    def episode_started(self, index: int, t_s: float) -> None:
        """The recorder started episode ``index`` at monotonic time ``t_s``; an index not
        above the last one seen is a repeat and ignored."""
        if self._last_index is not None and index <= self._last_index:
            return
        self._last_index = index
        self._starts.append(t_s)

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
        self._holding = False
        events = self.recording.events
        while self._next < len(events):
            t_rel, raw = events[self._next]
            t = self._t0 + t_rel / self._speed
            if t > now:
                break
            if isinstance(raw, Await):
                if not self._starts:
                    self._holding = True  # until an episode starts
                    break
                # File time t_rel is the episode's start, or now if it started before.
                start = max(self._starts.pop(0), t)
                self._t0 = start - t_rel / self._speed
                self._next += 1
                self.awaited += 1
                continue
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


DEVICES = ("keyboard", "spacemouse", "gamepad", "replay", "so101_leader")


def build_teleop(
    device: str,
    file: str | None = None,
    record: str | None = None,
    map_config: TeleopMapConfig | None = None,
    hid_path: str | None = None,
    event_path: str | None = None,
    leader: tuple[str, str] | None = None,
) -> DeviceTeleop:
    """The Teleop for a ``--device`` choice (not yet connected); ``leader`` is the
    ``so101_leader``'s (port, calibration file)."""
    if device == "replay":
        if file is None:
            raise ValueError("--device replay needs --file events.jsonl")
        return replay_teleop(file, map_config)
    if device == "spacemouse":
        return spacemouse_teleop(SpaceMouseConfig(path=hid_path), map_config, record)
    if device == "gamepad":
        return gamepad_teleop(GamepadConfig(path=event_path), map_config, record)
    if device == "keyboard":
        return keyboard_teleop(None, map_config, record)
    if device == "so101_leader":
        from .so101_leader import LeaderConfig, so101_leader_teleop  # imports mink: on demand

        if leader is None or not all(leader):
            raise ValueError("--device so101_leader needs --leader-port and --leader-calibration")
        if record is not None:
            raise ValueError("--record: leader readings have no event-file format")
        return so101_leader_teleop(LeaderConfig(*leader), map_config)
    raise ValueError(f"unknown device {device!r}; choose from {DEVICES}")
