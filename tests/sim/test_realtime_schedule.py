"""The real-time twin's event schedule and pacing (plain Python, no ROS)."""

from __future__ import annotations

import pytest

from sim.realtime import EventSchedule

DT = 0.002  # 500 Hz physics


def _events(schedule: EventSchedule, until_step: int):
    out = []
    while schedule.peek().step <= until_step:
        out.append(schedule.pop())
    return out


def test_state_every_period_cameras_at_the_nearest_physics_step() -> None:
    s = EventSchedule(DT, 0.1, state_hz=100.0, camera_hz=30.0)
    assert (s.state_steps, s.subs_per_control) == (5, 10)
    evs = _events(s, 100)  # the first 200 ms after a reset
    state_steps = [e.step for e in evs if e.state]
    camera_steps = [e.step for e in evs if e.camera]
    assert state_steps == list(range(5, 101, 5))
    assert [e.sub_index for e in evs if e.state] == list(range(1, 21))
    assert camera_steps == [17, 33, 50, 67, 83, 100]  # 34, 66, 100 ms ...: 30 Hz on 2 ms steps
    assert sum(e.advance for e in evs) == 100  # physics advances exactly to each event
    both = [e for e in evs if e.state and e.camera]
    assert [e.step for e in both] == [50, 100]


def test_reset_restarts_the_schedule() -> None:
    s = EventSchedule(DT, 0.1, state_hz=100.0, camera_hz=30.0)
    _events(s, 73)
    s.reset()
    ev = s.pop()
    assert (ev.step, ev.advance, ev.sub_index, ev.camera) == (5, 5, 1, False)


@pytest.mark.parametrize(
    ("control_period_s", "state_hz", "camera_hz", "match"),
    [
        (0.1, 125.0, 30.0, "control period / state period"),  # 100 ms / 8 ms
        (0.1, 300.0, 30.0, "state period / physics timestep"),  # 3.33 ms / 2 ms
        (0.1, 100.0, 1000.0, "faster than the physics rate"),
        (0.1, 100.0, 0.0, "positive"),
    ],
)
def test_rates_whose_ratios_are_not_whole_are_refused(
    control_period_s, state_hz, camera_hz, match
) -> None:
    with pytest.raises(ValueError, match=match):
        EventSchedule(DT, control_period_s, state_hz, camera_hz)


def test_whole_ratios_are_rounded_not_floored() -> None:
    # 1 / 0.03 s = 33.33 Hz control with 300 Hz state: 0.03 / (1/300) = 8.999... -> 9, not 8
    s = EventSchedule(1.0 / 600.0, 0.03, state_hz=300.0, camera_hz=30.0)
    assert s.subs_per_control == 9 and s.state_steps == 2


def _pacer(run_event, mono, max_lag_s: float = 0.1):
    import threading

    from sim.realtime import RealtimePacer

    schedule = EventSchedule(DT, 0.1, state_hz=100.0, camera_hz=30.0)
    lock = threading.RLock()
    return RealtimePacer(schedule, lock, run_event, max_lag_s=max_lag_s, monotonic=mono)


def test_a_late_pacer_steps_every_event_but_publishes_only_the_newest() -> None:
    t = {"now": 100.0}

    def mono() -> float:
        t["now"] += 0.0005  # each look at the clock costs 0.5 ms of fake time
        return t["now"]

    runs: list[tuple[int, bool, bool]] = []

    def run_event(ev, superseded: bool) -> None:
        runs.append((ev.step, superseded, ev.camera))
        if len(runs) == 12:
            pacer._stop.set()

    pacer = _pacer(run_event, mono)
    pacer.restart()
    t["now"] += 0.045  # the loop starts 45 ms late: events at 10..40 ms are overdue
    pacer._run()
    steps = [s for s, _, _ in runs]
    assert steps == sorted(steps) and steps[0] == 5  # every event runs (physics, bridge)
    flags = [sup for _, sup, _ in runs]
    # The first late event still sends the state (the reset's is 45 ms old), without frames;
    # the next overdue ones are dropped, then everything is published once caught up.
    assert not flags[0] and pacer.kept_alive >= 1 and True in flags and not flags[-1]
    caught_up = len(flags) - flags[::-1].index(True)
    assert not any(flags[caught_up:])
    assert pacer.superseded == sum(flags) and pacer.resyncs == 0


def test_a_pacer_slower_than_real_time_keeps_the_state_stream() -> None:
    """Physics 1.3x slower than real time: the loop is behind at every event, so without a
    keep-alive it would publish nothing until it slips (~0.3 s of silence at a 0.1 s lag):
    the state still goes out at least once per state period and frames once two camera periods
    have passed (plus the work of getting to the next camera event)."""
    t = {"now": 100.0}

    def mono() -> float:
        return t["now"]

    published: list[float] = []
    frames: list[float] = []

    def run_event(ev, superseded: bool) -> None:
        t["now"] += ev.advance * DT * 1.3  # the physics of this event, 1.3x real time
        if not superseded:
            published.append(t["now"])
            if ev.camera:
                frames.append(t["now"])
        if len(published) + pacer.superseded >= 400:
            pacer._stop.set()

    pacer = _pacer(run_event, mono)
    pacer.restart()
    pacer._run()
    assert pacer.superseded > 0 and pacer.resyncs >= 1  # behind throughout, and it slipped
    event_work = 5 * DT * 1.3  # the longest event: one state period of physics
    state_gaps = [b - a for a, b in zip(published[:-1], published[1:], strict=True)]
    assert max(state_gaps) <= 0.01 + event_work + 1e-9, max(state_gaps)
    frame_gaps = [b - a for a, b in zip(frames[:-1], frames[1:], strict=True)]
    # checked at camera events, which come every 1/30 s of sim time (1.3x that of wall time)
    assert max(frame_gaps) <= 2 / 30 + 1.3 / 30 + event_work + 1e-9, max(frame_gaps)
