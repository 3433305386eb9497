"""Clocks for RobotEnv over ROS 2 (:class:`robot_rl.core.protocols.Clock`).

- :class:`RosLockstepClock` (twin in ``lockstep`` mode, tests): ``tick()`` calls ``sim/step``,
  which advances physics by one control period, publishes every topic for the new time and
  answers ``{"stamp_s": t}``; the clock then waits until every synced stream of the session
  (robot state parts, camera images, task status) has delivered its message stamped ``t``.
  ``now_s()`` is ``t``. ``reset()`` waits the same way for the messages of the last reset.
  A stream that does not deliver raises :class:`StaleSensorError` naming it. The clock must
  be the twin's only stepper: the answer's ``twin_id``, ``episode`` and ``step`` (see
  ``drivers/CONTRACT.md``) must continue the previous answer's, else :meth:`tick` raises and
  says who interfered (another client stepping or resetting the twin, or a second twin in the
  same ROS domain: both answer every call, the first answer wins).
- Real time (``clock: realtime``, the twin in ``realtime`` mode and hardware):
  :class:`StreamAlignedClock` phase-locks the control tick to the sensor streams
  (:mod:`drivers.phase_lock`): it ticks at the nominal rate but right after a complete fresh
  set of readings (state + every camera) when one is expected within a small bounded wait, and
  aligns its schedule to the streams' phase at every reset. It uses only message *arrival*
  times, so it works the same on the twin and on hardware with free-running cameras.
  ``now_s()`` is in the stamps' time base: ``time.monotonic()`` on hardware
  (``time_base="monotonic"``); the twin stamps with sim time, so there (``time_base="stream"``)
  it is the newest message's stamp plus the wall time since it arrived.
  :class:`StreamTimeClock` (fixed rate at an arbitrary phase, stream time) is kept for
  comparison (``bench/ros_latency.py --clock stream``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Literal

from drivers.phase_lock import PhaseLockConfig, PhaseLockedTicker, SetTracker
from drivers.ros_session import Latest, RosSession
from robot_rl.core.clock import RateClock


class RosLockstepClock:
    """Lockstep: one ``tick()`` is one ``sim/step`` of the twin. See the module docstring.

    Args:
        session: The session whose synced streams must catch up after each step.
        control_hz: Control rate; must match the twin's control period.
        step_timeout_s: Timeout of one ``sim/step`` call, seconds.
        sync_timeout_s: How long to wait for the streams after a step or reset, seconds.
    """

    def __init__(
        self,
        session: RosSession,
        control_hz: float,
        step_timeout_s: float = 10.0,
        sync_timeout_s: float = 5.0,
    ) -> None:
        if control_hz <= 0:
            raise ValueError(f"control_hz must be positive, got {control_hz}")
        self.session = session
        self.period_s = 1.0 / control_hz
        self.overruns = 0
        self.ticks = 0
        self.step_timeout_s = step_timeout_s
        self.sync_timeout_s = sync_timeout_s
        self._last_step_s: float | None = None
        self._last_answer: dict | None = None

    def now_s(self) -> float:
        """Robot (sim) time of the last step or reset answer, seconds (0 before any)."""
        t = self.session.robot_time_s
        return 0.0 if t is None else t

    def reset(self) -> None:
        """Wait for every synced stream's message of the last reset; zero the counters."""
        self.session.wait_synced(self.sync_timeout_s, "reset")
        self.overruns = 0
        self.ticks = 0
        self._last_step_s = None
        self._last_answer = None

    def tick(self) -> None:
        """Step the twin one control period and wait for every stream's new messages.

        Raises:
            RosTimeoutError: ``sim/step`` did not answer (twin stopped?).
            ValueError: The step did not advance time by one control period, or the answer
                does not continue the previous one (the message says which: another client
                stepped or reset the twin, two twins answer, or the twin runs at another
                control rate or in real-time mode).
            StaleSensorError: A stream did not deliver the new time's message.
        """
        before = self.session.robot_time_s
        started = time.monotonic()
        answer = self.session.timed_trigger("sim/step", self.step_timeout_s)
        after = self.session.robot_time_s
        assert after is not None
        interference = self._interference(answer)
        since = "the reset" if before is None else f"{before:.6f} s"
        if interference:
            raise ValueError(
                f"sim/step moved time from {since} to {after:.6f} s, but {interference}. "
                + self._diagnostics(answer, started)
            )
        if before is not None and abs((after - before) - self.period_s) > 1e-6:
            raise ValueError(
                f"sim/step advanced time from {since} to {after:.6f} s, not by the env's "
                f"control period {self.period_s:g} s: start the twin in lockstep mode with the "
                f"same control rate as the env. {self._diagnostics(answer, started)}"
            )
        self._last_answer = answer
        self.session.wait_synced(self.sync_timeout_s, "sim/step")
        self.ticks += 1

    def _interference(self, answer: dict) -> str | None:
        """Why ``answer`` does not continue the previous ``sim/step`` answer (None if it does,
        or if the twin does not send ``twin_id``/``episode``/``step``)."""
        prev = self._last_answer
        keys = ("twin_id", "episode", "step")
        if prev is None or not all(k in prev and k in answer for k in keys):
            return None
        if answer["twin_id"] != prev["twin_id"]:
            return (
                f"the answer came from another twin process (twin_id {answer['twin_id']}, the "
                f"previous one from {prev['twin_id']}): two twins serve "
                f"{self.session.topic('sim/step')} in this ROS domain (a second `robot-rl up`, "
                "or another test run?); give each its own ROS_DOMAIN_ID"
            )
        if answer["episode"] != prev["episode"]:
            return (
                f"the twin's scene was reset (episode {prev['episode']} -> {answer['episode']}) "
                "between two steps of this env, by another client of the twin: another env or "
                "process drives this twin (same namespace and ROS_DOMAIN_ID)"
            )
        if answer["step"] != prev["step"] + 1:
            return (
                f"the twin stepped {answer['step'] - prev['step']} times since this env's last "
                "step: another client calls sim/step on this twin (same namespace and "
                "ROS_DOMAIN_ID)"
            )
        return None

    def _diagnostics(self, answer: dict, started_s: float) -> str:
        """Answers, call duration and the service graph, for the error message."""
        name = self.session.topic("sim/step")
        try:
            graph = (
                f"{self.session.node.count_services(name)} server(s) and "
                f"{self.session.node.count_clients(name)} client(s) of {name} visible"
            )
        except Exception as e:  # noqa: BLE001 - diagnostics must not hide the real error
            graph = f"service graph unavailable ({e})"
        domain = self.session.domain_id
        if domain is None:
            domain = os.environ.get("ROS_DOMAIN_ID", "0")
        return (
            f"Answer {answer}, previous answer {self._last_answer}; the call took "
            f"{time.monotonic() - started_s:.3f} s; {graph} on ROS_DOMAIN_ID={domain}."
        )


