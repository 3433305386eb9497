"""Shared fixtures for ROS 2 tests: environment, unique domain ids, node processes, a client.

Every ROS test runs its own graph: a unique ``ROS_DOMAIN_ID`` (from a range reserved per test
file owner), discovery on localhost only, Fast DDS with the repo's profile
(:mod:`drivers.ros.env`). Nodes run as real processes (``ros_graph.RosProcess``), killed
at teardown; the test talks to them through ``ros_graph.RosClient``, a plain rclpy node in
its own context (test modules import them from ``ros_graph``, never from ``conftest``).
Waits are on conditions with timeouts, never fixed sleeps.

Append new fixtures at the end; keep this file small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rclpy")

from ros_graph import DomainIds, RosClient, RosProcess  # noqa: E402

__all__ = ["DomainIds", "RosClient", "RosProcess"]


A1_DOMAINS = DomainIds(10, 30)  # arm bridge / twin node tests (helper A1)


@pytest.fixture
def a1_domain() -> int:
    """A fresh ROS domain id for one arm-bridge/twin test (range 10..29)."""
    return A1_DOMAINS.next()


@pytest.fixture
def ros_processes(tmp_path: Path) -> Iterator[Callable[..., RosProcess]]:
    """Factory ``start(args, domain_id, name)`` -> :class:`RosProcess`; all stopped at teardown
    (their logs are printed if the test failed, through pytest's captured output)."""
    started: list[RosProcess] = []

    def start(args: list[str], domain_id: int, name: str) -> RosProcess:
        p = RosProcess(args, domain_id, tmp_path / f"{name}.log")
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
        print(f"---- log of {p.args[2:6]} ----\n{p.log()[-4000:]}")


@pytest.fixture
def ros_client_factory() -> Iterator[Callable[[int], RosClient]]:
    """Factory ``make(domain_id)`` -> :class:`RosClient`; closed at teardown."""
    made: list[RosClient] = []

    def make(domain_id: int) -> RosClient:
        c = RosClient(domain_id)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


# -- helper A2 (env side, setups, `robot-rl up`): domain ids 30..49 ----------------------------

A2_DOMAINS = DomainIds(30, 50)


@pytest.fixture
def a2_domain() -> int:
    """A fresh ROS domain id for one env-side / supervisor test (range 30..49)."""
    return A2_DOMAINS.next()


@pytest.fixture(scope="module")
def a2_module_domain() -> int:
    """A ROS domain id shared by one test module's graph (range 30..49)."""
    return A2_DOMAINS.next()


# -- real-time clock tests (tests/drivers/test_realtime_clock.py): domain ids 90..95 -----------

RT_DOMAINS = DomainIds(90, 96)


@pytest.fixture
def rt_domain() -> int:
    """A fresh ROS domain id for one real-time clock test (range 90..95)."""
    return RT_DOMAINS.next()


# -- training behind ROS 2 (tests/drivers/test_train_ros.py, helper H9): domain ids 60..69 -----

H9_DOMAINS = DomainIds(60, 70)


@pytest.fixture
def h9_domain() -> int:
    """A fresh ROS domain id for one train-behind-ROS test (range 60..69)."""
    return H9_DOMAINS.next()


# -- bench/soak.py's short version (tests/drivers/test_soak.py): domain ids 96..99 ------------

SOAK_DOMAINS = DomainIds(96, 100)


@pytest.fixture
def soak_domain() -> int:
    """A fresh ROS domain id for one soak run (range 96..99)."""
    return SOAK_DOMAINS.next()


# -- Franka FR3 behind franka-sim (tests/drivers/test_franka*.py): domain ids 50..59 -----------

FRANKA_DOMAINS = DomainIds(50, 60)


@pytest.fixture
def franka_domain() -> int:
    """A fresh ROS domain id for one Franka node test (range 50..59)."""
    return FRANKA_DOMAINS.next()


@pytest.fixture(scope="module")
def franka_sim() -> Iterator[Any]:
    """franka-sim (:class:`drivers.franka.simulator.FrankaSim`) on 127.0.0.1 with motion limits
    and communication constraints enforced, one per test module (libfranka's ports are fixed:
    never two at once). Skips only when its venv cannot be created here."""
    pytest.importorskip("pylibfranka", reason="pip install pylibfranka (Franka client)")
    from drivers.franka.simulator import FrankaSim, FrankaSimError, sim_python

    try:
        sim_python(create=True)
    except FrankaSimError as exc:
        pytest.skip(f"franka-sim venv cannot be created here: {exc}")
    sim = FrankaSim(enforce_motion_limits=True, enforce_comm_constraints=True)
    sim.start()
    yield sim
    sim.stop()
