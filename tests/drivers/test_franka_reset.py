"""E-stop during a reset, on the real arm bridge node with the Franka backend and franka-sim.

``python -m drivers.franka.node`` (the lifecycle arm bridge, the FCI torque loop in its own
process) against franka-sim (libfranka's protocol, motion limits enforced) over real DDS. A
``reset`` moves the arm for seconds; meanwhile state and status must keep coming, and an
``estop`` from another client must act within its contract deadline: the arm holds short of
the goal, ``reset`` answers failure naming the e-stop, the e-stop stays until ``clear_error``,
and a later reset arrives. The bridge core's side of this is unit-tested with a test double in
``test_arm_bridge_reset.py``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from robot_rl.core import frames
from robot_rl.core.safety import DOWN_QUAT

pytest.importorskip("pylibfranka", reason="pip install pylibfranka (Franka client)")

from geometry_msgs.msg import PoseStamped, TwistStamped  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from drivers.arm_bridge.core import BACKEND_ERROR  # noqa: E402
from drivers.ros import convert, qos  # noqa: E402

SAFETY_DEADLINE_S = 1.0  # estop, hold, clear_error (drivers/CONTRACT.md)
# Inside SafetyConfig()'s box, 0.62 m apart: at the reference's 0.25 m/s a reset from A to B
# takes ~3 s, so an e-stop early in it leaves the arm far from B.
POSE_A = frames.pose(np.array([0.35, -0.25, 0.35]), np.array(DOWN_QUAT))
POSE_B = frames.pose(np.array([0.65, 0.25, 0.15]), np.array(DOWN_QUAT))


def dist(a: np.ndarray, b: np.ndarray) -> float:
    """Distance between the positions of two poses, metres."""
    return float(np.linalg.norm(np.asarray(a)[:3] - np.asarray(b)[:3]))


class Arm:
    """The test's view of the node: state and status as they arrive, its services."""

    def __init__(self, client) -> None:
        self.client = client
        for topic, t, profile in (
            ("/arm/ee_pose", PoseStamped, qos.SENSOR),
            ("/arm/ee_twist", TwistStamped, qos.SENSOR),
            ("/arm/status", String, qos.STATUS),
        ):
            client.subscribe(t, topic, profile)
        client.wait_for(lambda: "/arm/ee_pose" in client.latest, 60.0, "ee_pose from the node")
        client.wait_for(lambda: "/arm/status" in client.latest, 10.0, "status from the node")
        self.reset_client = client.node.create_client(Trigger, "/arm/reset")
        assert self.reset_client.wait_for_service(timeout_sec=30.0), "no /arm/reset service"

    def pose(self) -> np.ndarray:
        return convert.msg_to_pose(self.client.latest["/arm/ee_pose"].pose)

    def speed(self) -> float:
        v = self.client.latest["/arm/ee_twist"].twist.linear
        return float(np.linalg.norm([v.x, v.y, v.z]))

    def status(self) -> dict:
        return json.loads(self.client.latest["/arm/status"].data)

    def set_reset_pose(self, pose: np.ndarray) -> None:
        self.client.set_parameters(
            "/arm/arm_bridge", reset_pose=[float(v) for v in pose], reset_gripper=0.0
        )

    def start_reset(self):
        """Call ``reset`` without waiting; the future completes while the client spins."""
        return self.reset_client.call_async(Trigger.Request())

    def finish(self, future, timeout_s: float, what: str) -> Trigger.Response:
        self.client.wait_for(future.done, timeout_s, what)
        return future.result()

    def reset_through_faults(
        self, timeout_s: float, what: str
    ) -> tuple[Trigger.Response, tuple[int, int], np.ndarray]:
        """A reset that should arrive, tried again (up to twice) when the robot's own error ended
        it (``backend error: ...``, e.g. libfranka's communication_constraints_violation when
        its 1 kHz loop was not scheduled in time on loaded shared cores), once the bridge has
        recovered by itself (the Franka node's auto_recover), as the actor does
        (``ArmFaultError``). Returns the answer, and :meth:`marks` and the pose from before the
        last try."""
        for _ in range(3):
            at, start = self.marks(), self.pose()
            res = self.finish(self.start_reset(), timeout_s, what)
            if res.success or BACKEND_ERROR not in res.message:
                break
            self.client.wait_for(
                lambda: self.status()["state"] not in ("error", "resetting"), 30.0, "recovery"
            )
        return res, at, start

    def marks(self) -> tuple[int, int]:
        """Positions in the pose and status histories (to look at what arrived after)."""
        h = self.client.history
        return len(h["/arm/ee_pose"]), len(h["/arm/status"])


