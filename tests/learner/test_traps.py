"""The reward-trap warnings (robot_rl.run.traps): each trap is shown on a run that has it,
and none on the rewards that avoid it (the twin's costs, the sparse 0/1 success reward)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from learner_helpers import sac_factory, small_sac

from robot_rl.learner.config import TrainConfig
from robot_rl.learner.loop import Trainer
from robot_rl.run.traps import FAILURE_TRAP, SUCCESS_TRAP, RewardTrapCheck


class LineEnv(gym.Env):
    """A point on a line, starting at 0: x >= 0.8 is success, x <= -0.8 failure (both end the
    episode), 60-step limit. Per-step, success and failure rewards are set by ``rewards``."""

    metadata: dict = {}

    def __init__(self, step_r: float, success_r: float, failure_r: float) -> None:
        self.observation_space = gym.spaces.Dict(
            {"state": gym.spaces.Box(-1.0, 1.0, (1,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.rewards = (step_r, success_r, failure_r)
        self._x, self._t = 0.0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x, self._t = 0.0, 0
        return {"state": np.float32([self._x])}, {}

    def step(self, action):
        self._x = float(np.clip(self._x + 0.25 * float(action[0]), -1.0, 1.0))
        self._t += 1
        success, failure = self._x >= 0.8, self._x <= -0.8
        step_r, success_r, failure_r = self.rewards
        r = success_r if success else failure_r if failure else step_r
        obs = {"state": np.float32([self._x])}
        return obs, r, success or failure, self._t >= 60, {"is_success": success}


def _warnings(tmp_path, rewards: tuple[float, float, float], offset: float = 0.0) -> set[str]:
    """Traps found by the Trainer on a run of random actions (no updates: only the episodes)."""
    cfg = TrainConfig(
        total_env_steps=600, random_steps=600, learning_starts=10**6, eval_episodes=1,
        eval_every_steps=600, reward_offset=offset, progress=False, seed=3,
    )  # fmt: skip
    res = Trainer(
        LineEnv(*rewards), LineEnv(*rewards), cfg, sac_factory(small_sac()), tmp_path / "run"
    ).run()
    eps = res.episodes
    assert eps >= 10, eps  # enough episodes for both endings
    return {w["trap"] for w in res.reward_warnings}


def test_a_bonus_with_termination_on_success_is_reported(tmp_path):
    assert _warnings(tmp_path, (0.5, 1.0, 0.0)) == {SUCCESS_TRAP}


def test_a_cost_with_termination_on_failure_is_reported(tmp_path):
    assert _warnings(tmp_path, (-1.0, 0.0, -1.0)) == {FAILURE_TRAP}


def test_a_negative_offset_on_the_sparse_reward_makes_the_failure_trap(tmp_path):
    assert _warnings(tmp_path, (0.0, 1.0, 0.0), offset=-1.0) == {FAILURE_TRAP}


@pytest.mark.parametrize(
    "rewards",
    [(0.0, 1.0, 0.0), (-1.0, 0.0, -100.0)],
    ids=["sparse 0/1", "twin-like cost, -100 on failure"],
)
def test_rewards_without_a_trap_are_not_reported(tmp_path, rewards):
    assert _warnings(tmp_path, rewards) == set()


def test_the_check_compares_the_terminal_reward_with_carrying_on():
    check = RewardTrapCheck(gamma=0.9)  # carrying on is worth 10 x the per-step reward
    # 0.05 per step near success is worth 0.5 < 1 for the success: no trap
    assert check.episode([0.05] * 5 + [1.0], terminated=True, success=True) == []
    # 0.2 per step is worth 2 > 1: the agent would hover
    got = check.episode([0.0] * 3 + [0.2] * 5 + [1.0], terminated=True, success=True)
    assert [w.trap for w in got] == [SUCCESS_TRAP]
    assert "--reward-offset" in got[0].message and "--task-reward sparse" in got[0].message
    # reported once
    assert check.episode([0.2] * 5 + [1.0], terminated=True, success=True) == []
    # truncated episodes say nothing about termination
    check = RewardTrapCheck(gamma=0.9)
    assert check.episode([-1.0] * 10, terminated=False, success=False) == []
    # a failure at -5 beats -1 per step (worth -10): the trap; at -20 it does not
    assert check.episode([-1.0] * 4 + [-20.0], terminated=True, success=False) == []
    got = check.episode([-1.0] * 4 + [-5.0], terminated=True, success=False)
    assert [w.trap for w in got] == [FAILURE_TRAP]
    # undiscounted: any bonus outweighs finishing, any terminal reward beats an endless cost
    check = RewardTrapCheck(gamma=1.0)
    assert [w.trap for w in check.episode([0.01] * 5 + [100.0], True, True)] == [SUCCESS_TRAP]
    check = RewardTrapCheck(gamma=1.0)
    assert [w.trap for w in check.episode([-0.01] * 5 + [-100.0], True, False)] == [FAILURE_TRAP]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="gamma"):
        RewardTrapCheck(gamma=1.5)
    with pytest.raises(ValueError, match="near_steps"):
        RewardTrapCheck(gamma=0.99, near_steps=0)
