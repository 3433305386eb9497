"""The SO-101-class arm in the twin (:func:`sim.twin_arms.so101_twin`): its jaw gripper closes on
an object and measures its width, its hobby servos sag and settle with play, the tasks lie in its
reach (:mod:`sim.layout`: the cube, start region, safety box and camera at 0.4 of the FR3's), and
the scripted experts succeed on reach and pick_cube; peg_insert is refused, saying why."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core import frames, keys
from robot_rl.core.safety import DOWN_QUAT
from sim.backend import TASKS, task_info
from sim.config import SimConfig
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.tasks.pick_cube import CUBE_SIZE_M
from sim.twin_arms import SO101_LAYOUT, so101_twin
from sim.world import SimWorld

pytest.importorskip("mink", reason="pip install -e '.[arms]' (the SO-101 twin's IK)")


def _env(task: str):
    from robot_rl.app.envs.build import EnvSetup, configs_for, make_env

    env_cfg, sim_cfg = configs_for(EnvSetup(task=task, arm="so101"))
    return make_env(task, env_cfg, sim_cfg)


def _pad_gap(world: SimWorld) -> float:
    """Distance between the pads' inner faces along the TCP y axis, metres."""
    m, d = world.model, world.data
    R = world.data.site_xmat[world.tcp_site_id].reshape(3, 3)
    y = [R[:, 1] @ d.geom_xpos[m.geom(name).id] for name in ("left_pad", "right_pad")]
    half = m.geom("left_pad").size[1]
    return float(y[1] - y[0] - 2 * half)


def test_the_jaw_opens_closes_on_a_cube_and_holds_a_width() -> None:
    arm = so101_twin()
    w = SimWorld(SimConfig(cameras=(), arm="so101"), [], arm=arm)
    assert w.gripper.kind == "jaw" and w.gripper_closure() == pytest.approx(0.0)
    assert _pad_gap(w) == pytest.approx(arm.jaw.opening_m(arm.jaw.open_rad), abs=2e-3)
    assert _pad_gap(w) > 0.05  # room for the 2.5 cm cube from any side
    w.set_gripper_target(1.0)
    w.step(500)
    assert w.gripper_closure() > 0.98  # closed on nothing: the pads meet
    assert abs(_pad_gap(w)) < 2e-3
    for width in (0.01, 0.025, 0.04):
        w.set_gripper_width(width)
        w.forward()
        assert _pad_gap(w) == pytest.approx(width, abs=1.5e-3)


def test_the_so101_servos_sag_without_gravity_compensation_and_hold() -> None:
    w = SimWorld(SimConfig(cameras=(), arm="so101"), [], arm=so101_twin())
    home = w.tcp_pose()
    assert home[2] == pytest.approx(0.108, abs=3e-3)
    w.step(1000)
    sag = home[2] - w.tcp_pose()[2]
    assert 0.5e-3 < sag < 6e-3  # a hobby servo under its arm's weight: a few mm
    before = w.tcp_pose()
    w.step(500)
    assert np.allclose(w.tcp_pose()[:3], before[:3], atol=1e-3)  # and it holds there
    assert w.servo is not None and not w.servo.config.gravity_compensation


def test_the_tasks_are_scaled_into_the_so101_reach() -> None:
    assert task_info("pick_cube", "fr3") is TASKS["pick_cube"]
    assert task_info("pick_cube", "ur5e") is TASKS["pick_cube"]
    info = task_info("pick_cube", "so101")
    box_lo, box_hi = (
        np.array(info.default_safety.workspace_low_m),
        np.array(info.default_safety.workspace_high_m),
    )
    assert box_hi[0] <= 0.27 and box_hi[2] <= 0.15  # inside what the arm reaches pointing down
    assert info.action_scale_m == pytest.approx(0.4 * TASKS["pick_cube"].action_scale_m)
    env, b = _env("pick_cube")
    try:
        assert b.task.cube_size_m == pytest.approx(0.625 * CUBE_SIZE_M)
        for seed in range(5):
            env.reset(seed=seed)
            cube = b.world.body_pose("cube")
            tcp = b.world.tcp_pose()
            assert np.all(cube[:2] >= box_lo[:2]) and np.all(cube[:2] <= box_hi[:2])
            assert np.all(tcp[:3] >= box_lo) and np.all(tcp[:3] <= box_hi)
            err = frames.quat_error(np.asarray(DOWN_QUAT, dtype=np.float64), tcp[3:7])
            assert np.linalg.norm(err[:2]) < 0.05  # the jaws point down at the start
    finally:
        b.close()
    with pytest.raises(ValueError, match="so101 twin does not do 'peg_insert'"):
        task_info("peg_insert", "so101")


