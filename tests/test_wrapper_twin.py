"""Wrapper behaviour on the MuJoCo twin (RobotEnv over sim.backend), not on a toy env."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.envs import RobotEnv
from robot_rl.wrappers import FlattenState, GripperDiscretize, RelativeFrame, TimeLimit
from sim.backend import make_sim_backend
from sim.config import SimConfig

TASK = "pick_cube"


def _twin(control_rotation: bool = True, max_episode_steps: int = 50) -> RobotEnv:
    env_cfg = EnvConfig(max_episode_steps=max_episode_steps, control_rotation=control_rotation)
    b = make_sim_backend(TASK, SimConfig(cameras=()), env_cfg)
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg)


@pytest.fixture(scope="module")
def rel_env():
    env = RelativeFrame(_twin())
    yield env
    env.close()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relative_pose_is_identity_at_reset(rel_env, seed):
    obs, _ = rel_env.reset(seed=seed)
    np.testing.assert_allclose(obs[keys.STATE][keys.TCP_POSE], [0, 0, 0, 1, 0, 0, 0], atol=1e-6)
    assert rel_env.observation_space.contains(obs)


@pytest.mark.parametrize("control_rotation", [True, False])
def test_ee_plus_z_with_tcp_pointing_down_moves_down(control_rotation):
    env = RelativeFrame(_twin(control_rotation))
    inner_obs_z = []
    env.reset(seed=0)
    tool_z_in_base = env.R_base_ee[:, 2]
    assert tool_z_in_base[2] < -0.9, "precondition: the task starts with the TCP pointing down"
    z0 = env.start_pose[2]
    a = np.zeros(env.action_space.shape)
    a[2] = 1.0  # +z of the TCP frame
    a[-1] = -1.0
    for _ in range(5):
        obs, *_ = env.step(a)
        inner_obs_z.append(env.inverse_observation(obs)[keys.STATE][keys.TCP_POSE][2])
        # In the relative frame the TCP moves along its own +z.
        rel = obs[keys.STATE][keys.TCP_POSE]
        assert rel[2] > 0 and abs(rel[2]) > 3 * np.linalg.norm(rel[:2])
    assert np.all(np.diff([z0, *inner_obs_z]) < 0), f"base z should decrease: {inner_obs_z}"
    assert z0 - inner_obs_z[-1] > 0.5 * 5 * env.unwrapped.config.action_scale_m
    env.close()


def test_ee_yaw_rotates_about_the_tool_axis(rel_env):
    rel_env.reset(seed=3)
    a = np.zeros(7)
    a[5] = 1.0  # rotate about the TCP's own z axis
    a[-1] = -1.0
    for _ in range(3):
        obs, *_ = rel_env.step(a)
    rotvec = frames.quat_to_rotvec(obs[keys.STATE][keys.TCP_POSE][3:7].astype(np.float64))
    assert rotvec[2] > 0.1  # commanded 3 * 0.1 rad; the impedance controller lags a little
    assert np.linalg.norm(rotvec[:2]) < 0.2 * rotvec[2]


def test_inverse_action_roundtrip_at_measured_poses(rel_env):
    rng = np.random.default_rng(0)
    rel_env.reset(seed=4)
    for _ in range(5):
        rel_env.step(rng.uniform(-1, 1, 7))
        a = rng.uniform(-1, 1, 7)
        np.testing.assert_allclose(rel_env.inverse_action(rel_env.action(a)), a, atol=1e-9)
        np.testing.assert_allclose(rel_env.action(rel_env.inverse_action(a)), a, atol=1e-9)


def test_gripper_discretize_keeps_the_gripper_closed():
    env = TimeLimit(FlattenState(GripperDiscretize(_twin(control_rotation=False))), 6)
    flat = env.env
    obs, _ = env.reset(seed=0)
    g = flat.slices[keys.GRIPPER_POS]
    open_pos = float(obs[keys.STATE][g][0])
    obs, *_ = env.step(np.array([0, 0, 0, 0.9]))  # close
    for _ in range(3):
        obs, _, _, truncated, _ = env.step(np.array([0, 0, 0, 0.1]))  # dead band: keep
    assert float(obs[keys.STATE][g][0]) > open_pos + 0.3
    obs, _, _, truncated, _ = env.step(np.array([0, 0, 0, -0.1]))
    assert not truncated
    _, _, _, truncated, _ = env.step(np.array([0, 0, 0, 0.0]))
    assert truncated  # 6 steps < max_episode_steps: the wrapper's limit
    env.close()


# -- ObjectState: the declared door from sim truth into the observation ----------------------


def _object_state_env(parts=("cube_pos", "tcp_to_cube")):
    from robot_rl.wrappers import ObjectState

    env_cfg = EnvConfig(max_episode_steps=20, control_rotation=False)
    b = make_sim_backend(TASK, SimConfig(cameras=()), env_cfg)
    base = RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg)
    specs = {p: b.task.privileged_spec[p] for p in parts}
    return ObjectState(base, specs), b


def test_object_state_observes_the_cube_where_it_really_is():
    env, b = _object_state_env()
    cube_xy = []
    for seed in (0, 1, 2):
        obs, info = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        cube = b.world.data.xpos[b.world.model.body("cube").id]
        np.testing.assert_allclose(obs[keys.STATE]["cube_pos"], cube, atol=1e-6)
        tcp = obs[keys.STATE][keys.TCP_POSE][:3]
        np.testing.assert_allclose(obs[keys.STATE]["tcp_to_cube"], cube - tcp, atol=1e-5)
        cube_xy.append(obs[keys.STATE]["cube_pos"][:2].copy())
        obs2, *_ = env.step(np.zeros(4, dtype=np.float32))
        assert not np.shares_memory(obs[keys.STATE]["cube_pos"], obs2[keys.STATE]["cube_pos"])
    assert np.ptp(np.array(cube_xy), axis=0).max() > 0.01  # it follows the randomised cube
    flat = FlattenState(env)
    obs, _ = flat.reset(seed=3)
    np.testing.assert_allclose(
        obs[keys.STATE][flat.slices["cube_pos"]],
        b.world.data.xpos[b.world.model.body("cube").id],
        atol=1e-6,
    )
    env.close()


def test_object_state_rejects_clashes_and_reports_missing_entries():
    from robot_rl.core.specs import ArraySpec
    from robot_rl.wrappers import ObjectState, ObjectStateMissingError

    env, b = _object_state_env()
    with pytest.raises(ValueError, match="clash"):
        ObjectState(env, {"cube_pos": ArraySpec((3,), "float32")})
    ghost = ObjectState(env.env, {"ghost_pos": ArraySpec((3,), "float32")})
    with pytest.raises(ObjectStateMissingError, match="ghost_pos"):
        ghost.reset(seed=0)
    env.close()


def test_learner_env_state_mode_includes_the_task_object_state():
    from robot_rl.app.envs.build import WrapperConfig, make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from sim.backend import TASKS

    setup = LearnerEnvConfig(task="pick_cube", obs="state").env_setup()
    assert setup.wrappers.object_state == TASKS["pick_cube"].state_objects
    env, b = make_env_from_setup(setup)
    obs, _ = env.reset(seed=0)
    flat = next(e for e in _stack(env) if isinstance(e, FlattenState))
    assert set(TASKS["pick_cube"].state_objects) <= set(flat.slices)
    env.close()
    b.close()
    assert LearnerEnvConfig(task="pick_cube", obs="pixels").env_setup().wrappers.object_state == ()
    from dataclasses import replace

    bad = replace(setup, wrappers=WrapperConfig(flatten_state=True, object_state=("nope",)))
    with pytest.raises(ValueError, match="nope.*not available"):
        make_env_from_setup(bad)


def test_peg_insert_learner_env_holds_the_gripper_closed_and_the_expert_still_inserts():
    """peg_insert's learner env acts in [dx, dy, dz] at the task's 1 cm scale; the scripted
    expert's base actions map into it (their gripper dropped) and still insert the peg."""
    from robot_rl.app.envs.build import base_to_policy_action, make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig, same_data_settings
    from robot_rl.app.envs.policies import ExpertPolicy
    from sim.tasks.peg_insert import ACTION_SCALE_M

    lenv = LearnerEnvConfig(task="peg_insert", obs="state")
    setup = lenv.env_setup()
    assert setup.wrappers.fixed_gripper == 1.0 and setup.action_scale_m is None
    env, b = make_env_from_setup(setup)
    try:
        assert env.action_space.shape == (3,)
        assert env.unwrapped.config.action_scale_m == ACTION_SCALE_M
        policy = ExpertPolicy(b.make_expert(), env)
        to_policy = base_to_policy_action(env)
        successes = 0
        for seed in range(3):
            obs, info = env.reset(seed=seed)
            policy.reset(np.random.default_rng(seed))
            for _ in range(100):
                a = policy.act(obs, info)
                assert a.shape == (3,)
                obs, _, term, trunc, info = env.step(a)
                # The arm's gripper command is closed on every step: the peg stays held.
                assert info[keys.INFO_COMMAND][7] == pytest.approx(1.0)
                if term or trunc:
                    break
            successes += bool(info[keys.INFO_SUCCESS])
        assert successes >= 2
        a_base = np.array([0.5, -0.5, 0.25, -1.0])
        np.testing.assert_array_equal(to_policy(a_base), a_base[:3])
    finally:
        env.close()
        b.close()
    # "task" resolves to the task's own choice; an explicit "policy" gripper is other data.
    assert same_data_settings(lenv.to_json(), LearnerEnvConfig(task="peg_insert", gripper="fixed"))
    assert not same_data_settings(
        lenv.to_json(), LearnerEnvConfig(task="peg_insert", gripper="policy")
    )
    # A dataset written before these settings existed had a 4-dim, 2 cm action.
    legacy = {
        k: v
        for k, v in LearnerEnvConfig(task="pick_cube").to_json().items()
        if k not in ("gripper", "action_scale_m")
    }
    assert same_data_settings(legacy, LearnerEnvConfig(task="pick_cube"))
    assert not same_data_settings(legacy, LearnerEnvConfig(task="pick_cube", action_scale_m=0.01))
    # The action delay is the twin's latency, not a property of the data: demos recorded
    # without it train a delayed run.
    assert same_data_settings(legacy, LearnerEnvConfig(task="pick_cube", action_delay_ms=60))


