"""A person's teleop device read in this process, without ROS 2: for envs we did not write
(``--env``), which have no setup and no teleop node.

``collect --env ID --teleop keyboard|gamepad|spacemouse`` and ``train --env ID --human teleop
--teleop ...`` read the device directly through the device layer the twin's teleop node uses
(:mod:`drivers.teleop`: the device's bytes or events -> its parser -> the common mapper), and
:class:`robot_rl.core.teleop_axes.TeleopAxes` maps each reading onto the env's actions.

``--teleop-events FILE`` replays a recorded event file (:mod:`drivers.teleop.events`, as
``robot-rl teleop`` records them) through the same parser, on the env's STEP clock: each env step
advances the clock by one control period, and an event at file time ``t`` is read at the first
step at or after ``t``. A replay therefore gives the same episodes on any machine, however fast.
A live device runs on the wall clock, paced at ``--teleop-hz``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

DeviceKind = Literal["keyboard", "gamepad", "spacemouse"]


class StepClock:
    """A clock that moves only when told: one control period per env step (replays)."""

    def __init__(self, period_s: float) -> None:
        if not period_s > 0:
            raise ValueError(f"the step clock's period must be > 0 s, got {period_s}")
        self.period_s = float(period_s)
        self._ticks = 0

    def now(self) -> float:
        return self._ticks * self.period_s  # a product, not a running sum: no drift

    def tick(self) -> None:
        """One env step has passed."""
        self._ticks += 1


class WallPacer:
    """Holds a live device's loop at ``hz`` on the wall clock (0: unpaced)."""

    def __init__(self, hz: float) -> None:
        self._period = 1.0 / hz if hz > 0 else 0.0
        self._next: float | None = None

    def tick(self) -> None:
        if not self._period:
            return
        now = time.monotonic()
        if self._next is None or now > self._next + self._period:
            self._next = now  # first tick, or fell behind: do not rush to catch up
        else:
            time.sleep(max(0.0, self._next - now))
        self._next += self._period


class DeviceSession:
    """A connected device (or replay) and the clock its loop keeps.

    It is a :class:`robot_rl.core.protocols.Teleop` whose :meth:`read` first moves the clock one
    step (a replay's step clock; a live device's pacing), and a
    :class:`robot_rl.core.intervention.StepObserver`: an intervention wrapper's resets announce
    the episode starts a replay's await lines hold for.

    Attributes:
        teleop: The :class:`drivers.teleop.base.DeviceTeleop`.
        replay: Whether it replays a file (then :attr:`finished` says when it has played).
    """

    def __init__(self, teleop, clock) -> None:
        self.teleop = teleop
        self._clock = clock
        self.replay = isinstance(clock, StepClock)
        self._episodes = 0
        self._closed = False

    @property
    def finished(self) -> bool:
        """A replayed file has delivered every event (never for a live device)."""
        return self.replay and bool(getattr(self.teleop.source, "finished", False))

    def now(self) -> float:
        return self._clock.now() if self.replay else time.monotonic()

    def tick(self) -> None:
        self._clock.tick()

    def episode_started(self, index: int) -> None:
        """Episode ``index`` has started (a replay holding at an await line goes on)."""
        self.teleop.episode_started(index, self.now())

    # -- Teleop (the device is connected by open_device) --------------------------------------

    def connect(self) -> None:
        """Connected already (:func:`open_device`)."""

    def disconnect(self) -> None:
        self.close()

    def read(self):
        """One step's reading: the clock moves one step, then the device is read."""
        self.tick()
        return self.teleop.read()

    # -- StepObserver ------------------------------------------------------------------------

    def observe_reset(self, obs, info, seed) -> None:
        self.episode_started(self._episodes)
        self._episodes += 1

    def observe_step(self, obs, reward, info) -> None:
        """A device does not watch the env."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.teleop.disconnect()


def open_device(kind: DeviceKind | None, events: Path | None, control_hz: float) -> DeviceSession:
    """The device ``kind`` (live), or the replay of ``events`` (its device kind from the file's
    header; ``kind``, if given, must match it), connected.

    Raises:
        ValueError: Neither or a mismatch, a bad file, or a device that cannot be opened (the
            message says what to install or plug in).
    """
    if not control_hz > 0:
        raise ValueError(f"--teleop-hz must be > 0, got {control_hz}")
    if events is not None:
        from drivers.teleop.recording import RecordingFormatError, replay_teleop

        clock = StepClock(1.0 / control_hz)
        try:
            teleop = replay_teleop(events, now_fn=clock.now)
        except (OSError, RecordingFormatError, ValueError) as e:
            raise ValueError(f"--teleop-events {events}: {e}") from e
        if kind is not None and teleop.kind != kind:
            raise ValueError(
                f"--teleop {kind} with --teleop-events {events}, a {teleop.kind} recording: "
                "drop --teleop (the file says its device)"
            )
    elif kind is None:
        raise ValueError("give --teleop keyboard|gamepad|spacemouse or --teleop-events FILE")
    else:
        from drivers.teleop.recording import build_teleop

        teleop = build_teleop(kind)
        clock = WallPacer(control_hz)
    try:
        teleop.connect()
    except (OSError, ImportError, RuntimeError) as e:
        raise ValueError(
            f"cannot open the {teleop.kind} ({e}); plug it in (a SpaceMouse needs hidapi and "
            "read access to its /dev/hidraw*, a gamepad python-evdev and /dev/input/event*, "
            "the keyboard a terminal on stdin)"
        ) from e
    return DeviceSession(teleop, clock)