def test_a_layout_maps_points_lengths_sizes_and_the_safety_box() -> None:
    assert FR3_LAYOUT.identity and not SO101_LAYOUT.identity
    lay = TaskLayout("x", centre_xy_m=(0.2, 0.1), scale=0.5, object_scale=0.5)
    assert np.allclose(lay.point((0.5, 0.0, 0.2)), (0.2, 0.1, 0.1))
    assert np.allclose(lay.point((0.7, -0.2, 0.0)), (0.3, 0.0, 0.0))
    assert lay.length(0.04) == pytest.approx(0.02) and lay.size(0.04) == pytest.approx(0.02)
    safety = lay.safety(TASKS["reach"].default_safety)
    assert np.allclose(
        safety.workspace_low_m, lay.point(TASKS["reach"].default_safety.workspace_low_m)
    )
    assert FR3_LAYOUT.safety(TASKS["reach"].default_safety) is TASKS["reach"].default_safety
    with pytest.raises(ValueError, match="scale and object_scale must be in"):
        TaskLayout("bad", scale=0.0)
    with pytest.raises(ValueError, match=r"maps \(2,\) or \(3,\) points"):
        lay.point((1.0,))


@pytest.mark.parametrize(("task", "episodes", "need"), [("reach", 5, 5), ("pick_cube", 10, 8)])
def test_the_scripted_experts_succeed_on_the_so101(task: str, episodes: int, need: int) -> None:
    env, b = _env(task)
    expert = b.make_expert()
    rng = np.random.default_rng(0)
    wins = 0
    try:
        for ep in range(episodes):
            obs, info = env.reset(seed=100 + ep)
            expert.reset(rng)
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(expert.act(obs, info))
                done = term or trunc
            wins += bool(info[keys.INFO_SUCCESS])
    finally:
        b.close()
    assert wins >= need


def test_a_cube_held_still_in_the_jaw_stays_there() -> None:
    """The hinged jaw grips the cube at an angle; with soft contacts alone the cube crept out
    and fell after about 6 s of holding (sim.twin_arms.SO101_NOSLIP_ITERATIONS). Held at the
    lift height for 16 s it must stay grasped and lifted, and once seated in the jaw (it shifts
    about 7 mm in the first 6 s, here) not move in the hand."""
    import dataclasses

    from robot_rl.app.envs.build import EnvSetup, configs_for, make_env

    env_cfg, sim_cfg = configs_for(EnvSetup(task="pick_cube", arm="so101"))
    env_cfg = dataclasses.replace(env_cfg, terminate_on_success=False, max_episode_steps=300)
    env, b = make_env("pick_cube", env_cfg, sim_cfg)
    try:
        world = b.world
        obs, info = env.reset(seed=1)
        expert = b.make_expert()
        expert.reset(np.random.default_rng(1))
        for _ in range(60):  # grasp and lift
            obs, _, _, _, info = env.step(expert.act(obs, info))
            if info[keys.INFO_SUCCESS] and expert.phase == "lift":
                break
        assert info[keys.INFO_SUCCESS]
        for _ in range(60):  # reach the lift height; the cube seats in the jaw
            obs, _, _, _, info = env.step(expert.act(obs, info))
            assert info[keys.INFO_SUCCESS]
        in_hand = world.body_pose("cube")[:3] - world.tcp_pose()[:3]
        for _ in range(100):  # 10 s at 10 Hz, the arm holding still
            obs, _, _, _, info = env.step(expert.act(obs, info))
            assert info[keys.INFO_SUCCESS]
        moved = world.body_pose("cube")[:3] - world.tcp_pose()[:3] - in_hand
        assert np.linalg.norm(moved) < 0.001, moved
    finally:
        b.close()


