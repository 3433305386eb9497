"""The generic ROS 2 arm backend's core (``drivers.ros2_arm``) and the ros2_control-shaped
twin's controller (``sim.ros2_control``), unit tests without ROS.

:class:`Ros2ArmCore`'s joint commands never leave the joint limits nor move a joint more than a
tick's step from the previous command, however the targets, the measured joints or IK itself
misbehave; joint-name mismatches, staleness, limits and tracking errors are errors with messages
that say what to change; moves arrive; cartesian mode; config validation; the twin's controller
refuses bad commands and holds when they stop, and times a trajectory by its points'
``time_from_start`` (the watchdog waiting for its end). The node and the ROS 2 graph end to end
are in ``test_ros2_arm_node.py``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("mink")

from drivers.ik import DiffIK  # noqa: E402
from drivers.ros2_arm.config import Ros2ArmConfig  # noqa: E402
from drivers.ros2_arm.core import Ros2ArmCore, make_ik  # noqa: E402
from drivers.ros2_arm.state import JointStateError, pose_distance  # noqa: E402
from robot_rl.core import frames  # noqa: E402
from robot_rl.core.arm import builtin_arm  # noqa: E402
from robot_rl.core.safety import DOWN_QUAT  # noqa: E402

UR5E = builtin_arm("ur5e")

KINEMATICS = "sim/arms/models/ur5e.xml"
NAMES = list(UR5E.joint_names)
HOME = np.asarray(UR5E.home_q_rad)
TICK_S = 0.01


def make_core(mode: str = "joint", arm=UR5E, **kw) -> tuple[Ros2ArmCore, Ros2ArmConfig]:
    cfg = Ros2ArmConfig(arm=arm, mode=mode, kinematics=KINEMATICS, **kw)
    return Ros2ArmCore(cfg, make_ik(cfg)), cfg


class Arm:
    """A perfect position-controlled arm: it is where the last command put it."""

    def __init__(self, core: Ros2ArmCore, q: np.ndarray) -> None:
        self.core, self.q, self.t = core, np.array(q, dtype=float), 0.0
        self.commands: list[np.ndarray] = []
        self.publish()

    def publish(self) -> None:
        self.core.state.on_joint_state(NAMES, self.q, np.zeros(6), self.t)

    def tick(self, follow: bool = True) -> np.ndarray | None:
        self.t += TICK_S
        self.publish()
        out = self.core.next_output(self.t)
        if out is None:
            return None
        assert out.joints is not None and out.pose is None
        self.commands.append(out.joints)
        if follow:
            self.q = out.joints.copy()
        return out.joints

    def check_invariant(self, core: Ros2ArmCore, start: np.ndarray) -> None:
        """Every command within the limits and within a tick's step of the one before."""
        prev = np.clip(start, core.joint_low, core.joint_high)
        for q in self.commands:
            assert np.all(q >= core.joint_low) and np.all(q <= core.joint_high), q
            assert np.all(np.abs(q - prev) <= core.max_step_rad + 1e-12), q - prev
            prev = q


def down(x: float, y: float, z: float, yaw_rad: float = 0.0) -> np.ndarray:
    q = frames.quat_mul(frames.quat_from_rotvec(np.array([0, 0, yaw_rad])), np.array(DOWN_QUAT))
    return frames.pose(np.array([x, y, z]), q)


# -- unit: the core's joint commands ---------------------------------------------------------


def test_nothing_is_sent_before_the_first_target() -> None:
    core, _ = make_core()
    arm = Arm(core, HOME)
    assert all(arm.tick() is None for _ in range(5))
    assert core.error(arm.t) is None


