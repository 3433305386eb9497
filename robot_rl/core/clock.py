"""Fixed-rate clocks. Time is explicit (STYLE.md #5).

A :class:`Clock` paces the control loop: ``tick()`` returns when the next control period begins.
:class:`RateClock` does that against the monotonic wall clock and counts overruns (ticks that
started late because the loop body took longer than the period). The MuJoCo twin has its own
clock whose ``tick()`` advances physics by one control period.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from robot_rl.core import keys


def whole_ratio(numerator_s: float, denominator_s: float, what: str = "ratio") -> int:
    """``numerator / denominator`` as an int, rounded, and checked to be whole.

    Never floors (``int(0.03 // 0.001)`` is 29). Raises if the ratio is off a whole number by
    more than 1e-6 relative.
    """
    if denominator_s <= 0 or numerator_s <= 0:
        raise ValueError(f"{what}: periods must be positive, got {numerator_s}, {denominator_s}")
    r = numerator_s / denominator_s
    n = round(r)
    if n < 1 or abs(r - n) > 1e-6 * max(1.0, r):
        raise ValueError(
            f"{what}: {numerator_s} / {denominator_s} = {r} is not a whole number; "
            "choose rates so that one period divides the other"
        )
    return n


class LongestGap:
    """The longest time between two consecutive events (a stream's pauses), in the caller's
    clock; :meth:`restart` starts a new stream (the next event measures no gap)."""

    def __init__(self) -> None:
        self.max_s = 0.0
        self._last_s: float | None = None

    def event(self, now_s: float) -> None:
        if self._last_s is not None:
            self.max_s = max(self.max_s, now_s - self._last_s)
        self._last_s = now_s

    def restart(self) -> None:
        self._last_s = None


class RateClock:
    """Wall-clock fixed-rate ticker on the monotonic clock.

    Args:
        hz: Tick rate.
        now_fn: Monotonic time source in seconds (injectable for tests).
        sleep_fn: Sleep function (injectable for tests).

    A tick that begins more than one period after its deadline counts as an overrun; the
    schedule then restarts from now instead of bursting to catch up.
    """

    def __init__(
        self,
        hz: float,
        now_fn: Callable[[], float] = time.monotonic,
        sleep_fn: Callable[[float], None] = time.sleep,
    ) -> None:
        if hz <= 0:
            raise ValueError(f"hz must be positive, got {hz}")
        self.period_s = 1.0 / hz
        self._now = now_fn
        self._sleep = sleep_fn
        self._next_s = self._now() + self.period_s
        self.overruns = 0
        self.ticks = 0

    def now_s(self) -> float:
        """Monotonic time in seconds."""
        return self._now()

    def reset(self) -> None:
        """Restart the schedule from now; overrun count returns to zero."""
        self._next_s = self._now() + self.period_s
        self.overruns = 0
        self.ticks = 0

    def tick(self) -> None:
        """Block until the next tick deadline."""
        now = self._now()
        remaining = self._next_s - now
        if remaining > 0:
            self._sleep(remaining)
            self._next_s += self.period_s
        else:
            self.overruns += 1
            self._next_s = now + self.period_s
        self.ticks += 1


def obs_stamp(obs: object, default: float | None = None) -> float:
    """The robot-state stamp of a robot_rl observation (``obs[STAMPS][STAMP_STATE]``, seconds).

    Without one (an env that is not robot_rl's): ``default``, or the host's monotonic clock
    when ``default`` is None.
    """
    stamps = obs.get(keys.STAMPS) if isinstance(obs, Mapping) else None
    if isinstance(stamps, Mapping) and keys.STAMP_STATE in stamps:
        return float(stamps[keys.STAMP_STATE])
    return time.monotonic() if default is None else float(default)
