"""RosSession: one private rclpy context, node and executor thread for the env side.

:class:`drivers.ros_robot.RosRobot`, :class:`drivers.ros_camera.RosCamera`,
:class:`drivers.ros_task.RosTwinTask` and :class:`drivers.ros_clock.RosLockstepClock` of one
arm namespace share one session: their subscriptions feed :class:`Latest` slots (newest message,
its stamp and a receive counter), and :meth:`RosSession.wait_until` blocks the env thread on a
condition over those slots, signalled by every callback. Service calls and parameter updates
are synchronous with a timeout and raise :class:`RosTimeoutError` naming the service.

Untrusted inbound topics (``teleop/*``: anyone may publish there, at any rate) are subscribed
on the session's :attr:`RosSession.intake` (:mod:`drivers.ros.intake`): a second node with its
own thread and a message-rate budget, so that a flood on them never delays the state, camera
and service answers the env waits for.

The context is private (``rclpy.Context``), so a session never touches rclpy's global default
context and several sessions (or tests) can coexist in one process. The ROS environment
(``ROS_DOMAIN_ID`` ...) is read from ``os.environ`` at :meth:`RosSession.start`, unless a
``domain_id`` is given.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile

from drivers.ros.intake import CommandIntake

T = TypeVar("T")
log = logging.getLogger(__name__)
REJECTION_LOG_PERIOD_S = 5.0
"""A topic's rejections are logged at the first of a run, then at most once per this period."""
IDEMPOTENT_RESEND_S = 2.0
"""An idempotent service call that got no answer this long is sent again (see RosSession.call)."""


class RosTimeoutError(TimeoutError):
    """A service did not answer (or a message did not arrive) in time; the message names it."""


@dataclass
class Latest(Generic[T]):
    """The newest decoded message of one topic.

    Attributes:
        topic: Fully qualified topic name (for messages).
        kind: What one message is, for messages ("message", "frame").
        value: Decoded value of the newest valid message (None before the first).
        stamp_s: Its ``header.stamp`` in seconds (None before the first).
        count: Valid messages received so far.
        received_at_s: ``time.monotonic()`` when the newest valid message arrived.
        rejected: Malformed messages dropped so far.
        rejected_in_row: Malformed messages dropped since the last valid one.
        last_error: Why the last malformed message was dropped.
        logged_at_s: ``time.monotonic()`` of the last rejection logged (throttling).
    """

    topic: str
    kind: str = "message"
    value: T | None = None
    stamp_s: float | None = None
    count: int = 0
    received_at_s: float | None = None
    rejected: int = 0
    rejected_in_row: int = 0
    last_error: str | None = None
    logged_at_s: float = field(default=-math.inf, repr=False)

    def describe_rejections(self) -> str:
        """Why no newer valid message: ``the last 37 frames on /arm/front/image_raw were
        rejected: <reason>``; "" if the newest message was valid."""
        n = self.rejected_in_row
        if not n:
            return ""
        what = f"the last {self.kind}" if n == 1 else f"the last {n} {self.kind}s"
        verb = "was" if n == 1 else "were"
        return f"{what} on {self.topic} {verb} rejected: {self.last_error}"

    def describe_missing(self) -> str:
        """Why there is no value: never received, or only malformed messages."""
        if self.rejected:
            return f"no valid {self.kind} on {self.topic} yet; {self.describe_rejections()}"
        return f"no {self.kind} on {self.topic} yet; is its publisher running (same ROS_DOMAIN_ID)?"


