"""ObsAdapter: twin-style nested and flattened observations, foreign Dict envs, clear errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.specs import ArraySpec
from robot_rl.replay import ObsAdapter


def _box(n: int) -> gym.spaces.Box:
    return gym.spaces.Box(-np.inf, np.inf, (n,), np.float32)


def _img(h: int = 16, w: int = 20) -> gym.spaces.Box:
    return gym.spaces.Box(0, 255, (h, w, 3), np.uint8)


def _twin_space() -> gym.spaces.Dict:
    state = gym.spaces.Dict(
        {keys.GRIPPER_POS: _box(1), keys.TCP_POSE: _box(7), keys.TCP_VEL: _box(6), "extra": _box(2)}
    )
    return gym.spaces.Dict(
        {
            keys.STATE: state,
            keys.IMAGES: gym.spaces.Dict({keys.CAM_WRIST: _img(), keys.CAM_FRONT: _img()}),
            keys.STAMPS: gym.spaces.Dict(
                {keys.STAMP_STATE: gym.spaces.Box(0, np.inf, (), np.float64)}
            ),
        }
    )


def test_nested_state_is_concatenated_in_canonical_order():
    space = _twin_space()
    ad = ObsAdapter(space)
    assert ad.layout.state_dim == 16
    assert dict(ad.layout.images) == {
        keys.CAM_FRONT: ArraySpec((16, 20, 3), "uint8"),
        keys.CAM_WRIST: ArraySpec((16, 20, 3), "uint8"),
    }
    obs = space.sample()
    out = ad.to_learner(obs)
    st = obs[keys.STATE]
    want = np.concatenate([st[keys.TCP_POSE], st[keys.TCP_VEL], st[keys.GRIPPER_POS], st["extra"]])
    np.testing.assert_array_equal(out[keys.STATE], want)
    assert out[keys.STATE].dtype == np.float32
    assert out[keys.STATE][ad.state_slices["state/tcp_vel"]].tolist() == st[keys.TCP_VEL].tolist()
    for cam in (keys.CAM_FRONT, keys.CAM_WRIST):
        np.testing.assert_array_equal(out[keys.IMAGES][cam], obs[keys.IMAGES][cam])
        assert not np.shares_memory(out[keys.IMAGES][cam], obs[keys.IMAGES][cam])  # a copy


def test_twin_with_and_without_flatten_state_agree():
    from robot_rl.core.config import EnvConfig
    from robot_rl.envs import RobotEnv
    from robot_rl.wrappers import FlattenState
    from sim.backend import make_sim_backend
    from sim.config import SimConfig

    env_cfg = EnvConfig(max_episode_steps=5)
    sim_cfg = SimConfig(cameras=(keys.CAM_FRONT,), image_height=24, image_width=24)
    b = make_sim_backend("pick_cube", sim_cfg, env_cfg)
    env = RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg)
    flat = FlattenState(env)
    try:
        nested_ad, flat_ad = ObsAdapter(env.observation_space), ObsAdapter(flat.observation_space)
        assert nested_ad.layout == flat_ad.layout
        assert flat_ad.layout.images[keys.CAM_FRONT].shape == (24, 24, 3)
        obs, _ = env.reset(seed=0)
        a = nested_ad.to_learner(obs)
        f = flat_ad.to_learner(flat.observation(obs))
        np.testing.assert_array_equal(a[keys.STATE], f[keys.STATE])
        np.testing.assert_array_equal(
            a[keys.IMAGES][keys.CAM_FRONT], f[keys.IMAGES][keys.CAM_FRONT]
        )
    finally:
        flat.close()
        b.close()


def test_foreign_goal_env_and_top_level_camera():
    space = gym.spaces.Dict(
        {
            "observation": _box(4),
            "desired_goal": _box(3),
            "achieved_goal": _box(3),
            "pixels": _img(8, 8),
        }
    )
    ad = ObsAdapter(space)
    assert ad.layout.state_dim == 10 and list(ad.layout.images) == ["pixels"]
    obs = space.sample()
    out = ad.to_learner(obs)
    want = np.concatenate([obs["achieved_goal"], obs["desired_goal"], obs["observation"]])
    np.testing.assert_array_equal(out[keys.STATE], want)
    np.testing.assert_array_equal(out[keys.IMAGES]["pixels"], obs["pixels"])


def test_images_only_and_state_only():
    img_only = ObsAdapter(gym.spaces.Dict({keys.IMAGES: gym.spaces.Dict({"c": _img()})}))
    assert img_only.layout.state_dim == 0
    assert keys.STATE not in img_only.to_learner({keys.IMAGES: {"c": _img().sample()}})
    state_only = ObsAdapter(gym.spaces.Dict({keys.STATE: _box(3)}))
    out = state_only.to_learner({keys.STATE: np.arange(3, dtype=np.float64)})
    assert keys.IMAGES not in out and out[keys.STATE].dtype == np.float32


@pytest.mark.parametrize(
    "space, match",
    [
        (_box(3), "Dict observation space"),
        (gym.spaces.Dict({"k": gym.spaces.Discrete(3)}), "'k'"),
        (gym.spaces.Dict({"m": gym.spaces.Box(0, 1, (4, 4), np.float32)}), "'m'"),
        (gym.spaces.Dict({keys.IMAGES: gym.spaces.Dict({"c": _box(3)})}), "uint8"),
        (gym.spaces.Dict({keys.STATE: gym.spaces.Dict({"p": _img()})}), "'p'"),
        (gym.spaces.Dict({keys.STATE: _box(2), keys.IMAGES: _box(2)}), "Dict of cameras"),
    ],
)
def test_unmappable_spaces_raise_clearly(space, match):
    with pytest.raises(ValueError, match=match):
        ObsAdapter(space)


def test_wrong_observation_shape_raises():
    ad = ObsAdapter(gym.spaces.Dict({keys.STATE: _box(3), "cam": _img(4, 4)}))
    with pytest.raises(ValueError, match="expected 3"):
        ad.to_learner({keys.STATE: np.zeros(4), "cam": np.zeros((4, 4, 3), np.uint8)})
    with pytest.raises(ValueError, match="camera 'cam'"):
        ad.to_learner({keys.STATE: np.zeros(3), "cam": np.zeros((4, 4, 3), np.float32)})
