"""Unit and property tests of robot_rl.wrappers on a small kinematic env with robot_rl's layout.

``KinematicTcpEnv`` is a real (if tiny) gymnasium env, not a mock: it moves a TCP pose exactly as
:class:`robot_rl.envs.RobotEnv` turns actions into targets (base-frame delta, clipped to
[-1, 1]), with a perfectly tracking arm, so frame maths can be checked to float precision. The
twin-backed behaviour tests are in ``test_wrapper_twin.py``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robot_rl.core import frames, keys
from robot_rl.wrappers import (
    CropResize,
    FixedGripper,
    FlattenState,
    GripperDiscretize,
    ImageCropResize,
    RelativeFrame,
    TimeLimit,
    base_to_ee_action,
    crop_resize,
    ee_to_base_action,
)

SCALE_M = 0.02
SCALE_RAD = 0.1
DT_S = 0.1


class KinematicTcpEnv(gym.Env):
    """A TCP that reaches every commanded target exactly; robot_rl's observation layout.

    Args:
        control_rotation: 7-dim action (True) or 4-dim (False, orientation kept).
        image_hw: Size of the single "front" camera image; None for no camera.
        terminate_at: Step index at which ``terminated`` is returned (None: never).
    """

    def __init__(
        self,
        control_rotation: bool = True,
        image_hw: tuple[int, int] | None = None,
        terminate_at: int | None = None,
    ) -> None:
        self.control_rotation = control_rotation
        self.image_hw = image_hw
        self.terminate_at = terminate_at
        box = gym.spaces.Box
        state = {
            keys.TCP_POSE: box(-np.inf, np.inf, (7,), np.float32),
            keys.TCP_VEL: box(-np.inf, np.inf, (6,), np.float32),
            keys.TCP_WRENCH: box(-np.inf, np.inf, (6,), np.float32),
            keys.GRIPPER_POS: box(0.0, 1.0, (1,), np.float32),
        }
        spaces = {keys.STATE: gym.spaces.Dict(state)}
        stamps = {keys.STAMP_STATE: box(-np.inf, np.inf, (), np.float64)}
        if image_hw is not None:
            spaces[keys.IMAGES] = gym.spaces.Dict(
                {keys.CAM_FRONT: box(0, 255, (*image_hw, 3), np.uint8)}
            )
            stamps[keys.CAM_FRONT] = box(-np.inf, np.inf, (), np.float64)
        spaces[keys.STAMPS] = gym.spaces.Dict(stamps)
        self.observation_space = gym.spaces.Dict(spaces)
        dim = 7 if control_rotation else 4
        self.action_space = box(-1.0, 1.0, (dim,), np.float32)
        self.received: list[np.ndarray] = []  # actions as received (before clipping)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        rpy = self.np_random.uniform(-np.pi, np.pi, size=3)
        self._pose = frames.pose(
            self.np_random.uniform(-0.5, 0.5, 3), frames.quat_from_euler_xyz(rpy)
        )
        self._start_quat = self._pose[3:7].copy()
        self._vel = np.zeros(6)
        self._gripper = 0.0
        self._t = 0
        self.received = []
        return self._obs(), {}

    def step(self, action):
        self.received.append(np.array(action, dtype=np.float64, copy=True))
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        dpos = a[:3] * SCALE_M
        if self.control_rotation:
            drot = a[3:6] * SCALE_RAD
            self._pose = frames.apply_delta(self._pose, dpos, drot)
        else:
            drot = np.zeros(3)
            self._pose = frames.pose(self._pose[:3] + dpos, self._start_quat)
        self._vel = np.concatenate([dpos, drot]) / DT_S
        self._gripper = float((a[-1] + 1) / 2)
        self._t += 1
        terminated = self.terminate_at is not None and self._t >= self.terminate_at
        return self._obs(), 0.0, bool(terminated), False, {}

    def _obs(self) -> dict:
        wrench = np.concatenate([self._vel[:3] * 10.0, [0.0, 0.0, 1.0]])
        obs = {
            keys.STATE: {
                keys.TCP_POSE: self._pose.astype(np.float32),
                keys.TCP_VEL: self._vel.astype(np.float32),
                keys.TCP_WRENCH: wrench.astype(np.float32),
                keys.GRIPPER_POS: np.array([self._gripper], np.float32),
            },
            keys.STAMPS: {keys.STAMP_STATE: np.array(self._t * DT_S)},
        }
        if self.image_hw is not None:
            h, w = self.image_hw
            img = np.zeros((h, w, 3), np.uint8)
            img[..., 0] = np.arange(w, dtype=np.uint8)[None, :]  # column index
            img[..., 1] = np.arange(h, dtype=np.uint8)[:, None]  # row index
            img[..., 2] = self._t
            obs[keys.IMAGES] = {keys.CAM_FRONT: img}
            obs[keys.STAMPS][keys.CAM_FRONT] = np.array(self._t * DT_S)
        return obs


# -- RelativeFrame: pure maps ------------------------------------------------------------------

quats = st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4).filter(
    lambda q: np.linalg.norm(q) > 0.1
)
actions7 = st.lists(st.floats(-2.0, 2.0), min_size=7, max_size=7)
actions4 = st.lists(st.floats(-2.0, 2.0), min_size=4, max_size=4)


@given(q=quats, a=st.one_of(actions7, actions4))
@settings(max_examples=200, deadline=None)
def test_action_maps_are_exact_inverses(q, a):
    R = frames.quat_to_mat(np.array(q))
    a = np.array(a)
    np.testing.assert_allclose(base_to_ee_action(ee_to_base_action(a, R), R), a, atol=1e-9)
    np.testing.assert_allclose(ee_to_base_action(base_to_ee_action(a, R), R), a, atol=1e-9)


@given(q=quats, a=actions7)
@settings(max_examples=100, deadline=None)
def test_ee_action_is_rotated_by_tcp_rotation(q, a):
    R = frames.quat_to_mat(np.array(q))
    a = np.array(a)
    b = ee_to_base_action(a, R)
    np.testing.assert_allclose(b[:3], R @ a[:3], atol=1e-12)
    np.testing.assert_allclose(b[3:6], R @ a[3:6], atol=1e-12)
    assert b[6] == a[6]
    # Norms are preserved (a rotation), the gripper is untouched.
    assert np.isclose(np.linalg.norm(b[:3]), np.linalg.norm(a[:3]))


def test_four_dim_action_rotates_only_translation():
    R = frames.quat_to_mat(frames.quat_from_euler_xyz(np.array([0.3, -1.2, 2.0])))
    a = np.array([0.1, -0.4, 0.7, 0.9])
    b = ee_to_base_action(a, R)
    np.testing.assert_allclose(b[:3], R @ a[:3])
    assert b[3] == 0.9


def test_bad_action_dim_rejected():
    with pytest.raises(ValueError, match="7-dim"):
        ee_to_base_action(np.zeros(5), np.eye(3))


# -- RelativeFrame: on the kinematic env -------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relative_pose_is_identity_at_reset(seed):
    env = RelativeFrame(KinematicTcpEnv())
    obs, _ = env.reset(seed=seed)
    np.testing.assert_allclose(obs[keys.STATE][keys.TCP_POSE], [0, 0, 0, 1, 0, 0, 0], atol=1e-6)
    assert env.observation_space.contains(obs)


@given(
    seed=st.integers(0, 10_000),
    a=st.lists(st.floats(-0.5, 0.5), min_size=7, max_size=7),
)
@settings(max_examples=50, deadline=None)
def test_wrapper_action_roundtrip_and_routing(seed, a):
    inner = KinematicTcpEnv()
    env = RelativeFrame(inner)
    env.reset(seed=seed)
    for _ in range(2):
        env.step(np.array(a))
    a_ee = np.array(a)
    np.testing.assert_allclose(env.inverse_action(env.action(a_ee)), a_ee, atol=1e-9)
    np.testing.assert_allclose(env.action(env.inverse_action(a_ee)), a_ee, atol=1e-9)
    # What the inner env received is R_cur (of the pose measured before the step) times a_ee.
    R_before = env.R_base_ee
    env.step(a_ee)
    np.testing.assert_allclose(inner.received[-1], ee_to_base_action(a_ee, R_before), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_ee_translation_moves_along_tcp_axes(seed):
    env = RelativeFrame(KinematicTcpEnv())
    env.reset(seed=seed)
    for axis in range(3):
        a = np.zeros(7)
        a[axis] = 1.0 / np.sqrt(3)  # inside [-1, 1] after any rotation: no clipping
        obs, *_ = env.step(a)
        rel = obs[keys.STATE][keys.TCP_POSE]
        expected = np.zeros(3)
        expected[: axis + 1] = SCALE_M / np.sqrt(3)
        np.testing.assert_allclose(rel[:3], expected, atol=1e-6)
        np.testing.assert_allclose(rel[3:], [1, 0, 0, 0], atol=1e-6)
        # The twist seen in the TCP frame is the commanded TCP-frame step over dt.
        vel = obs[keys.STATE][keys.TCP_VEL]
        np.testing.assert_allclose(vel[:3], a[:3] * SCALE_M / DT_S, atol=1e-5)


def test_ee_rotation_composes_on_the_right():
    env = RelativeFrame(KinematicTcpEnv())
    env.reset(seed=4)
    a = np.array([0, 0, 0, 0.0, 0.0, 0.5, 0.0])
    obs, *_ = env.step(a)
    obs, *_ = env.step(np.array([0, 0, 0, 0.5, 0, 0, 0.0]))
    # Rotating about the TCP's own z then its own x: relative rotation = Rz * Rx.
    expected = frames.quat_normalize(
        frames.quat_mul(
            frames.quat_from_rotvec(np.array([0, 0, 0.5 * SCALE_RAD])),
            frames.quat_from_rotvec(np.array([0.5 * SCALE_RAD, 0, 0])),
        )
    )
    np.testing.assert_allclose(obs[keys.STATE][keys.TCP_POSE][3:], expected, atol=1e-6)
    np.testing.assert_allclose(obs[keys.STATE][keys.TCP_POSE][:3], 0.0, atol=1e-6)


def test_four_dim_relative_frame_keeps_gripper_and_maps_translation():
    inner = KinematicTcpEnv(control_rotation=False)
    env = RelativeFrame(inner)
    assert not env.control_rotation
    env.reset(seed=5)
    R = env.R_base_ee
    env.step(np.array([0.2, 0.0, -0.3, 0.8]))
    np.testing.assert_allclose(inner.received[-1][:3], R @ [0.2, 0.0, -0.3])
    assert inner.received[-1][3] == 0.8


@given(seed=st.integers(0, 10_000), a=st.lists(st.floats(-1, 1), min_size=7, max_size=7))
@settings(max_examples=30, deadline=None)
def test_inverse_observation_restores_absolute(seed, a):
    inner = KinematicTcpEnv()
    env = RelativeFrame(inner)
    env.reset(seed=seed)
    obs, *_ = env.step(np.array(a))
    absolute = inner._obs()
    restored = env.inverse_observation(obs)
    for part in (keys.TCP_POSE, keys.TCP_VEL, keys.TCP_WRENCH, keys.GRIPPER_POS):
        got, want = restored[keys.STATE][part], absolute[keys.STATE][part]
        if part == keys.TCP_POSE and np.dot(got[3:], want[3:]) < 0:
            got = np.concatenate([got[:3], -got[3:]])  # q and -q: same rotation
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_relative_frame_copies_and_rejects_bad_layouts():
    inner = KinematicTcpEnv()
    env = RelativeFrame(inner)
    obs, _ = env.reset(seed=0)
    obs2, *_ = env.step(np.zeros(7))
    for part in obs[keys.STATE]:
        assert not np.shares_memory(obs[keys.STATE][part], obs2[keys.STATE][part])
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(4))
    with pytest.raises(ValueError, match="FlattenState"):
        RelativeFrame(FlattenState(KinematicTcpEnv()))
    with pytest.raises(RuntimeError, match="reset"):
        RelativeFrame(KinematicTcpEnv()).action(np.zeros(7))


# -- FlattenState -------------------------------------------------------------------------------


def test_flatten_state_slices_and_roundtrip():
    inner = KinematicTcpEnv(image_hw=(8, 8))
    env = FlattenState(inner)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(np.full(7, 0.3))
    ref = inner._obs()
    assert env.order == keys.DEFAULT_STATE_PARTS
    assert obs[keys.STATE].dtype == np.float32 and obs[keys.STATE].shape == (20,)
    assert env.observation_space.contains(obs)
    stops = [0] + [s.stop for s in env.slices.values()]
    assert [s.start for s in env.slices.values()] == stops[:-1]
    assert stops[-1] == env.state_dim == 20
    for part, sl in env.slices.items():
        np.testing.assert_array_equal(obs[keys.STATE][sl], ref[keys.STATE][part])
    back = env.unflatten(obs)
    for part in ref[keys.STATE]:
        np.testing.assert_array_equal(back[keys.STATE][part], ref[keys.STATE][part])
    np.testing.assert_array_equal(
        obs[keys.IMAGES][keys.CAM_FRONT], ref[keys.IMAGES][keys.CAM_FRONT]
    )
    # Bounds follow the parts (gripper in [0, 1]).
    assert env.observation_space[keys.STATE].low[env.slices[keys.GRIPPER_POS]][0] == 0.0


def test_flatten_state_custom_order_and_validation():
    order = (keys.GRIPPER_POS, keys.TCP_WRENCH, keys.TCP_POSE, keys.TCP_VEL)
    env = FlattenState(KinematicTcpEnv(), order=order)
    assert env.slices[keys.GRIPPER_POS] == slice(0, 1)
    assert env.slices[keys.TCP_VEL] == slice(14, 20)
    obs, _ = env.reset(seed=1)
    np.testing.assert_allclose(
        obs[keys.STATE][env.slices[keys.TCP_POSE]][:3], env.unwrapped._pose[:3], atol=1e-6
    )
    with pytest.raises(ValueError, match="exactly once"):
        FlattenState(KinematicTcpEnv(), order=(keys.TCP_POSE,))
    with pytest.raises(ValueError, match="exactly once"):
        FlattenState(KinematicTcpEnv(), order=(*order, keys.TCP_POSE))


# -- ImageCropResize ---------------------------------------------------------------------------


def test_crop_without_resize_is_the_pixel_box():
    env = ImageCropResize(KinematicTcpEnv(image_hw=(40, 60)), crop=(5, 10, 20, 30))
    obs, _ = env.reset(seed=0)
    img = obs[keys.IMAGES][keys.CAM_FRONT]
    assert img.shape == (20, 30, 3) and img.dtype == np.uint8
    assert env.observation_space[keys.IMAGES][keys.CAM_FRONT].shape == (20, 30, 3)
    np.testing.assert_array_equal(img[..., 0], np.broadcast_to(np.arange(10, 40), (20, 30)))
    np.testing.assert_array_equal(img[..., 1], np.broadcast_to(np.arange(5, 25)[:, None], (20, 30)))
    assert env.observation_space.contains(obs)


def test_crop_then_resize_is_area_average():
    env = ImageCropResize(KinematicTcpEnv(image_hw=(40, 60)), crop=(0, 20, 40, 40), size=(20, 10))
    obs, _ = env.reset(seed=0)
    img = obs[keys.IMAGES][keys.CAM_FRONT]
    assert img.shape == (20, 10, 3) and img.dtype == np.uint8
    src = np.zeros((40, 40, 3))
    src[..., 0] = np.arange(20, 60)[None, :]
    src[..., 1] = np.arange(40)[:, None]
    block_mean = src.reshape(20, 2, 10, 4, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(img, block_mean, atol=1.0)
    assert env.observation_space.contains(obs)


def test_crop_resize_per_camera_and_validation():
    inner = KinematicTcpEnv(image_hw=(32, 32))
    env = ImageCropResize(inner, per_camera={keys.CAM_FRONT: CropResize(size_hw=(16, 16))})
    obs, _ = env.reset(seed=0)
    obs2, *_ = env.step(np.zeros(7))
    assert not np.shares_memory(obs[keys.IMAGES][keys.CAM_FRONT], obs2[keys.IMAGES][keys.CAM_FRONT])
    with pytest.raises(ValueError, match="outside"):
        ImageCropResize(inner, crop=(20, 0, 16, 16))
    with pytest.raises(ValueError, match="not among"):
        ImageCropResize(inner, per_camera={"side": CropResize(size_hw=(8, 8))})
    with pytest.raises(ValueError, match="cameras"):
        ImageCropResize(KinematicTcpEnv(), size=(8, 8))
    with pytest.raises(ValueError, match="height >= 1"):
        CropResize(size_hw=(0, 8))
    # Identity setting still returns a new array.
    img = np.zeros((4, 4, 3), np.uint8)
    out = crop_resize(img, CropResize())
    assert out is not img and not np.shares_memory(out, img)


# -- GripperDiscretize -------------------------------------------------------------------------


def test_gripper_close_open_keep():
    inner = KinematicTcpEnv(control_rotation=False)
    env = GripperDiscretize(inner, threshold=0.5)
    env.reset(seed=0)
    g_in = [0.0, 0.9, 0.0, 0.4, -0.4, -0.7, 0.2, 0.6]
    expected = [-1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0]
    for g, want in zip(g_in, expected, strict=True):
        env.step(np.array([0.1, 0.0, 0.0, g]))
        assert inner.received[-1][-1] == want
        assert inner.received[-1][0] == 0.1
        assert env.command == want
    env.reset(seed=1)
    assert env.command == -1.0
    env.step(np.array([0.0, 0.0, 0.0, 0.3]))
    assert inner.received[-1][-1] == -1.0


@given(
    a=st.lists(st.floats(-1, 1), min_size=6, max_size=6),
    g=st.sampled_from([-1.0, 1.0]),
    held=st.sampled_from([-1.0, 1.0]),
)
@settings(max_examples=50, deadline=None)
def test_gripper_inverse_is_exact_on_emitted_commands(a, g, held):
    env = GripperDiscretize(KinematicTcpEnv(), threshold=0.5, initial_command=held)
    env.reset(seed=0)
    b = np.array([*a, g])
    np.testing.assert_array_equal(env.action(env.inverse_action(b)), b)


def test_gripper_inverse_dead_band_is_keep_and_nan_passes():
    env = GripperDiscretize(KinematicTcpEnv(), threshold=0.5)
    env.reset(seed=0)
    assert env.inverse_action(np.array([0, 0, 0, 0, 0, 0, 0.2]))[-1] == 0.0
    assert env.inverse_action(np.array([0, 0, 0, 0, 0, 0, 0.7]))[-1] == 1.0
    assert np.isnan(env.action(np.array([0, 0, 0, 0, 0, 0, np.nan]))[-1])
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        GripperDiscretize(KinematicTcpEnv(), threshold=1.5)


# -- FixedGripper ------------------------------------------------------------------------------


@pytest.mark.parametrize("control_rotation", [False, True])
def test_fixed_gripper_drops_the_dimension_and_always_sends_the_command(control_rotation):
    inner = KinematicTcpEnv(control_rotation=control_rotation)
    env = FixedGripper(inner, command=1.0)
    n = inner.action_space.shape[0]
    assert env.action_space.shape == (n - 1,)
    env.reset(seed=0)
    for g_obs in range(3):
        a = np.full(n - 1, 0.1 * (g_obs + 1))
        _, *_ = env.step(a)
        np.testing.assert_array_equal(inner.received[-1], [*a, 1.0])
    # The gripper reading follows the held command, whatever the policy would have wanted.
    assert env.unwrapped._gripper == 1.0
    with pytest.raises(ValueError, match=r"gripper is fixed at \+1.0; do not pass it"):
        env.step(np.zeros(n))


@given(a=st.lists(st.floats(-1, 1), min_size=6, max_size=6), g=st.floats(-1, 1))
@settings(max_examples=50, deadline=None)
def test_fixed_gripper_inverse_is_exact_and_discards_the_human_gripper(a, g):
    env = FixedGripper(KinematicTcpEnv(), command=-1.0)
    b = np.array([*a, g])
    p = env.inverse_action(b)
    np.testing.assert_array_equal(p, a)
    np.testing.assert_array_equal(env.action(p), [*a, -1.0])


def test_fixed_gripper_rejects_bad_commands_and_layouts():
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        FixedGripper(KinematicTcpEnv(), command=2.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        FixedGripper(KinematicTcpEnv(), command=float("nan"))
    with pytest.raises(ValueError, match="inner action must have shape"):
        FixedGripper(KinematicTcpEnv()).inverse_action(np.zeros(3))


# -- TimeLimit ---------------------------------------------------------------------------------


def test_time_limit_truncates_and_resets():
    env = TimeLimit(KinematicTcpEnv(), max_episode_steps=3)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(7))
    for _ in range(2):
        env.reset(seed=0)
        flags = [env.step(np.zeros(7))[3] for _ in range(3)]
        assert flags == [False, False, True]
        assert env.elapsed_steps == 3


def test_time_limit_does_not_truncate_a_terminated_step():
    env = TimeLimit(KinematicTcpEnv(terminate_at=2), max_episode_steps=2)
    env.reset(seed=0)
    env.step(np.zeros(7))
    _, _, terminated, truncated, _ = env.step(np.zeros(7))
    assert terminated and not truncated
    with pytest.raises(ValueError, match=">= 1"):
        TimeLimit(KinematicTcpEnv(), 0)