def test_the_action_delay_reaches_the_twins_arm():
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig

    env, b = make_env_from_setup(LearnerEnvConfig(task="reach", action_delay_ms=60).env_setup())
    try:
        assert b.robot.action_delay_s == pytest.approx(0.06)
    finally:
        env.close()
        b.close()
    with pytest.raises(ValueError, match="action_delay_ms must be >= 0"):
        LearnerEnvConfig(action_delay_ms=-1)


def _stack(env):
    while True:
        yield env
        if not hasattr(env, "env"):
            return
        env = env.env


def test_sparse_task_reward_is_one_exactly_on_success_steps():
    """--task-reward sparse on the twin: the scripted expert's pick_cube episode earns 0 until
    the cube is lifted, 1 on the success step that ends it; the shaped cost stays in info."""
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.app.envs.policies import ExpertPolicy

    cfg = LearnerEnvConfig(task="pick_cube", obs="state", task_reward="sparse")
    env, b = make_env_from_setup(cfg.env_setup())
    try:
        policy = ExpertPolicy(b.make_expert(), env)
        obs, info = env.reset(seed=5)
        policy.reset(np.random.default_rng(5))
        rewards, shaped, successes = [], [], []
        for _ in range(200):
            obs, r, terminated, truncated, info = env.step(policy.act(obs, info))
            rewards.append(r)
            shaped.append(info[keys.INFO_TASK_REWARD])
            successes.append(info[keys.INFO_SUCCESS])
            if terminated or truncated:
                break
    finally:
        env.close()
        b.close()
    assert terminated and successes[-1], "the expert should lift the cube"
    assert rewards == [float(s) for s in successes] and rewards[-1] == 1.0
    assert sum(rewards) == 1.0 and min(shaped[:-1]) < -0.5  # the dense cost was there


