"""SimRobot, SimCamera, SimClock and the RobotEnv over the twin."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.protocols import Camera, Clock, Robot, Task
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
from robot_rl.core.types import ArmCommand, UnsafeCommandError
from robot_rl.envs import RobotEnv
from sim.backend import TASKS, make_sim_backend
from sim.config import RandomizationConfig, SimConfig

START = frames.pose(np.array([0.5, 0.0, 0.2]), np.array(DOWN_QUAT))


def _backend(cameras=(), safety=None, sim_cfg=None):
    sim_cfg = sim_cfg or SimConfig(cameras=cameras, image_height=64, image_width=64)
    return make_sim_backend("pick_cube", sim_cfg, EnvConfig(), safety=safety)


@pytest.fixture(scope="module")
def backend():
    b = _backend()
    b.robot.connect()
    yield b
    b.close()


def _reset(b, pose=START):
    b.task.reset(np.random.default_rng(0))
    b.robot.reset(pose)
    b.clock.reset()


def test_implements_protocols(backend):
    assert isinstance(backend.robot, Robot)
    assert isinstance(backend.clock, Clock)
    assert isinstance(backend.task, Task)


def test_spec_readable_before_connect():
    b = _backend()
    spec = b.robot.spec
    assert spec.num_joints == 7 and len(spec.joint_low_rad) == 7
    with pytest.raises(RuntimeError, match="connect"):
        b.robot.reset(START)


def test_reset_teleports_to_start_pose_at_rest(backend):
    pose = frames.pose(np.array([0.45, 0.1, 0.15]), np.array(DOWN_QUAT))
    _reset(backend, pose)
    s = backend.robot.read_state()
    np.testing.assert_allclose(s.tcp_pose[:3], pose[:3], atol=1e-4)
    assert np.linalg.norm(frames.quat_error(pose[3:7], s.tcp_pose[3:7])) < 1e-3
    assert s.gripper_pos == pytest.approx(0.0, abs=1e-6)
    assert s.stamp_s == 0.0
    np.testing.assert_allclose(s.joint_vel, 0.0)
    # After a while, still there and the external wrench is ~0 (hand weight compensated).
    for _ in range(5):
        backend.clock.tick()
    s = backend.robot.read_state()
    assert np.linalg.norm(s.tcp_pose[:3] - pose[:3]) < 1e-3
    assert np.abs(s.tcp_wrench).max() < 0.2
    assert s.stamp_s == pytest.approx(0.5)


def test_unreachable_start_pose_raises(backend):
    far = frames.pose(np.array([2.0, 0.0, 0.2]), np.array(DOWN_QUAT))
    with pytest.raises(ValueError, match="unreachable"):
        _reset(backend, far)


def test_clock_advances_one_control_period(backend):
    _reset(backend)
    t0 = backend.clock.now_s()
    backend.clock.tick()
    assert backend.clock.now_s() - t0 == pytest.approx(0.1)
    assert backend.clock.overruns == 0


def test_command_moves_arm_by_executed_step(backend):
    _reset(backend)
    target = START.copy()
    target[0] += 0.03
    executed, report = backend.robot.send_command(ArmCommand(target, 0.0))
    assert not report.step_clipped
    for _ in range(10):
        backend.clock.tick()
    assert np.linalg.norm(backend.robot.read_state().tcp_pose[:3] - target[:3]) < 0.003


def test_a_delayed_command_lands_after_its_delay_and_the_arm_moves_on_meanwhile():
    """With action_delay_s, the previous target holds for the delay, then the new one; the
    delayed arm is behind an undelayed one after the same period (a real arm's latency)."""
    delay = 0.05
    late = _backend(sim_cfg=SimConfig(cameras=(), action_delay_s=delay))
    now = _backend()
    try:
        for b in (late, now):
            b.robot.connect()
            _reset(b)
        target = START.copy()
        target[0] += 0.03
        for b in (late, now):
            b.robot.send_command(ArmCommand(target, 0.0))
        steps = round(delay / late.world.dt_s)
        late.world.step(steps)  # the delay: the previous target acts all through it
        np.testing.assert_allclose(late.world.controller.target_pos, START[:3], atol=1e-3)
        late.world.step(1)  # the first step at the delay's end tracks the new target
        np.testing.assert_allclose(late.world.controller.target_pos, target[:3])
        late.world.step(late.clock.n_substeps - steps - 1)  # the rest of the period
        now.clock.tick()
        moved = [b.robot.read_state().tcp_pose[0] - START[0] for b in (late, now)]
        assert 0 < moved[0] < 0.8 * moved[1]
        # A hold drops a command that has not landed yet.
        late.robot.send_command(ArmCommand(START, 0.0))
        late.robot.hold()
        late.clock.tick()
        assert late.world.controller.target_pos[0] > START[0] + 0.003  # held, START never landed
    finally:
        late.close()
        now.close()


def test_an_action_delay_of_a_period_or_more_is_refused():
    with pytest.raises(ValueError, match="shorter than the control period"):
        _backend(sim_cfg=SimConfig(cameras=(), action_delay_s=0.1))  # 10 Hz: 100 ms
    with pytest.raises(ValueError, match=">= 0"):
        SimConfig(action_delay_s=-0.01)


def test_watchdog_holds_when_commands_stop():
    b = _backend(safety=SafetyConfig(watchdog_timeout_s=0.05, max_step_m=0.05))
    b.robot.connect()
    _reset(b)
    target = START.copy()
    target[2] -= 0.05
    b.robot.send_command(ArmCommand(target, 0.0))
    for _ in range(10):  # 1 s without another command
        b.clock.tick()
    z = b.robot.read_state().tcp_pose[2]
    assert b.robot.watchdog_holds == 1
    # Held near where it was after ~0.05 s instead of going on to the target.
    assert z - target[2] > 0.03
    b.close()


def test_nan_command_raises_and_arm_holds(backend):
    _reset(backend)
    target = START.copy()
    target[1] += 0.04
    backend.robot.send_command(ArmCommand(target, 0.0))
    backend.clock.tick()
    bad = target.copy()
    bad[0] = np.nan
    with pytest.raises(UnsafeCommandError):
        backend.robot.send_command(ArmCommand(bad, 0.0))
    held = backend.robot.read_state().tcp_pose
    np.testing.assert_allclose(backend.world.controller.target_pos, held[:3])
    for _ in range(5):
        backend.clock.tick()
    # Does not continue towards the old target (only a small overshoot from momentum).
    assert backend.robot.read_state().tcp_pose[1] < target[1] - 0.005


_coord = st.floats(-5.0, 5.0, allow_nan=False)
_quat = st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=4, max_size=4).filter(
    lambda q: np.linalg.norm(q) > 1e-3
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cmds=st.lists(
        st.tuples(st.tuples(_coord, _coord, _coord), _quat, st.floats(-2, 3, allow_nan=False)),
        min_size=1,
        max_size=4,
    )
)
def test_executed_targets_stay_in_workspace_and_step_limit(backend, cmds):
    cfg = backend.safety
    lo, hi = np.array(cfg.workspace_low_m), np.array(cfg.workspace_high_m)
    _reset(backend)
    for p, q, g in cmds:
        current = backend.robot.read_state().tcp_pose
        executed, _ = backend.robot.send_command(ArmCommand(np.array([*p, *q]), g))
        tp = executed.target_pose[:3]
        assert np.all(tp >= lo - 1e-9) and np.all(tp <= hi + 1e-9)
        assert np.linalg.norm(tp - current[:3]) <= cfg.max_step_m + 1e-9
        assert np.linalg.norm(frames.quat_error(executed.target_pose[3:7], current[3:7])) <= (
            cfg.max_step_rad + 1e-6
        )
        assert 0.0 <= executed.gripper <= 1.0
        np.testing.assert_allclose(backend.world.controller.target_pos, tp)
        backend.world.step(5)