def test_estop_interrupts_a_reset_and_state_keeps_coming(
    franka_sim, franka_domain: int, ros_processes, ros_client_factory
) -> None:
    node = ros_processes(
        [sys.executable, "-m", "drivers.franka.node", "--robot-ip", franka_sim.host, "--ns", "arm"],
        franka_domain,
        "franka_node",
    )
    arm = Arm(ros_client_factory(franka_domain))
    # The e-stop comes from another client, as from a separate e-stop panel.
    panel = ros_client_factory(franka_domain)
    estop = panel.node.create_client(Trigger, "/arm/estop")
    assert estop.wait_for_service(timeout_sec=30.0), "no /arm/estop service"

    # 1. A reset that arrives: state and status are published while the arm travels.
    arm.set_reset_pose(POSE_A)
    res, (poses_at, status_at), start = arm.reset_through_faults(30.0, "the reset to A")
    assert res.success, res.message
    during = arm.client.history["/arm/ee_pose"][poses_at:]
    stamps = [convert.msg_to_time(m.header.stamp) for m in during]
    # Stamps are when the reading was taken: never back; the same reading may come twice when
    # the 1 kHz loop was not scheduled within a state period (2 shared cores).
    assert all(b >= a for a, b in zip(stamps, stamps[1:], strict=False)), "stamps went back"
    assert len(set(stamps)) > 2, f"state stamps did not advance during the reset: {stamps}"
    on_the_way = [
        m
        for m in during
        if min(dist(convert.msg_to_pose(m.pose), start), dist(convert.msg_to_pose(m.pose), POSE_A))
        > 0.05
    ]
    assert on_the_way, f"no ee_pose published mid-way during the reset ({len(during)} in all)"
    states = [json.loads(m.data)["state"] for m in arm.client.history["/arm/status"][status_at:]]
    assert "resetting" in states, states
    arm.client.wait_for(lambda: dist(arm.pose(), POSE_A) < 0.01, 5.0, "ee_pose at A")

    # 2. An e-stop during a reset acts at once; the reset fails naming it.
    arm.set_reset_pose(POSE_B)
    future = arm.start_reset()
    arm.client.wait_for(
        lambda: dist(arm.pose(), POSE_A) > 0.03, 30.0, "the arm to leave A towards B"
    )
    assert arm.status()["state"] == "resetting"
    answer = estop.call_async(Trigger.Request())
    panel.executor.spin_until_future_complete(answer, timeout_sec=SAFETY_DEADLINE_S)
    assert answer.done(), f"estop did not answer within {SAFETY_DEADLINE_S} s during a reset"
    assert answer.result().success
    at_estop = arm.pose()
    res = arm.finish(future, 10.0, "the interrupted reset to answer")
    assert not res.success and "interrupted by e-stop" in res.message, res.message

    # The arm stops short of B and stays there; the bridge reports the e-stop.
    arm.client.wait_for(lambda: arm.speed() < 0.005, 10.0, "the arm to come to rest")
    rest = arm.pose()
    assert dist(rest, POSE_B) > 0.15, f"the arm went on towards B: at {rest[:3]}"
    assert dist(rest, at_estop) < 0.1, f"the arm did not brake: {at_estop[:3]} -> {rest[:3]}"
    poses_at, _ = arm.marks()
    arm.client.wait_for(
        lambda: len(arm.client.history["/arm/ee_pose"]) > poses_at + 20, 10.0, "more states"
    )
    later = [convert.msg_to_pose(m.pose) for m in arm.client.history["/arm/ee_pose"][poses_at:]]
    assert max(dist(p, rest) for p in later) < 0.01, "the arm must hold where it stopped"
    assert arm.status()["state"] == "estop"
    res = arm.finish(arm.start_reset(), 10.0, "a reset during the e-stop")
    assert not res.success and "e-stop" in res.message, res.message

    # 3. clear_error, then the same reset arrives.
    res = arm.client.call(Trigger, "/arm/clear_error", timeout_s=10.0)
    assert res.success, res.message
    res, _, _ = arm.reset_through_faults(30.0, "the reset to B after clear_error")
    assert res.success, res.message
    arm.client.wait_for(lambda: dist(arm.pose(), POSE_B) < 0.01, 5.0, "ee_pose at B")
    arm.client.wait_for(lambda: arm.status()["state"] == "idle", 5.0, "status idle")
    assert node.alive
