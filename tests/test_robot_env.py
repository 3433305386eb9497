"""RobotEnv over the twin: bad input gets a clear error and the robot holds; stale sensors are
errors, not silent reuse; one step is one control period."""

import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.types import Frame, StaleSensorError, UnsafeCommandError
from robot_rl.envs import RobotEnv
from sim.backend import make_sim_backend
from sim.config import SimConfig


def make(cameras=(), **env_kw):
    env_cfg = EnvConfig(**env_kw)
    b = make_sim_backend(
        "pick_cube", SimConfig(cameras=cameras, image_height=32, image_width=32), env_cfg
    )
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg), b


def test_one_step_is_one_control_period():
    env, b = make(control_hz=10.0)
    obs, _ = env.reset(seed=0)
    t0 = float(obs[keys.STAMPS][keys.STAMP_STATE])
    obs, *_ = env.step(np.zeros(7, np.float32))
    assert float(obs[keys.STAMPS][keys.STAMP_STATE]) - t0 == pytest.approx(0.1, abs=1e-9)
    env.close()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_action_is_refused_and_robot_holds(bad):
    env, b = make()
    env.reset(seed=1)
    env.step(np.array([1, 0, -1, 0, 0, 0, 0], np.float32))  # arm moving
    action = np.zeros(7, np.float32)
    action[2] = bad
    with pytest.raises(UnsafeCommandError, match="NaN or inf"):
        env.step(action)
    ctrl = b.world.controller
    tcp = b.world.tcp_pose()
    # Hold: the controller now tracks the pose at the moment of the error, not the old target.
    np.testing.assert_allclose(ctrl.target_pos, tcp[:3], atol=1e-12)
    b.clock.tick()
    b.clock.tick()
    assert np.linalg.norm(b.world.tcp_pose()[:3] - tcp[:3]) < 0.01  # momentum only
    # The episode goes on once a valid action arrives.
    obs, *_ = env.step(np.zeros(7, np.float32))
    assert np.all(np.isfinite(obs[keys.STATE][keys.TCP_POSE]))
    env.close()


@pytest.mark.parametrize("shape", [(6,), (8,), (1, 7), ()])
def test_wrong_shape_action_says_what_is_expected(shape):
    env, b = make()
    env.reset(seed=2)
    with pytest.raises(ValueError, match=r"shape \(7,\) \[dx, dy, dz, rx, ry, rz, gripper\]"):
        env.step(np.zeros(shape, np.float32))
    env.close()


def test_out_of_range_action_is_clipped_not_amplified():
    env, b = make()
    obs, _ = env.reset(seed=3)
    p0 = obs[keys.STATE][keys.TCP_POSE][:3].copy()
    _, _, _, _, info = env.step(np.array([100, 0, 0, 0, 0, 0, 0], np.float32))
    cmd = info[keys.INFO_COMMAND]
    assert cmd[0] - p0[0] == pytest.approx(env.config.action_scale_m, abs=1e-6)
    env.close()


def test_step_before_reset_is_an_error():
    env, _ = make()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(7, np.float32))


class FrozenCamera:
    """Fault injection at the device boundary: a real twin camera that stops delivering new
    frames after its first one (as a USB camera that hangs would). Everything else is real."""

    def __init__(self, cam):
        self._cam = cam
        self._frame: Frame | None = None
        self.name = cam.name
        self.image_spec = cam.image_spec

    def connect(self):
        self._cam.connect()

    def disconnect(self):
        self._cam.disconnect()

    def read(self) -> Frame:
        if self._frame is None:
            self._frame = self._cam.read()
        return self._frame


def test_stale_camera_frame_is_an_error_and_robot_holds():
    env_cfg = EnvConfig(max_image_age_s=0.25)
    b = make_sim_backend(
        "pick_cube", SimConfig(cameras=("front",), image_height=32, image_width=32), env_cfg
    )
    env = RobotEnv(b.robot, [FrozenCamera(b.cameras[0])], b.task, b.clock, env_cfg)
    _, info = env.reset(seed=4)
    assert info[keys.INFO_OBS_AGE] == pytest.approx(0.0, abs=1e-9)
    _, _, _, _, info = env.step(np.zeros(7, np.float32))  # 0.1 s old: fine
    assert info[keys.INFO_OBS_AGE] == pytest.approx(0.1, abs=1e-9)  # the oldest reading's age
    assert info[keys.INFO_ACTION_AGE] == pytest.approx(0.0, abs=1e-9)  # sim time stood still
    _, _, _, _, info = env.step(np.zeros(7, np.float32))  # 0.2 s old: fine
    # the action answered the 0.1 s old observation: its age when the action was sent
    assert info[keys.INFO_ACTION_AGE] == pytest.approx(0.1, abs=1e-9)
    with pytest.raises(StaleSensorError, match="'front' frame is 0.300 s old"):
        env.step(np.array([1, 0, 0, 0, 0, 0, 0], np.float32))
    np.testing.assert_allclose(b.world.controller.target_pos, b.world.tcp_pose()[:3], atol=1e-12)
    env.close()


def test_observations_share_no_memory_across_steps():
    env, _ = make(cameras=("front", "wrist"))
    obs0, _ = env.reset(seed=5)
    obs1, *_ = env.step(np.zeros(7, np.float32))
    for group in (keys.STATE, keys.IMAGES):
        for k in obs0[group]:
            assert not np.shares_memory(obs0[group][k], obs1[group][k]), (group, k)
    env.close()


def test_control_rate_must_divide_physics_rate():
    with pytest.raises(ValueError, match="whole number"):
        make(control_hz=7.0)


def test_observed_quaternion_is_continuous_near_pointing_down():
    """The TCP points down (w ~ 0): the observed quaternion must not flip sign between steps."""
    env, _ = make()
    obs, _ = env.reset(seed=6)
    qs = [obs[keys.STATE][keys.TCP_POSE][3:7].copy()]
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = np.zeros(7, np.float32)
        a[3:6] = rng.uniform(-0.3, 0.3, 3)  # wobble around pointing down
        obs, *_ = env.step(a)
        qs.append(obs[keys.STATE][keys.TCP_POSE][3:7].copy())
    qs = np.array(qs)
    assert np.all(qs @ np.array([0, 1, 0, 0]) >= 0)
    assert np.max(np.linalg.norm(np.diff(qs, axis=0), axis=1)) < 0.2
    env.close()