def test_camera_frames_are_fresh_and_sequenced():
    b = _backend(cameras=("front", "wrist"))
    b.robot.connect()
    _reset(b)
    cams = {c.name: c for c in b.cameras}
    for c in cams.values():
        assert isinstance(c, Camera)
        c.connect()
    f1 = cams["front"].read()
    f1b = cams["front"].read()
    assert f1.image.shape == (64, 64, 3) and f1.image.dtype == np.uint8
    assert f1b.seq == f1.seq and not np.shares_memory(f1.image, f1b.image)
    assert f1.image.std() > 5  # not a blank image
    b.clock.tick()
    f2 = cams["front"].read()
    assert f2.seq == f1.seq + 1 and f2.stamp_s == pytest.approx(f1.stamp_s + 0.1)
    # The wrist camera sees the fingers (dark pads) in the lower part of the image.
    w = cams["wrist"].read().image
    assert w.std() > 5 and not np.array_equal(w, f2.image)
    b.close()


@pytest.mark.parametrize("cameras", [(), ("front", "wrist")])
def test_robot_env_runs_and_observations_share_no_memory(cameras):
    b = _backend(cameras=cameras)
    env = RobotEnv(b.robot, b.cameras, b.task, b.clock, EnvConfig())
    obs0, info = env.reset(seed=1)
    assert env.observation_space.contains(obs0)
    obs1, r, term, trunc, info = env.step(env.action_space.sample())
    obs2, r, term, trunc, info = env.step(np.zeros(7, dtype=np.float32))
    assert env.observation_space.contains(obs2)
    assert -1.0 <= r <= 0.0
    for a, c in ((obs1, obs2), (obs0, obs1)):
        for part in a[keys.STATE]:
            assert not np.shares_memory(a[keys.STATE][part], c[keys.STATE][part])
        for cam in a.get(keys.IMAGES, {}):
            assert not np.shares_memory(a[keys.IMAGES][cam], c[keys.IMAGES][cam])
    assert obs2[keys.STAMPS]["state"] == pytest.approx(0.2)
    if cameras:
        assert set(obs2[keys.IMAGES]) == set(cameras)
    else:
        assert keys.IMAGES not in obs2
    env.close()
    b.close()


def test_randomization_never_drifts():
    rnd = RandomizationConfig(
        friction_scale=(0.5, 1.5),
        light_jitter=0.2,
        color_jitter=0.1,
        camera_pos_jitter_m=0.02,
        camera_rot_jitter_rad=0.05,
    )
    b = _backend(sim_cfg=SimConfig(cameras=(), randomization=rnd))
    m = b.world.model
    pad = b.world.pad_geom_ids[0]
    f0, cam0 = m.geom_friction[pad, 0], m.cam_pos.copy()
    rng = np.random.default_rng(0)
    frictions = []
    for _ in range(30):
        b.task.reset(rng)
        frictions.append(m.geom_friction[pad, 0])
        assert np.abs(m.cam_pos - cam0).max() <= 0.02 + 1e-12
    frictions = np.array(frictions)
    assert frictions.min() >= 0.5 * f0 - 1e-12 and frictions.max() <= 1.5 * f0 + 1e-12
    assert frictions.std() > 0.05


def test_registry_lists_tasks_and_rejects_unknown():
    assert {"pick_cube", "peg_insert"} <= set(TASKS)
    with pytest.raises(ValueError, match="known tasks: .*pick_cube"):
        make_sim_backend("nope", SimConfig(cameras=()), EnvConfig())