def test_the_pick_expert_waits_for_a_slow_jaw_to_hold_the_cube() -> None:
    """Behind the SO-101 bridge the jaw closes at its closure rate limit (0.5 s from open to
    closed): the expert keeps closing until both pads hold the cube (at most 15 steps) instead
    of lifting after 3 steps and losing it."""
    from robot_rl.core.config import EnvConfig
    from sim.experts.pick_cube import CLOSE_MAX_STEPS, CLOSE_STEPS, PickCubeExpert

    expert = PickCubeExpert(EnvConfig(action_scale_m=0.008))
    expert.reset(np.random.default_rng(0))
    expert.phase = "close"
    cube = np.array([0.18, 0.0, 0.0125])

    def info(grasped: bool) -> dict:
        return {
            keys.INFO_PRIVILEGED: {
                "tcp_pose": np.concatenate([cube, DOWN_QUAT]),
                "cube_pos": cube,
                "cube_quat": np.array([1.0, 0.0, 0.0, 0.0]),
                "grasped": np.array([float(grasped)]),
                "cube_lift_m": np.array([0.0]),
            }
        }

    for _ in range(CLOSE_STEPS + 3):  # not held yet: keeps closing, in place
        a = expert.act({}, info(False))
        assert expert.phase == "close" and a[-1] == 1.0 and np.allclose(a[:3], 0.0)
    a = expert.act({}, info(True))  # held: lift with the jaw closed
    assert expert.phase == "lift" and a[2] > 0 and a[-1] == 1.0
    expert.reset(np.random.default_rng(0))
    expert.phase = "close"
    for _ in range(CLOSE_MAX_STEPS + 1):  # never held: gives up closing after the cap
        expert.act({}, info(False))
    assert expert.phase != "close"


def test_the_twin_servo_bus_reads_and_moves_the_arm_through_the_nodes_calibration(
    tmp_path,
) -> None:
    """The servo bus's model and the SO-101 node convert ticks with one calibration: what the
    twin's servos report reads back as the twin's joint angles (within a tick) and the jaw's
    closure, through the calibration file the node loads; a goal in ticks moves the arm there."""
    from drivers.feetech import calibration as cal
    from sim.ros2_control import ControlledArm
    from sim.twin_servo_bus import TwinServoModel, twin_servo_calibration

    world = SimWorld(SimConfig(cameras=(), arm="so101"), [], arm=so101_twin())
    ctl = ControlledArm(world, "servo_bus", watchdog_s=1.0)
    model = TwinServoModel(ctl, twin_servo_calibration(world))
    cal.save(model.calibration, tmp_path / "twin.json")
    calibration = cal.load(tmp_path / "twin.json")
    assert calibration.joint_names == world.arm.joint_names
    ticks = model.read_positions()
    assert ticks.shape == (model.num_servos,) == (len(world.arm.joint_names) + 1,)
    q = calibration.ticks_to_rad(ticks[:-1])
    np.testing.assert_allclose(q, world.joint_pos(), atol=cal.RAD_PER_TICK)
    assert calibration.gripper_ticks_to_closure(ticks[-1]) == pytest.approx(
        world.gripper_closure(), abs=0.02
    )
    goal = world.joint_pos() + np.array([0.15, -0.1, 0.1, 0.0, 0.2])
    goal_ticks = np.append(calibration.rad_to_ticks(goal), calibration.gripper_closure_to_ticks(1))
    # The bus answers from the node's last sync and its goals wait for the next one (the node
    # syncs under its physics lock at every physics event; the bus thread never takes it).
    model.write_goals(goal_ticks, np.ones(model.num_servos, dtype=bool))
    world.step(50)
    np.testing.assert_array_equal(model.read_positions(), ticks)  # no sync: as before
    assert np.max(np.abs(world.joint_pos() - q)) < 0.01  # no sync: the goal is not applied
    for _ in range(100):  # the bridge repeats its goal each tick; 2 s of sim time
        model.write_goals(goal_ticks, np.ones(model.num_servos, dtype=bool))
        model.sync()
        world.step(20)
    model.sync()
    assert np.max(np.abs(world.joint_pos() - goal)) < 0.03  # deadband, play, sag
    assert world.gripper_closure() > 0.95
    q_read = calibration.ticks_to_rad(model.read_positions()[:-1])
    np.testing.assert_allclose(q_read, world.joint_pos(), atol=cal.RAD_PER_TICK)