@pytest.mark.parametrize(
    "case",
    ["far_away", "behind_limits", "singular_wrist", "random_jumps", "lagging_arm", "rotation_flip"],
)
def test_joint_commands_stay_in_limits_and_within_a_step(case: str) -> None:
    """Try to break the invariant: far or unreachable targets, a joint limit in the way, the UR's
    wrist singularity (wrist_2 = 0), targets jumping every tick, an arm that lags."""
    arm_desc, q0 = UR5E, HOME.copy()
    if case == "behind_limits":  # the pan joint may move only 0.05 rad: the target is behind it
        lo, hi = list(UR5E.joint_low_rad), list(UR5E.joint_high_rad)
        lo[0], hi[0] = HOME[0] - 0.05, HOME[0] + 0.05
        arm_desc = UR5E.with_overrides(joint_low_rad=tuple(lo), joint_high_rad=tuple(hi))
    if case == "singular_wrist":
        q0[4] = 0.0  # wrist_2 = 0: wrist_1 and wrist_3 axes aligned
    core, _ = make_core(arm=arm_desc)
    arm = Arm(core, q0)
    p0 = core.tcp_pose()
    rng = np.random.default_rng(7)
    targets = {
        "far_away": [down(2.0, -1.5, 1.2)],
        "behind_limits": [down(0.0, 0.5, 0.2)],
        "singular_wrist": [frames.pose(p0[:3] + [0.05, 0.05, 0.0], p0[3:7])],
        "rotation_flip": [down(0.45, 0.1, 0.3, yaw_rad=np.pi)],
    }
    follow = case != "lagging_arm"
    for k in range(600):
        if case in ("random_jumps", "lagging_arm"):
            target = frames.pose(rng.uniform(-1.5, 1.5, 3), rng.normal(size=4))
        else:
            target = targets[case][0]
        if k % 10 == 0 or case == "random_jumps":
            core.command(target, 0.0, arm.t)
        arm.tick(follow=follow)
        if case == "lagging_arm" and k % 3 == 0:
            arm.q = arm.commands[-1].copy()  # the arm catches up every third tick only
    assert len(arm.commands) > 100
    arm.check_invariant(core, q0)
    if case == "far_away":  # it went as far as it could, not nowhere
        assert np.linalg.norm(core.tcp_pose()[:3] - p0[:3]) > 0.3
    if case == "behind_limits":  # pressed against the pan joint's limit, not beyond
        assert min(abs(arm.q[0] - core.joint_low[0]), abs(arm.q[0] - core.joint_high[0])) < 1e-6
    if case in ("random_jumps", "singular_wrist"):  # some ticks used the whole step
        steps = np.abs(np.diff(np.array(arm.commands), axis=0))
        assert np.any(np.isclose(steps, core.max_step_rad[None, :], rtol=1e-6))


def test_joint_commands_hold_the_invariant_when_ik_misbehaves(monkeypatch) -> None:
    """IK that returns huge steps or values beyond the limits is clipped; NaN is an error and
    nothing is sent."""
    core, _ = make_core()
    arm = Arm(core, HOME)
    core.command(down(0.5, 0.1, 0.25), 0.0, arm.t)
    rng = np.random.default_rng(1)
    assert core.ik is not None
    monkeypatch.setattr(core.ik, "step", lambda q, target: q + rng.normal(scale=50.0, size=6))
    for _ in range(300):
        arm.tick()
    arm.check_invariant(core, HOME)
    monkeypatch.setattr(core.ik, "step", lambda q, target: q * np.nan)
    assert arm.tick() is None
    assert "non-finite" in str(core.error(arm.t))


def test_joint_names_missing_from_joint_states_are_a_clear_error() -> None:
    core, _ = make_core()
    with pytest.raises(JointStateError, match=r"not \['wrist_1_joint'.*joint_names"):
        core.state.on_joint_state(NAMES[:3], HOME[:3], [], 0.0)
    # a message with none of the arm's joints (a gripper on the same topic) is ignored
    assert core.state.on_joint_state(["finger_joint"], [0.1], [], 0.0) is False
    assert core.state.other_names == ["finger_joint"]
    assert "no joint state" in str(core.error(0.0))
    with pytest.raises(JointStateError, match="not finite"):
        core.state.on_joint_state(NAMES, [np.nan] * 6, [], 0.0)
    # names in another order, extra joints: reordered to the description's
    order = [5, 3, 1, 0, 2, 4]
    names = [NAMES[i] for i in order] + ["finger_joint"]
    assert core.state.on_joint_state(names, [*HOME[order], 0.3], [], 0.0)
    np.testing.assert_allclose(core.read_state().joint_pos, HOME)


