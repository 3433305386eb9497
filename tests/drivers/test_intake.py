"""CommandIntake (``drivers/ros/intake.py``): naming under global remaps, the budget, newest wins.

Real DDS on loopback within one process (two contexts: the owner's and a publisher's).
"""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("rclpy")

import rclpy  # noqa: E402
from rclpy.context import Context  # noqa: E402
from std_msgs.msg import Float64  # noqa: E402

from drivers.ros import qos  # noqa: E402
from drivers.ros.env import apply_ros_env  # noqa: E402
from drivers.ros.intake import CommandIntake  # noqa: E402


def _context(domain: int, args: list[str] | None = None) -> Context:
    ctx = Context()
    rclpy.init(args=args, context=ctx, domain_id=domain)
    return ctx


def test_intake_keeps_its_own_name_under_a_global_node_remap_and_enforces_its_budget(a1_domain):
    apply_ros_env(a1_domain)
    # A node started as `... --ros-args -r __node:=arm_bridge` (as setups rename the twin): the
    # remap is process-wide, so an intake that took global arguments would also be named
    # arm_bridge and answer the owner's parameter services.
    owner_ctx = _context(a1_domain, ["prog", "--ros-args", "-r", "__node:=arm_bridge"])
    pub_ctx = _context(a1_domain)
    owner = rclpy.create_node("twin", namespace="/arm", context=owner_ctx)
    budget_hz = 200.0
    intake = CommandIntake(owner, max_rate_hz=budget_hz)
    got: list[float] = []
    lock = threading.Lock()

    def on_msg(msg: Float64) -> None:
        with lock:
            got.append(msg.data)

    sub = intake.subscribe(Float64, "gripper/command", on_msg, qos.COMMAND)
    intake.start()
    pub_node = rclpy.create_node("flood", namespace="/arm", context=pub_ctx)
    pub = pub_node.create_publisher(Float64, "/arm/gripper/command", qos.COMMAND)
    try:
        assert owner.get_name() == "arm_bridge"
        assert intake.node.get_name() == "arm_bridge_intake"
        assert sub.topic_name == "/arm/gripper/command"
        deadline = time.monotonic() + 30.0
        while pub.get_subscription_count() == 0:
            assert time.monotonic() < deadline, "the intake never matched the publisher"
            time.sleep(0.01)
        names = {n for n, ns in pub_node.get_node_names_and_namespaces() if ns == "/arm"}
        deadline = time.monotonic() + 30.0
        while not {"arm_bridge_intake", "arm_bridge"} <= names:  # two participants: two discoveries
            assert time.monotonic() < deadline, names
            time.sleep(0.05)
            names = {n for n, ns in pub_node.get_node_names_and_namespaces() if ns == "/arm"}
        assert "arm_bridge" in names and "twin_intake" not in names, names
        # Flood: every message counts 0.0 except the last, 1.0.
        t0 = time.monotonic()
        for _ in range(20000):
            pub.publish(Float64(data=0.0))
        pub.publish(Float64(data=1.0))
        deadline = time.monotonic() + 30.0
        while True:  # newest wins: the last message is taken once the flood stops
            with lock:
                if got and got[-1] == 1.0:
                    break
            assert time.monotonic() < deadline, "the newest message never arrived"
            time.sleep(0.01)
        elapsed_s = time.monotonic() - t0
        # The budget: callbacks at least 1/budget apart, after a burst of at most two.
        assert len(got) <= elapsed_s * budget_hz + 2, (len(got), elapsed_s)
        assert len(got) < 20001, "nothing was dropped: the test proves nothing"
        assert intake.taken == len(got)
    finally:
        intake.stop()
        owner.destroy_node()
        pub_node.destroy_node()
        rclpy.try_shutdown(context=owner_ctx)
        rclpy.try_shutdown(context=pub_ctx)


def test_a_slow_handler_holds_the_intake_thread_to_its_share_of_the_time(a1_domain):
    """A rate alone does not bound the time when one callback costs more than a slot (a slow or
    loaded machine): then the thread would never sleep. Its CPU time is budgeted too: with
    callbacks of >= 5 ms CPU, share 0.25 and a burst of 20 ms, the first few run at once and
    then one per >= 20 ms, whatever the 1000 Hz budget allows."""
    apply_ros_env(a1_domain)
    owner_ctx = _context(a1_domain)
    pub_ctx = _context(a1_domain)
    owner = rclpy.create_node("twin", namespace="/arm", context=owner_ctx)
    with pytest.raises(ValueError, match="max_busy_share"):
        CommandIntake(owner, max_busy_share=0.0)
    with pytest.raises(ValueError, match="burst_s"):
        CommandIntake(owner, burst_s=-1.0)
    share, burst_s, cost_s = 0.25, 0.020, 0.005
    intake = CommandIntake(owner, max_rate_hz=1000.0, max_busy_share=share, burst_s=burst_s)
    starts: list[float] = []

    def slow(msg: Float64) -> None:
        starts.append(time.monotonic())
        end = time.thread_time() + cost_s  # 5 ms of this thread's CPU, however long that takes
        while time.thread_time() < end:
            pass

    intake.subscribe(Float64, "gripper/command", slow, qos.COMMAND)
    intake.start()
    pub_node = rclpy.create_node("flood", namespace="/arm", context=pub_ctx)
    pub = pub_node.create_publisher(Float64, "/arm/gripper/command", qos.COMMAND)
    try:
        deadline = time.monotonic() + 30.0
        while pub.get_subscription_count() == 0:
            assert time.monotonic() < deadline, "the intake never matched the publisher"
            time.sleep(0.01)
        deadline = time.monotonic() + 30.0
        n = 25
        while len(starts) < n:  # a flood until n callbacks ran
            assert time.monotonic() < deadline, f"only {len(starts)} callbacks in 30 s"
            for _ in range(50):
                pub.publish(Float64(data=0.0))
            time.sleep(0.001)
        # n callbacks cost >= n * 5 ms of CPU; the bucket held burst_s and earned share per
        # second, so they span >= ((n - 1) * cost - burst) / share of wall time (380 ms here;
        # back to back, without the CPU budget, ~125 ms).
        span = starts[n - 1] - starts[0]
        assert span >= ((n - 1) * cost_s - burst_s) / share - 1e-3, (span, starts[:n])
    finally:
        intake.stop()
        owner.destroy_node()
        pub_node.destroy_node()
        rclpy.try_shutdown(context=owner_ctx)
        rclpy.try_shutdown(context=pub_ctx)
