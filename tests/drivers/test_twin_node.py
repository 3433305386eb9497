"""The twin behind ROS 2 (``sim.ros_node``) over real DDS, with real processes.

The twin runs in a subprocess; the test process is a plain rclpy client (conftest.RosClient);
adversarial commanders run in their own processes (this file doubles as their script:
``python tests/drivers/test_twin_node.py commander``; the flooder is ``flooder.py``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Float64, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from drivers.ros import convert, qos  # noqa: E402
from robot_rl.core import frames  # noqa: E402
from robot_rl.core.safety import DOWN_QUAT  # noqa: E402

TASK = "pick_cube"
NS = "/arm"
# pick_cube's default safety (sim.backend.TASKS["pick_cube"].default_safety).
BOX_LO = np.array([0.3, -0.28, 0.015])
BOX_HI = np.array([0.7, 0.28, 0.35])
MAX_STEP_M = 0.05
WATCHDOG_S = 0.5
PERIOD_S = 0.1
POS_TOL_M = 0.005  # impedance-controller overshoot allowed beyond the commanded limits


def _twin_args(mode: str, cameras: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable, "-m", "sim.ros_node", "--task", TASK, "--ns", NS.strip("/"),
        "--mode", mode, "--control-hz", str(1 / PERIOD_S), "--image-size", "64",
        "--cameras", *cameras,
    ]  # fmt: skip


def _json(response) -> dict:
    assert response.success, response.message
    return json.loads(response.message)


def _pose_of(msg: PoseStamped) -> np.ndarray:
    return convert.msg_to_pose_stamped(msg)[0]


def _stamp(msg) -> float:
    return convert.msg_to_time(msg.header.stamp)


class Twin:
    """Client-side handle on a running twin node."""

    def __init__(self, client, cameras: tuple[str, ...] = ()) -> None:
        self.c = client
        client.subscribe(PoseStamped, f"{NS}/ee_pose", qos.SENSOR)
        client.subscribe(String, f"{NS}/status", qos.STATUS)
        client.subscribe(String, f"{NS}/task/status", qos.STATUS)
        for cam in cameras:
            client.subscribe(Image, f"{NS}/{cam}/image_raw", qos.IMAGE)
        self.target_pub = client.publisher(PoseStamped, f"{NS}/target_pose", qos.COMMAND)
        self.gripper_pub = client.publisher(Float64, f"{NS}/gripper/command", qos.COMMAND)

    def reset(self, seed: int = 0) -> tuple[np.ndarray, float]:
        self.c.set_parameters(f"{NS}/twin", episode_seed=seed)
        r = _json(self.c.call(Trigger, f"{NS}/task/reset", resend_after_s=2.0))  # idempotent
        self.wait_pose_at(r["stamp_s"])
        return np.array(r["start_pose"]), r["stamp_s"]

    def step(self) -> float:
        t = _json(self.c.call(Trigger, f"{NS}/sim/step"))["stamp_s"]
        self.wait_pose_at(t)
        return t

    def wait_pose_at(self, t: float) -> None:
        topic = f"{NS}/ee_pose"
        self.c.wait_for(
            lambda: topic in self.c.latest and abs(_stamp(self.c.latest[topic]) - t) < 1e-6,
            10.0,
            f"ee_pose stamped {t}",
        )

    def pose(self) -> np.ndarray:
        return _pose_of(self.c.latest[f"{NS}/ee_pose"])

    def status(self) -> dict:
        return json.loads(self.c.latest[f"{NS}/status"].data)

    def send(self, pose: np.ndarray, stamp_s: float, gripper: float | None = None) -> None:
        if gripper is not None:
            self.gripper_pub.publish(Float64(data=gripper))
        self.target_pub.publish(convert.pose_stamped_to_msg(pose, stamp_s))

    def wait_subscribed(self) -> None:
        """The twin's command subscriptions matched our publishers."""
        self.c.wait_for(
            lambda: (
                self.target_pub.get_subscription_count() > 0
                and self.gripper_pub.get_subscription_count() > 0
            ),
            30.0,
            "the twin to subscribe to target_pose",
        )


@pytest.fixture
def lockstep_twin(a1_domain, ros_processes, ros_client_factory):
    proc = ros_processes(_twin_args("lockstep", ("front",)), a1_domain, "twin")
    twin = Twin(ros_client_factory(a1_domain), cameras=("front",))
    twin.domain, twin.proc = a1_domain, proc
    return twin