def test_sparse_reward_needs_success_in_info():
    import gymnasium as gym

    from robot_rl.wrappers import SuccessReward

    class NoSuccess(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,))
        action_space = gym.spaces.Box(-1, 1, (1,))

        def reset(self, *, seed=None, options=None):
            return np.zeros(1, np.float32), {}

        def step(self, action):
            return np.zeros(1, np.float32), 0.5, False, False, {}

    env = SuccessReward(NoSuccess())
    env.reset()
    with pytest.raises(KeyError, match="is_success"):
        env.step(np.zeros(1))
    with pytest.raises(ValueError, match="success_reward"):
        SuccessReward(NoSuccess(), success_reward=0.0)


def test_previous_action_is_a_state_part_and_other_data():
    """--previous-action: the learner env observes prev_action (the policy's 4-dim action);
    demos collected without it are other data, refused by the settings check."""
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import (
        LearnerEnvConfig,
        same_data_settings,
        settings_difference,
    )

    lenv = LearnerEnvConfig(task="pick_cube", obs="state", previous_action=True)
    env, b = make_env_from_setup(lenv.env_setup())
    try:
        flat = next(e for e in _stack(env) if isinstance(e, FlattenState))
        sl = flat.slices["prev_action"]
        obs, _ = env.reset(seed=0)
        assert sl.stop - sl.start == env.action_space.shape[0] == 4
        a = np.array([0.3, -0.2, 0.1, 2.0], np.float32)  # the gripper beyond the bounds
        obs, *_ = env.step(a)
        np.testing.assert_allclose(obs[keys.STATE][sl], [0.3, -0.2, 0.1, 1.0], atol=1e-6)
        assert env.observation_space.contains(obs)
    finally:
        env.close()
        b.close()
    plain = LearnerEnvConfig(task="pick_cube", obs="state")
    assert not same_data_settings(plain.to_json(), lenv)
    assert "previous_action: False in the data, True here" in settings_difference(
        plain.to_json(), lenv
    )
    # Datasets written before the setting existed had no previous action.
    legacy = {k: v for k, v in plain.to_json().items() if k != "previous_action"}
    assert same_data_settings(legacy, plain) and not same_data_settings(legacy, lenv)


