"""The generic ROS 2 arm backend's node (``drivers.ros2_arm.node``) and the ros2_control-shaped
twin (``sim.ros2_control_node``) over ROS 2.

- the node's ``--setup``: the arm's description from a setup file, a bad one refused;
- ROS, real DDS across processes: the twin as a UR under ros2_control in one process, the arm
  bridge with this backend in another, the env side (``drivers.ros_robot.RosRobot``, monotonic
  clock) here; joint mode (trajectory controller) and cartesian mode; a commander process that
  is killed (this file is its script: ``python tests/drivers/test_ros2_arm_node.py commander``).

The backend's core without ROS is in ``test_ros2_arm_core.py``.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

pytest.importorskip("mink")

from drivers.ros2_arm.state import pose_distance  # noqa: E402
from robot_rl.core import frames  # noqa: E402
from robot_rl.core.arm import builtin_arm  # noqa: E402

UR5E = builtin_arm("ur5e")
NAMES = list(UR5E.joint_names)


def test_the_node_takes_a_users_arm_from_a_setup_file(tmp_path) -> None:
    """``--setup`` reads the arm's description from the setup's ``arm:`` (a user's own arm, or a
    built-in with overrides); a bad one is refused with the file and key."""
    import yaml

    from drivers.ros2_arm.node import build_parser, config_from_args

    home = [3.1, -1.5, 1.8, -1.8, -1.5, -1.5]
    setup = {
        "robot": "hardware",
        "task": "t",
        "arm": {"kind": "ur5e", "home_q_rad": home},
        "reset_pose": [0.5, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0],
        "nodes": [{"name": "arm_bridge", "module": "drivers.ros2_arm.node"}],
    }
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(setup))
    cfg = config_from_args(build_parser().parse_args(["--mode", "joint", "--setup", str(path)]))
    assert cfg.arm.home_q_rad == tuple(home) and cfg.arm.backend == "ros2_joint"
    setup["arm"] = {"kind": "ur5e", "home_q_rad": home[:5]}
    path.write_text(yaml.safe_dump(setup))
    with pytest.raises(ValueError, match=r"mine.yaml: arm.home_q_rad: .* has 5 values"):
        config_from_args(build_parser().parse_args(["--mode", "joint", "--setup", str(path)]))


# -- ROS 2: twin as a ros2_control arm <-> arm bridge with this backend <-> env side ----------

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from ros_graph import DomainIds  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from drivers.ros import convert, qos  # noqa: E402
from drivers.ros_robot import RosRobot, RosRobotConfig  # noqa: E402
from robot_rl.core.types import ArmCommand, StaleSensorError  # noqa: E402
from sim.backend import TASKS  # noqa: E402

DOMAINS = DomainIds(70, 80)  # this file's ROS domain ids
NS = "/arm"
SAFETY = TASKS["pick_cube"].default_safety
GRIPPER_FLAGS = [
    "--gripper-command-topic", "/gripper/command", "--gripper-state-topic", "/joint_states",
    "--gripper-joint", "robotiq_85_left_knuckle_joint", "--gripper-scale", "0.8",
]  # fmt: skip
SAFETY_ARGS = [
    "--ros-args",
    "-p", f"workspace_low_m:={list(SAFETY.workspace_low_m)}",
    "-p", f"workspace_high_m:={list(SAFETY.workspace_high_m)}",
    "-p", f"watchdog_timeout_s:={SAFETY.watchdog_timeout_s}",
]  # fmt: skip
REACH_TOL_M = 0.003
NO_TRAJECTORY_MSGS = "pip install ros-kilted-trajectory-msgs (the ros extra)"


@pytest.fixture
def domain() -> int:
    return DOMAINS.next()


def start_graph(ros_processes, domain: int, mode: str, cameras: tuple[str, ...] = ()):
    """The twin (ur5e, pick_cube) as a ros2_control arm and the arm bridge in ``mode``."""
    interface = "joint" if mode == "joint" else "cartesian"
    twin = [sys.executable, "-m", "sim.ros2_control_node", "--arm", "ur5e", "--task", "pick_cube"]
    twin += ["--interface", interface, "--image-size", "32", "--cameras", *cameras]
    twin_proc = ros_processes(twin, domain, "twin")
    bridge = [sys.executable, "-m", "drivers.ros2_arm.node", "--mode", mode, "--arm", "ur5e"]
    # State age: 0.3 s, not the 0.1 s default: on 2 shared cores the twin sends its
    # joint_states steadily (controller/status max_state_gap_ms ~15-25 ms) but their delivery
    # to the bridge pauses 0.2-1.0 s about once a run (the bridge's max_state_gap_ms, every
    # thread of it idle meanwhile). A move (the reset) pauses through such a hole and goes on
    # (drivers.ros2_arm.core.MOVE_STALE_GRACE_S); staleness itself is unit-tested in
    # test_ros2_arm_core.py.
    bridge += ["--connect-timeout-s", "60", "--max-state-age-s", "0.3", *GRIPPER_FLAGS]
    if mode == "cartesian":
        bridge += ["--tcp-pose-topic", "/tcp_pose_broadcaster/pose"]
        bridge += ["--wrench-topic", "/force_torque_sensor_broadcaster/wrench"]
    return twin_proc, ros_processes([*bridge, *SAFETY_ARGS], domain, "bridge")


def connect_env(client) -> RosRobot:
    """The env side: RosRobot for the UR over the contract, on the monotonic clock."""
    cfg = RosRobotConfig(
        arm=UR5E,
        bridge_node="arm_bridge",
        name="ur5e-ros",
        safety=SAFETY,
        connect_timeout_s=90.0,
        max_state_age_s=1.0,  # the env's staleness is not under test (and the machine is loaded)
    )
    robot = RosRobot(cfg, now_s=time.monotonic)
    robot.connect()
    client.subscribe(String, f"{NS}/status", qos.STATUS)
    client.subscribe(String, f"{NS}/controller/status", qos.STATUS)
    client.subscribe(JointState, f"{NS}/joint_states", qos.SENSOR)
    client.wait_for(lambda: _fresh(robot), 60.0, "a fresh robot_state from the bridge")
    return robot


def _fresh(robot: RosRobot) -> bool:
    try:
        robot.read_state()
        return True
    except StaleSensorError:
        return False


def _json(client, topic: str) -> dict:
    """The latest JSON status on ``topic``, waiting for the first one (a status topic publishes
    at its own rate, and its first message can follow discovery by seconds)."""
    client.wait_for(lambda: topic in client.latest, 30.0, f"a message on {topic}")
    return json.loads(client.latest[topic].data)


def reach(client, robot: RosRobot, offset_m: np.ndarray) -> dict:
    """Command a target ``offset_m`` from the TCP at 10 Hz until the TCP stays within
    :data:`REACH_TOL_M`; return what was measured (latency, settling, error)."""
    start = robot.read_state().tcp_pose
    target = frames.pose(start[:3] + offset_m, start[3:7])
    t0 = time.monotonic()
    moved_s = reached_s = None
    errors: list[float] = []
    for tick in range(2000):  # 20 s in 10 ms looks; a command every 100 ms
        if tick % 10 == 0:
            robot.send_command(ArmCommand(target, 0.0))
        client.spin_for(0.01)
        state = robot.read_state()
        if moved_s is None and np.linalg.norm(state.tcp_pose[:3] - start[:3]) > 1e-3:
            moved_s = time.monotonic() - t0
        err = float(np.linalg.norm(state.tcp_pose[:3] - target[:3]))
        if reached_s is None and err < REACH_TOL_M:
            reached_s = time.monotonic() - t0
        if reached_s is not None and tick % 10 == 0:
            errors.append(err)
            if len(errors) >= 10:
                break
    assert reached_s is not None, f"TCP still {err * 1e3:.1f} mm from the target after 20 s"
    result = {
        "first_motion_s": moved_s,
        "reached_3mm_s": reached_s,
        "settled_error_mm": 1e3 * float(np.mean(errors)),
        "max_settled_error_mm": 1e3 * float(np.max(errors)),
    }
    print(f"reach {offset_m}: {result}")
    return result


def test_joint_mode_end_to_end(domain, ros_processes, ros_client_factory) -> None:
    """Joint mode over real DDS: state with the UR's joints, a 3 cm target reached, the arm in
    status, a NaN target refused (bridge) and a NaN trajectory refused (twin), a reset as a
    smooth move, the bridge's watchdog holding when the commander is killed, a scene reset of
    the twin, and the twin's own watchdog holding when the bridge dies."""
    traj = pytest.importorskip("trajectory_msgs.msg", reason=NO_TRAJECTORY_MSGS)
    _, bridge = start_graph(ros_processes, domain, "joint")
    client = ros_client_factory(domain)
    robot = connect_env(client)
    state = robot.read_state()
    assert state.joint_pos.shape == (6,)
    client.wait_for(lambda: f"{NS}/joint_states" in client.latest, 10.0, "joint_states")
    assert list(client.latest[f"{NS}/joint_states"].name) == NAMES
    client.wait_for(lambda: f"{NS}/status" in client.latest, 10.0, "status")
    assert _json(client, f"{NS}/status")["arm"] == {"name": "ur5e", "joint_names": NAMES}

    result = reach(client, robot, np.array([0.03, 0.0, 0.0]))
    assert result["max_settled_error_mm"] < 3.0

    # NaN at the contract: refused by the bridge, never executed
    held = robot.read_state().tcp_pose
    bad = convert.pose_stamped_to_msg(held, 0.0)
    bad.pose.position.x = float("nan")
    pub = client.publisher(PoseStamped, f"{NS}/target_pose", qos.COMMAND)
    client.wait_for(lambda: pub.get_subscription_count() > 0, 10.0, "the bridge's target_pose")
    pub.publish(bad)
    client.wait_for(
        lambda: _json(client, f"{NS}/status")["rejected"] >= 1, 10.0, "the NaN target counted"
    )
    assert "NaN" in _json(client, f"{NS}/status")["last_error"]
    # NaN straight to the driver's trajectory topic: the twin's controller refuses it
    traj_pub = client.publisher(
        traj.JointTrajectory, "/scaled_joint_trajectory_controller/joint_trajectory", qos.COMMAND
    )
    client.wait_for(lambda: traj_pub.get_subscription_count() > 0, 10.0, "the twin's controller")
    point = traj.JointTrajectoryPoint(positions=[float("nan")] * 6)
    traj_pub.publish(traj.JointTrajectory(joint_names=NAMES, points=[point]))
    client.wait_for(
        lambda: (
            f"{NS}/controller/status" in client.latest
            and _json(client, f"{NS}/controller/status")["refused"] >= 1
        ),
        10.0,
        "the twin to refuse the NaN trajectory",
    )
    assert "not finite" in _json(client, f"{NS}/controller/status")["last_refusal"]
    assert np.linalg.norm(robot.read_state().tcp_pose[:3] - held[:3]) < 2e-3

    # reset: a smooth move (IK ticks at the move speed) that answers once there
    goal = frames.pose(held[:3] + [-0.04, 0.04, 0.03], held[3:7])
    t0 = time.monotonic()
    try:
        robot.reset(goal, 0.0)
    except RuntimeError as e:  # say whose pause it was: the twin's or the bridge's
        twin = _json(client, f"{NS}/controller/status")
        raise AssertionError(
            f"{e}; twin max_state_gap_ms {twin.get('max_state_gap_ms')}, bridge backend "
            f"{_json(client, f'{NS}/status').get('backend')}"
        ) from e
    print(f"reset move of 64 mm: {time.monotonic() - t0:.2f} s")
    client.wait_for(  # a state from after the answer (the newest may be a few ticks old)
        lambda: pose_distance(robot.read_state().tcp_pose, goal)[0] < 0.005, 10.0, "the reset"
    )

    # a commander drives the arm; killed, the bridge's watchdog holds; the backend keeps
    # streaming the hold, so the twin's own watchdog never has to
    before = _json(client, f"{NS}/status")
    holds = before["watchdog_holds"]
    commander = ros_processes([sys.executable, __file__, "commander"], domain, "commander")
    client.wait_for(
        lambda: _json(client, f"{NS}/status")["state"] == "moving", 60.0, "the commander to move"
    )
    commander.kill()
    client.wait_for(
        lambda: _json(client, f"{NS}/status")["watchdog_holds"] > holds, 10.0, "a watchdog hold"
    )
    s = _json(client, f"{NS}/status")
    reaction_s = s["last_watchdog_hold_s"] - s["last_command_s"]
    twin = _json(client, f"{NS}/controller/status")
    print(f"watchdog reaction {reaction_s:.3f} s, status {s}, twin {twin}")
    # Never early (a safety property); how late depends on the machine's load (the bridge's
    # control tick runs in wall time), so the reaction is printed, not asserted: the measured
    # figure belongs in bench/, not here.
    assert SAFETY.watchdog_timeout_s <= reaction_s, s
    last = [robot.read_state().tcp_pose]

    def still() -> bool:  # two readings half a second apart within 2 mm: the arm is held
        client.spin_for(0.5)
        now = robot.read_state().tcp_pose
        moved = float(np.linalg.norm(now[:3] - last[0][:3]))
        last[0] = now
        return moved < 2e-3

    client.wait_for(still, 20.0, "the arm to stand still at the hold")
    p0 = last[0]
    # The bridge streams the hold, so the twin's own watchdog has no reason to fire: it fires
    # only where the twin waited longer than its timeout between two commands (a bridge tick
    # that a loaded machine stalled for seconds; the CI saw one of 2.0 s). Asserted as that
    # cause, not as a count that assumes the bridge always gets the CPU in time.
    ctl = _json(client, f"{NS}/controller/status")
    assert ctl["watchdog_holds"] == 0 or ctl["max_command_gap_s"] > ctl["watchdog_s"], ctl

    # a scene reset teleports the twin's arm (what no real arm does): the backend finds the arm
    # away from its commands and holds it where it is; the env's reset then moves from there
    client.set_parameters(f"{NS}/twin", episode_seed=5)
    answer = json.loads(client.call(Trigger, f"{NS}/task/reset", resend_after_s=2.0).message)
    start = np.asarray(answer["start_pose"])
    print(f"scene reset: the TCP jumped {np.linalg.norm(start[:3] - p0[:3]) * 1e3:.0f} mm")
    client.wait_for(lambda: _fresh(robot), 10.0, "the state after the scene reset")
    # The backend notices the jump and drops the old command stream: the arm stays at the new
    # start (a bridge that pulled it back would never satisfy this).
    client.wait_for(
        lambda: np.linalg.norm(robot.read_state().tcp_pose[:3] - start[:3]) < 0.005,
        10.0,
        "the arm at the scene's start pose",
    )
    robot.reset(start, 0.0)
    client.wait_for(
        lambda: pose_distance(robot.read_state().tcp_pose, start)[0] < 0.005, 10.0, "the reset"
    )

    def jumps_seen() -> bool:
        b = _json(client, f"{NS}/status")["backend"]
        return b["joint_jumps"] >= 1 and b["rebases"] >= 1

    client.wait_for(jumps_seen, 10.0, "the bridge to report the jump and the rebase")
    print(f"after the scene reset: twin {_json(client, f'{NS}/controller/status')}")

    # the bridge dies: the command stream stops and the twin's own watchdog holds the arm
    bridge.kill()
    client.wait_for(
        lambda: _json(client, f"{NS}/controller/status")["watchdog_holds"] >= 1,
        10.0,
        "the twin's watchdog to hold",
    )
    robot.disconnect()


