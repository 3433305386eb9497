"""The rehearsal report's figures from joined episodes (robot_rl.app.rehearsal.rehearsal_report):
the
in-loop target counts a corrected episode as a failure of the policy, and the classifier's
online errors are its verdicts against the twin's."""

from __future__ import annotations

import json

import pytest

from robot_rl.app.rehearsal.rehearsal_report import (
    _missed,
    figures,
    ros_eval_figures,
    target_met,
    unaided_successes,
)


def _row(i: int, twin: bool, classifier: bool, corrections: int) -> dict:
    return {
        "robot_s": 10.0 * (i + 1),
        "twin_success": twin,
        "classifier_success": classifier,
        "interventions": corrections,
        "intervened_steps": 10 * corrections,
        "length": 100,
    }


def test_the_in_loop_target_counts_a_corrected_episode_as_a_failure():
    # The human finished corrected episodes: neither they nor the policy's own successes
    # around them may make the policy look unaided. Uncorrected episodes alone would read 3/4
    # (and 1.0 over the last 3), which is what the policy does only when it needs no help.
    rows = [
        _row(0, True, True, 2),
        _row(1, False, False, 0),
        _row(2, True, True, 1),
        _row(3, True, True, 0),
        _row(4, True, False, 0),  # a success the classifier missed
        _row(5, False, True, 3),  # a success the classifier made up
        _row(6, True, True, 0),
    ]
    assert unaided_successes(rows) == [False, False, False, True, True, False, True]
    f = figures(rows, target=2 / 3, n=3)
    assert f["uncorrected_episodes"] == 4 and f["success_unaided_last_n"] == 3
    assert f["success_unaided_last"] == pytest.approx(2 / 3)  # episodes 4, 5, 6
    assert f["robot_minutes_to_target"] == pytest.approx(50.0 / 60.0)  # episodes 2-4: 2 of 3
    # Two episodes ended after the window that met it (they finish after the stop is asked).
    assert f["success_unaided_at_target"] == pytest.approx(2 / 3)
    assert f["episodes_after_target"] == 2
    assert figures(rows, target=1.0, n=3)["robot_minutes_to_target"] is None
    assert f["classifier_false_positives"] == 1 and f["classifier_false_negatives"] == 1
    assert f["interventions"] == 6
    assert f["interventions_first_half"] == pytest.approx(1.0)  # rows 0-2: 2, 0, 1
    assert f["interventions_second_half"] == pytest.approx(0.75)  # rows 3-6: 0, 0, 3, 0
    assert f["success_all"] == pytest.approx(5 / 7)
    effort = f["human_effort"]  # 100 steps at 10 Hz per episode
    assert effort["corrections"] == 6 and effort["human_steps"] == 60
    assert effort["robot_minutes"] == pytest.approx(700 / 600)
    assert effort["robot_minutes_until_no_correction"] is None  # never 20 clean in a row


def test_no_target_while_the_human_finishes_the_episodes():
    # Every episode succeeded, ten of eleven because the human took over: 1 in 3 unaided.
    rows = [_row(i, True, True, 1) for i in range(10)] + [_row(10, True, True, 0)]
    f = figures(rows, target=0.5, n=3)
    assert f["robot_minutes_to_target"] is None and f["success_unaided_last_n"] == 3
    assert f["success_unaided_last"] == pytest.approx(1 / 3)
    assert figures([], target=0.9, n=3)["success_unaided_last"] is None


def test_the_target_is_judged_on_the_final_evaluation():
    assert target_met({"success_rate": 0.9, "episodes": 50}, 0.9, 50) is True
    assert target_met({"success_rate": 0.88, "episodes": 50}, 0.9, 50) is False
    assert target_met({"success_rate": 1.0, "episodes": 20}, 0.9, 50) is False  # too few
    assert target_met(None, 0.9, 50) is None and target_met({}, 0.9, 50) is None


