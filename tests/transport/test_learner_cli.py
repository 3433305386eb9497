"""`robot-rl learner` / `robot-rl actor` settings that need no process: where the learner's
layout comes from (--layout-from, for a robot without a twin) and the actor's learned-reward
flags (the same as train's)."""

from __future__ import annotations

import pytest

from robot_rl.app.training.actor_cmd import ActorCmdConfig
from robot_rl.app.training.distributed import LearnerCmdConfig, _learner_layout
from robot_rl.core.batch import ObsLayout
from robot_rl.replay import EpisodeLog

HARDWARE = ObsLayout(state_dim=11, images={})  # no twin task has an 11-D state


def _robot_log(path):
    EpisodeLog.create(path, HARDWARE, 5, {"source": "online"}).close()
    return path


def test_layout_from_a_robot_log_without_evaluation(tmp_path):
    cmd = LearnerCmdConfig(run=tmp_path / "run", layout_from=_robot_log(tmp_path / "rec.zarr"),
                           eval_episodes=0)  # fmt: skip
    layout, action_dim, eval_env, closers = _learner_layout(cmd)
    assert (layout, action_dim, eval_env, closers) == (HARDWARE, 5, None, [])


def test_layout_from_refuses_to_evaluate_on_a_twin_of_another_layout(tmp_path):
    cmd = LearnerCmdConfig(run=tmp_path / "run", layout_from=_robot_log(tmp_path / "rec.zarr"))
    with pytest.raises(ValueError, match="--eval-episodes 0"):
        _learner_layout(cmd)


def test_without_layout_from_the_twin_gives_the_layout_and_evaluates(tmp_path):
    cmd = LearnerCmdConfig(run=tmp_path / "run", eval_episodes=1)
    layout, action_dim, eval_env, closers = _learner_layout(cmd)
    try:
        assert eval_env is not None and layout.state_dim > 0 and action_dim >= 3
    finally:
        for c in closers:
            c.close()


def test_actor_reward_flags_reach_the_env_building(tmp_path):
    cmd = ActorCmdConfig(run=tmp_path / "a", learner="127.0.0.1:1", reward=tmp_path / "rm",
                         reward_server="127.0.0.1:2", reward_deadline_s=0.2)  # fmt: skip
    train = cmd.as_train()
    assert (train.reward, train.reward_server, train.reward_deadline_s) == (
        tmp_path / "rm", "127.0.0.1:2", 0.2,
    )  # fmt: skip
    with pytest.raises(ValueError, match="also give --reward"):
        ActorCmdConfig(run=tmp_path / "a", learner="127.0.0.1:1", reward_server="127.0.0.1:2")
