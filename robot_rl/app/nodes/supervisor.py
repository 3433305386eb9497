"""Start, watch, restart and stop the nodes of a setup as plain processes (the supervisor of
``robot-rl up`` and of every command that starts a setup with ``--launch``).

Each node of the setup (:mod:`drivers.setup`) runs as ``python -m <module> <args>`` in its own
process group, with the ROS 2 environment of :func:`drivers.ros.env.ros_env` (domain id,
localhost discovery, Fast DDS profile) and its output in ``<log_dir>/<node>.log`` (appended
across restarts, one header line per start). No ROS 2 launch installation is needed.

Supervision:

- a node that exits non-zero or dies by a signal is restarted if its policy is
  ``on-failure``, after ``backoff_s``, at most ``max_restarts`` times; otherwise (policy
  ``never``, restarts used up, or a clean exit 0) it is down for good;
- a *required* node down for good shuts the whole setup down: the failure names the node, its
  exit status, its log file and the log's last lines (:mod:`robot_rl.app.nodes.supervision` reports
  it; exit code :data:`robot_rl.app.nodes.supervision.EXIT_NODE_DIED`);
- :meth:`Supervisor.stop`: SIGINT to every node's process group (rclpy nodes shut down cleanly
  on it), then SIGTERM after the timeout, then SIGKILL after as long again;
- a node outlives no supervisor: it runs under ``setpriv --pdeathsig SIGTERM`` (Linux
  util-linux), so the kernel sends it SIGTERM when the supervising process dies, even by
  SIGKILL, which no handler of ours can catch (:func:`die_with_parent`).

``<log_dir>/up.json`` holds the live state (pid, state, restarts, last exit code per node),
rewritten atomically on every change, for tools and tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from drivers.setup import NodeSpec, Setup
from robot_rl.app.nodes.supervision import Death, NodeDiedError

RUNNING = "running"
BACKOFF = "backoff"  # waiting to restart
EXITED = "exited"  # clean exit 0, not restarted
FAILED = "failed"  # down for good after a failure
STOPPED = "stopped"  # stopped by the supervisor
SKIPPED = "skipped"  # reads the terminal, but there is none


@dataclass
class NodeProcess:
    """Supervisor bookkeeping for one node."""

    spec: NodeSpec
    log_path: Path
    state: str = BACKOFF
    pid: int | None = None
    restarts: int = 0
    starts: int = 0
    last_exit: int | None = None
    started_at: float | None = None
    next_start_at: float = 0.0
    popen: subprocess.Popen | None = field(default=None, repr=False)

    def row(self) -> dict:
        return {
            "name": self.spec.name,
            "module": self.spec.module,
            "state": self.state,
            "pid": self.pid,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "required": self.spec.required,
            "log": str(self.log_path),
        }


class Supervisor:
    """Starts, watches, restarts and stops the nodes of a setup. See the module docstring.

    Args:
        setup: The setup whose nodes to run.
        log_dir: Directory for ``<node>.log`` and ``up.json`` (created).
        env: Environment of every child (plus each node's own ``env`` entries).
        python: Interpreter that runs ``-m <module>``.
        on_event: Called with one line of text per event (start, exit, restart, stop).
        clock: Monotonic time source, seconds.
    """

    def __init__(
        self,
        setup: Setup,
        log_dir: Path,
        env: Mapping[str, str],
        python: str = sys.executable,
        on_event: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.setup = setup
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._env = dict(env)
        self._python = python
        self._on_event = on_event or (lambda line: None)
        self.clock = clock
        self.nodes = [NodeProcess(n, self.log_dir / f"{n.name}.log") for n in setup.nodes]
        self.failure: str | None = None
        """Why the setup went down (a required node failed for good), else None."""
        self.deaths: list[Death] = []
        """Every exit of a node not asked for by :meth:`stop`, oldest first."""
        self.stopping = False
        """:meth:`stop` was called (watchers stop polling)."""
        self._lock = threading.RLock()  # poll() runs in a watch thread and in the caller's

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, has_terminal: bool | None = None) -> None:
        """Start every node; nodes that read the terminal only if stdin is one."""
        tty = sys.stdin.isatty() if has_terminal is None else has_terminal
        with self._lock:
            self._start(tty)

    def _start(self, tty: bool) -> None:
        for node in self.nodes:
            if node.spec.terminal and not tty:
                node.state = SKIPPED
                self._on_event(
                    f"{node.spec.name}: not started: it reads the terminal, and stdin "
                    "is not one (run `robot-rl up` in a terminal)"
                )
                continue
            self._spawn(node)
        self._write_state()

    def poll(self) -> bool:
        """Reap exited nodes (``waitpid``), restart per policy; False once a required node is
        down for good (``failure`` says which) or every node has ended. Thread-safe."""
        with self._lock:
            now = self.clock()
            changed = self._reap(now)
            for node in self.nodes:
                if node.state == BACKOFF and now >= node.next_start_at:
                    self._spawn(node)
                    changed = True
            if changed:
                self._write_state()
            if self.failure is not None:
                return False
            return any(n.state in (RUNNING, BACKOFF) for n in self.nodes)

    def required_death(self, since_s: float | None = None) -> Death | None:
        """After a :meth:`poll`: the death of a required node that explains a failure now.

        That is the one down for good (the setup is down), else the last death of a required
        node being restarted (in its backoff), else (with ``since_s``, supervisor clock) the
        last death of a required node at or after ``since_s``; None if there is none.
        """
        with self._lock:
            self.poll()
            required = [d for d in self.deaths if d.required]
            final = [d for d in required if d.final]
            if final:
                return final[0]
            restarting = {n.spec.name for n in self.nodes if n.state == BACKOFF}
            recent = [
                d
                for d in required
                if d.node in restarting or (since_s is not None and d.at_s >= since_s)
            ]
            return recent[-1] if recent else None

    def wait_required_death(self, grace_s: float, since_s: float | None = None) -> Death | None:
        """:meth:`required_death`, waiting up to ``grace_s`` seconds for one while any
        required node is still running (a node that is dying, not yet dead)."""
        deadline = self.clock() + grace_s
        while True:
            death = self.required_death(since_s)
            if death is not None or self.stopping or self.clock() >= deadline:
                return death
            if not any(n.state == RUNNING and n.spec.required for n in self.nodes):
                return None
            time.sleep(0.02)

    def error(self, death: Death, secondary: BaseException | None = None) -> NodeDiedError:
        """The :class:`NodeDiedError` that reports ``death`` (and what it caused)."""
        return NodeDiedError(death, secondary)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGINT every running node's group; SIGTERM after ``timeout_s``; SIGKILL after as
        long again. Returns when every process group is gone."""
        with self._lock:
            self.stopping = True
            self._reap(self.clock())  # a node that died before is reported as such
            self._stop(timeout_s)

    def _stop(self, timeout_s: float) -> None:
        live = [n for n in self.nodes if n.state == RUNNING and n.pid is not None]
        for n in self.nodes:
            if n.state == BACKOFF:
                n.state = STOPPED
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            live = [n for n in live if _group_alive(n.pid)]
            if not live:
                break
            for n in live:
                self._on_event(f"{n.spec.name}: sending {sig.name}")
                _signal_group(n.pid, sig)
            deadline = self.clock() + (timeout_s if sig != signal.SIGKILL else 5.0)
            while self.clock() < deadline and any(_group_alive(n.pid) for n in live):
                for n in live:
                    self._try_wait(n)
                time.sleep(0.05)
        for n in self.nodes:
            if n.state == RUNNING:
                self._try_wait(n)
                code = n.popen.returncode if n.popen is not None else None
                n.last_exit = code
                n.state = STOPPED
                n.pid = None
                self._on_event(f"{n.spec.name}: stopped (exit {code})")
        self._write_state()

    # -- internals -----------------------------------------------------------------------------

    def _reap(self, now: float) -> bool:
        changed = False
        for node in self.nodes:
            if node.state != RUNNING:
                continue
            assert node.popen is not None
            code = node.popen.poll()
            if code is None:
                continue
            changed = True
            self._reap_group(node)
            node.last_exit = code
            node.pid = None
            self._on_exit(node, code, now)
        return changed

    def _spawn(self, node: NodeProcess) -> None:
        argv = die_with_parent(node.spec.command(self._python))
        env = dict(self._env)
        env.update(dict(node.spec.env))
        node.starts += 1
        with open(node.log_path, "a") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"=== robot-rl up: start {node.starts} at {stamp}: {' '.join(argv)}\n")
            log.flush()
            try:
                node.popen = subprocess.Popen(
                    argv,
                    stdin=None if node.spec.terminal else subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # own process group: signals reach its children
                )
            except OSError as e:
                log.write(f"=== robot-rl up: could not start: {e}\n")
                node.pid = None
                self._on_exit(node, 127, self.clock())
                return
        node.pid = node.popen.pid
        node.state = RUNNING
        node.started_at = self.clock()
        self._on_event(f"{node.spec.name}: started pid {node.pid} (log {node.log_path})")

    def _on_exit(self, node: NodeProcess, code: int, now: float) -> None:
        policy = node.spec.restart
        restart = code != 0 and policy.policy == "on-failure" and not self.stopping
        restart = restart and node.restarts < policy.max_restarts
        if restart:
            note = f"restarting in {policy.backoff_s:g} s (restart {node.restarts + 1}/"
            note += f"{policy.max_restarts})"
        elif code == 0:
            note = ""
        elif self.stopping and policy.policy == "on-failure":
            note = "not restarted: the setup is stopping"
        else:
            note = "restarts used up" if policy.policy == "on-failure" else "restart policy never"
        death = Death(
            node.spec.name, code, node.log_path, now, node.spec.required, not restart, note
        )
        self.deaths.append(death)
        if restart:
            node.restarts += 1
            node.state = BACKOFF
            node.next_start_at = now + policy.backoff_s
            self._on_event(f"{node.spec.name}: {death.status}; {note}")
            return
        node.state = EXITED if code == 0 else FAILED
        reason = f"; {note}" if note else ""
        self._on_event(f"{node.spec.name}: {death.status}{reason} (see {node.log_path})")
        if node.spec.required and self.failure is None:
            self.failure = (
                f"required node {node.spec.name!r} {death.status}{reason}; see {node.log_path}"
            )

    def _try_wait(self, node: NodeProcess) -> None:
        if node.popen is not None:
            node.popen.poll()  # reap the leader; its group gets the same escalation

    def _reap_group(self, node: NodeProcess) -> None:
        # The leader died on its own; anything it left in its group goes too (no orphans).
        if node.popen is not None and _group_alive(node.popen.pid):
            _signal_group(node.popen.pid, signal.SIGKILL)

    def _write_state(self) -> None:
        data = {
            "setup": self.setup.source,
            "supervisor_pid": os.getpid(),
            "failure": self.failure,
            "nodes": [n.row() for n in self.nodes],
        }
        tmp = self.log_dir / "up.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.log_dir / "up.json")


def _group_alive(pgid: int | None) -> bool:
    if pgid is None:
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run so that the kernel sends it SIGTERM when the process starting it dies.

    Nodes run in their own sessions (signals for the node reach its children, a Ctrl-C at the
    terminal does not), so nothing else would end them when their supervisor is SIGKILLed: a
    driver or teleop node would go on publishing to the robot's topics with no one to stop it.
    ``setpriv --pdeathsig`` sets the Linux parent-death signal and execs ``argv`` (no wrapper
    process stays). The "parent" is the thread that starts the process, so start from a thread
    that lives as long as the node should (the supervisor's main loop or its watch thread).
    Without ``setpriv`` (not Linux, no util-linux) ``argv`` is returned as it is.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return list(argv)
    return [setpriv, "--pdeathsig", "SIGTERM", "--", *argv]


def _signal_group(pgid: int | None, sig: int) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def default_log_dir(setup: Setup) -> Path:
    """``runs/up/<setup name>-<YYYYmmdd-HHMMSS>``."""
    return Path("runs") / "up" / f"{setup.name}-{time.strftime('%Y%m%d-%H%M%S')}"
