"""pick_cube: scene, reward, success/failure, and the scripted expert's success rate."""

import numpy as np
import pytest

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.specs import check_tree
from robot_rl.envs import RobotEnv
from sim.backend import TASKS, make_sim_backend
from sim.config import RandomizationConfig, SimConfig
from sim.experts.base import Expert
from sim.tasks.base import FAILURE_REWARD
from sim.tasks.pick_cube import CUBE_SIZE_M, LIFT_HEIGHT_M


def _env(control_rotation=True, randomization=None):
    env_cfg = EnvConfig(control_rotation=control_rotation)
    sim_cfg = SimConfig(cameras=(), randomization=randomization or RandomizationConfig())
    b = make_sim_backend("pick_cube", sim_cfg, env_cfg)
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg), b


def _success_rate(control_rotation: bool, episodes: int, seed0: int = 0) -> float:
    env, b = _env(control_rotation)
    expert = b.make_expert()
    assert isinstance(expert, Expert)
    wins = 0
    for ep in range(episodes):
        obs, info = env.reset(seed=seed0 + ep)
        expert.reset(np.random.default_rng(ep))
        while True:
            a = expert.act(obs, info)
            assert env.action_space.contains(a)
            obs, r, term, trunc, info = env.step(a)
            if term or trunc:
                break
        wins += bool(info[keys.INFO_SUCCESS])
    env.close()
    return wins / episodes


@pytest.mark.parametrize("control_rotation", [True, False])
def test_expert_succeeds_short(control_rotation):
    assert _success_rate(control_rotation, 10) >= 0.9


@pytest.mark.parametrize("control_rotation", [True, False])
def test_expert_succeeds_50_episodes(control_rotation):
    assert _success_rate(control_rotation, 50, seed0=1000) >= 0.95


def test_reset_randomizes_cube_and_start_pose_within_ranges():
    env, b = _env()
    cubes, starts = [], []
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        p = info[keys.INFO_PRIVILEGED]
        check_tree(p, b.task.privileged_spec, "privileged")
        cubes.append(p["cube_pos"])
        starts.append(obs[keys.STATE][keys.TCP_POSE])
        assert p["cube_pos"][2] == pytest.approx(CUBE_SIZE_M / 2, abs=2e-3)
        assert b.safety.workspace_low_m[2] <= p["cube_pos"][2]  # reachable
        tcp_z_axis = frames.quat_to_mat(obs[keys.STATE][keys.TCP_POSE][3:7])[:, 2]
        np.testing.assert_allclose(tcp_z_axis, [0, 0, -1], atol=1e-3)  # pointing down
        assert not info[keys.INFO_SUCCESS] and not info[keys.INFO_FAILURE]
    assert np.std(np.array(cubes)[:, :2], axis=0).min() > 0.01
    assert np.std(np.array(starts)[:, :3], axis=0).min() > 0.01
    # Same seed, same scene.
    _, i1 = env.reset(seed=3)
    _, i2 = env.reset(seed=3)
    np.testing.assert_allclose(i1["privileged"]["cube_pos"], i2["privileged"]["cube_pos"])


def test_nominal_scene_without_object_randomization():
    env, b = _env(randomization=RandomizationConfig(object_pose=False))
    _, i1 = env.reset(seed=1)
    _, i2 = env.reset(seed=2)
    np.testing.assert_allclose(i1["privileged"]["cube_pos"], i2["privileged"]["cube_pos"])


def test_success_needs_grasp_and_lift_and_failure_when_cube_falls():
    env, b = _env()
    env.reset(seed=0)
    w, task = b.world, b.task
    # Lifted but not grasped: no success.
    tcp = w.tcp_pose()
    w.set_free_body_pose("cube", frames.pose(tcp[:3] + [0.2, 0, 0], np.array([1.0, 0, 0, 0])))
    w.forward()
    assert not task.evaluate().success
    # Grasped in the hand, high above the table: success with reward 0 (the cost stops).
    w.place_in_gripper("cube", frames.pose(np.zeros(3), np.array([1.0, 0, 0, 0])), CUBE_SIZE_M)
    b.clock.tick()
    status = task.evaluate()
    assert status.privileged["grasped"][0] == 1.0
    assert status.privileged["cube_lift_m"][0] >= LIFT_HEIGHT_M
    assert status.success and status.reward == 0.0
    # Off the table: failure.
    w.set_free_body_pose("cube", frames.pose(np.array([0.5, 0.9, -0.3]), np.array([1.0, 0, 0, 0])))
    w.forward()
    status = task.evaluate()
    assert status.failure and not status.success and status.reward == FAILURE_REWARD


def test_reward_is_bounded_and_shaped_by_reach():
    env, b = _env()
    obs, info = env.reset(seed=4)
    expert = b.make_expert()
    rewards = []
    for _ in range(30):
        obs, r, term, trunc, info = env.step(expert.act(obs, info))
        rewards.append(r)
        if term:
            break
    rewards = np.array(rewards)
    assert np.all((rewards >= -1) & (rewards <= 0))
    assert rewards[-1] == 0.0 and rewards[0] < rewards[len(rewards) // 2]


def test_task_info_defaults():
    info = TASKS["pick_cube"]
    assert info.max_episode_steps == 100
    assert "cube" in info.description
