"""Phase-locking a fixed-rate control loop to its sensor streams (plain Python, no ROS).

Why: the age of an observation at action time is what a policy pays for. A loop that ticks at
10 Hz with an arbitrary phase against cameras that free-run at 30 Hz sees frames up to one
camera period old, plus the spread between unsynchronised streams. So the clock ticks right
after a *complete fresh set* of readings has arrived, instead of at an arbitrary phase.

It needs only **arrival times** on the env's monotonic clock, never the streams' stamps: the
same logic runs against the MuJoCo twin (sim-time stamps) and on hardware (a Franka publishing
state at up to 1 kHz, cameras free-running at 30 Hz, unsynchronised with each other and with
the loop).

Model:

- A *set* completes when every stream (each robot state topic, each camera, ...) has delivered
  at least one message since the previous set completed, and each stream's newest message
  arrived within ``fresh_fraction`` (0.75) of the set interval (:class:`SetTracker`; the second
  rule keeps a dropped frame from splitting later bursts: without it, after a lost front frame
  every set would complete at the next front frame with the wrist frame of the burst before,
  one camera period old, for good). With 100 Hz
  state and 30 Hz cameras, sets complete at the camera arrivals (the later camera's, if they
  are not synchronised). The interval between completions is estimated robustly from the
  recent ones (:func:`robust_interval_s`: missed sets, late and early arrivals, reset gaps).
- :class:`PhaseLockedTicker` keeps nominal tick times ``N_k = N_{k-1} + period``. At ``reset``
  (and after an overrun) the schedule is *aligned*: ``N`` is placed ``lead_s`` before the
  expected set completion nearest to one period from now. Each ``tick()`` sleeps until ``N_k``;
  then, if the next set is expected by ``N_k + max_wait_s``, it waits for it, but never beyond
  ``N_k + max_wait_s`` (the env then uses what it has and its staleness check still applies);
  otherwise it returns at ``N_k``. Phase errors (camera crystal vs host clock, a twin that fell
  behind, a poor first estimate) are corrected:
  ``N_{k+1} = N_k + period + phase_gain * clip(e, -max_wait_s, max_wait_s)`` where ``e`` is the
  offset of the nearest set completion from ``N_k + lead_s``: the newest completion ``c``, or
  the one expected after it (``c + interval``) when that is nearer (the tick did not wait for
  it, or it was late). No correction when the newest completion is more than one interval old
  (the streams stalled: nothing to lock to).
- Overrun: a tick entered after ``N_k + max_wait_s`` (the loop body missed the whole window).
  It is counted, returns at once, and the schedule re-aligns from now. The bounded wait itself
  is never an overrun: a loop body no longer than the period always makes its window.

The control period should be a whole number of set intervals (10 Hz with 30 Hz cameras: 3);
otherwise only some ticks can land right after a set, the others return at their nominal time.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Collection, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass


@dataclass(frozen=True)
class PhaseLockConfig:
    """How a control loop locks to its streams.

    Attributes:
        max_wait_s: Longest wait after a tick's nominal time for the next complete set,
            seconds. Keep it below half the set interval (e.g. <= 0.4 x camera period: 13 ms at
            30 Hz), so that a tick never waits for a set it could not use.
        lead_s: The aligned nominal time is this long before the expected set completion,
            seconds: a set up to ``max_wait_s - lead_s`` late is waited for, an early one is
            used at the nominal time (then as old as it is early).
        phase_gain: Fraction of the observed phase error corrected per tick, in [0, 1]
            (0: align only at reset).
        history: Set completions kept for the interval estimate (>= 3; 31 is about one
            second of 30 Hz cameras).
    """

    max_wait_s: float = 0.013
    lead_s: float = 0.001
    phase_gain: float = 0.5
    history: int = 31

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_wait_s:
            raise ValueError(f"max_wait_s must be >= 0, got {self.max_wait_s}")
        if not 0.0 <= self.lead_s <= self.max_wait_s:
            raise ValueError(
                f"lead_s {self.lead_s} must be in [0, max_wait_s={self.max_wait_s}]: a tick "
                "placed before the set must be allowed to wait for it"
            )
        if not 0.0 <= self.phase_gain <= 1.0:
            raise ValueError(f"phase_gain must be in [0, 1], got {self.phase_gain}")
        if self.history < 3:
            raise ValueError(f"history must be >= 3 set completions, got {self.history}")


def robust_interval_s(times: Sequence[float]) -> float | None:
    """The period of ``times`` (increasing; None with fewer than two): each interval is divided
    by its whole number of median intervals (a missed set counts as two periods), then the mean
    of the middle half is taken (robust to late and early arrivals)."""
    if len(times) < 2:
        return None
    d = [times[i + 1] - times[i] for i in range(len(times) - 1)]
    m = statistics.median(d)
    if m <= 0:
        return None
    d = sorted(x / max(1, round(x / m)) for x in d)
    q = len(d) // 4
    return statistics.fmean(d[q : len(d) - q])


class SetTracker:
    """Completion times of complete sets of stream messages (see the module docstring).

    Not thread-safe: feed and read it under one lock (the ROS session's condition).

    Args:
        history: Completion times kept.
        fresh_fraction: A stream is fresh if its newest message arrived within this fraction
            of the set interval (checked once the interval is known). Below 1, and above the
            arrival spread of unsynchronised cameras as a fraction of their period (two
            cameras of one rate: at most 0.5).
    """

    def __init__(self, history: int = 31, fresh_fraction: float = 0.75) -> None:
        if not 0.0 < fresh_fraction < 1.0:
            raise ValueError(f"fresh_fraction must be in (0, 1), got {fresh_fraction}")
        self.fresh_fraction = fresh_fraction
        self._times: deque[float] = deque(maxlen=history)
        self._delivered: set[Hashable] = set()
        self._newest: dict[Hashable, float] = {}

    def arrival(self, stream: Hashable, t_s: float, required: Collection[Hashable]) -> bool:
        """Record that ``stream`` delivered a message at ``t_s`` (monotonic seconds).

        Args:
            stream: Which stream.
            t_s: Arrival time.
            required: Every stream of a complete set (may change between calls).

        Returns:
            True if this arrival completed a set.
        """
        t_s = float(t_s)
        self._newest[stream] = t_s
        self._delivered.add(stream)
        if not required or not all(r in self._delivered for r in required):
            return False
        interval = self.interval_s()
        if interval is not None:
            oldest = min(self._newest[r] for r in required)
            if t_s - oldest > self.fresh_fraction * interval:
                return False  # delivered, but long ago: wait for that stream's next message
        self._times.append(t_s)
        self._delivered.clear()
        return True

    @property
    def newest(self) -> float | None:
        """Time of the newest completion (None before the first)."""
        return self._times[-1] if self._times else None

    @property
    def completions(self) -> tuple[float, ...]:
        """The recent completion times, oldest first."""
        return tuple(self._times)

    def interval_s(self) -> float | None:
        """:func:`robust_interval_s` of the recent completions."""
        return robust_interval_s(self._times)


class PhaseLockedTicker:
    """The tick procedure of a clock phase-locked to a :class:`SetTracker` (module docstring).

    Time, sleeping and waiting are injected, so the logic runs on synthetic arrival times in
    tests and on the monotonic clock in :class:`drivers.ros_clock.StreamAlignedClock`.

    Args:
        period_s: Control period, seconds.
        config: Wait bound, lead, phase gain.
        sets: The completions to lock to (fed by the caller, read under ``guard``).
        guard: Held while reading ``sets`` (the lock its feeder holds).
        monotonic: Current time, seconds.
        sleep: Sleep for a duration, seconds.
        wait_for_set: ``wait_for_set(newest, timeout_s)`` blocks until ``sets.newest`` differs
            from ``newest`` or ``timeout_s`` passed (never longer).
    """

    def __init__(
        self,
        period_s: float,
        config: PhaseLockConfig,
        sets: SetTracker,
        *,
        guard: AbstractContextManager,
        monotonic: Callable[[], float],
        sleep: Callable[[float], None],
        wait_for_set: Callable[[float | None, float], object],
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        if config.max_wait_s >= period_s:
            raise ValueError(
                f"max_wait_s {config.max_wait_s} must be shorter than the control period "
                f"{period_s} s"
            )
        self.period_s = period_s
        self.config = config
        self.sets = sets
        self._guard = guard
        self._mono = monotonic
        self._sleep = sleep
        self._wait_for_set = wait_for_set
        self._next_s: float | None = None
        self.overruns = 0
        """Ticks entered after their window closed (nominal time + ``max_wait_s``)."""
        self.ticks = 0
        self.waits = 0
        """Ticks that waited for a set after their nominal time (diagnostics)."""
        self.wait_timeouts = 0
        """Waits that ended at the bound without a new set (diagnostics)."""

    @property
    def next_s(self) -> float | None:
        """Nominal time of the next tick (None before the first reset or tick)."""
        return self._next_s

    def _snapshot(self) -> tuple[float | None, float | None]:
        with self._guard:
            return self.sets.newest, self.sets.interval_s()

    def align(self, now_s: float) -> float:
        """Nominal time for the next tick: ``lead_s`` before the expected set completion
        nearest to ``now_s + period`` (later than ``now_s``); ``now_s + period`` when no set
        interval is known yet."""
        newest, interval = self._snapshot()
        target = now_s + self.period_s
        if newest is None or interval is None or interval <= 0:
            return target
        lead = self.config.lead_s
        expected = newest + round((target + lead - newest) / interval) * interval
        while expected - lead <= now_s:
            expected += interval
        return expected - lead

    def reset(self) -> None:
        """Zero the counters and align the schedule to the streams' current phase."""
        self.overruns = self.ticks = self.waits = self.wait_timeouts = 0
        self._next_s = self.align(self._mono())

    def tick(self) -> None:
        """Block until the next tick (see the module docstring)."""
        cfg = self.config
        now = self._mono()
        if self._next_s is None:
            self._next_s = self.align(now)
        nominal = self._next_s
        self.ticks += 1
        if now > nominal + cfg.max_wait_s:
            self.overruns += 1
            self._next_s = self.align(now)
            return
        if nominal > now:
            self._sleep(nominal - now)
        deadline = nominal + cfg.max_wait_s
        newest, interval = self._snapshot()
        if newest is not None and interval is not None and newest + interval <= deadline:
            remaining = deadline - self._mono()
            if remaining > 0:
                self.waits += 1
                self._wait_for_set(newest, remaining)
                if self._snapshot()[0] == newest:
                    self.wait_timeouts += 1
        newest, interval = self._snapshot()
        nxt = nominal + self.period_s
        if newest is not None and interval is not None and interval > 0:
            error = newest - (nominal + cfg.lead_s)
            if -interval <= error < -0.5 * interval:
                error += interval  # the next set (not waited for, or late) is the nearer one
            if abs(error) <= 0.5 * interval:
                nxt += cfg.phase_gain * min(max(error, -cfg.max_wait_s), cfg.max_wait_s)
        self._next_s = nxt
