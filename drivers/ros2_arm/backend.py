"""``Ros2ArmBackend``: the arm bridge's :class:`~drivers.arm_bridge.backend.ArmBackend` over a
vendor ROS 2 driver (the rclpy glue around :class:`drivers.ros2_arm.core.Ros2ArmCore`).

``connect()`` starts the backend's own rclpy context, node (``config.node_name``, root
namespace: the driver's topics are absolute, e.g. ``/joint_states``) and executor thread, waits
for the first joint state carrying every joint of the arm (a message with only some of them is
an error at once that names both lists; none at all within ``connect_timeout_s`` is an error
naming the topic and what did arrive), then starts the tick thread: every ``1 / bridge_hz`` it
asks the core what to send and publishes it (``joint`` mode: one IK step towards the newest safe
target, as a one-point ``JointTrajectory`` with ``time_from_start`` = ``trajectory_horizon_ticks``
ticks, or a ``Float64MultiArray``; ``cartesian`` mode: the target ``PoseStamped``, streamed so
that a driver-side command watchdog stays fed). ``cartesian`` mode also publishes each new target
at once from :meth:`Ros2ArmBackend.command`.

Gripper: a ``std_msgs/Float64`` command in driver units (``config.closure_to_driver``) and an
optional ``sensor_msgs/JointState``. There is no ``control_msgs`` wheel on PyPI (ROS 2 Kilted's
Python wheels stop at the common interfaces), so a driver's ``GripperCommand`` action cannot be
called from here: put a forward command controller or a relay in front of the gripper.

QoS: state topics are subscribed best effort (matches a reliable or a best-effort publisher, as
ros2_control's broadcasters are), commands are published reliable, keep last 1 (matches the
controllers' default subscriptions).

Time base: ``time.monotonic()``; a state is stamped with the arrival of its joint state (the
driver's header stamps are another clock and are not used for staleness).

Threads: the executor thread runs the subscriptions, the tick thread publishes, the bridge calls
the methods; one condition lock guards the core, a second lock orders what is published (a
command and a tick never publish out of order).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import rclpy
from builtin_interfaces.msg import Duration as DurationMsg
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray, Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from drivers.ik import DiffIK
from drivers.ros import convert, qos
from drivers.ros2_arm.config import Ros2ArmConfig
from drivers.ros2_arm.core import Output, Ros2ArmCore, make_ik
from drivers.ros2_arm.state import JointStateError
from robot_rl.core.clock import LongestGap
from robot_rl.core.types import RobotState

STATE_QOS = QoSProfile(
    reliability=ReliabilityPolicy.BEST_EFFORT,
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    durability=DurabilityPolicy.VOLATILE,
)
"""Driver state topics: best effort (matches any publisher), a short history (a driver may
publish the arm's and the gripper's joints as separate messages on one topic)."""


class Ros2ArmBackend:
    """The generic ROS 2 arm backend (module docstring).

    Args:
        config: Mode, topics, rates, gripper map, the arm.
        ik: The arm's IK (None: built from ``config``'s kinematics file).
    """

    def __init__(self, config: Ros2ArmConfig, ik: DiffIK | None = None) -> None:
        self.config = config
        self.arm = config.arm
        self.core = Ros2ArmCore(config, ik if ik is not None else make_ik(config))
        self._cond = threading.Condition()  # guards the core; notified by every state message
        self._pub_lock = threading.Lock()
        self._context: Context | None = None
        self._node: Any = None
        self._executor: SingleThreadedExecutor | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._pubs: dict[str, Any] = {}
        self._connect_error: str | None = None
        self.published = 0
        """Arm commands published (ticks and immediate ones)."""
        self.tick_overruns = 0
        """Ticks that started more than a tick late (the schedule then restarts)."""
        self.max_tick_work_ms = 0.0
        self.state_gap = LongestGap()
        """Between arriving joint states (the driver's pauses and this process's executor's,
        together)."""
        self.max_state_lock_wait_ms = 0.0
        """The longest a joint state waited for the core's lock (held by a tick or a call)."""

    # -- lifecycle -------------------------------------------------------------------------

    def connect(self) -> None:
        """Start the node, wait for the first complete joint state, start ticking.

        Raises:
            RuntimeError: No usable joint state (or TCP pose) within ``connect_timeout_s``, or a
                joint state without some of the arm's joints (the message names them).
        """
        if self._node is not None:
            return
        c = self.config
        self._stop.clear()
        self._connect_error = None
        self._context = ctx = Context()
        rclpy.init(args=[c.node_name], context=ctx)  # no --ros-args of the bridge's process
        node = self._node = rclpy.create_node(c.node_name, context=ctx)
        node.create_subscription(JointState, c.joint_states_topic, self._on_joint_state, STATE_QOS)
        if c.tcp_pose_topic is not None:
            node.create_subscription(PoseStamped, c.tcp_pose_topic, self._on_pose, STATE_QOS)
        if c.wrench_topic is not None:
            node.create_subscription(WrenchStamped, c.wrench_topic, self._on_wrench, STATE_QOS)
        if c.gripper_state_topic is not None:
            node.create_subscription(JointState, c.gripper_state_topic, self._on_grip, STATE_QOS)
        if c.mode == "cartesian":
            self._pubs["arm"] = node.create_publisher(PoseStamped, c.target_pose_topic, qos.COMMAND)
        elif c.joint_interface == "trajectory":
            self._pubs["arm"] = node.create_publisher(
                JointTrajectory, c.trajectory_topic, qos.COMMAND
            )
        else:
            self._pubs["arm"] = node.create_publisher(
                Float64MultiArray, c.position_topic, qos.COMMAND
            )
        if c.gripper_command_topic is not None:
            self._pubs["gripper"] = node.create_publisher(
                Float64, c.gripper_command_topic, qos.COMMAND
            )
        self._executor = SingleThreadedExecutor(context=ctx)
        self._executor.add_node(node)
        self._start_thread(self._spin, "ros2-arm-executor")
        deadline = time.monotonic() + c.connect_timeout_s
        with self._cond:
            while not self.core.state.has_state and self._connect_error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            error, ready = self._connect_error, self.core.state.has_state
        if not ready:
            self.disconnect()
            raise RuntimeError(error or self._timeout_message())
        self._start_thread(self._tick_loop, "ros2-arm-tick")

    def _timeout_message(self) -> str:
        c, core = self.config, self.core.state
        if core.joint_msgs and c.tcp_pose_topic is not None:
            return f"no TCP pose on {c.tcp_pose_topic} within {c.connect_timeout_s:g} s"
        seen = (
            f"; the messages there carried joints {core.other_names}, not the arm's (set the "
            "description's joint_names to the driver's)"
            if core.other_names
            else f"; {core.last_rejection}"
            if core.last_rejection
            else ": is the driver running, in the same ROS_DOMAIN_ID?"
        )
        return (
            f"no joint state with arm {self.arm.name!r}'s joints {list(self.arm.joint_names)} on "
            f"{c.joint_states_topic} within {c.connect_timeout_s:g} s{seen}"
        )

    def _start_thread(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _spin(self) -> None:
        assert self._executor is not None
        try:
            self._executor.spin()
        except (ExternalShutdownException, rclpy.executors.ShutdownException):
            pass
        except Exception:  # the context was shut down under the executor (SIGTERM)
            if self._context is not None and self._context.ok() and not self._stop.is_set():
                raise

    def disconnect(self) -> None:
        """Stop ticking (the driver's controller holds the last command) and close the node
        (idempotent)."""
        self._stop.set()
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=2.0)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2.0)
        self._threads = []
        if self._node is not None:
            self._node.destroy_node()
        if self._context is not None and self._context.ok():
            rclpy.try_shutdown(context=self._context)
        self._executor = self._node = self._context = None
        self._pubs = {}

    # -- subscriptions (executor thread) ---------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        now = time.monotonic()
        self.state_gap.event(now)
        with self._cond:
            waited_ms = (time.monotonic() - now) * 1e3
            self.max_state_lock_wait_ms = max(self.max_state_lock_wait_ms, waited_ms)
            try:
                stamp = convert.msg_to_time(msg.header.stamp)
                self.core.state.on_joint_state(msg.name, msg.position, msg.velocity, now, stamp)
            except JointStateError as e:
                self.core.state.reject(str(e))
                if not self.core.state.joint_msgs:
                    self._connect_error = str(e)
            self._cond.notify_all()

    def _on_pose(self, msg: PoseStamped) -> None:
        now = time.monotonic()
        with self._cond:
            try:
                if msg.header.frame_id not in ("", self.arm.base_frame):
                    raise ValueError(
                        f"{self.config.tcp_pose_topic} is in frame {msg.header.frame_id!r}, not "
                        f"the arm's base frame {self.arm.base_frame!r}"
                    )
                self.core.state.on_tcp_pose(convert.msg_to_pose(msg.pose), now)
            except ValueError as e:
                self.core.state.reject(str(e))
            self._cond.notify_all()

    def _on_wrench(self, msg: WrenchStamped) -> None:
        with self._cond:
            try:
                self.core.state.on_wrench(convert.msg_to_wrench(msg, self.arm.base_frame)[0])
            except ValueError as e:
                self.core.state.reject(f"{self.config.wrench_topic}: {e}")

    def _on_grip(self, msg: JointState) -> None:
        with self._cond:
            self.core.state.on_gripper_state(msg.name, msg.position)

    # -- publishing ------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        period = self.config.tick_s
        due = time.monotonic()
        while not self._stop.is_set():
            start = time.monotonic()
            with self._pub_lock:
                with self._cond:
                    out = self.core.next_output(start)
                if out is not None:
                    try:
                        self._publish(out)
                    except Exception:  # noqa: BLE001 - a shutdown (SIGTERM) ended the context
                        if self._context is not None and self._context.ok():
                            raise
                        return
            self.max_tick_work_ms = max(self.max_tick_work_ms, (time.monotonic() - start) * 1e3)
            due += period
            delay = due - time.monotonic()
            if delay < -period:
                self.tick_overruns += 1
                due = time.monotonic()
            elif delay > 0:
                self._stop.wait(delay)

    def _publish(self, out: Output) -> None:
        """Under ``_pub_lock``: one arm command."""
        pub = self._pubs.get("arm")
        if pub is None:
            return
        c = self.config
        if out.pose is not None:
            stamp = self._node.get_clock().now().to_msg()
            header = Header(stamp=stamp, frame_id=self.arm.base_frame)
            pub.publish(PoseStamped(header=header, pose=convert.pose_to_msg(out.pose)))
        elif out.joints is not None and c.joint_interface == "trajectory":
            horizon_ns = round(c.trajectory_horizon_ticks * c.tick_s * 1e9)
            point = JointTrajectoryPoint(
                positions=[float(v) for v in out.joints],
                time_from_start=DurationMsg(
                    sec=horizon_ns // 1_000_000_000, nanosec=horizon_ns % 1_000_000_000
                ),
            )
            pub.publish(JointTrajectory(joint_names=list(self.arm.joint_names), points=[point]))
        elif out.joints is not None:
            pub.publish(Float64MultiArray(data=[float(v) for v in out.joints]))
        self.published += 1

    def _publish_gripper(self, now: float) -> None:
        """Under both locks."""
        value = self.core.gripper_output(now)
        pub = self._pubs.get("gripper")
        if value is not None and pub is not None:
            pub.publish(Float64(data=value))

    # -- ArmBackend ------------------------------------------------------------------------

    def read_state(self) -> RobotState:
        with self._cond:
            return self.core.read_state()

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        now = time.monotonic()
        with self._pub_lock, self._cond:
            pose = self.core.command(target_pose, gripper, now)
            if self.core.error(now) is None:
                self._publish_gripper(now)
            if pose is not None:
                self._publish(Output(pose=pose))

    def hold(self) -> None:
        now = time.monotonic()
        with self._pub_lock, self._cond:
            pose = self.core.hold(now)
            if pose is not None:
                self._publish(Output(pose=pose))

    def start_move(self, pose: np.ndarray, gripper: float) -> None:
        now = time.monotonic()
        with self._pub_lock, self._cond:
            self.core.start_move(pose, gripper, now)
            if self.core.error(now) is None:
                self._publish_gripper(now)

    def move_done(self) -> bool:
        with self._cond:
            return self.core.move_done(time.monotonic())

    def clear_error(self) -> bool:
        with self._cond:
            return self.core.clear_error(time.monotonic())

    @property
    def error(self) -> str | None:
        with self._cond:
            return self.core.error(time.monotonic())

    def telemetry(self) -> dict:
        """The backend's figures for the bridge's ``status["backend"]``."""
        with self._cond:
            q_cmd = self.core.last_joint_command
            return {
                "mode": self.config.mode,
                "published": self.published,
                "joint_states": self.core.state.joint_msgs,
                "rejected_messages": self.core.state.rejected,
                "last_rejection": self.core.state.last_rejection,
                "max_tracking_error_rad": self.core.max_tracking_error_rad,
                "joint_jumps": self.core.state.jumps,
                "rebases": self.core.rebases,
                "ik_failures": 0 if self.core.ik is None else self.core.ik.failures,
                "last_rebase": self.core.last_rebase,
                "tick_overruns": self.tick_overruns,
                "max_tick_work_ms": self.max_tick_work_ms,
                "max_state_gap_ms": self.state_gap.max_s * 1e3,
                "max_state_lock_wait_ms": self.max_state_lock_wait_ms,
                "joint_command": None if q_cmd is None else [float(v) for v in q_cmd],
            }
