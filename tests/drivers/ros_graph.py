"""The ROS 2 test graph's parts, imported by tests/drivers/conftest.py and by test modules
(``from ros_graph import DomainIds``; a module of its own, because ``from conftest import``
resolves to whichever conftest pytest loaded last): leased domain ids, node processes, a
client node.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drivers.ros.env import apply_ros_env, ros_env

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


class DomainIds:
    """Hands out ROS domain ids from ``[start, stop)`` (offset per xdist worker), cycling.

    Each id is leased across processes (an ``flock`` on a file in :attr:`LOCK_DIR`, held until
    this process exits): an id another live pytest process holds is skipped. Two test runs in
    one domain answer each other's service calls (two twins both answer ``sim/step``), which
    failed as "sim/step advanced time from 0.1 to 0.1".
    """

    LOCK_DIR = Path(tempfile.gettempdir()) / "robot_rl_ros_domains"

    def __init__(self, start: int, stop: int) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        offset = int(worker[2:]) if worker[2:].isdigit() else 0
        n = stop - start
        self._range = (start, stop)
        self._ids = itertools.cycle([start + (offset * 7 + i) % n for i in range(n)])
        self._held: dict[int, Any] = {}

    def next(self) -> int:
        for _ in range(self._range[1] - self._range[0]):
            domain = next(self._ids)
            if domain in self._held or self._lease(domain):
                return domain
        raise RuntimeError(
            f"every ROS domain id in {self._range} is leased by another test process (lock files "
            f"in {self.LOCK_DIR}); wait for the other pytest runs to finish"
        )

    def _lease(self, domain: int) -> bool:
        try:
            self.LOCK_DIR.mkdir(exist_ok=True)
            f = open(self.LOCK_DIR / f"{domain}.lock", "a")  # noqa: SIM115 - held until exit
        except OSError:  # no writable temp dir: hand the id out unleased, as before
            return True
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        self._held[domain] = f
        return True


class RosProcess:
    """A node in a subprocess with its own ROS environment; output goes to ``log_path``."""

    def __init__(self, args: list[str], domain_id: int, log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = ros_env(domain_id, extra={"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")})
        self.proc = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def dump_stacks(self, timeout_s: float = 5.0) -> None:
        """Ask the node for every thread's stack (SIGUSR1; nodes that register
        :mod:`faulthandler` for it, like the twin) and wait until it is in the log."""
        if not self.alive:
            return
        before = self.log().count("most recent call first")
        self.proc.send_signal(signal.SIGUSR1)
        end = time.monotonic() + timeout_s
        while self.log().count("most recent call first") == before and time.monotonic() < end:
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL (a crash: no clean shutdown)."""
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


class RosClient:
    """A plain rclpy node in its own context for the test process.

    Latest message per subscribed topic in :attr:`latest`, every message in :attr:`history`.
    """

    def __init__(self, domain_id: int, name: str = "test_client") -> None:
        import rclpy

        apply_ros_env(domain_id)
        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.latest: dict[str, Any] = {}
        self.history: dict[str, list[Any]] = {}
        self._clients: dict[str, Any] = {}

    def subscribe(self, msg_type: type, topic: str, qos: Any) -> None:
        self.history[topic] = []

        def cb(msg: Any) -> None:
            self.latest[topic] = msg
            self.history[topic].append(msg)

        self.node.create_subscription(msg_type, topic, cb, qos)

    def publisher(self, msg_type: type, topic: str, qos: Any) -> Any:
        return self.node.create_publisher(msg_type, topic, qos)

    def spin_for(self, seconds: float) -> None:
        """Process callbacks for ``seconds`` of wall time (no waiting on a condition)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.01, max(0.0, end - time.monotonic())))

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Spin until ``predicate()`` holds; fail with ``what`` after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > end:
                raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
            self.executor.spin_once(timeout_sec=0.02)

    def call(
        self,
        srv_type: type,
        name: str,
        request: Any = None,
        timeout_s: float = 30.0,
        resend_after_s: float | None = None,
    ) -> Any:
        """Call a service (waiting for it to appear) and return the response. An idempotent
        call may pass ``resend_after_s``: sent again when unanswered that long (a first request's
        answer can be lost while discovery is under way: drivers.ros_session.RosSession.call)."""
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = self.node.create_client(srv_type, name)
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise TimeoutError(f"service {name} did not appear within {timeout_s} s")
        deadline = time.monotonic() + timeout_s
        while True:
            future = client.call_async(request if request is not None else srv_type.Request())
            left = deadline - time.monotonic()
            wait = left if resend_after_s is None else min(left, resend_after_s)
            self.executor.spin_until_future_complete(future, timeout_sec=max(wait, 0.0))
            if future.done():
                return future.result()
            client.remove_pending_request(future)
            if resend_after_s is None or time.monotonic() >= deadline:
                raise TimeoutError(f"service {name} did not answer within {timeout_s} s")

    def set_parameters(self, node: str, timeout_s: float = 30.0, **params: Any) -> None:
        """Set parameters of ``node`` (full name, e.g. ``/arm/twin``) via its standard service."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        req = SetParameters.Request(
            parameters=[Parameter(k, value=v).to_parameter_msg() for k, v in params.items()]
        )
        res = self.call(SetParameters, f"{node}/set_parameters", req, timeout_s, 2.0)
        failed = [r.reason for r in res.results if not r.successful]
        if failed:
            raise RuntimeError(f"set_parameters on {node} failed: {failed}")

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.try_shutdown(context=self.context)