def stream_time_s(session: RosSession, monotonic: Callable[[], float] = time.monotonic) -> float:
    """The robot's current time estimated from the session's synced streams: the stamp of the
    most recently received message plus the wall time elapsed since it arrived (the most recent
    arrival, not the largest stamp: the twin's time restarts at a scene reset). If every
    publisher stops, it keeps growing, so the readings age and the env raises a stale-data
    error. 0 before any message."""
    with session.cond:
        got = [s for s in session.synced if s.stamp_s is not None and s.received_at_s]
        if not got:
            return 0.0
        newest = max(got, key=lambda s: s.received_at_s or 0.0)
        return float(newest.stamp_s + (monotonic() - newest.received_at_s))


class StreamTimeClock(RateClock):
    """Real-time pacing on the wall clock at an arbitrary phase, ``now_s()`` =
    :func:`stream_time_s`. Superseded by :class:`StreamAlignedClock`; kept for comparison.

    Args:
        session: Session whose synced streams define the time base.
        hz: Control rate.
        monotonic: Wall-clock source (injectable for tests).
    """

    def __init__(
        self,
        session: RosSession,
        hz: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(hz, now_fn=monotonic)
        self.session = session
        self._mono = monotonic

    def now_s(self) -> float:
        """Estimated robot time, seconds (0 before any message)."""
        return stream_time_s(self.session, self._mono)


class StreamAlignedClock:
    """Real time, phase-locked to the session's synced streams (:mod:`drivers.phase_lock`).

    ``reset()`` first waits (at most ``reset_wait_s``) until every synced stream has delivered
    a message that arrived after the last time-setting service call (the robot's ``reset``)
    began and is stamped at or after its answer, so the reset observation shows the new
    episode; then it aligns the schedule. ``tick()``: see
    :class:`drivers.phase_lock.PhaseLockedTicker`; it never blocks longer than the nominal time
    plus ``config.max_wait_s``.

    Args:
        session: Session whose synced streams (state parts, cameras, task status) form a set.
        hz: Control rate.
        config: Wait bound, lead and phase gain (None: the defaults of
            :class:`drivers.phase_lock.PhaseLockConfig`).
        time_base: ``"stream"`` (twin: sim-time stamps, :func:`stream_time_s`) or
            ``"monotonic"`` (hardware: stamps are ``time.monotonic()``-equivalent).
        reset_wait_s: Longest wait at reset for the first complete set of the new episode.
    """

    def __init__(
        self,
        session: RosSession,
        hz: float,
        config: PhaseLockConfig | None = None,
        time_base: Literal["stream", "monotonic"] = "stream",
        reset_wait_s: float = 0.5,
    ) -> None:
        if hz <= 0:
            raise ValueError(f"hz must be positive, got {hz}")
        if time_base not in ("stream", "monotonic"):
            raise ValueError(f"time_base {time_base!r}: choose 'stream' or 'monotonic'")
        self.session = session
        self.time_base = time_base
        self.reset_wait_s = reset_wait_s
        config = config or PhaseLockConfig()
        self.sets = SetTracker(config.history)
        self.ticker = PhaseLockedTicker(
            1.0 / hz,
            config,
            self.sets,
            guard=session.cond,
            monotonic=time.monotonic,
            sleep=time.sleep,
            wait_for_set=self._wait_for_set,
        )
        session.arrival_hooks.append(self._on_arrival)

    @property
    def period_s(self) -> float:
        return self.ticker.period_s

    @property
    def overruns(self) -> int:
        return self.ticker.overruns

    @property
    def ticks(self) -> int:
        return self.ticker.ticks

    def now_s(self) -> float:
        """Robot time in the stamps' time base, seconds."""
        if self.time_base == "monotonic":
            return time.monotonic()
        return stream_time_s(self.session)

    def _on_arrival(self, slot: Latest) -> None:
        # Executor thread, under session.cond.
        synced = self.session.synced
        if slot.received_at_s is None or not any(s is slot for s in synced):
            return
        self.sets.arrival(id(slot), slot.received_at_s, [id(s) for s in synced])

    def _wait_for_set(self, newest: float | None, timeout_s: float) -> bool:
        return self.session.wait_until(lambda: self.sets.newest != newest, timeout_s)

    def _fresh_after_reset(self) -> bool:
        # Under session.cond.
        s = self.session
        t, started = s.robot_time_s, s.robot_call_started_s
        return all(
            x.stamp_s is not None
            and (x.received_at_s or 0.0) >= started
            and (t is None or x.stamp_s >= t - 1e-9)
            for x in s.synced
        )

    def reset(self) -> None:
        """Wait (bounded) for the new episode's first complete set, then align the schedule
        and zero the counters. Never raises: stale readings are the env's check."""
        if self.session.robot_time_s is not None:
            self.session.wait_until(self._fresh_after_reset, self.reset_wait_s)
        self.ticker.reset()

    def tick(self) -> None:
        """Block until the next tick (nominal time, or the set expected just after it)."""
        self.ticker.tick()
