"""The twin's arm kinds (:mod:`sim.twin_arms`) and joint position servos (:mod:`sim.joint_servo`):
the UR5e-class arm holds still, follows Cartesian targets through the bridge's IK under joint
control, keeps the safety layer in front; the servos show their deadband, backlash, speed limit
and sag without gravity compensation."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT
from robot_rl.core.types import ArmCommand
from sim.backend import make_sim_backend
from sim.config import SimConfig
from sim.joint_servo import JointServoConfig, JointServoController
from sim.twin_arms import twin_arm

pytest.importorskip("mink", reason="pip install -e '.[arms]' (the UR5e twin's IK)")


def _ur5e(task: str = "reach"):
    from robot_rl.app.envs.build import twin_joint_ik

    b = make_sim_backend(
        task, SimConfig(cameras=(), arm="ur5e"), EnvConfig(), joint_ik=twin_joint_ik
    )
    b.robot.connect()
    return b


def test_the_ur5e_twin_has_its_joints_and_a_tool_pointing_down_in_front() -> None:
    b = _ur5e()
    w = b.world
    assert b.robot.spec.joint_names == twin_arm("ur5e").arm.joint_names
    assert b.robot.spec.num_joints == 6 and b.robot.read_state().joint_pos.shape == (6,)
    pose = w.tcp_pose()
    assert 0.3 < pose[0] < 0.6 and pose[2] > 0.1
    assert abs(abs(float(np.dot(pose[3:], DOWN_QUAT))) - 1.0) < 1e-6
    w.step(500)  # 1 s: the servos hold the home pose against gravity
    np.testing.assert_allclose(w.tcp_pose()[:3], pose[:3], atol=1e-3)


def test_a_cartesian_command_goes_through_the_bridge_ik_to_the_joint_servos() -> None:
    b = _ur5e()
    start = b.robot.read_state().tcp_pose
    target = start.copy()
    target[:3] += [0.03, -0.02, -0.03]
    executed, report = b.robot.send_command(ArmCommand(target, 0.0))
    assert not report.step_clipped
    for _ in range(10):  # 1 s at 10 Hz
        b.clock.tick()
    np.testing.assert_allclose(b.robot.read_state().tcp_pose[:3], target[:3], atol=3e-3)
    # The safety layer is in front of the IK as on the FR3: a far target is clipped.
    far = target.copy()
    far[0] += 0.5
    executed, report = b.robot.send_command(ArmCommand(far, 0.0))
    assert report.step_clipped or report.workspace_clipped
    assert np.linalg.norm(executed.target_pose[:3] - b.world.tcp_pose()[:3]) <= 0.05 + 1e-6


def test_joint_control_without_ik_is_refused_with_what_to_pass() -> None:
    with pytest.raises(ValueError, match="driven in joint mode: pass joint_ik"):
        make_sim_backend("reach", SimConfig(cameras=(), arm="ur5e"), EnvConfig())
    with pytest.raises(ValueError, match=r"arm 'ur10': the twin has \['fr3', 'so101', 'ur5e'\]"):
        SimConfig(arm="ur10")


PENDULUM = """
<mujoco><option timestep="0.002" gravity="0 0 GRAVITY"/>
  <worldbody><body name="link"><joint name="j" axis="0 1 0" damping="0.01"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1"/></body></worldbody>
  <actuator><motor name="m" joint="j" ctrlrange="-50 50"/></actuator>
</mujoco>"""


def _pendulum(cfg: JointServoConfig, gravity: float = 0.0):
    m = mujoco.MjModel.from_xml_string(PENDULUM.replace("GRAVITY", str(gravity)))
    d = mujoco.MjData(m)
    servo = JointServoController(
        m, d, cfg, np.array([0]), np.array([0]), np.array([0]), np.array([50.0])
    )

    def run(goal: float, seconds: float = 1.0) -> float:
        servo.set_goal(np.array([goal]))
        for _ in range(int(seconds / m.opt.timestep)):
            mujoco.mj_step1(m, d)
            servo.compute()
            mujoco.mj_step2(m, d)
        return float(d.qpos[0])

    return run, servo


def test_servo_deadband_backlash_speed_and_sag() -> None:
    base = dict(kp_nm_per_rad=200.0, kd_nms_per_rad=4.0, vel_max_rad_s=1.0)
    run, _ = _pendulum(JointServoConfig(**base, deadband_rad=0.02))
    assert abs(run(0.01)) < 1e-3  # inside the deadband: the motor does not move
    assert abs(run(0.3) - 0.3) < 0.021  # outside: it goes, to within the deadband
    run, _ = _pendulum(JointServoConfig(**base, backlash_rad=0.04))
    from_below = (run(0.0), run(0.3))[1]
    run(0.6)
    from_above = run(0.3)
    assert from_above - from_below == pytest.approx(0.04, abs=0.005)  # the play, both ways
    run, servo = _pendulum(JointServoConfig(**base))
    run(0.0)
    servo.set_goal(np.array([1.0]))
    mj_steps = 0
    while servo.motor[0] < 0.5:
        servo.compute()
        mj_steps += 1
    assert mj_steps * 0.002 == pytest.approx(0.5, abs=0.01)  # 0.5 rad at 1 rad/s
    weak = JointServoConfig(**{**base, "kp_nm_per_rad": 20.0}, gravity_compensation=False)
    run, _ = _pendulum(weak, gravity=-9.81)
    sag = run(0.0, 2.0)
    assert sag == pytest.approx(9.81 * 0.15 / 20.0, rel=0.1)  # m g l_com / kp, no feed-forward
    run, _ = _pendulum(JointServoConfig(**base), gravity=-9.81)
    assert abs(run(0.0, 2.0)) < 1e-3  # with it: no sag
