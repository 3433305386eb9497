"""Teleop node: a device (or a recorded event file) -> ``teleop/twist`` and ``teleop/joy``.

    python -m drivers.teleop.node --device keyboard|spacemouse|gamepad|replay \
        [--file events.jsonl] [--record out.jsonl] --ns arm --rate-hz 50
    python -m drivers.teleop.node --device so101_leader --leader-port /dev/ttyACM1 \
        --leader-calibration leader.json --ns arm      # drivers/teleop/so101_leader.py

Node ``teleop`` in namespace ``--ns``. Every ``1 / rate_hz`` s it reads the device once
(:class:`drivers.teleop.base.DeviceTeleop`, all logic there) and publishes
``teleop/twist`` (geometry_msgs/TwistStamped, unit-less [-1, 1] per axis, frame ``base``, SENSOR
QoS) and ``teleop/joy`` (sensor_msgs/Joy: axes = twist + gripper axis, buttons = intervene,
success, failure, reset, discard; COMMAND QoS), both stamped with the monotonic read time
(``drivers/CONTRACT.md``).

Replay: ``--device replay --file F`` plays F in real time through the recorded device's parser.
Playback starts when both topics have a subscriber (``--start-timeout-s`` at most), so a late
subscriber does not miss the start; ``--exit-at-end`` ends the node once the file is played, the
final state has been published ``--tail-ticks`` times, and the episode the file drove has ended
(the recorder's ``"ended"`` announcement: a final press is then surely read; at most
``--end-wait-s`` after the tail, and at once when no recorder announces anything).

Episodes: the node reads ``teleop/session`` (std_msgs/String JSON ``{"episode": i, "state":
"running" | "ended", ...}``, STATUS QoS), where ``record`` and ``label`` announce every episode
(``drivers/CONTRACT.md``). A replayed file's await lines hold playback until the next episode
runs, and ``--record`` writes an await line at every episode start, so a recorded session replays
episode by episode (:mod:`drivers.teleop.events`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import rclpy
from geometry_msgs.msg import TwistStamped
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from sensor_msgs.msg import Joy
from std_msgs.msg import String

from drivers.ros import convert, qos

from .base import DeviceTeleop
from .mapping import TeleopMapConfig, joy_from_state
from .recording import DEVICES, ReplaySource, build_teleop


class TeleopNode(Node):
    """Thin ROS adapter: reads the teleop on a timer and publishes twist + joy."""

    def __init__(
        self,
        teleop: DeviceTeleop,
        namespace: str,
        rate_hz: float,
        wait_for_subscribers: bool,
        start_timeout_s: float,
        exit_at_end: bool,
        tail_ticks: int,
        end_wait_s: float = 30.0,
    ) -> None:
        super().__init__("teleop", namespace=namespace)
        if not rate_hz > 0:
            raise ValueError(f"rate_hz {rate_hz} must be > 0")
        self.teleop = teleop
        self.twist_pub = self.create_publisher(TwistStamped, "teleop/twist", qos.SENSOR)
        self.joy_pub = self.create_publisher(Joy, "teleop/joy", qos.TELEOP_JOY)
        self._wait = wait_for_subscribers
        self._deadline = time.monotonic() + start_timeout_s
        self._exit_at_end = exit_at_end
        self._tail = tail_ticks
        self.connected = False
        self._awaited = 0
        self._running: int | None = None  # the recorder's episode announced running, not ended
        self._end_wait_s = end_wait_s
        self._tail_done_at: float | None = None
        self.done = False
        self.published = 0
        self.session_sub = self.create_subscription(
            String, "teleop/session", self._on_session, qos.STATUS
        )
        self.timer = self.create_timer(1.0 / rate_hz, self._tick)

    def _on_session(self, msg: String) -> None:
        """An episode announcement of the recorder: a running episode is an episode start."""
        try:
            data = json.loads(msg.data)
            index, state = data["episode"], data["state"]
            if not isinstance(index, int) or isinstance(index, bool):
                raise TypeError(f"episode must be an integer, got {index!r}")
        except (ValueError, KeyError, TypeError) as e:
            self.get_logger().warn(f"teleop/session: malformed announcement ignored ({e})")
            return
        self.get_logger().info(f"teleop/session: episode {index} {state}")
        if state == "running":
            self._running = index
            self.teleop.episode_started(index, time.monotonic())
        elif self._running == index:
            self._running = None

    def _ready(self) -> bool:
        if not self._wait:
            return True
        subscribed = (
            self.twist_pub.get_subscription_count() > 0
            and self.joy_pub.get_subscription_count() > 0
        )
        if not subscribed and time.monotonic() > self._deadline:
            self.get_logger().warn("no subscriber before --start-timeout-s; starting anyway")
            return True
        return subscribed

    def _tick(self) -> None:
        if self.done:
            return
        if not self.connected:
            if not self._ready():
                return
            self.teleop.connect()
            self.connected = True
            self.get_logger().info(f"teleop {self.teleop.kind} connected")
        state = self.teleop.read()
        self.twist_pub.publish(convert.twist_stamped_to_msg(state.twist, state.stamp_s))
        axes, buttons = joy_from_state(state)
        self.joy_pub.publish(Joy(header=convert.header(state.stamp_s), axes=axes, buttons=buttons))
        self.published += 1
        source = self.teleop.source
        if isinstance(source, ReplaySource) and source.awaited != self._awaited:
            self._awaited = source.awaited
            self.get_logger().info(f"replay: await {self._awaited} passed, playing on")
        if self._exit_at_end and isinstance(source, ReplaySource) and source.finished:
            self._tail -= 1
            if self._tail > 0:
                return
            now = time.monotonic()
            if self._tail_done_at is None:
                self._tail_done_at = now
            # A recorder reads once per step: leave only once it has ended the episode the
            # file drove, so the file's last press (sent moments ago) is surely taken.
            waited = now - self._tail_done_at
            if self._running is None or waited >= self._end_wait_s:
                if self._running is not None:
                    self.get_logger().warn(
                        f"episode {self._running} still runs {waited:.1f} s after the file "
                        "ended (--end-wait-s); exiting"
                    )
                self.done = True


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", required=True, choices=DEVICES)
    p.add_argument("--file", default=None, help="recorded event file (--device replay)")
    p.add_argument("--record", default=None, help="record raw device events to this file")
    p.add_argument("--ns", default="arm", help="ROS namespace of the arm")
    p.add_argument("--rate-hz", type=float, default=50.0, help="publish rate (Hz)")
    p.add_argument("--deadzone", type=float, default=TeleopMapConfig.deadzone)
    p.add_argument("--hid-path", default=None, help="SpaceMouse hidraw path (default: find)")
    p.add_argument("--event-path", default=None, help="gamepad /dev/input/event* (default: find)")
    p.add_argument("--leader-port", default=None, help="so101_leader: the leader arm's port")
    p.add_argument("--leader-calibration", default=None, help="so101_leader: its calibration")
    p.add_argument(
        "--wait-for-subscribers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start reading only once both topics have a subscriber (default: on for replay)",
    )
    p.add_argument("--start-timeout-s", type=float, default=30.0)
    p.add_argument("--exit-at-end", action="store_true", help="replay: exit when played")
    p.add_argument("--tail-ticks", type=int, default=10)
    p.add_argument(
        "--end-wait-s",
        type=float,
        default=30.0,
        help="replay with --exit-at-end: wait at most this long for the recorder to end the "
        "episode the file drove",
    )
    return p.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args, ros_args = _parse(argv)
    teleop = build_teleop(
        args.device,
        args.file,
        args.record,
        TeleopMapConfig(deadzone=args.deadzone),
        args.hid_path,
        args.event_path,
        (args.leader_port, args.leader_calibration),
    )
    wait = args.wait_for_subscribers
    if wait is None:
        wait = args.device == "replay"
    rclpy.init(args=[sys.argv[0], *ros_args])
    node = TeleopNode(
        teleop,
        args.ns,
        args.rate_hz,
        wait,
        args.start_timeout_s,
        args.exit_at_end,
        args.tail_ticks,
        args.end_wait_s,
    )
    try:
        while rclpy.ok() and not node.done:
            rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass  # Ctrl-C / SIGTERM: shut down cleanly
    finally:
        if node.connected:
            teleop.disconnect()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