class RosSession:
    """A private rclpy node for one arm namespace, spun in a background thread.

    Args:
        namespace: Arm namespace without slashes (topics ``/<namespace>/...``).
        node_name: Name of the env-side node.
        domain_id: ``ROS_DOMAIN_ID`` (None: from the environment).
    """

    def __init__(
        self, namespace: str = "arm", node_name: str = "robot_rl_env", domain_id: int | None = None
    ) -> None:
        self.namespace = namespace.strip("/")
        self.node_name = node_name
        self.domain_id = domain_id
        self.cond = threading.Condition()
        """Notified after every message and every completed service call."""
        self._context: Context | None = None
        self._node: Node | None = None
        self._executor: SingleThreadedExecutor | None = None
        self._thread: threading.Thread | None = None
        self._intake: CommandIntake | None = None
        self._clients: dict[tuple[type, str], Any] = {}
        self.resent_requests = 0  # idempotent requests sent again (an answer was lost)
        self._lock = threading.Lock()
        self.synced: list[Latest] = []
        """Streams that must catch up with :attr:`robot_time_s` after a reset or a lockstep
        step (state parts, camera images, task status); components register theirs."""
        self.robot_time_s: float | None = None
        """The robot-side time of the last time-setting service answer (``reset``,
        ``task/reset``, ``sim/step``): their responses carry ``{"stamp_s": ...}``."""
        self.robot_call_started_s: float = 0.0
        """``time.monotonic()`` when that service call began."""
        self.arrival_hooks: list[Callable[[Latest], None]] = []
        """Called with the slot (under :attr:`cond`, in the executor thread) after every valid
        message; keep them cheap (e.g. :class:`drivers.ros_clock.StreamAlignedClock`)."""

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._node is not None

    def start(self) -> None:
        """Create the context, node and executor thread (idempotent)."""
        with self._lock:
            if self._node is not None:
                return
            ctx = Context()
            kwargs = {} if self.domain_id is None else {"domain_id": self.domain_id}
            rclpy.init(context=ctx, **kwargs)
            node = rclpy.create_node(self.node_name, namespace="/" + self.namespace, context=ctx)
            executor = SingleThreadedExecutor(context=ctx)
            executor.add_node(node)
            self._context, self._node, self._executor = ctx, node, executor
            self._thread = threading.Thread(target=self._spin, name="ros-session", daemon=True)
            self._thread.start()

    def _spin(self) -> None:
        assert self._executor is not None
        try:
            self._executor.spin()
        except ExternalShutdownException:
            pass

    def close(self) -> None:
        """Stop the executor thread and destroy the node and context (idempotent)."""
        with self._lock:
            if self._node is None:
                return
            assert self._executor is not None and self._context is not None
            if self._intake is not None:
                self._intake.stop()
                self._intake = None
            self._executor.shutdown(timeout_sec=2.0)
            self._node.destroy_node()
            if self._context.ok():
                rclpy.shutdown(context=self._context)
            if self._thread is not None:
                self._thread.join(timeout=2.0)
            self._node = self._executor = self._context = self._thread = None
            self._clients.clear()

    @property
    def node(self) -> Node:
        """The node (starts the session on first use)."""
        self.start()
        assert self._node is not None
        return self._node

    @property
    def intake(self) -> CommandIntake:
        """The rate-budgeted intake for untrusted topics (created and started on first use)."""
        node = self.node
        with self._lock:
            if self._intake is None:
                self._intake = CommandIntake(node)
                self._intake.start()
            return self._intake

    def topic(self, name: str) -> str:
        """Fully qualified name of ``name`` in this namespace."""
        return f"/{self.namespace}/{name}"

    # -- topics --------------------------------------------------------------------------------

    def subscribe(
        self,
        name: str,
        msg_type: type,
        qos: QoSProfile,
        decode: Callable[[Any], tuple[T, float]],
        kind: str = "message",
    ) -> tuple[Latest[T], Any]:
        """Keep the newest decoded message of topic ``name`` (relative to the namespace).

        ``decode(msg) -> (value, stamp_s)`` raises ValueError on a malformed message, which is
        then counted in ``Latest.rejected`` (and ``rejected_in_row``), its reason kept in
        ``Latest.last_error`` and logged (the first of a run of rejections, then at most every
        :data:`REJECTION_LOG_PERIOD_S`), and never replaces a valid value. Any other exception
        from ``decode`` is treated the same way (a decoder bug must not stop the executor).

        Args:
            kind: What one message is, for messages ("frame" for images).

        Returns:
            ``(latest, subscription)``; destroy the subscription with :meth:`unsubscribe`.
        """
        slot: Latest[T] = Latest(topic=self.topic(name), kind=kind)

        def callback(msg: Any) -> None:
            try:
                value, stamp_s = decode(msg)
            except Exception as e:  # noqa: BLE001 - counted, kept and logged; see above
                reason = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
                now = time.monotonic()
                with self.cond:
                    slot.rejected += 1
                    slot.rejected_in_row += 1
                    slot.last_error = reason
                    due = slot.rejected_in_row == 1 or now - slot.logged_at_s >= (
                        REJECTION_LOG_PERIOD_S
                    )
                    if due:
                        slot.logged_at_s = now
                        line = slot.describe_rejections()
                    self.cond.notify_all()
                if due:
                    log.warning("%s (%d rejected in all)", line, slot.rejected)
                return
            with self.cond:
                recovered = slot.rejected_in_row
                slot.value, slot.stamp_s = value, stamp_s
                slot.count += 1
                slot.rejected_in_row = 0
                slot.received_at_s = time.monotonic()
                for hook in self.arrival_hooks:
                    hook(slot)
                self.cond.notify_all()
            if recovered:
                log.warning(
                    "%s: valid %ss again after %d rejected", slot.topic, slot.kind, recovered
                )

        sub = self.node.create_subscription(msg_type, name, callback, qos)
        return slot, sub

    def unsubscribe(self, sub: Any) -> None:
        if self._node is not None and sub is not None:
            self._node.destroy_subscription(sub)

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``predicate()`` (evaluated under :attr:`cond`) is True; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(min(remaining, 0.1))
        return True

    # -- services ------------------------------------------------------------------------------

    def call(
        self,
        srv_type: type,
        name: str,
        request: Any,
        timeout_s: float,
        resend_after_s: float | None = None,
    ) -> Any:
        """Call service ``name`` (relative to the namespace, or absolute) and wait for the answer.

        ``resend_after_s`` (only for idempotent services: set_parameters, hold, estop,
        clear_error): send the request again when no answer came this long, until ``timeout_s``.
        A ROS 2 service can lose the answer to a client's first request when the server's
        answer writer has not discovered the client yet (it waits 100 ms, then drops it: "failed
        to send response (timeout)", ros2/ros2#1253, ros2/rmw_fastrtps#842); a loaded machine
        makes discovery slower than that.

        Raises:
            RosTimeoutError: The service is not available or did not answer within
                ``timeout_s`` (each).
        """
        key = (srv_type, name)
        client = self._clients.get(key)
        if client is None:
            client = self.node.create_client(srv_type, name)
            self._clients[key] = client
        full = name if name.startswith("/") else self.topic(name)
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise RosTimeoutError(
                f"service {full} is not available after {timeout_s:g} s; is the node that serves "
                "it running (same ROS_DOMAIN_ID, `robot-rl up` setup)?"
            )
        deadline = time.monotonic() + timeout_s
        while True:
            done = threading.Event()
            future = client.call_async(request)
            future.add_done_callback(lambda _f, done=done: done.set())
            left = deadline - time.monotonic()
            wait = left if resend_after_s is None else min(left, resend_after_s)
            if done.wait(max(wait, 0.0)):
                break
            client.remove_pending_request(future)
            if time.monotonic() < deadline and resend_after_s is not None:
                self.resent_requests += 1
                continue
            raise RosTimeoutError(
                f"service {full} did not answer within {timeout_s:g} s; is its node stopped or "
                "overloaded?"
            )
        exc = future.exception()
        if exc is not None:
            raise RuntimeError(f"service {full} failed: {exc}") from exc
        return future.result()

    def trigger(self, name: str, timeout_s: float, resend_after_s: float | None = None) -> dict:
        """Call a ``std_srvs/Trigger`` service; return its message parsed as JSON (or {}).
        ``resend_after_s``: see :meth:`call` (idempotent services only).

        Raises:
            RuntimeError: The service answered ``success=False`` (its message says why).
            RosTimeoutError: See :meth:`call`.
        """
        from std_srvs.srv import Trigger

        resp = self.call(Trigger, name, Trigger.Request(), timeout_s, resend_after_s)
        if not resp.success:
            raise RuntimeError(f"{self.topic(name)} refused: {resp.message}")
        try:
            data = json.loads(resp.message) if resp.message else {}
        except json.JSONDecodeError:
            return {"message": resp.message}
        return data if isinstance(data, dict) else {"message": data}

    def timed_trigger(
        self, name: str, timeout_s: float, resend_after_s: float | None = None
    ) -> dict:
        """:meth:`trigger` for a service whose answer carries ``{"stamp_s": float}``; records it
        in :attr:`robot_time_s` (and the call's start in :attr:`robot_call_started_s`).

        Raises:
            ValueError: The answer has no finite ``stamp_s``.
        """
        started = time.monotonic()
        data = self.trigger(name, timeout_s, resend_after_s)
        stamp = data.get("stamp_s")
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or stamp != stamp:
            raise ValueError(
                f"{self.topic(name)} answered {data!r}; expected JSON with a numeric 'stamp_s' "
                "(drivers/CONTRACT.md)"
            )
        with self.cond:
            self.robot_time_s = float(stamp)
            self.robot_call_started_s = started
        return data

    def caught_up(self) -> list[Latest]:
        """Synced streams without a message stamped :attr:`robot_time_s` that arrived after
        the last time-setting call began (call under :attr:`cond`)."""
        t = self.robot_time_s
        return [
            s
            for s in self.synced
            if t is None
            or s.stamp_s is None
            or abs(s.stamp_s - t) > 1e-6
            or (s.received_at_s or 0.0) < self.robot_call_started_s
        ]

    def wait_synced(self, timeout_s: float, what: str) -> None:
        """Wait until every synced stream has a message for :attr:`robot_time_s`.

        Raises:
            StaleSensorError: Some stream did not deliver in time (names them).
        """
        from robot_rl.core.types import StaleSensorError

        if self.wait_until(lambda: not self.caught_up(), timeout_s):
            return
        with self.cond:
            late = [
                f"{s.topic} (newest stamp {s.stamp_s}"
                + (f"; {s.describe_rejections()})" if s.rejected_in_row else ")")
                if s.value is not None
                else s.describe_missing()
                for s in self.caught_up()
            ]
        raise StaleSensorError(
            f"after {what} at robot time {self.robot_time_s} s, no message for that time within "
            f"{timeout_s:g} s on: {'; '.join(late)}"
        )

    def set_parameters(self, node: str, values: Mapping[str, Any], timeout_s: float) -> None:
        """Set parameters of node ``/<namespace>/<node>`` (standard SetParameters service).

        Raises:
            RuntimeError: The node rejected a parameter (its reason is in the message).
            RosTimeoutError: See :meth:`call`.
        """
        from rcl_interfaces.srv import SetParameters

        params = [Parameter(k, value=_param_value(v)).to_parameter_msg() for k, v in values.items()]
        req = SetParameters.Request(parameters=params)
        resp = self.call(
            SetParameters, f"{node}/set_parameters", req, timeout_s, IDEMPOTENT_RESEND_S
        )
        for (key, _), result in zip(values.items(), resp.results, strict=True):
            if not result.successful:
                raise RuntimeError(
                    f"node {self.topic(node)} rejected parameter {key!r}: {result.reason}"
                )


def _param_value(v: Any) -> Any:
    """Numpy values -> plain Python for rclpy's Parameter (lists of floats stay lists)."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [float(x) for x in v]
    return v
