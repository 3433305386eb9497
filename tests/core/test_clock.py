"""Fixed-rate clock: ratios are rounded and checked, overruns are counted."""

import time

import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.clock import RateClock, obs_stamp, whole_ratio


def test_whole_ratio_rounds_instead_of_flooring():
    assert int(0.03 // 0.001) == 29  # the trap
    assert whole_ratio(0.03, 0.001) == 30
    assert whole_ratio(0.1, 0.002) == 50


def test_whole_ratio_rejects_fractional_ratio():
    with pytest.raises(ValueError, match="not a whole number"):
        whole_ratio(0.1, 0.003)


class FakeTime:
    """Injected time source: the clock logic under test is the schedule, not the OS sleep."""

    def __init__(self):
        self.t = 100.0

    def now(self):
        return self.t

    def sleep(self, dt):
        assert dt > 0
        self.t += dt


def test_rate_clock_sleeps_to_deadline_and_counts_overruns():
    ft = FakeTime()
    clock = RateClock(10.0, now_fn=ft.now, sleep_fn=ft.sleep)
    ft.t += 0.05  # loop body shorter than the period
    clock.tick()
    assert ft.t == pytest.approx(100.1)
    assert clock.overruns == 0
    ft.t += 0.25  # loop body longer than the period: overrun, schedule restarts
    clock.tick()
    assert clock.overruns == 1
    before = ft.t
    clock.tick()
    assert ft.t == pytest.approx(before + 0.1)
    assert clock.overruns == 1
    assert clock.ticks == 3
    clock.reset()
    assert clock.overruns == 0 and clock.ticks == 0


def test_obs_stamp_reads_the_robot_state_stamp_else_the_fallback():
    obs = {keys.STAMPS: {keys.STAMP_STATE: np.float64(12.5), "front": np.float64(3.0)}}
    assert obs_stamp(obs) == 12.5
    assert obs_stamp(obs, default=0.0) == 12.5
    # an env that is not robot_rl's: the caller's default, else the monotonic clock
    assert obs_stamp({"state": np.zeros(3)}, default=0.0) == 0.0
    assert obs_stamp(np.zeros(3), default=-1.0) == -1.0
    before = time.monotonic()
    assert before <= obs_stamp({keys.STAMPS: {"front": 1.0}}) <= time.monotonic()
