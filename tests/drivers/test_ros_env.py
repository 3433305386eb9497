"""RobotEnv over ROS 2 (RosRobot, RosCamera, RosTwinTask, clocks) against the real twin node.

- env side alone (a test node plays the arm): state assembly, staleness, malformed messages
  dropped, commands published with the locally predicted safety report, a missing bridge;
- lockstep twin (one ``sim.ros_node`` process for the module): the env checker passes over
  ROS 2, with the same observation and action spaces as the twin driven directly; the scripted
  expert succeeds through ROS 2 about as often as directly;
- real-time twin: a paused (SIGSTOP) twin gives clear stale-data errors (camera and env), and
  everything recovers after SIGCONT.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from robot_rl.core.types import ArmCommand, StaleSensorError

pytest.importorskip("mujoco")

CAMERAS = ("front", "wrist")
IMAGE = 64


def _setup(
    path: Path, clock: str, cameras: tuple[str, ...] = CAMERAS, task: str = "pick_cube"
) -> Path:
    raw = {
        "name": f"test_{clock}",
        "namespace": "arm",
        "robot": "twin",
        "task": task,
        "clock": clock,
        "control_hz": 10.0,
        # Real time on a loaded 2-core machine: the twin can publish late by a period; these
        # tests are about behaviour (stale on pause, recovery), latency is bench/'s job.
        **({"max_state_age_s": 0.5, "max_image_age_s": 0.5} if clock == "realtime" else {}),
        "cameras": [{"name": c, "height": IMAGE, "width": IMAGE} for c in cameras],
        "nodes": [
            {
                "name": "twin",
                "module": "sim.ros_node",
                "args": [
                    "--task",
                    "${task}",
                    "--ns",
                    "${namespace}",
                    "--cameras",
                    *CAMERAS,
                    "--image-size",
                    str(IMAGE),
                    "--mode",
                    "${clock}",
                    "--control-hz",
                    "${control_hz}",
                ],
            }  # fmt: skip
        ],
    }
    path.write_text(yaml.safe_dump(raw))
    return path


class _Owned(gym.Wrapper):
    """Closes the ROS backend with the env (the checker builds and closes envs itself)."""

    def __init__(self, env: gym.Env, backend) -> None:
        super().__init__(env)
        self.backend = backend

    def close(self) -> None:
        try:
            self.env.close()
        finally:
            self.backend.close()


def _ros_env(setup: Path, domain: int, **kw) -> _Owned:
    from robot_rl.app.nodes.ros_env import make_ros_env

    env, backend = make_ros_env(setup, domain_id=domain, **kw)
    return _Owned(env, backend)


def _run_twin(setup_path: Path, domain: int, log_dir: Path):
    """Start the setup's nodes with the `up` supervisor (no table); returns it."""
    from drivers.ros.env import ros_env
    from drivers.setup import load_setup
    from robot_rl.app.nodes.supervisor import Supervisor

    env = ros_env(domain, extra={"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")})
    sup = Supervisor(load_setup(setup_path), log_dir, env)
    sup.start()
    return sup


def _log(sup) -> str:
    return "\n".join(n.log_path.read_text()[-3000:] for n in sup.nodes)


# -- env side against a test node playing the arm ---------------------------------------------


def _state(stamp_s: float, tcp_pose: np.ndarray):
    from robot_rl.core.types import RobotState

    z = np.zeros(6)
    return RobotState(stamp_s, tcp_pose, z, np.ones(6), 0.25, np.arange(7.0), np.zeros(7))


