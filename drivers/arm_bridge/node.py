"""The arm bridge behind ROS 2: a thin adapter around :class:`drivers.arm_bridge.core.ArmBridge`.

:class:`BridgeInterface` puts the bridge's topics and services (``drivers/CONTRACT.md``) on any
node; :class:`ArmBridgeNode` (lifecycle node ``arm_bridge``) uses it for any
:class:`ArmBackend`, and ``sim/ros_node.py`` uses it for the twin.

- subscribes ``target_pose`` (PoseStamped), ``gripper/command`` (Float64), COMMAND QoS, on a
  separate intake node (``<node>_intake``) with its own thread and a message-rate budget
  (:mod:`drivers.ros.intake`), so that no publisher on them (any rate, size or content) can
  starve the services, timers and publishers of the node;
  malformed messages (NaN, non-unit quaternion, wrong frame) are logged with the reason,
  counted in ``status`` (``rejected``) and never executed;
- publishes ``joint_states``, ``ee_pose``, ``ee_twist``, ``ee_wrench``, ``gripper/state``
  and the same values in one message, ``robot_state`` (SENSOR; what the env reads: one
  callback per state, not five), and ``status`` (STATUS, JSON);
- services ``reset`` (parameters ``reset_pose``, ``reset_gripper``), ``hold``, ``estop``,
  ``clear_error`` (std_srvs/Trigger).

Threads (:class:`ArmBridgeNode`, a multi-threaded executor): a target is executed when it is
accepted (at most one per the bridge's minimum interval); the control tick (watchdog, a target
that had to wait) and state publishing are timers in callback groups of their own, the
services in reentrant groups, so no service call delays them; one lock serialises the bridge
and the backend, held for short sections only. ``reset`` holds it to start the move and for
each check of arrival (every :data:`RESET_POLL_S`), not while the arm travels: an ``estop`` or
``hold`` during a reset acts at once (the arm holds, ``reset`` answers failure "interrupted by
e-stop"), and state and status keep being published (``status.state`` is ``resetting``).

Lifecycle (STYLE.md #13): configure = ``backend.connect()``, activate = allow motion (control
and state timers run), deactivate = hold (commands refused), cleanup = ``backend.disconnect()``.

Safety limits are read-only ROS 2 parameters named like the :class:`SafetyConfig` fields
(:mod:`drivers.arm_bridge.params`), read once at start-up: invalid values make ``main()`` log
the parameter and exit with code 2; a run-time change is refused.

Run: ``python -m drivers.arm_bridge.node --backend package.module:factory [--ns arm]
[--ros-args -p workspace_high_m:=[0.7, 0.3, 0.4]]`` where ``factory()`` returns an
:class:`ArmBackend` (e.g. the Franka backend).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import NoReturn

import numpy as np
import rclpy
import rclpy.logging
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.callback_groups import (
    CallbackGroup,
    MutuallyExclusiveCallbackGroup,
    ReentrantCallbackGroup,
)
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, Float64MultiArray, String
from std_srvs.srv import Trigger

from drivers.arm_bridge.backend import ArmBackend
from drivers.arm_bridge.core import TARGET_INTERVAL_PERIODS, ArmBridge, BridgeConfig, ResetJob
from drivers.arm_bridge.params import (
    EXIT_BAD_PARAMETER,
    BridgeParamError,
    declare_safety_parameters,
    describe_safety,
    safety_to_dict,
)
from drivers.ros import convert, qos
from drivers.ros.intake import DEFAULT_MAX_RATE_HZ, CommandIntake
from robot_rl.core.arm import ArmDescription, builtin_arm
from robot_rl.core.safety import SafetyConfig
from robot_rl.core.types import RobotState, UnsafeCommandError

FR3 = builtin_arm("fr3")

RESET_POSE_PARAM = "reset_pose"
RESET_GRIPPER_PARAM = "reset_gripper"
RESET_POLL_S = 0.01
"""How often ``reset`` checks whether the arm arrived, s (the lock is free in between)."""


class BridgeInterface:
    """The bridge's topics and services on ``node`` (names relative to its namespace).

    Args:
        node: The node to create them on.
        bridge: The bridge core.
        lock: Serialises every call into ``bridge`` and its backend (shared with whatever steps
            the backend, e.g. the twin's physics).
        now_fn: Current time in the bridge's time base (sim time or monotonic), seconds.
        accepting: Whether commands may be executed now (False: refused and counted, e.g. a
            lifecycle node that is not active).
        callback_group: Group for the hold/estop services (default: a reentrant group, so they
            never wait behind a long service call except on ``lock``). ``reset`` and
            ``clear_error`` get a reentrant group of their own: they wait for the arm, and a
            second ``reset`` during one is refused rather than queued.
        on_change: Called (under ``lock``) after every service call, e.g. to publish state.
        on_target: Called (under ``lock``) after a target was accepted.
        on_gripper: Called (under ``lock``) after a gripper command was accepted.
        max_command_hz: Budget of the command intake: messages per second over
            ``target_pose`` and ``gripper/command`` together (:mod:`drivers.ros.intake`).
        arm: The arm behind the backend: ``joint_states`` carries its joint names,
            ``robot_state`` its joint count, and ``status["arm"]`` its kind and joint names.
    """

    def __init__(
        self,
        node: Node,
        bridge: ArmBridge,
        lock: threading.RLock,
        now_fn: Callable[[], float],
        accepting: Callable[[], bool] = lambda: True,
        callback_group: CallbackGroup | None = None,
        on_change: Callable[[], None] | None = None,
        on_target: Callable[[], None] | None = None,
        on_gripper: Callable[[], None] | None = None,
        max_command_hz: float = DEFAULT_MAX_RATE_HZ,
        arm: ArmDescription = FR3,
    ) -> None:
        self.node = node
        self.arm = arm
        self.bridge = bridge
        self.lock = lock
        self.now_fn = now_fn
        self.accepting = accepting
        self.on_change = on_change or (lambda: None)
        self.on_target = on_target or (lambda: None)
        self.on_gripper = on_gripper or (lambda: None)
        group = callback_group or ReentrantCallbackGroup()
        slow = ReentrantCallbackGroup()
        if not node.has_parameter(RESET_POSE_PARAM):
            node.declare_parameter(RESET_POSE_PARAM, [0.5, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0])
        if not node.has_parameter(RESET_GRIPPER_PARAM):
            node.declare_parameter(RESET_GRIPPER_PARAM, 0.0)
        self._pubs = {
            name: node.create_publisher(t, name, qos.SENSOR)
            for name, t in (
                ("joint_states", JointState),
                ("ee_pose", PoseStamped),
                ("ee_twist", TwistStamped),
                ("ee_wrench", WrenchStamped),
                ("gripper/state", JointState),
            )
        }
        self._state_pub = node.create_publisher(Float64MultiArray, "robot_state", qos.SENSOR)
        self._status_pub = node.create_publisher(String, "status", qos.STATUS)
        self._safety = safety_to_dict(bridge.config.safety)
        self._arm = {"name": arm.name, "joint_names": list(arm.joint_names)}
        # Commands on their own node and thread (see drivers.ros.intake): a flood on these
        # topics must never delay estop / hold / step / the watchdog / state publishing.
        self.intake = CommandIntake(node, max_command_hz)
        self._subs = [
            self.intake.subscribe(PoseStamped, "target_pose", self._on_target, qos.COMMAND),
            self.intake.subscribe(Float64, "gripper/command", self._on_gripper, qos.COMMAND),
        ]
        self.intake.start()
        self._srvs = [
            node.create_service(Trigger, "reset", self._srv_reset, callback_group=slow),
            node.create_service(Trigger, "hold", self._srv_hold, callback_group=group),
            node.create_service(Trigger, "estop", self._srv_estop, callback_group=group),
            node.create_service(Trigger, "clear_error", self._srv_clear_error, callback_group=slow),
        ]

    # -- publishing -------------------------------------------------------------------------

    def publish_state(self, state: RobotState) -> None:
        """Publish the five state topics and ``robot_state``, stamped with ``state.stamp_s``."""
        msgs = convert.robot_state_to_msgs(state, self.arm.joint_names)
        for pub, msg in zip(self._pubs.values(), msgs, strict=True):
            pub.publish(msg)
        self._state_pub.publish(convert.robot_state_to_array_msg(state))

    def publish_status(self) -> None:
        """Publish the bridge status JSON (with the safety limits in force)."""
        status = {**self.bridge.status(), "safety": self._safety, "arm": self._arm}
        self._status_pub.publish(String(data=json.dumps(status)))

    # -- commands ---------------------------------------------------------------------------

    def _warn(self, reason: str) -> None:
        self.node.get_logger().warning(f"rejected: {reason}", throttle_duration_sec=1.0)

    def _on_target(self, msg: PoseStamped) -> None:
        with self.lock:
            now = self.now_fn()
            if not self.accepting():
                self.bridge.reject_malformed("bridge is not active; command refused", now)
                self._warn("bridge is not active")
                return
            try:
                pose, stamp_s = convert.msg_to_pose_stamped(
                    msg, unit_tol=self.bridge.config.unit_quat_tol
                )
            except ValueError as e:
                self.bridge.reject_malformed(f"malformed target_pose: {e}", now)
                self._warn(f"malformed target_pose: {e}")
                return
            if self.bridge.submit_target(pose, now, stamp_s):
                self.on_target()
            else:
                self._warn(str(self.bridge.last_error))

    def _on_gripper(self, msg: Float64) -> None:
        with self.lock:
            now = self.now_fn()
            if not self.accepting():
                self.bridge.reject_malformed("bridge is not active; command refused", now)
                return
            if self.bridge.submit_gripper(float(msg.data), now):
                self.on_gripper()
            else:
                self._warn(str(self.bridge.last_error))

    # -- services ---------------------------------------------------------------------------

    def reset_target(self) -> tuple[np.ndarray, float]:
        """The ``reset_pose`` (7,) and ``reset_gripper`` parameters."""
        pose = np.asarray(self.node.get_parameter(RESET_POSE_PARAM).value, dtype=np.float64)
        gripper = float(self.node.get_parameter(RESET_GRIPPER_PARAM).value)
        return pose, gripper

    def _srv_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Start the reset under the lock, then check arrival every :data:`RESET_POLL_S` with the
        lock taken only for the check (estop / hold / ticks / state publishing run between). A
        move that ends at once (the twin's teleport) is started and finished in one section."""
        try:
            with self.lock:
                pose, gripper = self.reset_target()
                if not self.accepting():
                    raise RuntimeError("bridge is not active")
                job = self.bridge.begin_reset(pose, gripper, self.now_fn())
                done = self._reset_arrived(job)
                if not done:
                    self.publish_status()  # state "resetting"
            while not done:
                time.sleep(RESET_POLL_S)
                with self.lock:
                    done = self._reset_arrived(job)
        except (RuntimeError, UnsafeCommandError, ValueError) as e:
            response.success, response.message = False, f"reset failed: {e}"
            self.node.get_logger().error(response.message)
            with self.lock:
                self.publish_status()
            return response
        response.success = True
        response.message = json.dumps({"stamp_s": self.now_fn()})
        return response

    def _reset_arrived(self, job: ResetJob) -> bool:
        """Under ``lock``: True (after publishing) once the reset ``job`` arrived; raises if it
        ended otherwise (:meth:`ArmBridge.poll_reset`)."""
        if not self.bridge.poll_reset(job, self.now_fn()):
            return False
        self.on_change()
        self.publish_status()
        return True

    def _srv_hold(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self.lock:
            self.bridge.hold(self.now_fn())
            self.on_change()
            self.publish_status()
        response.success, response.message = True, json.dumps({"stamp_s": self.now_fn()})
        return response

    def _srv_estop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self.lock:
            self.bridge.estop(self.now_fn())
            self.node.get_logger().warning("e-stop: holding; call clear_error to resume")
            self.on_change()
            self.publish_status()
        response.success, response.message = True, json.dumps({"stamp_s": self.now_fn()})
        return response

    def _srv_clear_error(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        # The backend's recovery may take seconds (a Franka's automaticErrorRecovery): it runs
        # without the lock, so that estop / hold / ticks / state publishing go on meanwhile; an
        # e-stop that comes meanwhile stands (finish_clear_error then fails).
        with self.lock:
            job = self.bridge.begin_clear_error(self.now_fn())
        backend_ok = bool(self.bridge.backend.clear_error())
        with self.lock:
            ok = self.bridge.finish_clear_error(job, backend_ok)
            self.on_change()
            self.publish_status()
            response.success = ok
            response.message = json.dumps(
                {"stamp_s": self.now_fn(), "last_error": self.bridge.last_error}
            )
        return response

    def destroy(self) -> None:
        """Stop the command intake; remove the topics and services from the node."""
        self.intake.stop()
        self._subs = []
        for s in self._srvs:
            self.node.destroy_service(s)
        for p in [*self._pubs.values(), self._state_pub, self._status_pub]:
            self.node.destroy_publisher(p)


class ArmBridgeNode(LifecycleNode):
    """Lifecycle node ``arm_bridge`` around an :class:`ArmBridge` and any backend.

    Parameters: ``control_hz`` (the env's control rate, default 10: a target is executed when
    it arrives, at most one per :data:`~drivers.arm_bridge.core.TARGET_INTERVAL_PERIODS` of its
    period), ``state_hz`` (state publishing and control tick rate, default 100),
    ``reset_pose``, ``reset_gripper``, and the read-only safety limits
    (:mod:`drivers.arm_bridge.params`; defaults ``config.safety``).
    Time base: ``time.monotonic()``.

    Args:
        backend: The arm.
        config: Command checks; its ``safety`` gives the safety parameters' defaults.
        namespace: ROS namespace (``/arm``).
        arm: The arm behind the backend (its joints on ``joint_states``, ``robot_state`` and in
            ``status.arm``).

    Raises:
        BridgeParamError: A safety parameter is invalid (the message names it).
    """

    def __init__(
        self,
        backend: ArmBackend,
        config: BridgeConfig,
        namespace: str = "arm",
        arm: ArmDescription = FR3,
    ) -> None:
        super().__init__("arm_bridge", namespace=namespace)
        self.backend = backend
        self.arm = arm  # joint_states / robot_state / status.arm carry its joints
        safety = declare_safety_parameters(self, config.safety)
        self.config = replace(config, safety=safety)
        self.get_logger().info(f"safety limits (read-only parameters): {describe_safety(safety)}")
        self.declare_parameter("control_hz", 10.0)
        self.declare_parameter("state_hz", 100.0)
        self.lock = threading.RLock()
        self.bridge: ArmBridge | None = None
        self.iface: BridgeInterface | None = None
        self._active = False
        self._timers: list = []

    @staticmethod
    def now_s() -> float:
        return time.monotonic()

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.backend.connect()
        except Exception as e:  # noqa: BLE001 - any backend failure fails the transition
            self.get_logger().error(f"backend.connect() failed: {e}")
            return TransitionCallbackReturn.FAILURE
        period_s = 1.0 / float(self.get_parameter("control_hz").value)
        interval = TARGET_INTERVAL_PERIODS * period_s
        self.bridge = ArmBridge(self.backend, replace(self.config, min_target_interval_s=interval))
        self.iface = BridgeInterface(
            self,
            self.bridge,
            self.lock,
            self.now_s,
            accepting=lambda: self._active,
            on_target=self._execute_now,
            arm=self.arm,
        )
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        state_hz = float(self.get_parameter("state_hz").value)
        # A group per timer: neither waits for the other nor for a service call (only for the
        # lock, which no one holds for long). The control tick runs at the state rate: a target
        # that came too soon after the previous one (the bridge's minimum interval) goes out
        # within a state period of being allowed, and the watchdog looks as often.
        self._timers = [
            self.create_timer(
                1.0 / state_hz,
                self._control_tick,
                callback_group=MutuallyExclusiveCallbackGroup(),
            ),
            self.create_timer(
                1.0 / state_hz,
                self._publish_state,
                callback_group=MutuallyExclusiveCallbackGroup(),
            ),
        ]
        with self.lock:
            self._active = True
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.lock:
            self._active = False
            assert self.bridge is not None
            self.bridge.hold(self.now_s(), why="deactivate")
        self._stop_timers()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def _stop_timers(self) -> None:
        for t in self._timers:
            self.destroy_timer(t)
        self._timers = []

    def _teardown(self) -> None:
        with self.lock:
            self._active = False
            if self.bridge is not None:
                self.bridge.hold(self.now_s(), why="shutdown")
        self._stop_timers()
        if self.iface is not None:
            self.iface.destroy()
            self.iface = None
            self.backend.disconnect()
        self.bridge = None

    def _execute_now(self) -> None:
        """A target was accepted (under the lock): execute it at once, as the policy sent it,
        unless the bridge's minimum interval since the last one has not passed (then a later
        control tick does; a backend error holds it, and the control tick recovers)."""
        assert self.bridge is not None
        self.bridge.tick(self.now_s(), recover=False)

    def _control_tick(self) -> None:
        with self.lock:
            if self.bridge is None or self.iface is None:
                return
            bridge = self.bridge
            bridge.tick(self.now_s(), recover=False)
            self.iface.publish_status()
            if not bridge.recovery_due:
                return
            job = bridge.begin_clear_error(self.now_s(), clear_estop=False)
        # auto_recover without the lock (see _srv_clear_error); the tick timer waits, nothing else
        ok = bool(bridge.backend.clear_error())
        with self.lock:
            if self.bridge is bridge and self.iface is not None:
                bridge.finish_clear_error(job, ok)
                self.iface.publish_status()

    def _publish_state(self) -> None:
        with self.lock:
            if self.iface is None:
                return
            state = self.backend.read_state()
        self.iface.publish_state(state)


def _load_factory(path: str) -> Callable[[], ArmBackend]:
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"--backend {path!r}: expected 'package.module:factory'")
    return getattr(importlib.import_module(module), name)


def exit_bad_parameter(node_name: str, error: BridgeParamError) -> NoReturn:
    """Log an invalid parameter, shut rclpy down and exit with :data:`EXIT_BAD_PARAMETER`."""
    rclpy.logging.get_logger(node_name).fatal(f"invalid parameter, not starting: {error}")
    rclpy.try_shutdown()
    sys.exit(EXIT_BAD_PARAMETER)


def spin_bridge(node: ArmBridgeNode, unreachable: str, ready: str | None = None) -> int:
    """Run a bridge node's life: configure (connect the backend), activate, spin until Ctrl-C /
    SIGTERM; then shut the node down, disconnect the backend (idempotent: a backend's own
    threads must end whatever happened), destroy the node and shut rclpy down. The one main
    loop of every bridge node (Franka, generic ROS 2, SO-101).

    Args:
        node: The bridge node (rclpy initialised, the backend not yet connected).
        unreachable: Logged when the backend cannot connect ("cannot reach ...").
        ready: Logged once connected (None: nothing).

    Returns:
        The process exit code: 0, or 1 when the backend could not connect.
    """
    executor = MultiThreadedExecutor(num_threads=3)
    executor.add_node(node)
    code = 0
    try:
        if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            node.get_logger().error(f"{unreachable}; exiting")
            code = 1
        else:
            if ready:
                node.get_logger().info(ready)
            node.trigger_activate()
            executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # SIGTERM shut the context down while the executor built its wait set
        if rclpy.ok():
            raise
    finally:
        try:
            node.trigger_shutdown()
        except Exception:  # noqa: BLE001 - the context may already be shut down (SIGTERM)
            pass
        node.backend.disconnect()
        node.destroy_node()
        rclpy.try_shutdown()
    return code


def main(argv: list[str] | None = None) -> None:
    """Entry point: build the backend, configure + activate, spin until Ctrl-C / SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", required=True, help="package.module:factory -> ArmBackend")
    parser.add_argument("--ns", default="arm", help="ROS namespace of the arm")
    args, ros_args = parser.parse_known_args(argv)
    rclpy.init(args=ros_args)
    try:
        node = ArmBridgeNode(_load_factory(args.backend)(), BridgeConfig(SafetyConfig()), args.ns)
    except BridgeParamError as e:
        exit_bad_parameter("arm_bridge", e)
    executor = MultiThreadedExecutor(num_threads=3)
    executor.add_node(node)
    try:
        node.trigger_configure()
        node.trigger_activate()
        executor.spin()
    except KeyboardInterrupt:
        pass
    finally:
        node.trigger_shutdown()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
