"""reach: fixed goal, random start, dense reward, success radius, scripted expert, marker."""

import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.envs import RobotEnv
from sim.backend import TASKS, make_sim_backend
from sim.config import SimConfig
from sim.tasks.reach import GOAL_POS_M, SUCCESS_DIST_M


def _env(control_rotation=False, cameras=()):
    env_cfg = EnvConfig(control_rotation=control_rotation, max_episode_steps=40)
    sim_cfg = SimConfig(cameras=cameras, image_height=64, image_width=64)
    b = make_sim_backend("reach", sim_cfg, env_cfg)
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg), b


def test_registered():
    assert "reach" in TASKS
    assert TASKS["reach"].max_episode_steps >= 20


def test_goal_is_fixed_and_start_is_random():
    env, _ = _env()
    starts, goals = [], []
    for seed in range(4):
        _, info = env.reset(seed=seed)
        p = info[keys.INFO_PRIVILEGED]
        goals.append(p["goal_pos"].copy())
        starts.append(p["tcp_pose"][:3].copy())
    assert np.allclose(goals, np.asarray(GOAL_POS_M, dtype=np.float32)[None])
    assert np.min(np.linalg.norm(np.diff(starts, axis=0), axis=1)) > 1e-3
    env.close()


@pytest.mark.parametrize("control_rotation", [False, True])
def test_expert_succeeds_and_reward_is_dense(control_rotation):
    env, b = _env(control_rotation)
    expert = b.make_expert()
    for ep in range(5):
        obs, info = env.reset(seed=100 + ep)
        expert.reset(np.random.default_rng(ep))
        rewards = []
        while True:
            obs, r, term, trunc, info = env.step(expert.act(obs, info))
            rewards.append(r)
            assert -1.0 <= r <= 0.0
            if term or trunc:
                break
        assert info[keys.INFO_SUCCESS] and term
        d = np.linalg.norm(info[keys.INFO_PRIVILEGED]["tcp_to_goal"])
        assert d < SUCCESS_DIST_M
        assert rewards[-1] == 0.0
        if len(rewards) > 2:
            assert rewards[-2] > rewards[0]  # getting closer pays
    env.close()


def test_zero_policy_does_not_succeed():
    env, _ = _env()
    obs, info = env.reset(seed=3)
    for _ in range(10):
        obs, r, term, trunc, info = env.step(np.zeros(env.action_space.shape, np.float32))
        assert not info[keys.INFO_SUCCESS]
        assert r < 0.0
    env.close()


def test_goal_marker_is_visible_and_does_not_collide():
    env, b = _env(cameras=("front",))
    world = b.world
    gid = world.model.geom("reach_goal").id
    assert world.model.geom_contype[gid] == 0 and world.model.geom_conaffinity[gid] == 0
    obs, _ = env.reset(seed=2)  # a start where the hand does not hide the marker
    img = obs[keys.IMAGES]["front"].astype(int)
    green = (img[..., 1] - img[..., 0] > 40) & (img[..., 1] - img[..., 2] > 40)
    assert green.sum() > 0
    env.close()
