"""CommandIntake: untrusted inbound topics on their own node, thread and rate budget.

A node that serves safety (the arm bridge's ``estop`` / ``hold`` / ``clear_error``, the twin's
``sim/step`` / ``reset``, the watchdog, state and status publishing) must be served whatever
arrives on the topics anyone may publish to (``target_pose``, ``gripper/command``,
``teleop/*``): any rate, any size, any content. With those subscriptions in the same executor
as the services, every message costs the executor a Python wake-up, a take and a callback
(~0.1-0.3 ms under the GIL), so a publisher at a few kHz kept that executor and the GIL busy and
service calls waited for seconds (``sim/step did not answer within 30 s``, issue 17).

So inbound command topics live on a second node (``<name>_intake``, same namespace, same
context), with its own single-threaded executor in its own thread, and that thread takes at
most ``max_rate_hz`` messages per second in total: after each callback it sleeps until its next
slot. A rate alone does not bound the time: on a slow or loaded machine one take + callback
can cost more than a slot (0.4 ms measured under a flood here, and malformed messages such as
a 64 KB ``frame_id`` cost more), and the thread would then never sleep. So the thread's CPU
time is budgeted too, as a bucket: it earns ``max_busy_share`` seconds of CPU per second of wall
time (default :data:`DEFAULT_MAX_BUSY_SHARE`), holds at most ``burst_s`` of it
(:data:`DEFAULT_BURST_S`), and after a take that left it in debt it sleeps until the debt is
paid. Over any long stretch the intake holds the GIL at most that share of the time, however
slow the machine; a short burst (a commander's target and gripper command just before a lockstep
``sim/step``, which waits only ``--command-wait-s`` for them) is taken at once.

Messages that arrive faster wait in the DDS reader history (keep-last: the newest
replaces the older ones in C++, without the GIL), so a flood costs this process at most
``max_rate_hz`` callbacks per second, and the safety executor never sees it. The executor
takes ready subscriptions round-robin, so a flood on one topic does not starve another of the
intake's topics.

Not a context of its own: a context is one DDS participant, whose shared-memory port (a queue
of a few hundred messages) a flood can fill, dropping service requests until the writer's next
heartbeat. An intake on its own participant keeps the flood off the owner's port, but then a
commander's target and its ``sim/step`` arrive on different ports, out of order, and a target
taken after the step is stale (measured: ``test_narrowed_box_holds_under_a_flood`` lost box
clips). Open question, see the issue notes.

What this means for commands: the bridge executes only the newest target per control period
anyway, so a budget well above the control rate (default 1000 messages/s for all topics of
the intake together) loses nothing a well-behaved commander sends; messages dropped by DDS
under a flood are never seen, so ``status`` counts only the messages the bridge examined.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, ShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile

DEFAULT_MAX_RATE_HZ = 1000.0
"""Default budget of an intake: messages per second over all its topics."""
DEFAULT_MAX_BUSY_SHARE = 0.25
"""Default share of the time an intake thread may spend taking and handling messages."""
DEFAULT_BURST_S = 0.05
"""Default CPU time an idle intake may spend at once, seconds (~100 typical takes)."""


class CommandIntake:
    """Subscriptions for untrusted inbound topics, served by a rate-budgeted thread.

    The intake node is ``<owner name>_intake`` in the owner's namespace and context. It ignores
    the process's command-line arguments (a global ``-r __node:=arm_bridge`` would otherwise
    give it the owner's name, and its parameter services would answer for the owner); topic
    names are resolved by the owner (its remaps apply) before subscribing.

    Args:
        owner: The node the topics belong to.
        max_rate_hz: Callbacks per second over all topics (the rest is dropped by DDS).
        max_busy_share: Largest share of the time (CPU time of this thread over wall time) the
            intake spends taking and handling messages over any long stretch, in (0, 1].
        burst_s: CPU time the intake may spend at once after being idle, seconds (>= 0).

    Raises:
        ValueError: ``max_rate_hz`` is not positive, ``max_busy_share`` not in (0, 1] or
            ``burst_s`` negative.
    """

    def __init__(
        self,
        owner: Node,
        max_rate_hz: float = DEFAULT_MAX_RATE_HZ,
        max_busy_share: float = DEFAULT_MAX_BUSY_SHARE,
        burst_s: float = DEFAULT_BURST_S,
    ) -> None:
        if not max_rate_hz > 0:
            raise ValueError(f"max_rate_hz must be > 0, got {max_rate_hz}")
        if not 0 < max_busy_share <= 1:
            raise ValueError(f"max_busy_share must be in (0, 1], got {max_busy_share}")
        if not burst_s >= 0:
            raise ValueError(f"burst_s must be >= 0, got {burst_s}")
        self.min_interval_s = 1.0 / float(max_rate_hz)
        self.max_busy_share = float(max_busy_share)
        self.burst_s = float(burst_s)
        self._owner = owner
        context = owner.context  # not one of its own: see the module docstring
        self.node: Node = rclpy.create_node(
            f"{owner.get_name()}_intake",
            namespace=owner.get_namespace(),
            context=context,
            use_global_arguments=False,
        )
        self._context = context
        self._executor = SingleThreadedExecutor(context=context)
        self._executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.taken = 0
        """Messages taken (callbacks run) so far."""

    def subscribe(
        self, msg_type: type, topic: str, callback: Callable[[Any], None], qos: QoSProfile
    ) -> Any:
        """Subscribe ``callback`` to ``topic`` (as the owner would name it) on the intake node."""

        def counted(msg: Any) -> None:
            self.taken += 1
            callback(msg)

        resolved = self._owner.resolve_topic_name(topic)
        return self.node.create_subscription(msg_type, resolved, counted, qos)

    def unsubscribe(self, sub: Any) -> None:
        self.node.destroy_subscription(sub)

    def start(self) -> None:
        """Start the intake thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"{self.node.get_name()}-intake", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        next_slot = time.monotonic()
        credit_s, credit_at = self.burst_s, next_slot  # the CPU-time bucket
        while not self._stop.is_set() and self._context.ok():
            before = self.taken
            cpu0 = time.thread_time()
            try:
                self._executor.spin_once(timeout_sec=0.1)
            except (ExternalShutdownException, ShutdownException):
                return
            except Exception:  # noqa: BLE001 - a context torn down under us ends the thread
                if self._stop.is_set() or not self._context.ok():
                    return
                raise
            if self.taken != before:
                busy_s = time.thread_time() - cpu0
                now = time.monotonic()
                earned = self.max_busy_share * (now - credit_at)
                credit_s, credit_at = min(self.burst_s, credit_s + earned) - busy_s, now
                next_slot = max(next_slot + self.min_interval_s, now - self.min_interval_s)
                idle_s = max(next_slot - now, -credit_s / self.max_busy_share)
                if idle_s > 0:
                    self._stop.wait(idle_s)

    def stop(self) -> None:
        """Stop the thread and destroy the node (idempotent; call before the context ends)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._thread = None
        self._executor.shutdown(timeout_sec=1.0)
        try:
            self.node.destroy_node()
        except Exception:  # noqa: BLE001 - already destroyed with its context
            pass
