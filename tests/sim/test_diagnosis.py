"""sim.diagnosis: a failed twin episode's first unreached stage, from the truth the twin
scores; every stage's field is one the task publishes as a one-number truth field."""

from __future__ import annotations

import numpy as np
import pytest

from sim.diagnosis import NOT_AT_ONCE, describe, failed_stage, failures_by_stage, task_stages
from sim.scoring import EpisodeScores


@pytest.mark.parametrize(
    "task", ["pick_cube", "peg_insert", "plug_insert", "assemble", "cable_route"]
)
def test_every_stage_reads_a_one_number_truth_field_the_task_publishes(task: str) -> None:
    from robot_rl.core.config import EnvConfig
    from sim.backend import make_sim_backend
    from sim.config import SimConfig

    b = make_sim_backend(task, SimConfig(cameras=()), EnvConfig(control_rotation=True))
    spec = b.task.privileged_spec
    for s in task_stages(task):
        assert s.field in spec and int(np.prod(spec[s.field].shape)) == 1, (task, s)
    b.close()


def test_a_hovering_policy_fails_at_the_grasp_as_the_twin_scores_it(tmp_path) -> None:
    """A real pick_cube episode that never moves, scored by the twin's own scorer."""
    from robot_rl.app.envs.build import EnvSetup, make_env_from_setup

    env, backend = make_env_from_setup(EnvSetup(task="pick_cube", control_rotation=False))
    scores = EpisodeScores(tmp_path / "scores.jsonl")
    scores.start(0, 0)
    env.reset(seed=0)
    for k in range(20):
        env.step(np.zeros(4, np.float32))
        scores.observe(0.1 * (k + 1), backend.task.evaluate())
    scores.finish()
    from sim.scoring import read_scores

    (row,) = read_scores(tmp_path / "scores.jsonl")
    assert not row["success"] and failed_stage("pick_cube", row["truth_max"]) == "grasp"
    env.close()
    backend.close()


def test_an_evaluation_on_the_direct_twin_keeps_each_episodes_truth_peak_for_the_report(
    tmp_path,
) -> None:
    """``robot-rl eval`` on the direct twin (robot_rl.run.evaluate): each episode's peak of the
    twin's one-number truth (never shown to the policy), so that the rehearsal report says at
    which stage the direct twin's failures failed, as it does over ROS 2."""
    from robot_rl.app.envs.build import EnvSetup, make_env_from_setup
    from robot_rl.app.rehearsal.rehearsal_report import failed_at
    from robot_rl.run.evaluate import evaluate

    class Hover:  # never closes the gripper: it cannot grasp
        def act(self, obs, deterministic=True, generator=None):
            return np.zeros(4, np.float32)

    env, backend = make_env_from_setup(
        EnvSetup(task="pick_cube", control_rotation=False, max_episode_steps=15)
    )
    res = evaluate(env, Hover(), lambda o: o, 2, seed=0)
    env.close()
    backend.close()
    peaks = [e.truth_max for e in res.episodes]
    assert all(p is not None and p["grasped"] == 0.0 and "cube_lift_m" in p for p in peaks)
    assert "cube_pos" not in peaks[0]  # a (3,) field: not one number
    per = res.summary()["per_episode"]
    assert failed_at(per, "pick_cube", "fr3") == {"grasp": 2}


def test_stages_in_order_scaled_lifts_and_what_cannot_be_said() -> None:
    grasped_low = {"grasped": 1.0, "cube_lift_m": 0.03}
    assert failed_stage("pick_cube", {"grasped": 0.0, "cube_lift_m": 0.2}) == "grasp"
    assert failed_stage("pick_cube", grasped_low) == "lift"  # the FR3 task lifts 5 cm
    assert failed_stage("pick_cube", grasped_low, length_scale=0.5) == NOT_AT_ONCE
    assert failed_stage("pick_cube", {"grasped": 1.0}) is None  # an older twin's score
    assert failed_stage("reach", {}) is None
    rows = [
        {"success": False, "truth_max": {"bracket_held": 1, "seated": 1, "pin_held": 1,
                                         "pin_depth_m": 0.004}},
        {"success": False, "truth_max": {"bracket_held": 1, "seated": 0, "pin_held": 0,
                                         "pin_depth_m": 0.0}},
        {"success": True, "truth_max": {}},
        {"success": False},
    ]  # fmt: skip
    counts = failures_by_stage("assemble", rows)
    assert counts == {"placement": 1, "insertion": 1, "unknown": 1}
    said = describe("assemble", counts)
    assert said.startswith("1 held the bracket but never seated it in its nest; 1 entered")