def test_stale_state_and_limits_are_errors_and_a_moved_arm_is_held_where_it_is() -> None:
    core, cfg = make_core()
    arm = Arm(core, HOME)
    core.hold(arm.t)
    assert arm.tick() is not None
    # stale: nothing is sent, clear_error fails until a fresh state arrives
    t = arm.t + cfg.max_state_age_s + 0.05
    assert "old" in str(core.error(t)) and core.next_output(t) is None
    assert not core.clear_error(t)
    core.state.on_joint_state(NAMES, arm.q, np.zeros(6), t)
    assert core.clear_error(t) and core.error(t) is None
    # a joint outside its limits
    bad = HOME.copy()
    bad[2] = 3.2
    core.state.on_joint_state(NAMES, bad, np.zeros(6), t)
    assert "'elbow_joint' at 3.2000 rad is outside" in str(core.error(t))
    # the arm is pushed away from our commands (freedrive, at 2 rad/s: no jump): once it is
    # max_tracking_error_rad away, the stale target is dropped and it is held where it is
    core, _ = make_core()
    core.state.on_joint_state(NAMES, HOME, np.zeros(6), t)
    core.command(down(0.6, -0.2, 0.1), 0.0, t)
    q, outs = HOME.copy(), []
    for _ in range(20):
        t += TICK_S
        q = q + 0.02
        core.state.on_joint_state(NAMES, q, np.zeros(6), t)
        outs.append(core.next_output(t))
    assert core.rebases == 1 and "max_tracking_error_rad" in str(core.last_rebase)
    assert core.error(t) is None and all(o is not None for o in outs)
    rebased = next(i for i, o in enumerate(outs) if np.allclose(o.joints, HOME + 0.02 * (i + 1)))
    for o in outs[rebased:]:  # held where it was found, not chasing the old target
        np.testing.assert_allclose(o.joints, HOME + 0.02 * (rebased + 1))


@pytest.mark.parametrize("mode", ["joint", "cartesian"])
def test_a_jump_of_the_measured_joints_pauses_then_holds_there(mode: str) -> None:
    """The twin's scene reset teleports the arm by less than max_tracking_error_rad per joint
    (25 cm at the TCP): without jump detection the stale command would pull the arm back. A
    glitch that reverts changes nothing."""
    core, _ = make_core(mode)
    t = 0.0
    core.state.on_joint_state(NAMES, HOME, np.zeros(6), t)
    core.command(down(0.5, 0.1, 0.2), 0.0, t)
    glitch = HOME.copy()
    glitch[1] += 0.2
    for q in (HOME, glitch, HOME, HOME, HOME, HOME):  # a one-sample glitch
        t += TICK_S
        core.state.on_joint_state(NAMES, q, np.zeros(6), t)
        out = core.next_output(t)
    assert out is not None and core.rebases == 0 and core.state.jumps == 2
    teleported = HOME + np.array([0.2, -0.15, 0.2, 0.1, 0.0, 0.25])
    outs = []
    for _ in range(4):
        t += TICK_S
        core.state.on_joint_state(NAMES, teleported, np.zeros(6), t)
        outs.append(core.next_output(t))
    assert outs[0] is None and outs[1] is None and core.rebases == 1
    out = outs[-1]
    assert out is not None
    if mode == "joint":
        np.testing.assert_allclose(out.joints, teleported)
    else:
        np.testing.assert_allclose(out.pose, core.tcp_pose())