def _scores(path, starts_and_success, seeds=None):
    lines = [
        {"episode": i, "wall_start": t, "wall_end": t + 1.0, "success": ok}
        | ({} if seeds is None else {"seed": seeds[i]})
        for i, (t, ok) in enumerate(starts_and_success)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_ros_evaluation_is_scored_by_the_twin_inside_its_window(tmp_path):
    # Two training episodes before the window, then three evaluation episodes.
    _scores(tmp_path / "scores.jsonl", [(1, True), (2, True), (10, True), (11, False), (12, True)])
    per = [  # the classifier's verdicts, and its highest success probability in each episode
        {"success": True, "max_success_prob": 0.9},
        {"success": True, "max_success_prob": 0.8},
        {"success": False, "max_success_prob": 0.42},
    ]
    result = {"per_episode": per, "success_rate": 2 / 3, "sensor_faults": 0}
    f = ros_eval_figures(tmp_path, result, {"wall_start": 9.5, "wall_end": 13.0})
    assert f["final_eval_ros_missed_max_success_prob"] == [0.42]  # the one it missed
    assert "1 never reached the threshold (highest probability 0.42-0.42)" in _missed(f, 0.6)
    assert "0 never reached" in _missed(f, 0.4)  # above it: held back by the gates
    assert f["final_eval_ros_episodes"] == 3
    assert f["final_eval_ros_success"] == pytest.approx(2 / 3)  # the twin: yes, no, yes
    assert f["final_eval_ros_classifier_false_positives"] == 1  # episode 1
    assert f["final_eval_ros_classifier_false_negatives"] == 1  # episode 2
    # One score more than episodes, not a retry (not the same scene): no shifted join.
    g = ros_eval_figures(
        tmp_path, {**result, "per_episode": per[:2]}, {"wall_start": 9.5, "wall_end": 13.0}
    )
    assert g["final_eval_ros_success"] is None and g["final_eval_ros_episodes"] == 2
    assert ros_eval_figures(tmp_path, None, None)["final_eval_ros_success"] is None


def test_an_episode_a_stale_sensor_ended_is_joined_once_its_retry_is_scored(tmp_path):
    """The evaluation runs an episode a stale sensor ended again with the same seed; the twin
    scored both attempts (the same scene seed, one after the other): the retry is the one
    joined, and the figures stand."""
    starts = [(10, True), (11, False), (12, True), (13, True)]
    _scores(tmp_path / "scores.jsonl", starts, seeds=[7, 8, 8, 9])  # scene 8 ran twice
    per = [{"success": True}, {"success": True}, {"success": False}]
    result = {"per_episode": per, "success_rate": 2 / 3, "sensor_faults": 1}
    f = ros_eval_figures(tmp_path, result, {"wall_start": 9.5, "wall_end": 14.0})
    assert f["final_eval_ros_episodes"] == 3
    assert f["final_eval_ros_success"] == pytest.approx(1.0)  # yes, yes (the retry), yes
    assert f["final_eval_ros_classifier_false_negatives"] == 1  # the third episode
    assert f["final_eval_ros_classifier_false_positives"] == 0


def test_the_evaluation_keeps_each_episodes_highest_classifier_probability():
    """``robot-rl eval`` with a learned reward: each episode's highest success probability
    (NaN, a late label, skipped), so the report can tell a miss under the threshold from one
    the gates held back; None without a learned reward."""
    import gymnasium as gym
    import numpy as np

    from robot_rl.core import keys
    from robot_rl.run.evaluate import evaluate

    class Probs(gym.Env):
        observation_space = gym.spaces.Dict({"state": gym.spaces.Box(-1, 1, (1,))})
        action_space = gym.spaces.Box(-1.0, 1.0, (1,))

        def __init__(self, probs):
            self.probs = probs

        def reset(self, *, seed=None, options=None):
            self.t = 0
            return {"state": np.zeros(1, np.float32)}, {}

        def step(self, action):
            p, self.t = self.probs[self.t], self.t + 1
            info = {} if p is None else {keys.INFO_REWARD: {"success_prob": p}}
            return {"state": np.zeros(1, np.float32)}, 0.0, False, self.t == 3, info

    class Zero:
        def act(self, obs, deterministic=True):
            return np.zeros(1, np.float32)

    res = evaluate(Probs([0.2, float("nan"), 0.55]), Zero(), lambda o: o, 2, seed=0)
    assert [e.max_success_prob for e in res.episodes] == [0.55, 0.55]
    res = evaluate(Probs([None, None, None]), Zero(), lambda o: o, 1, seed=0)
    assert res.episodes[0].max_success_prob is None


def test_the_twin_scores_say_what_the_scene_was_when_the_classifier_was_wrong(tmp_path):
    # The twin's score log keeps its one-number truth at an episode's last state update and
    # its peak; the report summarises it over the classifier's false positives (what to fix).
    import numpy as np

    from robot_rl.app.rehearsal.rehearsal_report import false_positive_truth
    from robot_rl.core.types import TaskStatus
    from sim.scoring import EpisodeScores, read_scores

    def status(grasped, lift, success=False):
        p = {"grasped": np.array([grasped], np.float32), "cube_lift_m": np.array([lift])}
        return TaskStatus(-1.0, success, privileged=p | {"cube_pos": np.zeros(3)})

    s = EpisodeScores(tmp_path / "scores.jsonl", wall=lambda: 1.0)
    s.start(0, 7)
    s.observe(0.1, status(0.0, 0.0))
    s.observe(0.2, status(1.0, 0.03))
    s.observe(0.3, status(0.0, np.nan))  # a non-finite field is left out, not written as NaN
    s.observe(0.4, status(0.0, 0.015))
    s.close()
    (rec,) = read_scores(tmp_path / "scores.jsonl")
    assert rec["truth_end"] == {"grasped": 0.0, "cube_lift_m": 0.015}  # no cube_pos: (3,)
    assert rec["truth_max"] == {"grasped": 1.0, "cube_lift_m": 0.03}

    rows = [
        _row(0, False, True, 0) | {"truth_end": {"grasped": 0.0, "cube_lift_m": 0.03}},
        _row(1, False, True, 0) | {"truth_end": {"grasped": 1.0, "cube_lift_m": 0.01}},
        _row(2, False, True, 0) | {"truth_end": {"grasped": 0.0, "cube_lift_m": 0.02}},
        _row(3, True, True, 0) | {"truth_end": {"grasped": 1.0, "cube_lift_m": 0.5}},  # right
        _row(4, False, False, 0),  # a failure both called a failure
    ]
    assert false_positive_truth(rows) == {"cube_lift_m": [0.01, 0.02, 0.03], "grasped": [0, 0, 1]}
    assert figures(rows, 0.9, 3)["classifier_false_positives_truth_end"]["grasped"][1] == 0.0
    assert false_positive_truth(rows[3:]) == {}


def test_the_report_says_at_which_stage_failed_episodes_failed(tmp_path):
    """From the twin's truth (truth_max): the evaluation's failures by the first stage they
    never reached; the training window's own failures likewise, corrected ones apart."""
    from robot_rl.app.rehearsal.rehearsal_report import _failures

    never = {"grasped": 0.0, "cube_lift_m": 0.0}
    low = {"grasped": 1.0, "cube_lift_m": 0.01}
    up = {"grasped": 1.0, "cube_lift_m": 0.06}
    lines = [
        {"episode": i, "wall_start": 10.0 + i, "wall_end": 10.5 + i, "success": ok,
         "truth_max": truth}
        for i, (ok, truth) in enumerate([(False, never), (False, low), (True, up), (False, up)])
    ]  # fmt: skip
    (tmp_path / "scores.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    per = [{"success": ok} for ok in (False, False, True, False)]
    window = {"wall_start": 9.5, "wall_end": 14.0}
    f = ros_eval_figures(tmp_path, {"per_episode": per}, window, "pick_cube", "fr3")
    assert f["final_eval_ros_failed_at"] == {"grasp": 1, "lift": 1, "not_at_once": 1}
    # On the SO-101 twin the lift that counts is scaled down with its layout (1 cm may do).
    so101 = ros_eval_figures(tmp_path, {"per_episode": per}, window, "pick_cube", "so101")
    assert so101["final_eval_ros_failed_at"]["grasp"] == 1
    # reach has no stages: nothing to say
    assert ros_eval_figures(tmp_path, {"per_episode": per}, window, "reach", "fr3")[
        "final_eval_ros_failed_at"
    ] is None  # fmt: skip
    episodes = [(False, 0, never), (False, 2, never), (True, 0, up), (False, 0, low)]
    rows = [_row(i, ok, ok, c) | {"truth_max": t} for i, (ok, c, t) in enumerate(episodes)]
    g = figures(rows, target=0.9, n=4, task="pick_cube", arm="fr3")
    assert g["failed_at_last"] == {"grasp": 1, "lift": 1, "corrected": 1}
    said = _failures("pick_cube", {**f, **g, "success_unaided_last_n": 4})
    assert "final evaluation over ROS 2: 1 never grasped the cube" in said
    assert "last 4 training episodes: 1 never grasped the cube; 1 grasped the cube but" in said
    assert "1 needed the person" in said
    direct = _failures("pick_cube", {"final_eval_failed_at": {"grasp": 2}})
    assert direct == "on the direct twin: 2 never grasped the cube"
