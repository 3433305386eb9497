"""A servo that stops answering under the SO-101 node (its own process, real DDS on loopback):
the bridge refuses the reset with a backend error, ``RosRobot.reset`` raises
:class:`ArmFaultError` (which the actor waits out, ``tests/transport/test_actor.py``), and the
arm resets again once the error has cleared: by itself at the bridge's next tick with
``--auto-recover`` (the twin's simulated bus in ``robot-rl rehearse``), only after
``clear_error`` without it (a real arm: a person looks first).

The servos are simulated at the byte boundary (:class:`drivers.feetech.sim_bus.SimServoBus` on
a pty, which the node opens with pyserial as it would ``/dev/ttyACM0``; CI has no servos).
Waits are on conditions with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("rclpy")

from ros_graph import PYTHON, DomainIds, RosProcess  # noqa: E402
from so101_helpers import HOME_Q, arm_ticks, calibration  # noqa: E402
from so101_helpers import open_sim as open_sim  # noqa: E402 - the fixture (re-exported)

from drivers.feetech import calibration as cal  # noqa: E402
from drivers.feetech.servo_model import KinematicServoConfig, KinematicServoModel  # noqa: E402
from drivers.ros_clock import stream_time_s  # noqa: E402
from drivers.ros_robot import RosRobot, RosRobotConfig  # noqa: E402
from drivers.ros_session import IDEMPOTENT_RESEND_S, RosSession  # noqa: E402
from drivers.so101.config import SO101_SAFETY  # noqa: E402
from robot_rl.core.arm import builtin_arm  # noqa: E402
from robot_rl.core.types import ArmFaultError, StaleSensorError  # noqa: E402

DOMAINS = DomainIds(80, 86)  # this file's ROS domain ids (80..85: no other test file uses them)
TIMEOUT_S = 60.0
"""Longest wait for the node to come up or a state to change (a loaded 2-core host)."""
SILENT = 3
"""The servo that stops answering (elbow_flex)."""


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)  # poll interval


@pytest.mark.parametrize("auto_recover", [True, False], ids=["auto_recover", "clear_error"])
def test_a_silent_servo_refuses_the_reset_as_an_arm_fault_until_its_error_clears(
    tmp_path, open_sim, auto_recover: bool
) -> None:
    path = tmp_path / "so101.json"
    cal.save(calibration(), path)
    model = KinematicServoModel(6, KinematicServoConfig(initial_ticks=arm_ticks(HOME_Q)))
    sim = open_sim(model)
    domain = DOMAINS.next()
    args = [PYTHON, "-m", "drivers.so101.node", "--port", sim.port, "--calibration", str(path)]
    args += ["--ns", "arm", *(["--auto-recover"] if auto_recover else [])]
    node = RosProcess(args, domain, tmp_path / "so101_node.log")
    session = RosSession("arm", node_name="fault_env", domain_id=domain)
    cfg = RosRobotConfig(
        arm=builtin_arm("so101"),
        bridge_node="arm_bridge",
        safety=SO101_SAFETY,
        name="so101",
        connect_timeout_s=TIMEOUT_S,
        max_state_age_s=2.0,  # staleness is not under test here (and the host may be loaded)
        reset_timeout_s=TIMEOUT_S,
    )
    robot = RosRobot(cfg, now_s=lambda: stream_time_s(session), session=session)
    try:
        robot.connect()

        def fresh() -> bool:
            try:
                robot.read_state()
            except StaleSensorError:
                return False
            return True

        _wait(fresh, "a fresh state from the SO-101 node")
        home = robot.read_state().tcp_pose.copy()
        robot.reset(home, 0.0)  # the arm resets while every servo answers

        sim.stop_answering(SILENT)
        with pytest.raises(ArmFaultError, match=r"servo 3 \(elbow_flex\)") as fault:
            _wait_for_refusal(robot, home)
        assert "backend error" in str(fault.value) and "e-stop" not in str(fault.value)

        sim.resume_answering(SILENT)
        if auto_recover:
            _wait(lambda: _resets(robot, home), "the reset once the bridge recovered by itself")
        else:
            # Without --auto-recover the error stays, though the servo answers again, until a
            # person clears it.
            with pytest.raises(ArmFaultError, match="elbow_flex"):
                robot.reset(home, 0.0)
            robot.session.trigger("clear_error", TIMEOUT_S, IDEMPOTENT_RESEND_S)
            robot.reset(home, 0.0)
        state = robot.read_state()
        assert np.linalg.norm(state.tcp_pose[:3] - home[:3]) < 0.005  # the arm is where it was
    finally:
        robot.disconnect()
        session.close()
        node.stop()
        print(f"---- log of the SO-101 node ----\n{node.log()[-4000:]}")


def _wait_for_refusal(robot: RosRobot, home: np.ndarray) -> None:
    """Reset until the bridge refuses (the node notices the silent servo at its next read);
    the refusal's ArmFaultError propagates."""
    end = time.monotonic() + TIMEOUT_S
    while time.monotonic() < end:
        robot.reset(home, 0.0)
        time.sleep(0.05)  # poll interval: the next reset
    pytest.fail(f"the reset was never refused in {TIMEOUT_S} s with a servo silent")


def _resets(robot: RosRobot, home: np.ndarray) -> bool:
    """True once a reset succeeds; False while it is refused as an arm fault."""
    try:
        robot.reset(home, 0.0)
    except ArmFaultError:
        return False
    return True
