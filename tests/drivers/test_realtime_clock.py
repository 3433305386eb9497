"""The real-time env clock: phase-locking to the sensor streams.

- plain Python (:mod:`drivers.phase_lock`) on synthetic arrival times and a fake clock: the
  schedule aligns to the streams' phase at reset (ticks land right after a complete set), a
  tick never blocks longer than nominal time + ``max_wait_s``, the bounded wait is never an
  overrun while a genuinely late loop body is, a slow drift is followed, and without streams it
  is a plain fixed-rate clock;
- ROS 2: RobotEnv over the real-time twin (``clock: realtime`` -> StreamAlignedClock) runs
  episodes without stale-data errors, its reset observations show the new episode, and it
  locks to the twin's 30 Hz camera frames.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest

from drivers.phase_lock import PhaseLockConfig, PhaseLockedTicker, SetTracker, robust_interval_s

PERIOD_S = 0.1
CAM_PERIOD_S = 1.0 / 30.0
STATE_PERIOD_S = 0.01
TRANSPORT_S = 0.001


class SyntheticStreams:
    """Arrivals on a fake monotonic clock: the tracker sees each arrival when time passes it.

    Args:
        arrivals: ``(time_s, stream)`` pairs (any order).
        streams: Every stream of a complete set.
    """

    def __init__(self, arrivals: list[tuple[float, str]], streams: tuple[str, ...]) -> None:
        self.arrivals = sorted(arrivals)
        self.streams = streams
        self.i = 0
        self.t = 0.0
        self.sets = SetTracker(31)
        self.last: dict[str, float] = {}
        self.sleeps: list[float] = []
        self.waits: list[float] = []

    def _feed(self, until_s: float) -> bool:
        """Deliver arrivals up to ``until_s``; stop at (and return True on) a completion."""
        while self.i < len(self.arrivals) and self.arrivals[self.i][0] <= until_s:
            t, s = self.arrivals[self.i]
            self.i += 1
            self.last[s] = t
            if self.sets.arrival(s, t, self.streams):
                self.t = max(self.t, t)
                return True
        return False

    def advance(self, dt_s: float) -> None:
        end = self.t + dt_s
        while self._feed(end):
            pass
        self.t = end

    def now(self) -> float:
        return self.t

    def sleep(self, dt_s: float) -> None:
        assert dt_s > 0
        self.sleeps.append(dt_s)
        self.advance(dt_s)

    def wait_for_set(self, newest: float | None, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        end = self.t + timeout_s
        while self.i < len(self.arrivals) and self.arrivals[self.i][0] <= end:
            if self._feed(self.arrivals[self.i][0]) and self.sets.newest != newest:
                return True
        self.t = end
        return False

    def ages(self) -> dict[str, float]:
        """Age of each stream's newest message now."""
        return {s: self.t - self.last[s] for s in self.streams}

    def ticker(self, config: PhaseLockConfig | None = None) -> PhaseLockedTicker:
        return PhaseLockedTicker(
            PERIOD_S,
            config or PhaseLockConfig(),
            self.sets,
            guard=contextlib.nullcontext(),
            monotonic=self.now,
            sleep=self.sleep,
            wait_for_set=self.wait_for_set,
        )


def twin_like(
    duration_s: float,
    cam_phase_s: tuple[float, ...] = (0.0137, 0.0137),
    cam_period_s: float = CAM_PERIOD_S,
    jitter_s: float = 0.0,
    stop_s: float = math.inf,
    seed: int = 0,
) -> SyntheticStreams:
    """100 Hz state (two topics) and one camera per phase; arrivals stop at ``stop_s``."""
    rng = np.random.default_rng(seed)
    arrivals = []
    for k in range(int(duration_s / STATE_PERIOD_S)):
        for s in ("joints", "pose"):
            arrivals.append((k * STATE_PERIOD_S + 0.0021 + TRANSPORT_S, s))
    cams = tuple(f"cam{i}" for i in range(len(cam_phase_s)))
    for cam, phase in zip(cams, cam_phase_s, strict=True):
        for j in range(int(duration_s / cam_period_s)):
            t = phase + j * cam_period_s + TRANSPORT_S + jitter_s * rng.uniform(-1, 1)
            arrivals.append((t, cam))
    arrivals = [(t, s) for t, s in arrivals if t < stop_s]
    return SyntheticStreams(arrivals, ("joints", "pose", *cams))


def run(world: SyntheticStreams, ticker: PhaseLockedTicker, ticks: int, body_s) -> list[dict]:
    """Reset, then ``ticks`` ticks, each after a loop body of ``body_s(k)`` seconds."""
    world.advance(0.5)  # streams running before the episode
    ticker.reset()
    out = []
    for k in range(ticks):
        world.advance(body_s(k))
        nominal = ticker.next_s
        before = world.t
        ticker.tick()
        out.append({"nominal": nominal, "entered": before, "returned": world.t, **world.ages()})
    return out