def test_joint_move_arrives_at_its_bounded_speed_and_hold_ends_it() -> None:
    core, cfg = make_core()
    arm = Arm(core, HOME)
    p0 = core.tcp_pose()
    goal = frames.pose(p0[:3] + [0.05, -0.05, 0.05], p0[3:7])
    core.start_move(goal, 0.0, arm.t)
    path = []
    for _ in range(2000):
        arm.tick()
        path.append(core.tcp_pose()[:3])
        if core.move_done(arm.t):
            break
    assert pose_distance(core.tcp_pose(), goal)[0] <= cfg.move_tolerance_m
    steps = np.abs(np.diff(np.array([HOME, *arm.commands]), axis=0))
    assert np.all(steps <= core.move_step_rad + 1e-12)
    # along the straight line, at about the move speed
    line = (goal[:3] - p0[:3]) / np.linalg.norm(goal[:3] - p0[:3])
    off_line = [np.linalg.norm((p - p0[:3]) - line * ((p - p0[:3]) @ line)) for p in path]
    assert max(off_line) < 2e-3
    duration_s = len(path) * TICK_S
    assert duration_s == pytest.approx(
        np.linalg.norm(goal[:3] - p0[:3]) / cfg.move_speed_m_s, rel=0.3
    )
    core.start_move(down(0.4, 0.0, 0.3), 0.0, arm.t)
    core.hold(arm.t)
    with pytest.raises(RuntimeError, match="ended by hold"):
        core.move_done(arm.t)


def test_a_move_pauses_through_a_hole_in_the_state_stream_and_fails_on_a_long_one() -> None:
    """A 0.3 s hole in the joint states (DDS delivery pausing on a loaded machine): the move
    sends nothing while stale, then goes on and arrives; a hole longer than
    MOVE_STALE_GRACE_S ends it with the staleness in the message."""
    from drivers.ros2_arm.core import MOVE_STALE_GRACE_S

    core, cfg = make_core(max_state_age_s=0.1)
    arm = Arm(core, HOME)
    p0 = core.tcp_pose()
    goal = frames.pose(p0[:3] + [0.0, 0.04, 0.03], p0[3:7])
    core.start_move(goal, 0.0, arm.t)
    for _ in range(20):
        arm.tick()
        assert not core.move_done(arm.t)
    last_state_s, sent_while_stale = arm.t, []
    while arm.t < last_state_s + 0.3:  # no joint state arrives: the arm is where it was
        arm.t += TICK_S
        out = core.next_output(arm.t)
        if arm.t - last_state_s > cfg.max_state_age_s:
            sent_while_stale.append(out)
        assert not core.move_done(arm.t)  # paused, not failed
    assert len(sent_while_stale) >= 10 and all(o is None for o in sent_while_stale)
    for _ in range(2000):
        arm.tick()
        if core.move_done(arm.t):
            break
    assert pose_distance(core.tcp_pose(), goal)[0] <= cfg.move_tolerance_m
    arm.check_invariant(core, HOME)

    core.start_move(p0, 0.0, arm.t)
    arm.tick()
    hole_end = arm.t + MOVE_STALE_GRACE_S + 0.5
    stale = r"the move stopped: .*joint_states is .* old.*stale for"
    with pytest.raises(RuntimeError, match=stale):
        while arm.t < hole_end:
            arm.t += TICK_S
            core.move_done(arm.t)


def test_cartesian_mode_publishes_targets_and_interpolates_moves() -> None:
    core, cfg = make_core("cartesian", gripper_command_topic="/gripper/command", gripper_scale=0.8)
    core.state.on_joint_state(NAMES, HOME, np.zeros(6), 0.0)
    p0 = core.tcp_pose()
    assert core.next_output(0.0) is None  # nothing before the first target
    target = frames.pose(p0[:3] + [0.02, 0, 0], p0[3:7])
    np.testing.assert_allclose(core.command(target, 1.0, 0.0), target)
    assert core.gripper_output(0.0) == pytest.approx(cfg.closure_to_driver(1.0))
    assert core.gripper_output(0.01) is None  # unchanged: not again until the keep-alive
    np.testing.assert_allclose(core.hold(0.0), p0, atol=1e-12)
    goal = frames.pose(p0[:3] + [0.1, 0, 0], p0[3:7])
    core.start_move(goal, 0.0, 0.0)
    poses = [core.next_output(0.0).pose for _ in range(200)]  # type: ignore[union-attr]
    dists = np.linalg.norm(np.diff(np.array([p0, *poses])[:, :3], axis=0), axis=1)
    assert np.all(dists <= cfg.move_speed_m_s * cfg.tick_s + 1e-12)
    np.testing.assert_allclose(poses[-1], goal, atol=1e-9)


