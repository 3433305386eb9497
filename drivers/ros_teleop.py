"""RosTeleop: :class:`robot_rl.core.protocols.Teleop` over ``teleop/twist`` + ``teleop/joy``.

The env side of the teleop topics (``drivers/CONTRACT.md``): a teleop node (a device, a
recorded event file, or the simulated human) publishes at its own rate; the recorder reads once
per env step. Between two :meth:`RosTeleop.read` calls:

- buttons are latched: a button is in the returned ``TeleopState.buttons`` if any message since
  the previous read had it down, so a tap (one message) between two env steps is never lost and
  a held button shows in every read while held;
- the gripper request is latched: the newest non-"no change" gripper target since the previous
  read (a tapped close key is one message);
- the twist is the newest one from either topic (both carry it), if it arrived within
  ``stale_after_s`` (receive time, this process's monotonic clock, so the teleop node may run
  on another machine); otherwise it is zero. An old twist is never reused, so a device that
  goes silent stops the arm. :meth:`RosTeleop.status` says why (waiting / live / silent).

A publisher whose clock goes back (the simulated human stamps its answers with the twin's sim
time, which restarts at every ``task/reset``) has started a new episode: the latches are cleared
before its first message of the new episode is latched, so nothing answered in an earlier
episode (or an evaluation in between) carries over. Device clocks never go back. "Goes back" is
judged per topic (a topic's stamp behind its own last one and behind everything accepted since
the last clear): the two topics arrive on separate readers, and under load an older twist can
land after a newer joy, which must not wipe a tap the joy carried.

The recorder announces its episodes on ``teleop/session`` (:meth:`RosTeleop.announce`: std_msgs/
String JSON ``{"episode": i, "state": "running" | "ended", ...}``, STATUS QoS, so a teleop node
that starts late reads the latest): a replayed event file waits there for each episode to run
(:mod:`drivers.teleop.events`), and a person's device recording marks the episode starts.

Malformed messages (wrong number of axes or buttons, NaN, out of range) are counted in the
status and ignored. ``teleop/joy`` is written and read with a history of 100
(:data:`drivers.ros.qos.TELEOP_JOY`), so neither the teleop node's writer nor this reader
collapses a burst of messages (and a tap in one of them) before the callback runs.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from geometry_msgs.msg import TwistStamped
from sensor_msgs.msg import Joy
from std_msgs.msg import String

from drivers.ros import convert, qos
from drivers.ros_session import RosSession
from drivers.teleop.mapping import state_from_joy
from robot_rl.core.types import TeleopState

JOY_READER = qos.TELEOP_JOY
"""Reader QoS of ``teleop/joy`` (see the module docstring)."""


WAITING, LIVE, SILENT = "waiting", "live", "silent"


@dataclass(frozen=True)
class RosTeleopConfig:
    """Where and how to read the teleop topics.

    Attributes:
        namespace: Arm namespace (topics ``/<namespace>/teleop/twist`` and ``.../joy``).
        stale_after_s: A twist received longer ago than this reads as zero, seconds. Longer
            than a few publish periods of the teleop node (50 Hz by default).
        gripper_threshold: |gripper axis| on ``teleop/joy`` at or above which the gripper
            target is set (as :func:`drivers.teleop.mapping.state_from_joy`).
    """

    namespace: str = "arm"
    stale_after_s: float = 0.25
    gripper_threshold: float = 0.5

    def __post_init__(self) -> None:
        if not self.stale_after_s > 0:
            raise ValueError(f"stale_after_s {self.stale_after_s} must be > 0 seconds")
        if not 0.0 < self.gripper_threshold <= 1.0:
            raise ValueError(f"gripper_threshold {self.gripper_threshold} must be in (0, 1]")


@dataclass(frozen=True)
class RosTeleopStatus:
    """What the teleop topics look like from the reader.

    Attributes:
        state: ``waiting`` (nothing received yet), ``live`` (a twist within
            ``stale_after_s``) or ``silent`` (messages stopped; the twist reads as zero).
        age_s: Seconds since the newest valid message (None before the first).
        received: Valid messages received (both topics).
        rejected: Malformed messages ignored (both topics).
        last_error: Why the last malformed message was rejected.
        publishers: Publishers of ``teleop/joy`` matched with the reader.
        last_stamp_s: ``header.stamp`` of the newest valid message (the publisher's clock).
    """

    state: str
    age_s: float | None
    received: int
    rejected: int
    last_error: str | None
    publishers: int
    last_stamp_s: float | None

    def describe(self, topic: str = "teleop") -> str:
        """One line for a status display."""
        bad = f", {self.rejected} malformed ignored ({self.last_error})" if self.rejected else ""
        if self.state == WAITING:
            who = "no publisher" if self.publishers == 0 else f"{self.publishers} publisher(s)"
            return f"{topic}: waiting for a first message ({who}){bad}"
        if self.state == SILENT:
            return f"{topic}: silent for {self.age_s:.1f} s; twist reads as zero{bad}"
        return f"{topic}: live ({self.received} messages){bad}"


class RosTeleop:
    """Teleop readings from ``teleop/twist`` + ``teleop/joy``. See the module docstring.

    Args:
        config: Topics and timeouts.
        session: A shared :class:`RosSession` of the same namespace (e.g. the env's); None
            creates a private one (closed by :meth:`disconnect`).
        now_fn: Monotonic clock for receive times and read stamps, seconds.
    """

    def __init__(
        self,
        config: RosTeleopConfig | None = None,
        session: RosSession | None = None,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or RosTeleopConfig()
        if session is not None and session.namespace != self.config.namespace.strip("/"):
            raise ValueError(
                f"session namespace {session.namespace!r} differs from the teleop namespace "
                f"{self.config.namespace!r}"
            )
        self._own_session = session is None
        self.session = session or RosSession(self.config.namespace, node_name="robot_rl_teleop")
        self._now = now_fn
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # notified for every valid message
        self._subs: list[Any] = []
        self._twist = np.zeros(6)
        self._twist_rx: float | None = None
        self._buttons: set[str] = set()
        self._gripper: float | None = None
        self._received = 0
        self._rejected = 0
        self._last_error: str | None = None
        self._last_stamp: float | None = None
        self._topic_stamp: dict[str, float] = {}  # newest stamp per topic (twist, joy)
        self._newest_since_clear: float | None = None
        self._joy_stamp: float | None = None  # header stamp of the newest valid teleop/joy
        self._session_pub: Any = None
        self._connected = False

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def joy_topic(self) -> str:
        return self.session.topic("teleop/joy")

    def connect(self) -> None:
        """Subscribe to both topics (idempotent). Does not wait for a publisher."""
        if self._connected:
            return
        # The session's rate-budgeted intake: a flood on the teleop topics (anyone may
        # publish there) must not delay the state, images and service answers of the env.
        intake = self.session.intake
        self._subs = [
            intake.subscribe(TwistStamped, "teleop/twist", self._on_twist, qos.SENSOR),
            intake.subscribe(Joy, "teleop/joy", self._on_joy, JOY_READER),
        ]
        if self._session_pub is None:
            self._session_pub = self.session.node.create_publisher(
                String, "teleop/session", qos.STATUS
            )
        self._connected = True

    def announce(self, episode: int, state: str, **extra: Any) -> None:
        """Tell the teleop node the recorder's episode ``episode`` is ``"running"`` (after its
        reset, when input counts) or ``"ended"`` (``extra``: e.g. ``end="success"``)."""
        if state not in ("running", "ended"):
            raise ValueError(f"state must be 'running' or 'ended', got {state!r}")
        if not self._connected:
            raise RuntimeError("RosTeleop is not connected; call connect() first")
        data = {"episode": int(episode), "state": state, **extra}
        self._session_pub.publish(String(data=json.dumps(data)))

    def disconnect(self) -> None:
        """Unsubscribe (and close the private session, if any). Idempotent."""
        if self._subs and self.session.started:
            for sub in self._subs:
                self.session.intake.unsubscribe(sub)
        self._subs = []
        if self._session_pub is not None and self.session.started:
            self.session.node.destroy_publisher(self._session_pub)
        self._session_pub = None
        self._connected = False
        if self._own_session:
            self.session.close()

    def publishers(self) -> int:
        """Publishers of ``teleop/joy`` matched with this reader (0 before :meth:`connect`)."""
        if not self._connected:
            return 0
        return self._subs[1].get_publisher_count()

    def wait_for_publisher(self, timeout_s: float) -> bool:
        """Wait until a ``teleop/joy`` publisher is matched with this reader; False after
        ``timeout_s``."""
        return self._wait(lambda: self.publishers() > 0, timeout_s)

    def wait_for_message(self, timeout_s: float) -> bool:
        """Wait until a first valid message has arrived; False after ``timeout_s``."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self._received > 0, timeout_s)

    @staticmethod
    def _wait(pred: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not pred():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    # -- reading -------------------------------------------------------------------------------

    def read(self) -> TeleopState:
        """The reading now: fresh twist (else zero), latched buttons and gripper request.

        Clears the latches, so each button press appears in exactly the reads that follow it
        until it is released (a tap: one read).
        """
        if not self._connected:
            raise RuntimeError("RosTeleop is not connected; call connect() first")
        now = self._now()
        with self._lock:
            fresh = self._twist_rx is not None and now - self._twist_rx <= self.config.stale_after_s
            twist = self._twist.copy() if fresh else np.zeros(6)
            buttons = frozenset(self._buttons)
            gripper = self._gripper
            self._buttons.clear()
            self._gripper = None
        return TeleopState(stamp_s=now, twist=twist, gripper=gripper, buttons=buttons)

    def clear(self) -> None:
        """Forget latched buttons and gripper requests (e.g. those pressed during a reset)."""
        with self._lock:
            self._buttons.clear()
            self._gripper = None

    def status(self) -> RosTeleopStatus:
        """Waiting / live / silent, with counters (see :class:`RosTeleopStatus`)."""
        now = self._now()
        pubs = self.publishers()
        with self._lock:
            age = None if self._twist_rx is None else now - self._twist_rx
            if age is None:
                state = WAITING
            elif age <= self.config.stale_after_s:
                state = LIVE
            else:
                state = SILENT
            return RosTeleopStatus(
                state, age, self._received, self._rejected, self._last_error, pubs, self._last_stamp
            )

    def wait_for_stamp(self, stamp_s: float, timeout_s: float, tol_s: float = 1e-6) -> bool:
        """Wait until the newest valid ``teleop/joy`` message is stamped ``stamp_s`` (within
        ``tol_s``, the publisher's clock); False after ``timeout_s``. For a publisher that
        answers each robot state with its stamp (the simulated human in lockstep). The joy
        message carries the whole reading (twist, buttons, gripper), so once it has arrived the
        next :meth:`read` holds the answer, whichever topic's message came first."""

        def arrived() -> bool:
            return self._joy_stamp is not None and abs(self._joy_stamp - stamp_s) <= tol_s

        with self._arrived:
            return self._arrived.wait_for(arrived, timeout_s)

    # -- callbacks (executor thread) -----------------------------------------------------------

    def _reject(self, error: Exception) -> None:
        with self._lock:
            self._rejected += 1
            self._last_error = str(error)

    def _on_twist(self, msg: TwistStamped) -> None:
        try:
            twist, stamp = convert.msg_to_twist(msg, frame_id=None)
            if np.any(np.abs(twist) > 1.0 + 1e-6):
                raise ValueError(f"teleop/twist must be in [-1, 1] per axis, got {twist}")
        except (ValueError, TypeError) as e:
            self._reject(e)
            return
        self._accept(np.clip(twist, -1.0, 1.0), stamp, None, frozenset())

    def _on_joy(self, msg: Joy) -> None:
        try:
            stamp = convert.msg_to_time(msg.header.stamp)
            state = state_from_joy(
                list(msg.axes), list(msg.buttons), stamp, self.config.gripper_threshold
            )
        except (ValueError, TypeError) as e:
            self._reject(e)
            return
        self._accept(state.twist, stamp, state.gripper, state.buttons, joy=True)

    def _accept(
        self,
        twist: np.ndarray,
        stamp: float,
        gripper: float | None,
        buttons: frozenset[str],
        joy: bool = False,
    ) -> None:
        now = self._now()
        topic = "joy" if joy else "twist"
        with self._lock:
            # The publisher's clock went back (a new episode of the simulated human): this
            # topic's stamp is behind its own last one, and behind everything accepted since
            # the last clear. The two topics arrive on separate readers, so one may lag the
            # other under load: an older twist after a newer joy is not a new episode (it
            # would wipe a tap latched from the joy).
            own = self._topic_stamp.get(topic)
            newest = self._newest_since_clear
            if (
                own is not None
                and stamp < own - 1e-6
                and newest is not None
                and (stamp < newest - 1e-6)
            ):
                self._buttons.clear()
                self._gripper = None
                self._newest_since_clear = None
            self._topic_stamp[topic] = stamp
            self._newest_since_clear = max(stamp, self._newest_since_clear or -math.inf)
            if joy:
                self._joy_stamp = stamp
            self._twist = np.asarray(twist, dtype=np.float64)
            self._twist_rx = now
            self._buttons |= buttons
            if gripper is not None:
                self._gripper = gripper
            self._received += 1
            self._last_stamp = stamp  # newest arrival (a robot clock may restart at a reset)
            self._arrived.notify_all()