def test_lockstep_moves_toward_target_with_advancing_stamps(lockstep_twin):
    twin = lockstep_twin
    start, t0 = twin.reset(seed=3)
    assert t0 == 0.0
    np.testing.assert_allclose(twin.pose()[:3], start[:3], atol=1e-3)
    twin.wait_subscribed()
    goal = frames.pose(start[:3] + np.array([0.04, -0.03, -0.05]), start[3:7])
    goal[:3] = np.clip(goal[:3], BOX_LO + 0.02, BOX_HI - 0.02)
    t, dists, stamps = t0, [], []
    for _ in range(15):
        twin.send(goal, t, gripper=1.0)
        t = twin.step()
        stamps.append(t)
        dists.append(np.linalg.norm(twin.pose()[:3] - goal[:3]))
    np.testing.assert_allclose(np.diff([t0, *stamps]), PERIOD_S, atol=1e-9)
    assert dists[-1] < 0.005 < dists[0], dists
    # The camera and the task status are published for the same sim time.
    img, img_t = convert.msg_to_image(twin.c.latest[f"{NS}/front/image_raw"])
    assert img.shape == (64, 64, 3) and img_t == pytest.approx(t)
    task = json.loads(twin.c.latest[f"{NS}/task/status"].data)
    assert task["stamp_s"] == pytest.approx(t) and "cube_pos" in task["privileged"]
    s = twin.status()
    assert s["state"] == "moving" and s["rejected"] == 0
    assert s["arm"] == {"name": "fr3", "joint_names": [f"joint{i}" for i in range(1, 8)]}


def test_estop_holds_until_clear_error(lockstep_twin):
    twin = lockstep_twin
    start, t = twin.reset(seed=1)
    twin.wait_subscribed()
    _json(twin.c.call(Trigger, f"{NS}/estop", resend_after_s=2.0))
    goal = frames.pose(np.clip(start[:3] + [0.05, 0.05, 0.0], BOX_LO, BOX_HI), start[3:7])
    p0 = twin.pose()
    for _ in range(5):
        twin.send(goal, t)
        t = twin.step()
    assert np.linalg.norm(twin.pose()[:3] - p0[:3]) < 1e-3
    # Refused and counted. Not necessarily all 5: the intake takes the newest command of what
    # arrived since it last looked (KEEP_LAST 1), and under load two may arrive in one look.
    twin.c.wait_for(lambda: twin.status()["rejected"] >= 1, 10.0, "refused commands counted")
    assert twin.status()["state"] == "estop"
    assert not twin.c.call(Trigger, f"{NS}/reset").success, "reset must be refused in e-stop"
    assert twin.c.call(Trigger, f"{NS}/clear_error", resend_after_s=2.0).success
    for _ in range(5):
        twin.send(goal, t)
        t = twin.step()
    assert np.linalg.norm(twin.pose()[:3] - p0[:3]) > 0.02


def test_killing_the_commander_holds_within_one_watchdog_period(
    a1_domain, ros_processes, ros_client_factory
):
    """Real time: a commander drives the arm; SIGKILL it; the bridge holds within the watchdog
    timeout (+ one control period), measured in sim time from the stamps."""
    ros_processes(_twin_args("realtime"), a1_domain, "twin")
    twin = Twin(ros_client_factory(a1_domain))
    commander = ros_processes([sys.executable, __file__, "commander"], a1_domain, "commander")
    topic = f"{NS}/status"
    twin.c.wait_for(
        lambda: topic in twin.c.latest and twin.status()["state"] == "moving",
        60.0,
        "the commander to move the arm",
    )
    commander.kill()
    twin.c.wait_for(
        lambda: twin.status()["watchdog_holds"] >= 1, 30.0, "the watchdog to hold the arm"
    )
    s = twin.status()
    assert s["state"] == "holding"
    # The hold's own time, not the status stamp: statuses keep coming after the hold, and the
    # one this test reads first may be any of them (keep-last delivery, a loaded machine).
    reaction_s = s["last_watchdog_hold_s"] - s["last_command_s"]
    assert WATCHDOG_S - 1e-6 <= reaction_s <= WATCHDOG_S + PERIOD_S + 1e-6, s
    # Held: after settling (an arm moving at the hold overshoots and comes back within about a
    # second, tests/drivers/test_flood.py), the TCP stays put.
    held_t = s["last_watchdog_hold_s"]
    twin.c.wait_for(lambda: _stamp(twin.c.latest[f"{NS}/ee_pose"]) > held_t + 1.0, 30.0, "time")
    p0 = twin.pose()
    twin.c.wait_for(lambda: _stamp(twin.c.latest[f"{NS}/ee_pose"]) > held_t + 1.5, 30.0, "time")
    assert np.linalg.norm(twin.pose()[:3] - p0[:3]) < 2e-3