def test_config_errors_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="--kinematics"):
        Ros2ArmConfig(arm=UR5E, mode="joint")
    Ros2ArmConfig(arm=UR5E, mode="cartesian", tcp_pose_topic="/tcp_pose_broadcaster/pose")
    with pytest.raises(ValueError, match="choose one of"):
        Ros2ArmConfig(arm=UR5E, mode="velocity", kinematics=KINEMATICS)
    with pytest.raises(ValueError, match="not a ROS 2 topic name"):
        Ros2ArmConfig(arm=UR5E, kinematics=KINEMATICS, joint_states_topic="joint states")
    with pytest.raises(ValueError, match="at least two ticks"):
        Ros2ArmConfig(arm=UR5E, kinematics=KINEMATICS, max_state_age_s=0.01)
    with pytest.raises(ValueError, match="gripper_scale is 0"):
        Ros2ArmConfig(arm=UR5E, kinematics=KINEMATICS, gripper_scale=0.0)
    cfg = Ros2ArmConfig(arm=UR5E, kinematics=KINEMATICS, gripper_offset=0.085, gripper_scale=-0.085)
    assert cfg.closure_to_driver(1.0) == pytest.approx(0.0)
    assert cfg.driver_to_closure(0.0425) == pytest.approx(0.5)
    with pytest.raises(Exception, match="not in the kinematics file"):
        DiffIK(
            KINEMATICS, UR5E.with_overrides(joint_names=("a", *NAMES[1:])), make_core()[0].ik.config
        )  # type: ignore[union-attr]
    assert replace(cfg, mode="cartesian").mode == "cartesian"


@pytest.fixture
def twin_sim():
    """The UR5e twin (pick_cube, no cameras) that ``sim.ros2_control.ControlledArm`` drives."""
    from drivers.ik import DiffIKConfig
    from robot_rl.core.config import EnvConfig
    from sim.backend import make_sim_backend
    from sim.config import SimConfig

    def ik(arm):
        return DiffIK(arm.kinematics, arm.arm, DiffIKConfig.for_arm(arm.arm, 0.01)).step

    sim = make_sim_backend("pick_cube", SimConfig(arm="ur5e", cameras=()), EnvConfig(), joint_ik=ik)
    yield sim
    sim.close()


def test_twin_controller_refuses_bad_commands_and_holds_when_they_stop(twin_sim) -> None:
    """The ros2_control-shaped twin's own checks (sim.ros2_control, no ROS): wrong joint names,
    NaN, a goal beyond a limit, one bad point of a trajectory: refused, counted, not executed;
    the watchdog holds once the command stream stops."""
    from sim.ros2_control import ControlledArm

    world = twin_sim.world
    ctl = ControlledArm(world, "joint", watchdog_s=0.5)
    servo = world.servo
    assert servo is not None
    goal0 = servo.goal.copy()
    beyond = HOME.copy()
    beyond[2] = 3.3
    assert not ctl.joint_goal(["a", *NAMES[1:]], HOME, 0.0)
    assert "controller's joints" in str(ctl.last_refusal)
    assert not ctl.joint_goal(NAMES, [np.nan] * 6, 0.0)
    assert not ctl.joint_goal(NAMES, beyond, 0.0)
    assert "'elbow_joint' goal 3.3000 rad is outside" in str(ctl.last_refusal)
    assert not ctl.trajectory(NAMES, [HOME, beyond, HOME], 0.0)
    assert not ctl.trajectory(NAMES, [], 0.0)
    assert ctl.refused == 5 and ctl.accepted == 0
    np.testing.assert_array_equal(servo.goal, goal0)
    order = [2, 0, 1, 5, 4, 3]
    assert ctl.trajectory([NAMES[i] for i in order], [HOME[order]], 0.0)
    np.testing.assert_allclose(servo.goal, HOME)
    ctl.tick(0.4)
    assert ctl.watchdog_holds == 0
    world.step(5)
    ctl.tick(0.6)
    assert ctl.watchdog_holds == 1
    np.testing.assert_allclose(servo.goal, servo.motor)
    assert not ctl.gripper(float("nan")) and ctl.gripper(0.4)
    assert world.gripper_target() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="choose one of"):
        ControlledArm(world, "velocity", 0.5)