def test_the_twin_servo_bus_answers_from_its_own_process_and_dies_with_its_twin(
    tmp_path,
) -> None:
    """The twin's bus runs in a process of its own (it must answer while the twin's interpreter
    is busy or starved, as servos do): over the wire it reports the positions the twin last
    synced, the goals written on the wire reach the twin at its next sync, and the bus process
    goes away when the process that owns the twin is killed (no orphan holding a pty)."""
    pytest.importorskip("serial", reason="FeetechBus needs pyserial (pip install pyserial)")
    import os
    import signal
    import subprocess
    import sys
    import time

    from drivers.feetech.bus import FeetechBus
    from sim.ros2_control import ControlledArm
    from sim.twin_servo_bus import ServoBusProcess, TwinServoModel, twin_servo_calibration

    world = SimWorld(SimConfig(cameras=(), arm="so101"), [], arm=so101_twin())
    ctl = ControlledArm(world, "servo_bus", watchdog_s=1.0)
    model = TwinServoModel(ctl, twin_servo_calibration(world))
    ids = tuple(range(1, model.num_servos + 1))
    bus = ServoBusProcess(model.shared, ids)
    try:
        with FeetechBus(bus.port, ids=ids, timeout_s=2.0) as client:
            np.testing.assert_array_equal(client.sync_read_positions(), model.read_positions())
            goal = model.read_positions() + np.array([80, -60, 60, 0, 100, 0])
            client.set_torque(None, True)
            client.sync_write_goal_positions(None, goal)
            q_before = world.joint_pos().copy()
            for _ in range(100):  # 2 s of sim time: the goal applies at the syncs
                model.sync()
                world.step(20)
            moved = model.calibration.rad_to_ticks(world.joint_pos())
            assert np.max(np.abs(world.joint_pos() - q_before)) > 0.05
            assert np.max(np.abs(moved - goal[:-1])) < 30  # deadband, play, sag
            np.testing.assert_array_equal(client.sync_read_positions(), model.read_positions())
    finally:
        bus.close()
    assert not bus._process.is_alive()

    owner = (
        "import sys, time\n"
        "from sim.twin_servo_bus import ServoBusProcess, SharedServoState\n"
        "bus = ServoBusProcess(SharedServoState(3), (1, 2, 3))\n"
        "print(bus._process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True)
    try:
        bus_pid = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30.0  # the bus process sees its pipe close and exits
        while _running(bus_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(bus_pid):
            os.kill(bus_pid, signal.SIGKILL)
            pytest.fail("the bus process outlived the process that owns the twin")
    finally:
        if proc.poll() is None:
            proc.kill()


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_reward_frames_render_the_so101_twin_and_its_expert_succeeds_in_them(tmp_path) -> None:
    """`robot-rl reward frames --arm so101`: the classifier's frames come from the SO-101 twin
    (its cameras, its expert), so a classifier for the small arm can be checked offline before a
    robot day; the store says which arm made it."""
    from robot_rl.app.rewards.reward_frames import RewardFramesConfig, run_reward_frames
    from robot_rl.replay.frames import FrameLog

    cfg = RewardFramesConfig(
        out=tmp_path / "so101.zarr",
        arm="so101",
        episodes=2,
        near_miss_fraction=0.0,
        noisy_fraction=0.0,
        wander_fraction=0.0,
        max_steps=40,
        after_success_steps=2,
    )
    result = run_reward_frames(cfg, progress=False)
    assert result["successful_episodes_by_kind"]["success"] == 2
    assert result["positives"] >= 2 * 3 and result["negatives"] > 0
    with FrameLog.open(cfg.out) as store:
        assert store.meta["arm"] == "so101"
        assert store.meta["env"]["arm"] == "so101"