def test_cartesian_mode_end_to_end(domain, ros_processes, ros_client_factory) -> None:
    """Cartesian mode (the driver's TCP pose and wrench topics) with one small camera."""
    pytest.importorskip("trajectory_msgs.msg", reason=NO_TRAJECTORY_MSGS)  # both nodes need it
    start_graph(ros_processes, domain, "cartesian", cameras=("front",))
    client = ros_client_factory(domain)
    client.subscribe(Image, f"{NS}/front/image_raw", qos.IMAGE)
    client.subscribe(String, f"{NS}/task/status", qos.STATUS)
    robot = connect_env(client)
    assert robot.read_state().joint_pos.shape == (6,)
    result = reach(client, robot, np.array([0.0, 0.03, -0.01]))
    assert result["max_settled_error_mm"] < 3.0
    client.wait_for(lambda: f"{NS}/front/image_raw" in client.latest, 10.0, "a camera frame")
    image, stamp = convert.msg_to_image(client.latest[f"{NS}/front/image_raw"])
    assert image.shape == (32, 32, 3) and image.std() > 0
    assert abs(stamp - time.monotonic()) < 5.0  # the hardware time base, as the bridge's state
    assert "cube_pos" in _json(client, f"{NS}/task/status")["privileged"]
    s = _json(client, f"{NS}/status")
    assert s["arm"]["name"] == "ur5e" and s["backend"]["mode"] == "cartesian"
    assert s["backend"]["rejected_messages"] == 0
    robot.disconnect()


# -- the commander (run as a script) ------------------------------------------------------------


def _commander() -> None:  # pragma: no cover - runs in a child process
    """Drive the TCP back and forth by 2 cm in y at 20 Hz from where it is."""
    from test_twin_node import run_pose_commander

    center: list = []

    def target(cur: np.ndarray) -> np.ndarray:
        if not center:
            center.append(cur.copy())
        phase = np.sin(2 * np.pi * 0.5 * time.monotonic())
        return frames.pose(center[0][:3] + [0.0, 0.02 * phase, 0.0], center[0][3:7])

    run_pose_commander("commander", target, NS)


if __name__ == "__main__":
    _commander()