def test_gripper_discretize_as_a_run_setting_keeps_the_gripper_open_in_the_dead_band():
    """--gripper-discretize (train, learner, actor): a policy output between -0.5 and 0.5 keeps
    the last command (open after reset) instead of half-closing the hand; not a data setting
    (demos recorded without it stay usable), but an actor must run the learner's."""
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig, same_data_settings
    from robot_rl.app.training.run_settings import ActorEnvFlags, SettingsConflictError, resolve_env

    def closure_after(lenv: LearnerEnvConfig, g: float) -> float:
        env, b = make_env_from_setup(lenv.env_setup())
        try:
            flat = next(e for e in _stack(env) if isinstance(e, FlattenState))
            env.reset(seed=0)
            for _ in range(4):
                obs, *_ = env.step(np.array([0.0, 0.0, 0.0, g], np.float32))
            return float(obs[keys.STATE][flat.slices[keys.GRIPPER_POS]][0])
        finally:
            env.close()
            b.close()

    plain = LearnerEnvConfig(task="pick_cube", obs="state")
    lenv = LearnerEnvConfig(task="pick_cube", obs="state", gripper_discretize=True)
    assert closure_after(plain, 0.2) > 0.3  # a target of 0.6 closure: half closed
    assert closure_after(lenv, 0.2) < 0.05  # keeps the reset's open command
    assert closure_after(lenv, 0.9) > 0.5  # closes
    assert same_data_settings(plain.to_json(), lenv)
    with pytest.raises(SettingsConflictError, match="gripper_discretize"):
        resolve_env(ActorEnvFlags(gripper_discretize=False), lenv)
    with pytest.raises(ValueError, match="--gripper-discretize needs a gripper"):
        LearnerEnvConfig(gripper="fixed", gripper_discretize=True)
    with pytest.raises(ValueError, match="--gripper-discretize needs a gripper"):
        LearnerEnvConfig(task="peg_insert", gripper_discretize=True)  # holds the peg
    # The hybrid gripper's "stay" (0) is a keep only under --gripper-discretize.
    import dataclasses
    from pathlib import Path

    from robot_rl.app.training.train_config import TRAIN_SAC, TrainCmdConfig

    hybrid = dataclasses.replace(TRAIN_SAC, hybrid_gripper=True)
    with pytest.raises(ValueError, match="add --gripper-discretize"):
        TrainCmdConfig(run=Path("unused"), sac=hybrid)
    TrainCmdConfig(run=Path("unused"), sac=hybrid, env=lenv)


@pytest.mark.parametrize(
    ("task", "extra"),
    [("pick_cube", {"gripper_discretize": True, "previous_action": True}), ("peg_insert", {})],
)
def test_the_pixel_ros_env_wraps_like_the_learner_env_without_the_status_reward(task, extra):
    """record / label / train over ROS 2 build their pixel env's wrappers from the same
    LearnerEnvConfig.wrapper_config as the direct env, except the success reward: on a real
    arm there is no success status, so pixel rewards come from label and the classifier."""
    from dataclasses import replace
    from types import SimpleNamespace

    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.app.teleop.record import env_wrappers

    lenv = LearnerEnvConfig(task=task, obs="pixels", task_reward="sparse", **extra)
    cams, wr = env_wrappers(lenv, SimpleNamespace(cameras=()))
    direct = lenv.env_setup().wrappers
    assert direct.success_reward and not wr.success_reward
    assert wr == replace(direct, success_reward=False)
    assert cams == lenv.cameras
    free = replace(lenv, task="stack the blue cup on the red one")  # hardware: free text
    assert env_wrappers(free, SimpleNamespace(cameras=()))[1].flatten_state
