"""RosLockstepClock must be the twin's only stepper, and says so when it is not.

Root cause of the flake "sim/step advanced time from 0.1 to 0.1" in test_ros_env.py: another
pytest run in the same ROS_DOMAIN_ID (its twin answers every ``sim/step`` and ``task/reset`` of
ours, and ours of its; the first answer wins). Reproduced by running that test twice at once in
one domain; not reproduced in 10 isolated runs under full CPU load. The domain ids of
``conftest.DomainIds`` are now leased across processes, and the clock checks the twin's
``twin_id`` / ``episode`` / ``step`` in each answer, naming the interference.

Here: the real twin in lockstep, our clock on a :class:`RosSession`, and a second client that
resets or steps the twin between two of our ticks.
"""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("rclpy")

from ros_graph import DomainIds  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from drivers.ros_clock import RosLockstepClock  # noqa: E402
from drivers.ros_session import RosSession  # noqa: E402

H1_DOMAINS = DomainIds(90, 96)  # helper H1's ROS domain ids


def _answer(twin: str, episode: int, step: int) -> dict:
    return {"stamp_s": 0.1 * step, "twin_id": twin, "episode": episode, "step": step}


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (_answer("b", 1, 3), "another twin process"),
        (_answer("a", 2, 1), "scene was reset (episode 1 -> 2)"),
        (_answer("a", 1, 4), "stepped 2 times"),
        (_answer("a", 1, 3), None),
        ({"stamp_s": 0.3}, None),  # a twin without the identity fields: time check only
    ],
)
def test_interference_is_named(answer: dict, says: str | None) -> None:
    clock = RosLockstepClock(RosSession("arm"), control_hz=10.0)
    clock._last_answer = _answer("a", 1, 2)
    why = clock._interference(answer)
    assert (why is None) if says is None else (says in why), why


def test_another_client_resetting_or_stepping_the_twin_is_named(
    ros_processes, ros_client_factory
) -> None:
    domain = H1_DOMAINS.next()
    ros_processes(
        [sys.executable, "-m", "sim.ros_node", "--task", "reach", "--ns", "arm", "--mode",
         "lockstep", "--control-hz", "10", "--cameras"],
        domain,
        "twin",
    )  # fmt: skip
    other = ros_client_factory(domain)
    session = RosSession("arm", domain_id=domain)
    clock = RosLockstepClock(session, control_hz=10.0, step_timeout_s=60.0)
    try:
        session.timed_trigger("task/reset", 60.0)
        clock.reset()
        clock.tick()
        clock.tick()
        assert clock.now_s() == pytest.approx(0.2)

        assert other.call(Trigger, "/arm/task/reset").success  # someone else resets the twin
        with pytest.raises(ValueError) as err:
            clock.tick()
        msg = str(err.value)
        assert "from 0.200000 s to 0.100000 s" in msg, msg
        assert "scene was reset (episode 1 -> 2)" in msg, msg
        assert "1 server(s)" in msg and f"ROS_DOMAIN_ID={domain}" in msg, msg

        clock.reset()
        clock.tick()
        assert other.call(Trigger, "/arm/sim/step").success  # someone else steps it
        with pytest.raises(ValueError, match="stepped 2 times"):
            clock.tick()
    finally:
        session.close()
