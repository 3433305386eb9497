"""Human effort (:mod:`robot_rl.run.effort`): corrections are runs of intervened steps; robot
time is steps / control rate; the minutes until no correction is the end of the first run of
uncorrected episodes; figures over time and the first / last minutes; the same figures from a
log's intervention flags on disk as from the live steps; and the curve's effort panel."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.replay import EpisodeLog
from robot_rl.run.effort import HumanEffort, corrections_of

LAYOUT = ObsLayout(state_dim=1, images={})


@pytest.mark.parametrize(
    ("flags", "n"),
    [([], 0), ([0, 0, 0], 0), ([1, 1, 0], 1), ([0, 1, 0, 1, 1, 0, 1], 3), ([1, 0, 1], 2)],
)
def test_a_correction_is_a_run_of_intervened_steps(flags, n) -> None:
    assert corrections_of(np.array(flags, dtype=bool)) == n


def _effort(per_episode: list[tuple[int, int, int]], hz: float = 10.0) -> HumanEffort:
    e = HumanEffort(hz)
    for steps, corr, human in per_episode:
        e.add_episode(steps, corr, human)
    return e


def test_minutes_until_no_correction_is_where_the_first_clean_run_ends() -> None:
    # 60 steps per episode at 10 Hz: 0.1 robot minutes each.
    eps = [(60, 1, 20)] * 5 + [(60, 0, 0)] * 3 + [(60, 2, 30)] + [(60, 0, 0)] * 4
    e = _effort(eps)
    assert e.robot_minutes == pytest.approx(1.3)
    assert e.minutes_until_no_correction(window=4) == pytest.approx(1.3)  # episodes 9-12
    assert e.minutes_until_no_correction(window=3) == pytest.approx(0.8)  # episodes 5-7
    assert e.minutes_until_no_correction(window=5) is None
    assert HumanEffort(10.0).minutes_until_no_correction() is None


def test_figures_over_time_and_at_both_ends() -> None:
    # 600 steps = 1 robot minute per episode: 3 corrected minutes, then 3 clean ones.
    e = _effort([(600, 2, 120)] * 3 + [(600, 0, 0)] * 3)
    t = e.over_time(bin_minutes=2.0)
    assert t["robot_minutes"] == [2.0, 4.0, 6.0]
    assert t["corrections_per_episode"] == [2.0, 1.0, 0.0]
    assert t["human_steps_per_robot_minute"] == [120.0, 60.0, 0.0]
    s = e.summary(tail_minutes=2.0, window=3)
    assert s["corrections"] == 6 and s["human_steps"] == 360
    assert s["human_share"] == pytest.approx(360 / 3600)
    assert s["first_minutes"] == {
        "episodes": 2,
        "corrections_per_episode": 2.0,
        "human_share": pytest.approx(0.2),
    }
    assert s["last_minutes"]["corrections_per_episode"] == 0.0
    assert s["robot_minutes_until_no_correction"] == pytest.approx(6.0)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="human_steps <= steps"):
        HumanEffort(10.0).add_episode(5, 1, 6)
    with pytest.raises(ValueError, match="control_hz must be > 0"):
        HumanEffort(0.0)


def test_the_log_on_disk_gives_the_live_figures(tmp_path) -> None:
    rng = np.random.default_rng(0)
    episodes = [rng.random(int(rng.integers(5, 30))) < p for p in (0.6, 0.4, 0.2, 0.0, 0.0)]
    live = HumanEffort(10.0)
    log = EpisodeLog.create(tmp_path / "log.zarr", LAYOUT, 1, {"source": "online"})
    for k, flags in enumerate(episodes):
        log.begin_episode("online", policy_version=0, seed=k)
        for t, f in enumerate(flags):
            live.add_step(bool(f))
            obs = {keys.STATE: np.array([t], np.float32)}
            log.append(
                obs_learner=obs,
                action=np.zeros(1, np.float32),
                policy_action=np.zeros(1, np.float32),
                reward=0.0,
                terminated=t == len(flags) - 1,
                truncated=False,
                intervened=bool(f),
                policy_version=0,
                stamp_s=float(t),
                next_obs_learner={keys.STATE: np.array([t + 1], np.float32)},
            )
        log.end_episode(success=False)
        live.end_episode()
    log.close()
    with EpisodeLog.open(tmp_path / "log.zarr", mode="r") as read:
        logged = HumanEffort.from_log(read, 10.0)
    assert logged.episodes == live.episodes and len(logged.episodes) == 5
    assert [e.corrections for e in logged.episodes] == [corrections_of(f) for f in episodes]
    assert logged.summary() == live.summary()


def test_the_curve_draws_the_effort_panel(tmp_path) -> None:
    from robot_rl.learner.plots import write_learning_curve

    e = _effort([(100, 2, 40)] * 10 + [(100, 0, 0)] * 25)
    png = tmp_path / "curve.png"
    write_learning_curve(png, [0, 1000], [0.0, 0.9], [-50.0, -10.0], effort=e)
    import matplotlib.image

    wide = matplotlib.image.imread(png).shape[1]
    write_learning_curve(png, [0, 1000], [0.0, 0.9], [-50.0, -10.0])
    assert wide > matplotlib.image.imread(png).shape[1]  # a third panel
