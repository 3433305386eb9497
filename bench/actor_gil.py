"""What the env's ROS 2 executor thread costs the policy's forward pass (the actor's GIL).

The actor acts in its main thread (EfficientNet-Lite0 on two 128x128 frames, one torch thread)
while a :class:`drivers.ros_session.RosSession` executor thread receives the robot's topics in
the same process. A py-spy profile of a pixel rehearsal's actor showed that thread busy in
rclpy's Python executor loop (``_wait_for_ready_callbacks``) more often than the main thread
ran the network, and the action left ~130 ms after its observation for ~20 ms of network.
Each torch op gives the GIL up and takes it back; while another thread runs Python, taking it
back waits up to the switch interval (5 ms).

This bench runs the forward pass every control period (10 Hz, new frames each time, so no
memo hit) in one process, with another process publishing the topics a bridge and a twin
publish (the five state topics a RosRobot reads at 100 Hz, two 128x128 images at 10 Hz), for
each variant:

- ``none``: no ROS session (the network alone);
- ``publisher``: no ROS session, but the publisher process runs (what its CPU use alone costs
  the forward pass on 2 cores: the baseline of the variants below);
- ``single``: RosSession subscribed to the topics, rclpy's SingleThreadedExecutor;
- ``single_si``: SingleThreadedExecutor with ``sys.setswitchinterval(0.0005)``;
- ``combined``: the session subscribed to ``robot_state`` (the whole state in one message at
  100 Hz, what :class:`drivers.ros_robot.RosRobot` reads now) and the two images.

The publisher always publishes both the five state topics and ``robot_state``.

(rclpy's experimental EventsExecutor, C++ dispatch, was tried: in Kilted it deadlocks when a
subscription is created while it spins, which RosSession does.)

One JSON object per variant: wall and thread-CPU time of the forward pass (mean, p50, p90).

    ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST python bench/actor_gil.py --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_efficiency import machine_info  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NS = "gilbench"
VARIANTS = ("none", "publisher", "single", "single_si", "combined")
N_STATE = 5  # joint_states, ee_pose, ee_twist, ee_wrench, gripper/state (drivers.ros_robot)


def publish(seconds: float) -> None:
    """The publisher process: a bridge's and a twin's topics at their rates."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import Image
    from std_msgs.msg import Float64MultiArray

    from drivers.ros import convert, qos
    from robot_rl.core.types import RobotState

    rclpy.init()
    node = rclpy.create_node("gil_publisher", namespace="/" + NS)
    state = [node.create_publisher(PoseStamped, f"state{i}", qos.SENSOR) for i in range(N_STATE)]
    cams = {c: node.create_publisher(Image, f"{c}/image", qos.SENSOR) for c in ("front", "wrist")}
    combined = node.create_publisher(Float64MultiArray, "robot_state", qos.SENSOR)
    z, q7 = np.zeros(6), np.zeros(7)
    pose = np.array([0.5, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0])
    rng = np.random.default_rng(0)
    img = Image()
    img.height = img.width = 128
    img.encoding, img.step = "rgb8", 128 * 3
    start = time.monotonic()
    k = 0
    while time.monotonic() - start < seconds and rclpy.ok():  # SIGTERM: rclpy shuts down
        msg = PoseStamped()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.pose.orientation.w = 1.0
        try:
            for pub in state:
                pub.publish(msg)
            t = time.monotonic()
            combined.publish(
                convert.robot_state_to_array_msg(RobotState(t, pose, z, z, 0.0, q7, q7))
            )
        except Exception:  # noqa: BLE001 - the context went away with a SIGTERM: done
            break
        if k % 10 == 0:
            for pub in cams.values():
                img.header.stamp = msg.header.stamp
                img.data = rng.integers(0, 255, 128 * 128 * 3, dtype=np.uint8).tobytes()
                pub.publish(img)
        k += 1
        time.sleep(max(0.0, start + k * 0.01 - time.monotonic()))
    node.destroy_node()
    if rclpy.ok():
        rclpy.shutdown()


def measure(variant: str, steps: int, features) -> dict:
    """Forward passes at 10 Hz under ``variant``; wall and thread CPU per pass."""
    import drivers.ros_session as rs
    from drivers.ros import qos

    session = None
    counts: dict[str, int] = {}
    if variant not in ("none", "publisher"):
        if variant == "single_si":
            sys.setswitchinterval(0.0005)
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import Image

        session = rs.RosSession(NS, node_name=f"gil_{variant}")
        if variant == "combined":
            from std_msgs.msg import Float64MultiArray

            from drivers.ros import convert

            slots = [
                session.subscribe(
                    "robot_state", Float64MultiArray, qos.SENSOR, convert.array_msg_to_robot_state
                )[0]
            ]
        else:
            slots = [
                session.subscribe(f"state{i}", PoseStamped, qos.SENSOR, lambda m: (m, 0.0))[0]
                for i in range(N_STATE)
            ]
        for c in ("front", "wrist"):
            decode = lambda m: (np.frombuffer(m.data, np.uint8).reshape(128, 128, 3), 0.0)  # noqa: E731
            slots.append(session.subscribe(f"{c}/image", Image, qos.SENSOR, decode)[0])
        if not session.wait_until(lambda: all(s.count > 0 for s in slots), 30.0):
            raise RuntimeError("the publisher's topics did not arrive within 30 s")
        before = [s.count for s in slots]
    rng = np.random.default_rng(1)
    wall, cpu = [], []
    t_next = time.monotonic()
    for _ in range(steps):
        frames = rng.integers(0, 255, (2, 128, 128, 3), dtype=np.uint8)
        t0, c0 = time.perf_counter(), time.thread_time()
        features.encode(frames)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        t_next += 0.1
        time.sleep(max(0.0, t_next - time.monotonic()))
    if session is not None:
        counts = {s.topic: s.count - b for s, b in zip(slots, before, strict=True)}
        session.close()
    sys.setswitchinterval(0.005)

    def stats(xs: list[float]) -> dict:
        a = np.asarray(xs) * 1e3
        return {
            "mean": float(a.mean()),
            "p50": float(np.median(a)),
            "p90": float(np.quantile(a, 0.9)),
        }

    return {"forward_wall_ms": stats(wall), "forward_thread_cpu_ms": stats(cpu), "received": counts}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="forward passes per variant (10 Hz)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--publish", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help="append the JSON lines here")
    args = p.parse_args()
    if args.publish is not None:
        publish(args.publish)
        return 0
    import torch

    from policies.features import EfficientNetFeatures, installed_weights_path

    torch.set_num_threads(1)
    features = EfficientNetFeatures(installed_weights_path(), "cpu")
    features.memo_frames = 0  # every pass runs the network
    lines = []
    for variant in args.variants:
        pub = None
        if variant != "none":
            seconds = args.steps * 0.1 + 60.0
            pub = subprocess.Popen(
                [sys.executable, __file__, "--publish", str(seconds)], cwd=REPO, env=os.environ
            )
        try:
            figures = measure(variant, args.steps, features)
        finally:
            if pub is not None:
                pub.terminate()
                pub.wait(10)
        record = {
            "benchmark": "actor_gil",
            "config": {"variant": variant, "steps": args.steps, "frames": "2x128x128", "hz": 10},
            "machine": machine_info(),
            "figures": figures,
        }
        line = json.dumps(record)
        print(line, flush=True)
        lines.append(line)
    if args.out is not None:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
