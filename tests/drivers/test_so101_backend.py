"""The SO-101 backend (:class:`drivers.so101.backend.So101Backend`) against simulated STS3215
servos on a pty: the state and the TCP pose of a reference FK, cartesian targets reached, every
goal within the limits and a tick's joint step, a silent or corrupt servo held and named,
connect's errors, a reset through the bridge.

The bus client is the real one; only the servos are simulated (``so101_helpers.py`` says why
and how). The calibration workflow and the leader arm are in ``test_so101_leader.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
from so101_helpers import (
    FAULT_TIMEOUT_S,
    GRIPPER_TICKS,
    HOME_Q,
    IDS,
    RPT,
    TIMEOUT_S,
    ReferenceFK,
    arm_ticks,
    calibration,
    wait_for,
)

# The open_sim and follower fixtures: imported ``as`` themselves (an explicit re-export), so
# that linters do not take them for unused imports that the tests' parameters shadow.
from so101_helpers import follower as follower
from so101_helpers import open_sim as open_sim

from drivers.arm_bridge.core import ArmBridge, BridgeConfig
from drivers.feetech import calibration as cal
from drivers.feetech.protocol import STS3215
from drivers.feetech.servo_model import KinematicServoConfig, KinematicServoModel
from drivers.so101.backend import So101Backend
from drivers.so101.config import SO101_SAFETY, So101Config, So101Error
from robot_rl.core.arm import builtin_arm

SO101 = builtin_arm("so101")


def ticks_later(backend: So101Backend, n: int) -> Callable[[], bool]:
    """A condition: ``n`` more backend ticks have run."""
    start = backend.ticks
    return lambda: backend.ticks >= start + n


# -- backend ------------------------------------------------------------------------------------


def test_connect_holds_and_read_state_gives_five_joints_and_the_tcp_pose_of_fk(follower):
    backend, sim, recorder = follower()
    state = backend.read_state()
    assert state.joint_pos.shape == state.joint_vel.shape == (5,)
    np.testing.assert_allclose(state.joint_pos, HOME_Q, atol=RPT)
    fk = ReferenceFK()(state.joint_pos)
    np.testing.assert_allclose(state.tcp_pose[:3], fk[:3], atol=1e-9)
    assert abs(abs(float(np.dot(state.tcp_pose[3:], fk[3:]))) - 1.0) < 1e-9
    np.testing.assert_allclose(state.tcp_pose[:3], [0.185, 0.0, 0.108], atol=2e-3)
    assert state.gripper_pos == 0.0 and not np.any(state.tcp_wrench)
    # The goals were the present positions before torque went on, then torque is on for all six.
    first_goal, first_torque = recorder.writes[0]
    np.testing.assert_array_equal(first_goal, arm_ticks(HOME_Q))
    assert not first_torque.any()
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x01" for i in IDS)
    # A later tick reads again: a newer stamp, the same pose at rest.
    wait_for(lambda: backend.read_state().stamp_s > state.stamp_s, what="a newer state")
    np.testing.assert_allclose(backend.read_state().tcp_pose, state.tcp_pose, atol=1e-9)
    # A tick publishes its state before it writes its goals: the telemetry is read once a tick
    # has ended since (CI read it between the first tick's read and its write: no write yet).
    ticks = backend.telemetry()["ticks"]
    wait_for(lambda: backend.telemetry()["ticks"] > ticks, what="a whole tick")
    telemetry = backend.telemetry()
    assert telemetry["bus_errors"] == 0 and telemetry["sync_write_ms"]["max"] > 0


def test_a_cartesian_target_2cm_away_is_reached_within_a_few_mm(follower):
    backend, _, _ = follower(lag=True)  # servos with a first-order lag
    start = backend.read_state().tcp_pose
    for offset in ([0.02, 0.0, 0.0], [0.0, -0.02, 0.0], [0.0, 0.0, 0.02]):
        target = start.copy()
        target[:3] += offset
        backend.command(target, 0.0)

        def error_m(target=target) -> float:
            return float(np.linalg.norm(backend.read_state().tcp_pose[:3] - target[:3]))

        wait_for(lambda: error_m() < 0.003, timeout_s=5.0, what=f"TCP within 3 mm of {offset}")
        start = backend.read_state().tcp_pose


def test_goals_stay_within_the_limits_and_one_tick_of_joint_speed_whatever_is_asked(follower):
    pan_limit = 0.3
    backend, _, recorder = follower(limits_rad={"shoulder_pan": (-pan_limit, pan_limit)})
    home = backend.read_state().tcp_pose

    def pose(xyz) -> np.ndarray:
        return np.concatenate([xyz, home[3:]])

    # 1. A target a metre away (out of reach): the arm goes at most one step per tick.
    backend.command(pose([1.2, 0.0, 0.6]), 1.0)
    wait_for(ticks_later(backend, 25), what="25 ticks towards a far target")
    # 2. A target behind the pan limit (needs ~0.5 rad of pan; +pan turns to -y): pan stops at
    # its calibrated limit.
    backend.command(pose([0.2, -0.11, 0.12]), 0.0)
    wait_for(ticks_later(backend, 60), what="60 ticks towards a target behind a limit")
    assert backend.read_state().joint_pos[0] == pytest.approx(pan_limit, abs=3 * RPT)
    # 3. Targets that flip between two far poses faster than the ticks.
    flips = [pose([0.1, -0.3, 0.0]), pose([0.35, 0.3, 0.4])]
    deadline = time.monotonic() + 0.3
    i = 0
    while time.monotonic() < deadline:
        backend.command(flips[i % 2], float(i % 2))
        i += 1
        time.sleep(0.001)  # a publisher flooding at ~1 kHz
    # 4. A malformed target never reaches the bus.
    with pytest.raises(ValueError, match="finite"):
        backend.command(pose([np.nan, 0.0, 0.1]), 0.0)
    # 5. A move to a far pose, ended by a hold.
    backend.start_move(pose([0.3, -0.2, 0.25]), 1.0)
    wait_for(ticks_later(backend, 10), what="10 ticks of a move")
    backend.hold()
    with pytest.raises(So101Error, match="ended by hold"):
        backend.move_done()
    # 6. Joint teleop far outside every limit.
    backend.follow_joints(np.array([3.0, -3.0, 3.0, -3.0, 3.0]), 0.5)
    wait_for(ticks_later(backend, 25), what="25 ticks of joint teleop")

    goals = recorder.goals()
    assert len(goals) > 100
    arm = goals[:, :5].astype(float)
    step_ticks = backend.max_step_rad / RPT  # 4.7 rad/s * 20 ms = 61.3 ticks
    assert np.abs(np.diff(arm, axis=0)).max(axis=0) == pytest.approx(step_ticks, abs=1.0)
    assert np.all(np.abs(np.diff(arm, axis=0)) <= step_ticks + 1.0)
    low = 2048 + backend.q_low / RPT
    high = 2048 + backend.q_high / RPT
    assert np.all(arm >= low - 1.0) and np.all(arm <= high + 1.0)
    assert arm[:, 0].max() >= high[0] - 1.0  # pan went to its limit ...
    assert high[0] == pytest.approx(2048 + pan_limit / RPT, abs=1.0)  # ... the calibrated one
    # The description's limits where the calibration is wider (every joint but pan).
    np.testing.assert_allclose(backend.q_high[1:], SO101.joint_high_rad[1:])
    jaw = goals[:, 5].astype(float)
    jaw_step = backend.config.gripper_speed_per_s * backend.config.tick_s * 1000  # ticks
    assert np.all(np.abs(np.diff(jaw)) <= jaw_step + 1.0)
    assert jaw.min() >= GRIPPER_TICKS[0] and jaw.max() <= GRIPPER_TICKS[1]


def test_a_silent_servo_makes_the_backend_hold_name_it_and_send_nothing_until_clear_error(
    follower,
):
    backend, sim, recorder = follower(bus_timeout_s=FAULT_TIMEOUT_S)
    target = backend.read_state().tcp_pose.copy()
    target[2] += 0.03
    backend.command(target, 0.0)  # moving when the servo falls silent
    wait_for(ticks_later(backend, 3))
    sim.stop_answering(3)
    wait_for(lambda: backend.error is not None, timeout_s=5.0, what="the backend's error")
    assert "servo 3 (elbow_flex)" in backend.error and "holding" in backend.error
    last_good = backend.read_state()
    # The hold: goals = the last good positions (once the simulated servos decoded it).
    hold = np.asarray(arm_ticks(last_good.joint_pos)[:5])
    wait_for(
        lambda: np.abs(recorder.goals()[-1][:5] - hold).max() <= 1.0,
        what="the hold at the last good positions",
    )
    sent = dict(sim.instructions_served)
    writes = len(recorder.writes)
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x01" for i in IDS)
    wait_for(ticks_later(backend, 15), what="15 ticks in error")
    assert sim.instructions_served == sent and len(recorder.writes) == writes
    assert backend.read_state().stamp_s == last_good.stamp_s  # the state ages, never refreshed
    backend.command(target, 1.0)  # the bridge would refuse it; the backend sends nothing
    wait_for(ticks_later(backend, 5))
    assert sim.instructions_served == sent
    # Still silent: clear_error fails and names it again.
    assert backend.clear_error() is False
    assert "servo 3 (elbow_flex)" in backend.error
    # Answering again: clear_error resumes, and the arm moves on command.
    sim.resume_answering(3)
    assert backend.clear_error() is True and backend.error is None
    assert backend.recoveries == 1
    target = backend.read_state().tcp_pose.copy()
    target[0] += 0.01
    backend.command(target, 0.0)
    wait_for(
        lambda: np.linalg.norm(backend.read_state().tcp_pose[:3] - target[:3]) < 0.003,
        what="the arm moving again after clear_error",
    )


def test_a_corrupt_reply_is_a_clear_error_naming_the_servo(follower):
    backend, sim, _ = follower(bus_timeout_s=FAULT_TIMEOUT_S)
    sim.corrupt_next_reply(4, count=2)  # both tries of one request (bus_retries=1)
    wait_for(lambda: backend.error is not None, what="the backend's error")
    assert "servo 4 (wrist_flex)" in backend.error
    assert "FeetechProtocolError" in backend.error and "checksum" in backend.error
    assert backend.clear_error() is True and backend.error is None


def test_connect_names_a_missing_servo_a_missing_calibration_and_a_joint_out_of_range(
    tmp_path, open_sim
):
    path = tmp_path / "so101.json"
    with pytest.raises(So101Error, match="no calibration file .*robot-rl arm calibrate"):
        So101Backend(So101Config("/dev/null", path)).connect()
    cal.save(calibration(), path)
    start = arm_ticks(HOME_Q)
    sim = open_sim(KinematicServoModel(5), ids=(1, 2, 3, 4, 6))
    backend = So101Backend(
        So101Config(sim.port, path, bus_timeout_s=FAULT_TIMEOUT_S, bus_retries=0)
    )
    with pytest.raises(So101Error, match=r"servo 5 \(wrist_roll\) did not answer"):
        backend.connect()
    bent = list(start)
    bent[2] = 2048 + 2.2 / RPT  # elbow_flex beyond its 1.69 rad limit
    sim = open_sim(KinematicServoModel(6, KinematicServoConfig(initial_ticks=tuple(bent))))
    backend = So101Backend(So101Config(sim.port, path, bus_timeout_s=TIMEOUT_S))
    with pytest.raises(So101Error, match="'elbow_flex' .* outside its range"):
        backend.connect()
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x00" for i in IDS)


def test_the_bridge_resets_through_start_move_and_move_done(follower):
    backend, _, _ = follower()
    bridge = ArmBridge(backend, BridgeConfig(SO101_SAFETY))
    home = backend.home_pose()
    goal = home.copy()
    goal[:3] += [0.04, 0.05, 0.06]
    job = bridge.begin_reset(goal, 1.0, time.monotonic())
    wait_for(lambda: bridge.poll_reset(job, time.monotonic()), timeout_s=8.0, what="the reset")
    state = backend.read_state()
    assert np.linalg.norm(state.tcp_pose[:3] - goal[:3]) <= backend.config.move_tolerance_m
    assert state.gripper_pos == pytest.approx(1.0, abs=backend.config.gripper_tolerance)


def test_the_node_waits_for_a_port_that_appears_late(tmp_path) -> None:
    """``--wait-for-port-s``: a device plugged in (or a twin's bus opened) after the node started
    is waited for; one that never appears is named when the wait ends."""
    import threading

    pytest.importorskip("rclpy")
    from drivers.so101.node import wait_for_files

    late, never = tmp_path / "ttyACM0", tmp_path / "ttyACM1"
    appear = threading.Timer(0.2, late.touch)
    appear.start()
    assert wait_for_files([str(late)], timeout_s=30.0) == []
    appear.join()
    assert wait_for_files([str(late), str(never)], timeout_s=0.1) == [str(never)]
