"""RosSession.call resends an idempotent request whose answer does not come.

The case it is for: a ROS 2 service loses the answer to a client's first request when the
server's answer writer has not yet discovered the client (ros2/ros2#1253; it failed a fresh-clone
CI run as "set_parameters did not answer within 30 s"). That race cannot be produced on demand;
here a real server in its own process holds its first answer for longer than the resend period,
which the client sees the same way: no answer in time.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

pytest.importorskip("rclpy")

from drivers.ros_session import RosSession, RosTimeoutError  # noqa: E402

SERVER = textwrap.dedent(
    """
    import time, rclpy
    from std_srvs.srv import Trigger
    rclpy.init()
    node = rclpy.create_node("slow_server")
    calls = []
    def answer(req, resp):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(4.0)  # the first answer comes too late
        resp.success, resp.message = True, '{"call": %d}' % len(calls)
        return resp
    def never(req, resp):
        time.sleep(4.0)
        return resp
    node.create_service(Trigger, "/arm/slow", answer)
    node.create_service(Trigger, "/arm/late", never)
    rclpy.spin(node)
    """
)


def test_an_idempotent_call_is_sent_again_when_its_answer_does_not_come(
    a1_domain, ros_processes
) -> None:
    ros_processes([sys.executable, "-c", SERVER], a1_domain, "slow_server")
    session = RosSession("arm", node_name="resend_test", domain_id=a1_domain)
    try:
        data = session.trigger("/arm/slow", 30.0, resend_after_s=1.0)
        assert session.resent_requests >= 1
        assert data["call"] >= 2  # the answer to a resent request
        # Without resending, a call whose answer does not come in time is an error that says so.
        with pytest.raises(RosTimeoutError, match="did not answer within"):
            session.trigger("/arm/late", 0.5)
    finally:
        session.close()
