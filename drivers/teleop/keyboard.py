"""Keyboard teleop from a terminal: key presses -> twist, gripper and buttons.

A terminal sends key presses (and autorepeats while a key is held) but no releases. A motion key
therefore drives its axis for ``hold_s`` after its last press; the terminal's autorepeat (every
~30 ms after an initial ~250-500 ms delay) keeps it alive while held, and it stops ``hold_s``
after release. Button keys are taps; the intervene key toggles intervention on and off.

Default keys (robot base frame, x forward, y left, z up):

- ``w``/``s`` +-vx, ``a``/``d`` +-vy, ``r``/``f`` +-vz;
- ``u``/``o`` +-wx (roll), ``i``/``k`` +-wy (pitch), ``j``/``l`` +-wz (yaw);
- ``c`` close gripper, ``v`` open gripper;
- ``space`` toggle intervene, ``y`` success, ``n`` failure, ``x`` reset, ``z`` discard.

Key names: lower-case characters, plus ``space``, ``tab``, ``enter``, ``esc``, ``backspace``,
``up``, ``down``, ``left``, ``right`` (:func:`split_keys` turns terminal bytes into names).
Tests feed recorded key sequences (with timestamps) to the parser; the terminal is the device.
"""

from __future__ import annotations

import os
import select
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import DeviceTeleop
from .mapping import DeviceReading, TeleopMapConfig, TeleopMapper, check_action

_NAMED = {" ": "space", "\t": "tab", "\r": "enter", "\n": "enter", "\x7f": "backspace"}
_ESCAPES = {"\x1b[A": "up", "\x1b[B": "down", "\x1b[C": "right", "\x1b[D": "left"}


def split_keys(text: str) -> list[str]:
    """Terminal input -> key names (arrow escape sequences, named whitespace, lower-case)."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        seq = text[i : i + 3]
        if seq in _ESCAPES:
            keys.append(_ESCAPES[seq])
            i += 3
            continue
        ch = text[i]
        keys.append("esc" if ch == "\x1b" else _NAMED.get(ch, ch.lower()))
        i += 1
    return keys


def _default_motion_keys() -> dict[str, tuple[int, float]]:
    return {
        "w": (0, 1.0),
        "s": (0, -1.0),
        "a": (1, 1.0),
        "d": (1, -1.0),
        "r": (2, 1.0),
        "f": (2, -1.0),
        "u": (3, 1.0),
        "o": (3, -1.0),
        "i": (4, 1.0),
        "k": (4, -1.0),
        "j": (5, 1.0),
        "l": (5, -1.0),
    }


def _default_action_keys() -> dict[str, str]:
    return {
        "c": "gripper_close",
        "v": "gripper_open",
        "y": "success",
        "n": "failure",
        "x": "reset",
        "z": "discard",
    }


@dataclass(frozen=True)
class KeyboardConfig:
    """Keyboard settings.

    Attributes:
        motion_keys: Key -> (twist index 0..5, sign).
        action_keys: Key -> logical action (taps).
        intervene_toggle_key: Key that toggles intervention on / off.
        hold_s: A motion key drives its axis for this long after its last press (s); longer
            than the terminal's autorepeat delay so a held key never flickers.
    """

    motion_keys: Mapping[str, tuple[int, float]] = field(default_factory=_default_motion_keys)
    action_keys: Mapping[str, str] = field(default_factory=_default_action_keys)
    intervene_toggle_key: str = "space"
    hold_s: float = 0.6

    def __post_init__(self) -> None:
        if not self.hold_s > 0:
            raise ValueError(f"hold_s {self.hold_s} must be > 0")
        for key, (idx, sign) in self.motion_keys.items():
            if idx not in range(6) or sign not in (1.0, -1.0):
                raise ValueError(f"motion_keys[{key!r}] = ({idx}, {sign}): index 0..5, sign +-1")
        for key, action in self.action_keys.items():
            check_action(action, f"KeyboardConfig.action_keys[{key!r}]")
        clash = set(self.motion_keys) & (set(self.action_keys) | {self.intervene_toggle_key})
        if clash:
            raise ValueError(f"keys {sorted(clash)} are mapped to both motion and an action")


class KeyboardParser:
    """Key presses (with times) -> reading."""

    def __init__(self, config: KeyboardConfig | None = None) -> None:
        self.config = config or KeyboardConfig()
        self._last_press: dict[str, float] = {}
        self._pressed: set[str] = set()
        self._intervening = False

    def configure(self, info: Mapping[str, Any]) -> None:
        """Nothing to take from the terminal."""

    def feed(self, raw: Any, t_s: float) -> None:
        if not isinstance(raw, str) or not raw:
            raise ValueError(f"key must be a non-empty key name string, got {raw!r}")
        c = self.config
        if raw in c.motion_keys:
            self._last_press[raw] = t_s
        elif raw in c.action_keys:
            self._pressed.add(c.action_keys[raw])
        elif raw == c.intervene_toggle_key:
            self._intervening = not self._intervening
        # other keys: ignored (a terminal sends whatever is typed)

    def reading(self, now_s: float) -> DeviceReading:
        axes = np.zeros(6)
        for key, t in self._last_press.items():
            if now_s - t <= self.config.hold_s:
                idx, sign = self.config.motion_keys[key]
                axes[idx] += sign
        pressed = frozenset(self._pressed)
        self._pressed.clear()
        held = frozenset({"intervene"}) if self._intervening else frozenset()
        return DeviceReading(axes=np.clip(axes, -1.0, 1.0), held=held, pressed=pressed)


class TerminalKeySource:
    """Key presses from a terminal (stdin by default) in cbreak mode, read without blocking.

    The terminal settings are restored by :meth:`close`.
    """

    kind = "keyboard"
    info: Mapping[str, Any] = {}

    def __init__(self, fd: int | None = None) -> None:
        self._fd = fd
        self._saved: Any = None

    def open(self) -> None:
        import termios
        import tty

        fd = sys.stdin.fileno() if self._fd is None else self._fd
        if not os.isatty(fd):
            raise RuntimeError(
                "keyboard teleop needs a terminal on stdin (run the node in a terminal, not "
                "under a supervisor without a tty), or replay a recorded file"
            )
        self._saved = termios.tcgetattr(fd)
        tty.setcbreak(fd)
        self._fd = fd

    def close(self) -> None:
        if self._saved is not None and self._fd is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def poll(self) -> list[tuple[float, str]]:
        if self._fd is None or self._saved is None:
            raise RuntimeError("keyboard is not open")
        out: list[tuple[float, str]] = []
        while select.select([self._fd], [], [], 0.0)[0]:
            data = os.read(self._fd, 256)
            if not data:
                break
            now = time.monotonic()
            out.extend((now, k) for k in split_keys(data.decode(errors="replace")))
        return out


def keyboard_teleop(
    config: KeyboardConfig | None = None,
    map_config: TeleopMapConfig | None = None,
    record_path: str | None = None,
) -> DeviceTeleop:
    """A terminal keyboard :class:`robot_rl.core.protocols.Teleop`. Keys are full-scale, so the
    deadzone does not matter; ``intervene_on_motion`` still applies."""
    config = config or KeyboardConfig()
    return DeviceTeleop(
        TerminalKeySource(),
        KeyboardParser(config),
        TeleopMapper(map_config or TeleopMapConfig()),
        record_path=record_path,
    )