# -- plain Python -----------------------------------------------------------------------------


def test_set_tracker_completes_when_every_stream_delivered() -> None:
    sets = SetTracker(5)
    req = ("a", "b", "cam")
    assert not sets.arrival("a", 1.0, req)
    assert not sets.arrival("a", 1.01, req)
    assert not sets.arrival("b", 1.02, req)
    assert sets.arrival("cam", 1.03, req)
    assert sets.newest == 1.03 and sets.interval_s() is None
    for t in (1.11, 1.12):
        assert not sets.arrival("a", t, req) and not sets.arrival("b", t, req)
    assert sets.arrival("cam", 1.13, req)
    assert sets.interval_s() == pytest.approx(0.1)
    assert not sets.arrival("cam", 1.15, ()), "no required streams: never a set"
    # a stream that delivered, but long ago for its rate, is waited for
    assert not sets.arrival("b", 1.14, req)
    assert not sets.arrival("cam", 1.23, req)  # a: 110 ms old, sets come every 100 ms
    assert not sets.arrival("a", 1.235, req)  # b: 95 ms old
    assert sets.arrival("b", 1.236, req)


def test_interval_estimate_survives_missed_sets_and_jitter() -> None:
    rng = np.random.default_rng(1)
    times = [k * CAM_PERIOD_S + rng.uniform(-0.003, 0.003) for k in range(31)]
    for k in (3, 4, 10, 17, 25):  # missed sets (dropped frames, a stalled twin)
        times.remove(times[k])
    assert robust_interval_s(times) == pytest.approx(CAM_PERIOD_S, abs=0.001)
    assert robust_interval_s(times[:1]) is None


def test_a_dropped_frame_does_not_split_later_sets() -> None:
    """Front and wrist frames arrive in bursts (front first). A dropped front frame must not
    make later sets complete at the next front frame, with the wrist frame of the burst
    before (a set one camera period old that stays so)."""
    arrivals = []
    for k in range(60):
        t = 0.5 + k * CAM_PERIOD_S
        arrivals += [(t - 0.001, "state"), (t + 0.0001, "front"), (t + 0.0003, "wrist")]
    arrivals.remove((0.5 + 20 * CAM_PERIOD_S + 0.0001, "front"))  # best-effort QoS: dropped
    sets = SetTracker()
    required = ("state", "front", "wrist")
    completed = [(t, s) for t, s in arrivals if sets.arrival(s, t, required)]
    assert completed[-30:] == [(t, "wrist") for t, s in arrivals[-90:] if s == "wrist"]


def test_reset_aligns_ticks_right_after_the_camera_frames() -> None:
    world = twin_like(12.0)
    cfg = PhaseLockConfig()
    log = run(world, world.ticker(cfg), 100, lambda k: 0.02)
    for rec in log[1:]:
        # each tick returns on the set: both cameras just arrived (no older than the lead)
        assert rec["cam0"] <= cfg.lead_s + 1e-9 and rec["cam1"] <= cfg.lead_s + 1e-9, rec
        assert rec["returned"] - rec["nominal"] <= cfg.max_wait_s + 1e-9
    periods = np.diff([r["returned"] for r in log[1:]])
    assert np.allclose(periods, PERIOD_S, atol=2e-3), periods  # 34/32/34 ms frames: exact 0.1
    assert world.sets.interval_s() == pytest.approx(CAM_PERIOD_S, abs=2e-3)


def test_unsynchronised_cameras_lock_to_the_later_one() -> None:
    world = twin_like(12.0, cam_phase_s=(0.004, 0.019))
    log = run(world, world.ticker(), 100, lambda k: 0.03)
    for rec in log[2:]:
        assert rec["cam1"] <= 0.003 + 1e-9, rec  # the set completes with the later camera
        assert rec["cam0"] <= 0.015 + 0.003 + 1e-9, rec  # the other: at most the phase gap


def test_wait_is_bounded_when_the_streams_stop_and_is_not_an_overrun() -> None:
    cfg = PhaseLockConfig(max_wait_s=0.012, lead_s=0.003)
    world = twin_like(12.0, stop_s=1.3)
    ticker = world.ticker(cfg)
    log = run(world, ticker, 30, lambda k: 0.05)
    for rec in log:
        assert rec["returned"] - rec["nominal"] <= cfg.max_wait_s + 1e-9, rec
    assert all(w <= cfg.max_wait_s + 1e-9 for w in world.waits)
    assert ticker.overruns == 0
    assert ticker.wait_timeouts > 0  # it did wait, for sets that never came
    stalled = [r for r in log if r["nominal"] > 1.4]
    assert stalled and all(
        abs(r["returned"] - r["nominal"] - cfg.max_wait_s) < 1e-9 for r in stalled
    )  # after the stop: exactly nominal + bound (then the env's staleness check decides)