def test_twin_controller_times_a_trajectory_by_its_time_from_start(twin_sim) -> None:
    """A timed trajectory (times 0.5 s, 1.0 s): the servo goal goes linearly from the goal at
    acceptance to the first point by 0.5 s, then to the second by 1.0 s, and stays there."""
    from sim.ros2_control import ControlledArm

    ctl = ControlledArm(twin_sim.world, "joint", watchdog_s=0.5)
    servo = twin_sim.world.servo
    goal0 = servo.goal.copy()
    p1 = HOME + np.array([0.2, -0.1, 0.1, 0.0, 0.1, -0.2])
    p2 = HOME + np.array([0.4, -0.2, 0.3, 0.1, 0.0, -0.3])
    assert ctl.trajectory(NAMES, [p1, p2], 10.0, times_s=[0.5, 1.0])
    np.testing.assert_allclose(servo.goal, goal0)  # starts from the present goal
    ctl.tick(10.25)
    np.testing.assert_allclose(servo.goal, goal0 + 0.5 * (p1 - goal0))
    ctl.tick(10.5)
    np.testing.assert_allclose(servo.goal, p1)
    ctl.tick(10.75)
    np.testing.assert_allclose(servo.goal, 0.5 * (p1 + p2))
    for now_s in (11.0, 11.2, 11.4):
        ctl.tick(now_s)
        np.testing.assert_allclose(servo.goal, p2)
    assert ctl.accepted == 1 and ctl.watchdog_holds == 0
    # a point at time 0 is the goal at once; a new trajectory replaces a running one
    assert ctl.trajectory(NAMES, [p1, HOME], 12.0, times_s=[0.0, 1.0])
    np.testing.assert_allclose(servo.goal, p1)
    assert ctl.trajectory(NAMES, [p2], 12.5, times_s=[0.5])
    ctl.tick(12.75)
    np.testing.assert_allclose(servo.goal, 0.5 * (p1 + p2))


def test_twin_controller_refuses_times_that_go_back_or_are_not_finite(twin_sim) -> None:
    """time_from_start decreasing, NaN/inf or one per point missing: refused, counted, the
    servo goal untouched; times_s=None keeps executing the last point at once."""
    from sim.ros2_control import ControlledArm

    ctl = ControlledArm(twin_sim.world, "joint", watchdog_s=0.5)
    servo = twin_sim.world.servo
    goal0 = servo.goal.copy()
    p1, p2 = HOME + 0.1, HOME - 0.1
    assert not ctl.trajectory(NAMES, [p1, p2], 0.0, times_s=[1.0, 0.5])
    assert "non-decreasing" in str(ctl.last_refusal)
    assert not ctl.trajectory(NAMES, [p1, p2], 0.0, times_s=[0.5, float("inf")])
    assert "finite" in str(ctl.last_refusal)
    assert not ctl.trajectory(NAMES, [p1, p2], 0.0, times_s=[0.5])
    assert ctl.refused == 3 and ctl.accepted == 0
    ctl.tick(0.5)
    np.testing.assert_allclose(servo.goal, goal0)
    assert ctl.trajectory(NAMES, [p1, p2], 1.0)
    np.testing.assert_allclose(servo.goal, p2)


def test_twin_watchdog_waits_for_the_end_of_a_trajectory(twin_sim) -> None:
    """A 2 s trajectory counts as commanded until its end: no hold in its middle (the 0.5 s
    watchdog would have fired), one hold 0.5 s after its end, the goal then at the motors."""
    from sim.ros2_control import ControlledArm

    ctl = ControlledArm(twin_sim.world, "joint", watchdog_s=0.5)
    servo = twin_sim.world.servo
    target = HOME + np.array([0.3, -0.2, 0.2, 0.1, 0.1, -0.2])
    assert ctl.trajectory(NAMES, [target], 0.0, times_s=[2.0])
    for k in range(1, 251):  # state periods up to 0.5 s after the end
        ctl.tick(k * TICK_S)
    assert ctl.watchdog_holds == 0
    np.testing.assert_allclose(servo.goal, target)
    ctl.tick(2.51)
    assert ctl.watchdog_holds == 1
    np.testing.assert_allclose(servo.goal, servo.motor)
