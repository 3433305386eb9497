"""The QoS profiles of the ROS 2 contract (``drivers/CONTRACT.md``), defined once.

- :data:`SENSOR`: state streams (joint states, EE pose/twist/wrench, gripper state, teleop
  twist). Best effort, keep last 1, volatile, deadline 0.1 s: a late reading is useless and a
  silent publisher is detected by the subscriber's deadline-missed event (and by stamps).
- :data:`IMAGE`: camera images and camera info. As SENSOR with a 0.2 s deadline.
- :data:`COMMAND`: target pose, gripper command, teleop buttons. Reliable, keep last 1,
  volatile: the newest command must arrive; an old one must never be replayed.
- :data:`STATUS`: bridge and task status (JSON strings). Reliable, keep last 1, transient
  local: a late subscriber gets the last status.

Publisher and subscriber must use the same profile (a best-effort publisher does not match a
reliable subscriber; a subscriber's deadline must not be shorter than the publisher's).
"""

from __future__ import annotations

from rclpy.duration import Duration
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

SENSOR_DEADLINE_S = 0.1
"""Deadline of :data:`SENSOR`, seconds."""

IMAGE_DEADLINE_S = 0.2
"""Deadline of :data:`IMAGE`, seconds."""


def _duration(seconds: float) -> Duration:
    return Duration(nanoseconds=round(seconds * 1e9))


SENSOR = QoSProfile(
    reliability=ReliabilityPolicy.BEST_EFFORT,
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    durability=DurabilityPolicy.VOLATILE,
    deadline=_duration(SENSOR_DEADLINE_S),
)

IMAGE = QoSProfile(
    reliability=ReliabilityPolicy.BEST_EFFORT,
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    durability=DurabilityPolicy.VOLATILE,
    deadline=_duration(IMAGE_DEADLINE_S),
)

COMMAND = QoSProfile(
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    durability=DurabilityPolicy.VOLATILE,
)

TELEOP_JOY = QoSProfile(
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    durability=DurabilityPolicy.VOLATILE,
)
"""``teleop/joy``, both ends: reliable, keep last 100 (2 s at the teleop node's 50 Hz). A
tapped button is down in exactly one message. With a short history, a reader whose intake
thread is a moment behind on a loaded machine (its rate budget, the GIL) lets DDS replace the
unread tap with newer messages, and a writer replaces an unacknowledged one: the press is
lost. The intake's rate budget still bounds what a flood costs."""

STATUS = QoSProfile(
    reliability=ReliabilityPolicy.RELIABLE,
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

__all__ = [
    "COMMAND",
    "IMAGE",
    "IMAGE_DEADLINE_S",
    "SENSOR",
    "SENSOR_DEADLINE_S",
    "STATUS",
    "TELEOP_JOY",
]