def test_lifecycle_bridge_node_publishes_rejects_and_estops(
    a1_domain, ros_processes, ros_client_factory
):
    """The generic lifecycle node ``arm_bridge`` (any backend; here the twin's arm, frozen).
    Its control rate here is 0.1 Hz: a target still goes out when it arrives, not at the next
    10 s control tick."""
    args = [sys.executable, "-m", "drivers.arm_bridge.node"]
    args += ["--backend", "sim.ros_node:static_twin_backend", "--ros-args", "-p", "control_hz:=0.1"]
    ros_processes(args, a1_domain, "bridge")
    twin = Twin(ros_client_factory(a1_domain))
    twin.c.wait_for(lambda: f"{NS}/ee_pose" in twin.c.latest, 60.0, "ee_pose from arm_bridge")
    twin.wait_subscribed()
    pose = twin.pose()
    bad = convert.pose_stamped_to_msg(pose, 0.0)
    bad.pose.orientation.w = 2.0
    twin.target_pub.publish(bad)
    twin.c.wait_for(
        lambda: f"{NS}/status" in twin.c.latest and twin.status()["rejected"] >= 1,
        30.0,
        "the malformed target to be counted",
    )
    assert "unit quaternion" in twin.status()["last_error"]
    assert twin.c.call(Trigger, f"{NS}/estop", resend_after_s=2.0).success
    twin.c.wait_for(lambda: twin.status()["state"] == "estop", 10.0, "e-stop status")
    assert not twin.c.call(Trigger, f"{NS}/reset").success
    assert twin.c.call(Trigger, f"{NS}/clear_error", resend_after_s=2.0).success
    twin.c.wait_for(lambda: twin.status()["state"] == "idle", 10.0, "cleared status")
    twin.target_pub.publish(convert.pose_stamped_to_msg(pose, 0.0))
    twin.c.wait_for(
        lambda: twin.status()["executed_s"] is not None, 30.0, "the target to be executed"
    )
    s = twin.status()
    # bridge time (monotonic) from accepting the target to sending it to the arm: a state
    # period at most, while the old 10 s control tick would have waited 0-10 s
    assert s["executed_s"] - s["last_command_s"] < 1.0, s


# -- adversarial processes (run as scripts) ---------------------------------------------------


def run_pose_commander(
    node_name: str, target: Callable[[np.ndarray], np.ndarray], ns: str = NS
) -> None:  # pragma: no cover - runs in a child process
    """A commander's loop (also ``test_ros2_arm_node.py``'s): every 50 ms, ``target(pose)``
    of the latest ``<ns>/ee_pose`` (7,) to ``<ns>/target_pose``, stamped as that pose; spins
    until killed."""
    import rclpy

    rclpy.init()
    node = rclpy.create_node(node_name)
    latest: dict = {}
    node.create_subscription(
        PoseStamped, f"{ns}/ee_pose", lambda m: latest.__setitem__("pose", m), qos.SENSOR
    )
    pub = node.create_publisher(PoseStamped, f"{ns}/target_pose", qos.COMMAND)

    def command() -> None:
        if "pose" in latest:
            msg = latest["pose"]
            pub.publish(convert.pose_stamped_to_msg(target(_pose_of(msg)), _stamp(msg)))

    node.create_timer(0.05, command)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass


def _command_process(kind: str) -> None:  # pragma: no cover - runs in a child process
    """``commander``: drive the TCP back and forth at 20 Hz. (The flood of garbage and unsafe
    commands is ``tests/drivers/flooder.py``, used by ``test_flood.py``.)"""
    down = np.array(DOWN_QUAT)
    goal_x = [0.38, 0.62]

    def target(cur: np.ndarray) -> np.ndarray:
        if abs(cur[0] - goal_x[0]) < 0.01:
            goal_x.reverse()
        step = np.clip(goal_x[0] - cur[0], -0.03, 0.03)
        return frames.pose(cur[:3] + [step, 0.0, 0.0], down)

    run_pose_commander(f"{kind}_commander", target)


if __name__ == "__main__":
    _command_process(sys.argv[1])
