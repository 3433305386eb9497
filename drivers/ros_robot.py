"""RosRobot: :class:`robot_rl.core.protocols.Robot` over the ROS 2 contract topics.

State: the newest ``robot_state`` of the arm namespace (the bridge's whole state in one
message, beside the standard ``joint_states``, ``ee_pose``, ``ee_twist``, ``ee_wrench`` and
``gripper/state``: one subscription callback per state instead of five, which the process's
other work, e.g. the policy, would wait for), decoded by :mod:`drivers.ros.convert` in the
subscription callback (a malformed message is dropped and counted, never used).
:meth:`RosRobot.read_state` returns it and raises :class:`StaleSensorError` naming the topic
when it never arrived or is older than ``max_state_age_s`` relative to the env clock's
``now_s()`` (same time base as the stamps: sim time for the twin, monotonic time on hardware).

Commands: :meth:`RosRobot.send_command` publishes ``gripper/command`` then ``target_pose``
(both reliable). The bridge (or twin) owns safety and decides what is executed; this class
applies the same :class:`robot_rl.core.safety.SafetyLayer` with the same limits to the newest
measured pose, only to *report* what the bridge will execute (its return value). With the same
measured pose (always so in lockstep) the two agree exactly; in real time the bridge clips
against the pose at its own tick, which may be a few ms newer. A malformed command (NaN, wrong
shape) is not published: the arm is told to hold and :class:`UnsafeCommandError` is raised.

Lockstep: with ``ack_timeout_s`` set, each publish waits until the subscriber acknowledged the
message (reliable QoS), so that a following ``sim/step`` is sure to see it.

Services: ``reset`` (after setting parameters ``reset_pose``, ``reset_gripper`` on the bridge
node), ``hold``. See ``drivers/CONTRACT.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.duration import Duration
from std_msgs.msg import Float64, Float64MultiArray

from drivers.arm_bridge.core import BACKEND_ERROR
from drivers.ros import convert, qos
from drivers.ros_session import IDEMPOTENT_RESEND_S, Latest, RosSession, RosTimeoutError
from robot_rl.core.arm import ArmDescription, builtin_arm
from robot_rl.core.protocols import RobotSpec
from robot_rl.core.safety import SafetyConfig, SafetyLayer
from robot_rl.core.types import (
    ArmCommand,
    ArmFaultError,
    RobotState,
    SafetyReport,
    StaleSensorError,
    UnsafeCommandError,
)

FR3 = builtin_arm("fr3")

STATE_TOPIC = "robot_state"
"""The topic (relative to the namespace) of the whole :class:`RobotState` in one message."""


@dataclass(frozen=True)
class RosRobotConfig:
    """How the env side talks to an arm over ROS 2.

    Attributes:
        namespace: Arm namespace (topics ``/<namespace>/...``).
        bridge_node: Node that serves ``reset``/``hold`` and owns the ``reset_pose`` parameter:
            ``twin`` for the MuJoCo twin, ``arm_bridge`` for a real arm.
        max_state_age_s: A state part older than this (relative to the clock's now) is stale.
        safety: The bridge's limits, used locally only to report what will be executed.
        service_timeout_s: Timeout of ``hold`` and of parameter updates, seconds.
        reset_timeout_s: Timeout of the blocking ``reset`` service, seconds.
        ack_timeout_s: If set, wait up to this long for the bridge to acknowledge every
            command (lockstep); None: publish and go on (real time).
        connect_timeout_s: How long :meth:`RosRobot.connect` waits for the bridge's command
            subscriptions and ``reset`` service.
        name: Robot model name reported in the spec.
        arm: The arm's description: joint count and names (``robot_state`` is refused unless
            it carries this many joints), limits and home for the spec.
    """

    namespace: str = "arm"
    bridge_node: str = "twin"
    max_state_age_s: float = 0.2
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    service_timeout_s: float = 5.0
    reset_timeout_s: float = 30.0
    ack_timeout_s: float | None = None
    connect_timeout_s: float = 10.0
    name: str = "fr3-ros"
    arm: ArmDescription = FR3

    def __post_init__(self) -> None:
        if self.max_state_age_s <= 0:
            raise ValueError(f"max_state_age_s must be positive, got {self.max_state_age_s}")
        for key in ("service_timeout_s", "reset_timeout_s", "connect_timeout_s"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key} must be positive, got {getattr(self, key)}")
        if self.ack_timeout_s is not None and self.ack_timeout_s <= 0:
            raise ValueError("ack_timeout_s must be positive or None")


class RosRobot:
    """An arm behind the ROS 2 contract. See the module docstring.

    Args:
        config: Namespace, limits, timeouts.
        now_s: The env clock's ``now_s`` (staleness reference and command stamps).
        session: Shared session (None: a private one, closed on :meth:`disconnect`).
    """

    def __init__(
        self,
        config: RosRobotConfig,
        now_s: Callable[[], float],
        session: RosSession | None = None,
    ) -> None:
        self.config = config
        self._now = now_s
        self._own_session = session is None
        self.session = session or RosSession(config.namespace)
        self._safety = SafetyLayer(config.safety)
        self._spec = RobotSpec.from_arm(config.arm, name=config.name)
        self._slot: Latest | None = None
        self._subs: list = []
        self._pub_target = None
        self._pub_gripper = None

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    # -- lifecycle -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Subscribe to the state topics, advertise the command topics, and wait until the
        bridge subscribes to them and serves ``reset``.

        Raises:
            RosTimeoutError: No bridge within ``connect_timeout_s`` (the message says which
                topic or service is missing).
        """
        if self._pub_target is not None:
            return
        s = self.session
        n_joints = self.config.arm.num_joints
        slot, sub = s.subscribe(
            STATE_TOPIC,
            Float64MultiArray,
            qos.SENSOR,
            lambda msg: convert.array_msg_to_robot_state(msg, num_joints=n_joints),
        )
        self._slot = slot
        self._subs.append(sub)
        s.synced.append(slot)
        self._pub_target = s.node.create_publisher(PoseStamped, "target_pose", qos.COMMAND)
        self._pub_gripper = s.node.create_publisher(Float64, "gripper/command", qos.COMMAND)
        timeout = self.config.connect_timeout_s
        for pub, topic in (
            (self._pub_target, "target_pose"),
            (self._pub_gripper, "gripper/command"),
        ):
            if not s.wait_until(lambda p=pub: p.get_subscription_count() > 0, timeout):
                self.disconnect()
                raise RosTimeoutError(
                    f"nobody subscribes to {s.topic(topic)} after {timeout:g} s; start the arm "
                    f"bridge or twin node (`robot-rl up <setup.yaml>`) with namespace "
                    f"{self.config.namespace!r} and the same ROS_DOMAIN_ID"
                )

    def disconnect(self) -> None:
        """Drop subscriptions and publishers (and the private session, if any)."""
        s = self.session
        if self._slot is not None and self._slot in s.synced:
            s.synced.remove(self._slot)
        if s.started:
            for sub in self._subs:
                s.unsubscribe(sub)
            for pub in (self._pub_target, self._pub_gripper):
                if pub is not None:
                    s.node.destroy_publisher(pub)
        self._slot = None
        self._subs.clear()
        self._pub_target = self._pub_gripper = None
        if self._own_session:
            s.close()

    def _require_connected(self) -> None:
        if self._pub_target is None:
            raise RuntimeError("RosRobot is not connected; call connect() first")

    # -- Robot ---------------------------------------------------------------------------------

    def reset(self, start_pose: np.ndarray, gripper: float = 0.0) -> None:
        """Set ``reset_pose`` / ``reset_gripper`` on the bridge node, then call ``reset``
        (blocks until the arm is there).

        Raises:
            ValueError: ``start_pose`` is not a finite (7,) pose.
            ArmFaultError: The bridge refused or ended the reset for an error of its backend's
                own (a servo that did not answer; not an e-stop): wait for it to clear.
            RuntimeError: The bridge refused (e.g. e-stop active, pose outside the box).
            RosTimeoutError: The bridge did not answer.
        """
        self._require_connected()
        pose = np.asarray(start_pose, dtype=np.float64)
        if pose.shape != (7,) or not np.all(np.isfinite(pose)) or not np.isfinite(gripper):
            raise ValueError(
                f"reset pose must be a finite (7,) [x, y, z, qw, qx, qy, qz] and gripper finite; "
                f"got {pose} and {gripper}"
            )
        cfg = self.config
        self.session.set_parameters(
            cfg.bridge_node,
            {"reset_pose": [float(v) for v in pose], "reset_gripper": float(gripper)},
            cfg.service_timeout_s,
        )
        try:
            self.session.timed_trigger("reset", cfg.reset_timeout_s)
        except RuntimeError as e:  # a refusal (RosTimeoutError is not one: it propagates)
            if BACKEND_ERROR in str(e):
                raise ArmFaultError(
                    f"{e} (the arm holds; it moves again once its driver's error clears: the "
                    "bridge's auto_recover, or clear_error)"
                ) from e
            raise

    def read_state(self) -> RobotState:
        """The newest state; see the module docstring.

        Raises:
            StaleSensorError: A part never arrived, only malformed messages arrived, or it is
                older than ``max_state_age_s``.
        """
        self._require_connected()
        now = self._now()
        limit = self.config.max_state_age_s
        slot = self._slot
        assert slot is not None
        with self.session.cond:
            state = slot.value
            if state is None or slot.stamp_s is None:
                raise StaleSensorError(f"robot state incomplete: {slot.describe_missing()}")
            age = now - slot.stamp_s
            if age > limit:
                why = slot.describe_rejections() or "is the arm bridge / twin running?"
                raise StaleSensorError(
                    f"{slot.topic} is {age:.3f} s old at clock time {now:.3f} s (limit "
                    f"max_state_age_s={limit}); {why}"
                )
        return RobotState(  # copies: a caller may keep or change its arrays
            stamp_s=state.stamp_s,
            tcp_pose=state.tcp_pose.copy(),
            tcp_vel=state.tcp_vel.copy(),
            tcp_wrench=state.tcp_wrench.copy(),
            gripper_pos=state.gripper_pos,
            joint_pos=state.joint_pos.copy(),
            joint_vel=state.joint_vel.copy(),
        )

    def send_command(self, command: ArmCommand) -> tuple[ArmCommand, SafetyReport]:
        """Publish ``command``; return what the bridge will execute and which limits clip it.

        Raises:
            UnsafeCommandError: NaN/inf or wrong shape; not published, the arm holds.
            StaleSensorError: No measured pose yet (call ``reset`` and read the state first).
            RosTimeoutError: Lockstep only: the bridge did not acknowledge the command.
        """
        self._require_connected()
        slot = self._slot
        assert slot is not None
        with self.session.cond:
            state = slot.value
        if state is None:
            raise StaleSensorError(
                f"no measured pose to check the command against: {slot.describe_missing()}"
            )
        current = state.tcp_pose
        try:
            executed, report = self._safety.apply(command, current)
        except UnsafeCommandError as e:
            try:
                self.hold()
            except (RosTimeoutError, RuntimeError) as h:
                raise UnsafeCommandError(f"{e} Telling the arm to hold failed too: {h}") from h
            raise
        stamp = max(float(self._now()), 0.0)
        assert self._pub_target is not None and self._pub_gripper is not None
        self._pub_gripper.publish(Float64(data=float(command.gripper)))
        target = np.asarray(command.target_pose, dtype=np.float64).copy()
        target[3:7] /= np.linalg.norm(target[3:7])
        self._pub_target.publish(convert.pose_stamped_to_msg(target, stamp))
        if self.config.ack_timeout_s is not None:
            timeout = Duration(nanoseconds=round(self.config.ack_timeout_s * 1e9))
            for pub, topic in (
                (self._pub_gripper, "gripper/command"),
                (self._pub_target, "target_pose"),
            ):
                if not pub.wait_for_all_acked(timeout):
                    raise RosTimeoutError(
                        f"{self.session.topic(topic)}: the bridge did not acknowledge the command "
                        f"within {self.config.ack_timeout_s:g} s; is it stopped?"
                    )
        return executed, report

    def hold(self) -> None:
        """Call the bridge's ``hold`` service (stop and hold the current pose)."""
        self._require_connected()
        self.session.trigger("hold", self.config.service_timeout_s, IDEMPOTENT_RESEND_S)

    # -- diagnostics ---------------------------------------------------------------------------

    def rejected_messages(self) -> dict[str, int]:
        """Malformed state messages dropped so far, per topic."""
        with self.session.cond:
            return {} if self._slot is None else {STATE_TOPIC: self._slot.rejected}