def test_robot_state_message_round_trips_and_refuses_what_is_malformed() -> None:
    """``robot_state`` carries exactly the five state topics' values and stamp (the stamp
    nanosecond-rounded like a header's), and refuses another layout, size, NaN, a non-unit
    quaternion, a negative stamp, saying what is wrong."""
    pytest.importorskip("rclpy")
    from drivers.ros import convert
    from robot_rl.core.safety import DOWN_QUAT

    state = _state(123.4567890123, np.array([0.5, -0.1, 0.2, *DOWN_QUAT]))
    got, stamp = convert.array_msg_to_robot_state(convert.robot_state_to_array_msg(state))
    parts = convert.robot_state_to_msgs(state)
    assert stamp == got.stamp_s == convert.msg_to_time(parts[1].header.stamp)
    want = convert.msgs_to_robot_state(*parts)
    for field in ("tcp_pose", "tcp_vel", "tcp_wrench", "joint_pos", "joint_vel"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    assert got.gripper_pos == want.gripper_pos

    def broken(edit) -> object:
        msg = convert.robot_state_to_array_msg(state)
        edit(msg)
        return msg

    cases = [
        (lambda m: setattr(m.layout.dim[0], "label", "x,y"), "another version of the contract"),
        (lambda m: setattr(m, "data", list(m.data)[:34]), "34 values"),
        (lambda m: m.data.__setitem__(9, float("nan")), "NaN or inf"),
        (lambda m: m.data.__setitem__(4, 2.0), "unit quaternion"),
        (lambda m: m.data.__setitem__(0, -1.0), "must be >= 0"),
    ]
    for edit, message in cases:
        with pytest.raises(ValueError, match=message):
            convert.array_msg_to_robot_state(broken(edit))


def test_robot_state_message_is_sized_and_labelled_from_the_arm() -> None:
    """An N-joint arm's ``robot_state`` has ``21 + 2 N`` values labelled with N; a receiver that
    expects another joint count refuses it, naming the mismatch; a 7-joint message written as
    before arms were data (the literal 35-value label) still decodes; ``joint_states`` carries
    the arm's own names."""
    pytest.importorskip("rclpy")
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension

    from drivers.ros import convert
    from robot_rl.core.safety import DOWN_QUAT
    from robot_rl.core.types import RobotState

    pose = np.array([0.4, 0.0, 0.3, *DOWN_QUAT])
    state = RobotState(2.5, pose, np.zeros(6), np.zeros(6), 0.5, np.arange(6.0), -np.arange(6.0))
    msg = convert.robot_state_to_array_msg(state)
    assert msg.layout.dim[0].label.endswith("joint_pos[6],joint_vel[6]")
    assert len(msg.data) == msg.layout.dim[0].size == 33
    got, _ = convert.array_msg_to_robot_state(msg, num_joints=6)
    np.testing.assert_array_equal(got.joint_pos, np.arange(6.0))
    np.testing.assert_array_equal(got.joint_vel, -np.arange(6.0))
    assert convert.array_msg_to_robot_state(msg)[0].joint_pos.shape == (6,)  # any N
    with pytest.raises(ValueError, match="carries 6 arm joints but this env's arm .* has 7"):
        convert.array_msg_to_robot_state(msg, num_joints=7)
    msg.data = list(msg.data)[:-1]
    with pytest.raises(ValueError, match="32 values; .* are 33"):
        convert.array_msg_to_robot_state(msg)

    old = Float64MultiArray()  # the 7-joint message exactly as the contract wrote it before
    label = "stamp_s,tcp_pose[7],tcp_vel[6],tcp_wrench[6],gripper_pos,joint_pos[7],joint_vel[7]"
    old.layout.dim = [MultiArrayDimension(label=label, size=35, stride=35)]
    old.data = [1.0, *pose, *[0.0] * 12, 0.25, *range(7), *[0.5] * 7]
    got, stamp = convert.array_msg_to_robot_state(old, num_joints=7)
    assert stamp == 1.0 and got.joint_pos.tolist() == list(range(7)) and got.gripper_pos == 0.25

    names = tuple(f"ur_{i}" for i in range(6))
    parts = convert.robot_state_to_msgs(state, names)
    assert list(parts[0].name) == list(names)
    back = convert.msgs_to_robot_state(*parts, joint_names=names)
    np.testing.assert_array_equal(back.joint_pos, state.joint_pos)
    with pytest.raises(ValueError, match="expected names"):
        convert.msgs_to_robot_state(*parts)  # the FR3's names are not in it
    with pytest.raises(ValueError, match="7 joint names"):
        convert.robot_state_to_msgs(state)


def test_ros_robot_state_staleness_and_commands(a2_domain: int, ros_client_factory) -> None:
    from geometry_msgs.msg import PoseStamped
    from std_msgs.msg import Float64, Float64MultiArray

    from drivers.ros import convert, qos
    from drivers.ros_robot import RosRobot, RosRobotConfig
    from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
    from robot_rl.core.types import RobotState, UnsafeCommandError

    arm = ros_client_factory(a2_domain)  # plays the bridge: state out, commands in
    arm.subscribe(PoseStamped, "/arm/target_pose", qos.COMMAND)
    arm.subscribe(Float64, "/arm/gripper/command", qos.COMMAND)
    pub = arm.publisher(Float64MultiArray, "/arm/robot_state", qos.SENSOR)
    now = [10.0]
    safety = SafetyConfig(max_step_m=0.05)
    robot = RosRobot(
        RosRobotConfig(bridge_node="nobody", safety=safety, service_timeout_s=0.5),
        lambda: now[0],
    )
    try:
        robot.connect()
        with pytest.raises(StaleSensorError, match="no message on /arm/robot_state yet"):
            robot.read_state()
        pose = np.array([0.5, 0.0, 0.2, *DOWN_QUAT])

        def arrived(stamp: float) -> bool:
            arm.spin_for(0.01)
            with robot.session.cond:
                return robot._slot.stamp_s == stamp

        def sent(stamp: float) -> bool:  # again until it arrives: a message published
            pub.publish(convert.robot_state_to_array_msg(_state(stamp, pose)))  # before
            return arrived(stamp)  # discovery matched the robot's reader is lost

        arm.wait_for(lambda: sent(9.95), 10, "state at 9.95")
        state = robot.read_state()
        assert state.stamp_s == pytest.approx(9.95)
        np.testing.assert_allclose(state.tcp_pose, pose)
        np.testing.assert_allclose(state.joint_pos, np.arange(7.0))
        np.testing.assert_allclose(state.tcp_wrench, np.ones(6))
        assert state.gripper_pos == pytest.approx(0.25)
        state.tcp_pose[:] = 0.0  # the caller's copy: the next read is unchanged
        np.testing.assert_allclose(robot.read_state().tcp_pose, pose)

        now[0] = 10.3  # 0.35 s later: the state is too old
        with pytest.raises(StaleSensorError, match=r"/arm/robot_state is 0\.350 s old"):
            robot.read_state()

        bad = convert.robot_state_to_array_msg(_state(10.3, pose))
        bad.data[3] = float("nan")
        pub.publish(bad)  # malformed: dropped, counted, the valid value is kept
        arm.wait_for(lambda: robot.rejected_messages()["robot_state"] == 1, 10, "rejection")
        with pytest.raises(StaleSensorError, match="is 0.350 s old"):
            robot.read_state()

        # A bridge that serves another arm (6 joints, the setup describes the FR3's 7): every
        # state is refused and the stale error says why.
        six = convert.robot_state_to_array_msg(
            RobotState(10.3, pose, np.zeros(6), np.zeros(6), 0.0, np.zeros(6), np.zeros(6))
        )
        pub.publish(six)
        arm.wait_for(lambda: robot.rejected_messages()["robot_state"] == 2, 10, "rejection")
        with pytest.raises(StaleSensorError, match="carries 6 arm joints but this env's arm"):
            robot.read_state()

        # Commands: published as asked; the return value is the locally predicted clipping.
        far = ArmCommand(np.array([0.5, 0.0, 0.4, *DOWN_QUAT]), 0.7)
        executed, report = robot.send_command(far)
        assert report.step_clipped and not report.workspace_clipped
        np.testing.assert_allclose(executed.target_pose[:3], [0.5, 0.0, 0.25])
        arm.wait_for(lambda: "/arm/target_pose" in arm.latest, 10, "target_pose")
        got, stamp = convert.msg_to_pose_stamped(arm.latest["/arm/target_pose"])
        np.testing.assert_allclose(got, far.target_pose)
        assert stamp == pytest.approx(10.3)
        arm.wait_for(lambda: "/arm/gripper/command" in arm.latest, 10, "gripper/command")
        assert arm.latest["/arm/gripper/command"].data == pytest.approx(0.7)

        # A NaN command is not published; the arm is told to hold (no hold service here).
        with pytest.raises(UnsafeCommandError, match="NaN.*hold failed too: service /arm/hold"):
            robot.send_command(ArmCommand(np.full(7, np.nan), 0.0))
        assert len(arm.history["/arm/target_pose"]) == 1
    finally:
        robot.disconnect()


def test_connect_without_a_bridge_says_what_to_start(a2_domain: int) -> None:
    from drivers.ros.env import apply_ros_env
    from drivers.ros_robot import RosRobot, RosRobotConfig
    from drivers.ros_session import RosTimeoutError

    apply_ros_env(a2_domain)
    robot = RosRobot(RosRobotConfig(connect_timeout_s=0.5), lambda: 0.0)
    with pytest.raises(
        RosTimeoutError, match=r"nobody subscribes to /arm/target_pose.*robot-rl up"
    ):
        robot.connect()


# -- lockstep twin -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lockstep(tmp_path_factory, a2_module_domain: int):
    """(setup with cameras, state-only setup, domain) of one lockstep twin for the module."""
    tmp = tmp_path_factory.mktemp("lockstep")
    with_cams = _setup(tmp / "cams.yaml", "lockstep")
    state_only = _setup(tmp / "state.yaml", "lockstep", cameras=())
    sup = _run_twin(with_cams, a2_module_domain, tmp / "logs")
    try:
        yield with_cams, state_only, a2_module_domain
    finally:
        sup.stop(5.0)
        print(_log(sup))


def _direct(cameras: tuple[str, ...]):
    from robot_rl.app.envs.build import make_env
    from robot_rl.core.config import EnvConfig
    from sim.config import SimConfig

    return make_env(
        "pick_cube",
        EnvConfig(max_episode_steps=100),
        SimConfig(cameras=cameras, image_height=IMAGE, image_width=IMAGE),
    )


def test_env_checker_and_schema_over_ros(lockstep) -> None:
    from robot_rl.app.envs.policies import ExpertPolicy
    from robot_rl.envs.checker import check_env

    with_cams, _, domain = lockstep
    report = check_env(
        lambda: _ros_env(with_cams, domain),
        steps=15,
        expert_fn=lambda env: ExpertPolicy(env.backend.make_expert(), env),
        expert_episodes=1,
        expert_max_steps=100,
    )
    assert report.expert_successes == 1
    direct, backend = _direct(CAMERAS)
    ros = _ros_env(with_cams, domain)
    try:
        assert ros.observation_space == direct.observation_space
        assert ros.action_space == direct.action_space
        obs_ros, info_ros = ros.reset(seed=3)
        obs_direct, info_direct = direct.reset(seed=3)
        assert sorted(info_ros["privileged"]) == sorted(info_direct["privileged"])
        assert obs_ros["images"]["front"].shape == (IMAGE, IMAGE, 3)
        assert obs_ros["stamps"]["front"] == obs_ros["stamps"]["state"]
    finally:
        ros.close()
        direct.close()
        backend.close()


def test_a_setup_crop_box_is_what_every_reader_of_the_camera_sees(lockstep, tmp_path) -> None:
    """A setup camera's ``crop`` (the twin publishes the whole frame): the observation has the
    box's shape and pixels, and the backend's camera (which a learned reward reads) delivers
    the same box."""
    from robot_rl.wrappers.image_crop_resize import CroppedCamera

    with_cams, _, domain = lockstep
    raw = yaml.safe_load(with_cams.read_text())
    raw["cameras"][1]["crop"] = [8, 16, 32, 40]  # wrist: rows 8..39, columns 16..55
    cropped = tmp_path / "cropped.yaml"
    cropped.write_text(yaml.safe_dump(raw))
    env = _ros_env(cropped, domain)
    try:
        images = env.observation_space["images"]
        assert images["front"].shape == (IMAGE, IMAGE, 3)
        assert images["wrist"].shape == (32, 40, 3)
        obs, _ = env.reset(seed=5)
        obs, *_ = env.step(env.action_space.sample() * 0)
        wrist = next(c for c in env.backend.cameras if c.name == "wrist")
        assert isinstance(wrist, CroppedCamera) and wrist.image_spec.shape == (32, 40, 3)
        full, box = wrist.camera.read(), wrist.read()  # lockstep: the frame of this step
        assert full.image.shape == (IMAGE, IMAGE, 3) and full.seq == box.seq
        np.testing.assert_array_equal(box.image, full.image[8:40, 16:56])
        np.testing.assert_array_equal(obs["images"]["wrist"], box.image)
        assert box.image.std() > 0  # a rendered scene, not a blank
    finally:
        env.close()


def _success_rate(env: gym.Env, expert, episodes: int) -> float:
    wins = 0
    for i in range(episodes):
        obs, info = env.reset(seed=100 + i)
        expert.reset(np.random.default_rng(i))
        while True:
            obs, _, terminated, truncated, info = env.step(expert.act(obs, info))
            if terminated or truncated:
                break
        wins += bool(info["is_success"])
    return wins / episodes


def test_expert_success_through_ros_close_to_direct(lockstep) -> None:
    from robot_rl.app.envs.policies import ExpertPolicy

    _, state_only, domain = lockstep
    episodes = 10
    ros = _ros_env(state_only, domain)
    try:
        ros_rate = _success_rate(ros, ExpertPolicy(ros.backend.make_expert(), ros), episodes)
    finally:
        ros.close()
    direct, backend = _direct(())
    try:
        direct_rate = _success_rate(direct, ExpertPolicy(backend.make_expert(), direct), episodes)
    finally:
        direct.close()
        backend.close()
    assert direct_rate >= 0.8
    assert ros_rate >= direct_rate - 0.2, (ros_rate, direct_rate)


# -- real-time twin: a paused node -------------------------------------------------------------


def test_paused_twin_gives_stale_errors_and_recovers(tmp_path: Path, a2_domain: int) -> None:
    setup = _setup(tmp_path / "rt.yaml", "realtime")
    sup = _run_twin(setup, a2_domain, tmp_path / "logs")
    env = None
    try:
        env = _ros_env(setup, a2_domain, connect_timeout_s=60.0)
        env.reset(seed=0)
        zero = np.zeros(env.action_space.shape, dtype=np.float32)
        for _ in range(3):
            env.step(zero)
        camera = env.backend.cameras[0]
        seq = camera.read().seq

        twin_pid = sup.nodes[0].pid
        os.kill(twin_pid, signal.SIGSTOP)
        try:
            error = _wait_raises(camera.read, StaleSensorError, 10.0)
            assert "camera 'front'" in str(error) and "s old" in str(error), error
            with pytest.raises(StaleSensorError, match="s old"):
                env.step(zero)  # the env refuses stale data (the state is checked first)
        finally:
            os.kill(twin_pid, signal.SIGCONT)

        end = time.monotonic() + 20
        while True:  # recovery: fresh frames again, no error
            try:
                if camera.read().seq > seq:
                    break
            except StaleSensorError:
                pass
            assert time.monotonic() < end, "no fresh frame after SIGCONT"
            time.sleep(0.02)
        env.reset(seed=1)
        for _ in range(3):
            obs, *_ = env.step(zero)
        assert obs["images"]["front"].shape == (IMAGE, IMAGE, 3)
    finally:
        if env is not None:
            env.close()
        sup.stop(5.0)
        print(_log(sup))


def _wait_raises(fn, exc: type[BaseException], timeout_s: float) -> BaseException:
    """Call ``fn`` until it raises ``exc`` (returned); fail after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            fn()
        except exc as e:
            return e
        time.sleep(0.02)
    raise AssertionError(f"{fn} did not raise {exc.__name__} within {timeout_s} s")
