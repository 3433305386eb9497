"""Questions to the ROS 2 graph from outside it (who subscribes to a topic)."""

from __future__ import annotations

import time
from collections.abc import Callable


def topic_subscribers(
    domain_id: int,
    topic: str,
    expect_node: str | None = None,
    timeout_s: float = 10.0,
    give_up: Callable[[], bool] | None = None,
) -> list[str] | None:
    """Sorted names of the nodes subscribed to ``topic`` in ``domain_id``.

    Discovery takes from 0.1 s to a few seconds, so an empty answer proves nothing: with
    ``expect_node`` the graph is polled until that node's subscription is seen (the graph has
    been discovered), at most ``timeout_s``, and every subscriber is returned then; None if
    ``give_up()`` turns true first (e.g. the process that starts that node has ended).

    Raises:
        TimeoutError: ``expect_node`` was not seen subscribing within ``timeout_s``.
    """
    import rclpy
    from rclpy.context import Context

    from drivers.ros.env import apply_ros_env

    apply_ros_env(domain_id)
    ctx = Context()
    rclpy.init(context=ctx, domain_id=domain_id)
    try:
        node = rclpy.create_node("graph_probe", context=ctx)
        try:
            end = time.monotonic() + timeout_s
            while True:
                names = sorted({i.node_name for i in node.get_subscriptions_info_by_topic(topic)})
                if expect_node is None or expect_node in names:
                    if expect_node is None:
                        time.sleep(min(timeout_s, 3.0))  # give discovery its usual time
                        names = sorted(
                            {i.node_name for i in node.get_subscriptions_info_by_topic(topic)}
                        )
                    return names
                if give_up is not None and give_up():
                    return None
                if time.monotonic() > end:
                    raise TimeoutError(
                        f"node {expect_node!r} was not seen subscribing to {topic} in domain "
                        f"{domain_id} within {timeout_s:g} s (subscribers seen: {names})"
                    )
                time.sleep(0.1)
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
