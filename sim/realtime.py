"""The twin in ``realtime`` mode: what happens when, and wall-clock pacing (plain Python; the
ROS node ``sim/ros_node.py`` wires it to the bridge and the publishers).

Like a real arm and real cameras, the twin publishes on its own schedule, in sim time since
the last scene reset, in whole physics steps (:class:`EventSchedule`):

- a *state event* every state period (``state_hz``, default 100 Hz): the bridge ticks at a
  control boundary or when a target is queued, then the state, task status and bridge status
  are published;
- a *camera event* at the physics step nearest each camera period (``camera_hz``, default 30 Hz,
  like real cameras, so frames come every 34, 32, 34 ms at a 2 ms physics step): the state is
  published too (as from a 1 kHz arm, the newest state is never older than a frame), then the
  cameras render and publish, each frame stamped with the sim time it shows. An event can be
  both.

``control period / state period`` and ``state period / physics step`` must be whole numbers:
rounded and checked (:func:`robot_rl.core.clock.whole_ratio`), never floored.

Commands: a target that arrives is executed at the next state event, not only at control
boundaries, so command-to-motion latency is at most one state period plus the dynamics. At most
one new target is executed per 0.8 control periods (the bridge's ``min_target_interval_s``, sim
time since the last one; a target that comes sooner waits), clipped against the pose measured
when it is executed, and the bridge ticks at every control boundary (watchdog, gripper-only
commands) as before.

:class:`RealtimePacer` runs the events at their wall-clock times on a thread: sim time
``t`` since the reset is due at wall time ``wall0 + t``. A late loop catches up: it runs the
missed events back to back, stepping physics and the bridge, but publishes only the newest (an
event whose successor is already due is *superseded*: its state and frames are dropped, as a
loaded camera drops frames, counted in :attr:`RealtimePacer.superseded`), except that a late
event still goes out when the last state published is a state period old, or (with its frames)
when the last frames are two camera periods old (counted in :attr:`RealtimePacer.kept_alive`):
a twin whose physics and rendering run slower than real time would otherwise fall behind event
after event and publish nothing until it slips (0.2-0.3 s of silence at a 0.1 s lag: the arm
bridge's state age and the actor's frame age limits trip), where a real driver keeps its state
stream and a real camera its frames. If it falls more than ``max_lag_s`` behind, sim time slips
instead (``wall0`` moves, counted in :attr:`RealtimePacer.resyncs`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from robot_rl.core.clock import whole_ratio


@dataclass(frozen=True)
class TwinEvent:
    """One event of the realtime twin.

    Attributes:
        step: Physics steps since the scene reset at which it happens.
        advance: Physics steps to run before it (since the previous event).
        state: Bridge tick (if the gate allows) and state publication.
        camera: Render and publish the cameras.
        sub_index: State events: index of the state period since the reset (else -1).
    """

    step: int
    advance: int
    state: bool
    camera: bool
    sub_index: int = -1


class EventSchedule:
    """State and camera events in physics steps since the last reset (module docstring).

    Args:
        sim_dt_s: Physics timestep, seconds.
        control_period_s: Control period, seconds (a whole number of state periods).
        state_hz: State publication rate (a whole number of physics steps per period).
        camera_hz: Camera frame rate (> 0, at most the physics rate).

    Raises:
        ValueError: A ratio is not whole, or a rate is out of range (the message says which).
    """

    def __init__(
        self, sim_dt_s: float, control_period_s: float, state_hz: float, camera_hz: float
    ) -> None:
        if state_hz <= 0 or camera_hz <= 0:
            raise ValueError(
                f"state_hz and camera_hz must be positive, got {state_hz}, {camera_hz}"
            )
        self.sim_dt_s = sim_dt_s
        self.state_steps = whole_ratio(
            1.0 / state_hz, sim_dt_s, "state period / physics timestep (--state-hz, --sim-hz)"
        )
        self.subs_per_control = whole_ratio(
            control_period_s,
            1.0 / state_hz,
            "control period / state period (--control-hz, --state-hz)",
        )
        self.camera_steps = 1.0 / camera_hz / sim_dt_s
        if self.camera_steps < 1.0 - 1e-9:
            raise ValueError(
                f"camera_hz {camera_hz} is faster than the physics rate {1.0 / sim_dt_s:g} Hz; "
                "lower --camera-hz"
            )
        self.reset()

    def reset(self) -> None:
        """Restart at step 0; the event at step 0 (state + cameras) is the reset's own
        publication, so the next event is the first one after it."""
        self._state_k = 1
        self._camera_j = 1
        self._last_step = 0

    def _camera_step(self, j: int) -> int:
        return max(1, round(j * self.camera_steps)) if j > 0 else 0

    def peek(self) -> TwinEvent:
        """The next event (not consumed)."""
        s = self._state_k * self.state_steps
        c = self._camera_step(self._camera_j)
        step = min(s, c)
        return TwinEvent(
            step=step,
            advance=step - self._last_step,
            state=s == step,
            camera=c == step,
            sub_index=self._state_k if s == step else -1,
        )

    def pop(self) -> TwinEvent:
        """The next event, consumed."""
        ev = self.peek()
        if ev.state:
            self._state_k += 1
        if ev.camera:
            self._camera_j += 1
            while self._camera_step(self._camera_j) <= ev.step:  # camera faster than a step
                self._camera_j += 1
        self._last_step = ev.step
        return ev


class RealtimePacer:
    """Runs :class:`EventSchedule` events at their wall-clock times on a daemon thread.

    Args:
        schedule: The events.
        lock: Held while an event runs (and by :meth:`restart`'s caller).
        run_event: ``run_event(event, superseded)`` executes one event (steps physics, ticks
            the bridge; publishes unless ``superseded``), called under ``lock``.
        max_lag_s: Largest lag caught up by running events back to back, seconds.
        on_resync: Called with the lag (seconds, under ``lock``) when sim time slips.
        monotonic: Wall-clock source.
    """

    def __init__(
        self,
        schedule: EventSchedule,
        lock: threading.RLock,
        run_event: Callable[[TwinEvent, bool], None],
        max_lag_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        on_resync: Callable[[float], None] | None = None,
    ) -> None:
        self.schedule = schedule
        self.lock = lock
        self.run_event = run_event
        self.max_lag_s = max_lag_s
        self.on_resync = on_resync or (lambda lag_s: None)
        self._mono = monotonic
        self._wall0 = monotonic()
        self._generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resyncs = 0
        """Times the loop fell more than ``max_lag_s`` behind and let sim time slip."""
        self.events = 0
        self.superseded = 0
        """Events run late enough that the next one was already due (nothing published)."""
        self.kept_alive = 0
        """Late events published anyway: the last state (or frames) were too old to drop more."""
        self._state_gap_s = schedule.state_steps * schedule.sim_dt_s
        self._frame_gap_s = 2.0 * schedule.camera_steps * schedule.sim_dt_s
        self._last_state = self._last_frames = self._wall0

    def counters(self) -> dict[str, int]:
        """Events run, superseded (nothing published), kept alive, resyncs (for a status)."""
        return {
            "events": self.events,
            "superseded": self.superseded,
            "kept_alive": self.kept_alive,
            "resyncs": self.resyncs,
        }

    def restart(self) -> None:
        """Scene reset (call under ``lock``): schedule from step 0 at wall time now."""
        self.schedule.reset()
        # the reset publishes its own state and frames
        self._wall0 = self._last_state = self._last_frames = self._mono()
        self._generation += 1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="twin-realtime", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        dt = self.schedule.sim_dt_s
        while not self._stop.is_set():
            with self.lock:
                generation = self._generation
                due = self._wall0 + self.schedule.peek().step * dt
            delay = due - self._mono()
            if delay > 0 and self._stop.wait(delay):
                return
            with self.lock:
                if generation != self._generation:
                    continue  # a scene reset restarted the schedule meanwhile
                lag = self._mono() - due
                if lag > self.max_lag_s:
                    self._wall0 += lag
                    self.resyncs += 1
                    self.on_resync(lag)
                ev = self.schedule.pop()
                now = self._mono()
                superseded = now >= self._wall0 + self.schedule.peek().step * dt
                if superseded:
                    frames = ev.camera and now - self._last_frames >= self._frame_gap_s
                    if frames or now - self._last_state >= self._state_gap_s:
                        ev, superseded = replace(ev, camera=frames), False
                        self.kept_alive += 1
                self.run_event(ev, superseded)
                if not superseded:
                    self._last_state = now
                    if ev.camera:
                        self._last_frames = now
                self.events += 1
                self.superseded += superseded
