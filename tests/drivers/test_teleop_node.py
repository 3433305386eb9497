"""The teleop node replaying a recorded SpaceMouse file publishes the recorded sequence.

The node runs in a subprocess over real DDS (loopback); the test subscribes to
``/arm/teleop/joy`` and ``/arm/teleop/twist`` and checks the de-duplicated sequence of what
arrived, in order. The recorded HID reports stand in for the USB device (none on CI).
"""

from __future__ import annotations

import itertools
import json
import struct
import sys

import numpy as np
import pytest

pytest.importorskip("rclpy")

from geometry_msgs.msg import TwistStamped  # noqa: E402
from sensor_msgs.msg import Joy  # noqa: E402

from drivers.ros import qos  # noqa: E402
from drivers.ros.convert import msg_to_time  # noqa: E402
from drivers.teleop.mapping import state_from_joy  # noqa: E402

_DOMAINS = itertools.cycle(range(70, 76))  # helper C's range 70..89; 70..75 for teleop


def _sm(rid: int, *vals: int) -> str:
    return (bytes([rid]) + struct.pack(f"<{len(vals)}h", *vals)).hex()


def _write_recording(path) -> None:
    header = {"format": "robot_rl.teleop_events", "version": 1, "device": "spacemouse"}
    events = [
        (0.0, _sm(1, 350, 0, 0)),  # +x full
        (0.3, _sm(1, 0, -350, 0)),  # towards -y device = +vy
        (0.6, _sm(1, 0, 0, 0)),
        (0.6, _sm(2, 0, 0, -350)),  # +wz
        (0.9, _sm(2, 0, 0, 0)),
        (0.9, "0300200000"),  # Pro button 2 (success) held 0.1 s
        (1.0, "0300000000"),
        (1.2, "0301000000"),  # left / menu button: gripper close
        (1.5, "0300000000"),
    ]
    lines = [json.dumps(header)] + [json.dumps({"t_s": t, "raw": r}) for t, r in events]
    path.write_text("\n".join(lines) + "\n")


def _dedupe(items: list) -> list:
    out: list = []
    for x in items:
        if not out or out[-1] != x:
            out.append(x)
    return out


def test_replay_node_publishes_recorded_sequence(tmp_path, ros_processes, ros_client_factory):
    domain = next(_DOMAINS)
    rec = tmp_path / "events.jsonl"
    _write_recording(rec)
    client = ros_client_factory(domain)
    client.subscribe(Joy, "/arm/teleop/joy", qos.TELEOP_JOY)
    client.subscribe(TwistStamped, "/arm/teleop/twist", qos.SENSOR)
    node = ros_processes(
        [
            *(
                sys.executable,
                "-m",
                "drivers.teleop.node",
                "--device",
                "replay",
                "--file",
                str(rec),
            ),
            *("--ns", "arm", "--rate-hz", "50", "--exit-at-end", "--tail-ticks", "10"),
        ],
        domain,
        "teleop",
    )
    client.wait_for(lambda: not node.alive, 60.0, "the replay node to play the file and exit")
    client.spin_for(0.2)  # drain messages already delivered to this process
    assert node.proc.returncode == 0, node.log()

    joys = client.history["/arm/teleop/joy"]
    twists = client.history["/arm/teleop/twist"]
    assert len(joys) >= 40, f"only {len(joys)} joy messages"
    stamps = [msg_to_time(m.header.stamp) for m in joys]
    assert all(b > a for a, b in itertools.pairwise(stamps)), "joy stamps must increase"
    states = [state_from_joy(list(m.axes), list(m.buttons), 0.0) for m in joys]
    seq = _dedupe([(tuple(s.twist.round(6)), s.gripper, tuple(sorted(s.buttons))) for s in states])
    e = np.eye(6)
    expected = [
        (tuple(e[0]), None, ("intervene",)),
        (tuple(e[1]), None, ("intervene",)),
        (tuple(e[5]), None, ("intervene",)),
        (tuple(np.zeros(6)), None, ("success",)),
        (tuple(np.zeros(6)), None, ()),
        (tuple(np.zeros(6)), 1.0, ()),
        (tuple(np.zeros(6)), None, ()),
    ]
    assert seq == expected
    assert {m.header.frame_id for m in twists} == {"base"}
    tw = _dedupe([tuple(round(v, 6) for v in _twist(m)) for m in twists])
    assert tw == [tuple(e[0]), tuple(e[1]), tuple(e[5]), tuple(np.zeros(6))]


def test_replay_holds_at_an_await_until_the_recorder_runs_an_episode(
    tmp_path, ros_processes, ros_client_factory
):
    """An await line holds the presses (a lost press under load is what it prevents): the
    node publishes a device at rest, however long, until ``teleop/session`` says an episode
    runs; then the press follows, 0.05 s of file time later."""
    from std_msgs.msg import String

    domain = next(_DOMAINS)
    rec = tmp_path / "events.jsonl"
    header = {"format": "robot_rl.teleop_events", "version": 1, "device": "spacemouse"}
    items = [{"t_s": 0.0, "await": "episode"}, {"t_s": 0.05, "raw": _sm(1, 350, 0, 0)}]
    rec.write_text("\n".join(json.dumps(x) for x in [header, *items]) + "\n")
    client = ros_client_factory(domain)
    client.subscribe(Joy, "/arm/teleop/joy", qos.TELEOP_JOY)  # playback waits for both topics
    client.subscribe(TwistStamped, "/arm/teleop/twist", qos.SENSOR)
    session = client.publisher(String, "/arm/teleop/session", qos.STATUS)
    node = ros_processes(
        [sys.executable, "-m", "drivers.teleop.node", "--device", "replay", "--file", str(rec)]
        + ["--ns", "arm", "--rate-hz", "50"],
        domain,
        "teleop",
    )
    twists = client.history["/arm/teleop/twist"]
    # 50 messages at 50 Hz: a second of playback, twenty times the press's file time.
    client.wait_for(lambda: len(twists) >= 50, 60.0, "50 twists from the replay node")
    assert node.alive, node.log()
    assert not any(np.any(_twist(m)) for m in twists), "a press played before the episode ran"
    session.publish(String(data=json.dumps({"episode": 0, "state": "ended", "end": "reset"})))
    session.publish(String(data=json.dumps({"episode": 0, "state": "running", "seed": 3})))
    client.wait_for(lambda: np.any(_twist(twists[-1])), 30.0, "the press after the start")
    assert _twist(twists[-1]) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def _twist(m: TwistStamped) -> list[float]:
    lin, ang = m.twist.linear, m.twist.angular
    return [lin.x, lin.y, lin.z, ang.x, ang.y, ang.z]


def test_replay_needs_a_file():
    from drivers.teleop.node import build_teleop

    with pytest.raises(ValueError, match="--file"):
        build_teleop("replay")