def test_overruns_count_missed_windows_only() -> None:
    cfg = PhaseLockConfig()
    world = twin_like(20.0)
    ticker = world.ticker(cfg)
    # Bodies up to the period never overrun, whatever the waits; one body of 0.13 s
    # (longer than period + max_wait) overruns once, and the schedule re-aligns.
    log = run(world, ticker, 40, lambda k: 0.13 if k == 20 else 0.098)
    assert ticker.overruns == 1, [r for r in log if r["entered"] > r["nominal"]]
    assert log[20]["returned"] == log[20]["entered"]  # an overrun tick returns at once
    for rec in log[22:]:
        assert rec["cam0"] <= cfg.lead_s + 1e-9, rec  # re-aligned after the overrun


def test_jittery_drifting_cameras_stay_locked() -> None:
    # 0.6 % slow camera clock (0.6 ms per control period) and +-2 ms arrival jitter.
    cfg = PhaseLockConfig()
    world = twin_like(40.0, cam_period_s=CAM_PERIOD_S * 1.006, jitter_s=0.002, seed=3)
    ticker = world.ticker(cfg)
    log = run(world, ticker, 300, lambda k: 0.05)
    ages = [max(r["cam0"], r["cam1"]) for r in log[5:]]
    assert ticker.overruns == 0
    assert max(ages) <= 0.008, max(ages)  # never a stale frame: the lock follows the drift
    assert all(r["returned"] - r["nominal"] <= cfg.max_wait_s + 1e-9 for r in log)


@pytest.mark.parametrize("offset_s", [0.019, -0.014, 0.05])
def test_a_wrong_phase_is_pulled_in(offset_s: float) -> None:
    """E.g. a poor interval estimate at reset left the ticks 16 ms after the frames (no wait:
    the next frame is beyond the bound), or before them, or half a period off."""
    cfg = PhaseLockConfig()
    world = twin_like(12.0)
    ticker = world.ticker(cfg)
    world.advance(0.5)
    ticker.reset()
    ticker._next_s += offset_s
    ages = []
    for _ in range(20):
        world.advance(0.03)
        ticker.tick()
        ages.append(max(world.ages()["cam0"], world.ages()["cam1"]))
    assert max(ages[12:]) <= cfg.lead_s + 1e-9, ages
    assert ticker.overruns == 0


def test_without_streams_it_is_a_fixed_rate_clock() -> None:
    world = SyntheticStreams([], ("a",))
    ticker = world.ticker()
    ticker.reset()
    starts = []
    for _ in range(5):
        world.advance(0.03)
        ticker.tick()
        starts.append(world.t)
    assert np.allclose(np.diff(starts), PERIOD_S) and not world.waits and ticker.overruns == 0


def test_config_is_validated_with_what_to_change() -> None:
    with pytest.raises(ValueError, match="lead_s"):
        PhaseLockConfig(max_wait_s=0.005, lead_s=0.01)
    with pytest.raises(ValueError, match="phase_gain"):
        PhaseLockConfig(phase_gain=2.0)
    with pytest.raises(ValueError, match="shorter than the control period"):
        SyntheticStreams([], ("a",)).ticker(PhaseLockConfig(max_wait_s=0.2, lead_s=0.0))


# -- ROS 2: RobotEnv over the real-time twin --------------------------------------------------


def test_env_over_realtime_twin_runs_without_stale_errors(tmp_path: Path, rt_domain) -> None:
    pytest.importorskip("mujoco")
    from test_ros_env import _log, _ros_env, _run_twin, _setup

    from drivers.ros_clock import StreamAlignedClock

    setup = _setup(tmp_path / "rt.yaml", "realtime")
    sup = _run_twin(setup, rt_domain, tmp_path / "logs")
    env = None
    try:
        env = _ros_env(setup, rt_domain, connect_timeout_s=60.0)
        clock = env.unwrapped.clock
        assert isinstance(clock, StreamAlignedClock)
        rng = np.random.default_rng(0)
        steps = 0
        for episode in range(3):
            obs, info = env.reset(seed=episode)
            stamps = obs["stamps"]
            # The reset observation is the new episode's: the twin's sim time restarted.
            assert max(stamps.values()) < 0.5, stamps
            for _ in range(15):  # 1.5 s per episode
                a = np.clip(rng.normal(0, 0.5, env.action_space.shape), -1, 1).astype(np.float32)
                obs, _, term, trunc, info = env.step(a)
                steps += 1
                if term or trunc:
                    break
        assert steps >= 30
        # The sets are the twin's 30 Hz camera frames, and the clock waited for them.
        assert clock.sets.interval_s() == pytest.approx(CAM_PERIOD_S, abs=0.006)
        assert clock.ticker.waits > 0
    finally:
        if env is not None:
            env.close()
        sup.stop(5.0)
        print(_log(sup))
