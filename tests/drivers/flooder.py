"""A misbehaving publisher: floods every inbound topic of an arm namespace as fast as it can.

Run as a process (``python tests/drivers/flooder.py --ns arm``); used by
``tests/drivers/test_flood.py`` and ``bench/ros_latency.py --flood``. In a tight loop it
publishes, round-robin over ``target_pose``, ``gripper/command``, ``teleop/twist`` and
``teleop/joy``, a mix of:

- targets far outside the workspace box, huge steps, random orientations, stamped with the
  newest ``ee_pose`` stamp (so a lockstep twin takes them as this period's command);
- NaN / inf fields, non-unit quaternions, a wrong ``frame_id``, a 64 KB ``frame_id``;
- gripper commands NaN, inf, -7, 9;
- teleop twists with NaN / 1e9 axes, Joy messages with wrong axis / button counts (up to 10k
  axes), NaN axes, and valid-looking ones.

Every second it prints one JSON line ``{"published": {topic: count}, "rate_hz": total,
"ee_pose_received": n}`` (flushed), so a test or benchmark can read how hard it pushed and
whether it hears the arm (its targets carry the stamps of the ``ee_pose`` it received); one
such line also goes out at once when the first ``ee_pose`` arrives.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - runs in a child process
    import rclpy
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.executors import ExternalShutdownException
    from sensor_msgs.msg import Joy
    from std_msgs.msg import Float64

    from drivers.ros import convert, qos
    from robot_rl.core import frames
    from robot_rl.core.safety import DOWN_QUAT

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ns", default="arm")
    args = p.parse_args(argv)
    ns = "/" + args.ns.strip("/")
    rclpy.init()
    node = rclpy.create_node("flooder")
    latest: dict = {}
    received = [0]

    def on_pose(msg: PoseStamped) -> None:
        latest["pose"] = msg
        received[0] += 1

    node.create_subscription(PoseStamped, f"{ns}/ee_pose", on_pose, qos.SENSOR)
    pubs = {
        "target_pose": node.create_publisher(PoseStamped, f"{ns}/target_pose", qos.COMMAND),
        "gripper/command": node.create_publisher(Float64, f"{ns}/gripper/command", qos.COMMAND),
        "teleop/twist": node.create_publisher(TwistStamped, f"{ns}/teleop/twist", qos.SENSOR),
        "teleop/joy": node.create_publisher(Joy, f"{ns}/teleop/joy", qos.COMMAND),
    }
    counts = dict.fromkeys(pubs, 0)
    rng = np.random.default_rng(0)
    down = np.array(DOWN_QUAT)
    big_frame = "x" * 65536

    def target() -> PoseStamped:
        ref = latest.get("pose")
        cur = np.array([0.5, 0.0, 0.2]) if ref is None else convert.msg_to_pose_stamped(ref)[0][:3]
        stamp = 0.0 if ref is None else convert.msg_to_time(ref.header.stamp)
        msg = PoseStamped(header=convert.header(stamp))
        r = rng.random()
        if r < 0.4:  # far outside the box / huge steps / any orientation
            q = frames.quat_normalize(rng.normal(size=4))
            msg.pose = convert.pose_to_msg(frames.pose(cur + rng.uniform(-3, 3, 3), q))
        elif r < 0.55:
            msg.pose = convert.pose_to_msg(frames.pose(cur, down))
            msg.pose.position.x = float(rng.choice([math.nan, math.inf, -math.inf]))
        elif r < 0.65:
            msg.pose = convert.pose_to_msg(frames.pose(cur, down))
            msg.pose.orientation.w = 3.0
        elif r < 0.75:
            msg.pose = convert.pose_to_msg(frames.pose(cur + [0.3, 0, 0], down))
            msg.header.frame_id = "world" if r < 0.7 else big_frame
        else:  # plausible, up to 20 cm away
            msg.pose = convert.pose_to_msg(frames.pose(cur + rng.uniform(-0.2, 0.2, 3), down))
        return msg

    def gripper() -> Float64:
        return Float64(data=float(rng.choice([math.nan, math.inf, -7.0, 9.0, 0.5])))

    def twist() -> TwistStamped:
        msg = TwistStamped(header=convert.header(time.monotonic()))
        v = rng.uniform(-1, 1, 6)
        r = rng.random()
        if r < 0.3:
            v[rng.integers(6)] = math.nan
        elif r < 0.5:
            v[rng.integers(6)] = 1e9
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(x) for x in v[:3])
        msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(x) for x in v[3:])
        return msg

    def joy() -> Joy:
        msg = Joy(header=convert.header(time.monotonic()))
        r = rng.random()
        if r < 0.3:
            msg.axes = [0.0] * int(rng.choice([0, 3, 10000]))
            msg.buttons = [1] * int(rng.choice([0, 50]))
        elif r < 0.6:
            msg.axes = [math.nan] * 7
            msg.buttons = [0] * 8
        else:
            msg.axes = [float(x) for x in rng.uniform(-1, 1, 7)]
            msg.buttons = [int(b) for b in rng.integers(0, 2, 8)]
        return msg

    makers = [
        ("target_pose", target),
        ("gripper/command", gripper),
        ("teleop/twist", twist),
        ("teleop/joy", joy),
    ]
    # Pre-build a pool per topic so that the loop spends its time publishing, not in numpy.
    pools = {name: [make() for _ in range(64)] for name, make in makers}
    next_report = time.monotonic() + 1.0
    total_at_report = 0
    i = 0
    try:
        while rclpy.ok():
            for name, pub in pubs.items():
                pub.publish(pools[name][i % 64])
                counts[name] += 1
            i += 1
            first_pose = False
            if i % 64 == 0:  # follow the arm: refresh stamps and targets
                before = received[0]
                rclpy.spin_once(node, timeout_sec=0)
                first_pose = before == 0 and received[0] > 0
                pools["target_pose"] = [target() for _ in range(64)]
            now = time.monotonic()
            if now >= next_report or first_pose:
                total = sum(counts.values())
                rate = (total - total_at_report) / max(now - next_report + 1.0, 1e-3)
                line = {"published": counts, "rate_hz": round(rate)}
                line["ee_pose_received"] = received[0]
                print(json.dumps(line), flush=True)
                total_at_report, next_report = total, now + 1.0
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # SIGTERM: rclpy shut the context down under a publish
        if rclpy.ok():
            raise


if __name__ == "__main__":
    main()
