"""A required node that dies under a command is reported as the cause, not what the env saw.

``robot-rl up`` and the commands that start a setup's nodes with ``--launch`` (``rollout``,
``record``, ``label``, ``train`` and ``actor`` with ``--setup``, all through
:func:`robot_rl.app.nodes.ros_env.make_ros_env`) supervise the nodes with
:class:`robot_rl.app.nodes.supervisor.Supervisor`. When a required node dies, the env soon fails
with a
secondary error (``StaleSensorError``: the streams stopped; ``RosTimeoutError``: a service did
not answer). Here the dead node wins:

- :class:`NodeDiedError` names the node, its exit status (exit code, or the signal that killed
  it), its log file and the log's last lines, and the secondary error if there was one. The CLI
  prints it and exits with :data:`EXIT_NODE_DIED` (3).
- :func:`dead_node_wins` turns an exception raised while a required node is dead into
  NodeDiedError (chained to it). It reaps the children first (``waitpid`` through
  ``Supervisor.poll``), and for the errors a dying node causes (stale data, timeouts, failed
  service calls) it waits up to :data:`DEATH_GRACE_S` for a required node that is still running
  to exit: the message does not depend on whether the env or the supervisor noticed first.
- :class:`SupervisedEnv` wraps the env of a ``--launch`` command: each ``reset`` / ``step``
  polls the supervisor first (a node that died between steps stops the run at the next one; an
  optional node is restarted per its policy), runs inside :func:`dead_node_wins`, and a watch
  thread interrupts a call blocked on the dead node (e.g. a reset waiting for a service that
  will never answer) instead of letting it run into its timeout.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym

from robot_rl.core.types import StaleSensorError

EXIT_NODE_DIED = 3
"""Exit code of a command whose required node died (``up`` and every ``--launch`` command)."""
DEATH_GRACE_S = 2.0
"""How long a stale-data / timeout error waits for a required node that is still running to
exit (a node that is dying) before it is reported as it is, seconds."""
TAIL_LINES = 12
"""Lines of the node's log shown in the message."""
SECONDARY = (StaleSensorError, TimeoutError, RuntimeError)
"""Errors a dying node causes in the env (RosTimeoutError is a TimeoutError; a failed service
call is a RuntimeError): these wait for a dying node; others only poll."""
_INTERRUPT = signal.SIGURG  # ignored by default: one delivered after close does nothing


def signal_name(num: int) -> str:
    """``SIGKILL`` for 9; ``signal 99`` for an unknown number."""
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


@dataclass(frozen=True)
class Death:
    """One exit of a supervised node that the supervisor did not ask for.

    Attributes:
        node: Node name.
        exit_code: Exit code; negative: killed by signal ``-exit_code`` (``Popen.returncode``).
        log_path: The node's log file.
        at_s: When it was reaped, supervisor clock (monotonic seconds).
        required: The node is required by its setup.
        final: Down for good (not restarted).
        note: What the supervisor did: ``restart policy never``, ``restarts used up``,
            ``restarting in 1 s (restart 1/3)``; empty after a clean exit.
    """

    node: str
    exit_code: int
    log_path: Path
    at_s: float
    required: bool
    final: bool
    note: str = ""

    @property
    def status(self) -> str:
        """``killed by SIGKILL`` or ``exited with code 1``."""
        if self.exit_code < 0:
            return f"killed by {signal_name(-self.exit_code)}"
        return f"exited with code {self.exit_code}"


class NodeDiedError(Exception):
    """A required node of the setup died; the message names it, its exit status, its log file,
    the log's last lines and the error the env raised because of it (if any).

    Attributes:
        death: The death reported.
        tail: The log's last lines.
        secondary: The env's error caused by the death, or None.
    """

    def __init__(self, death: Death, secondary: BaseException | None = None) -> None:
        self.death = death
        self.tail = log_tail(death.log_path, TAIL_LINES)
        self.secondary = secondary
        note = f" ({death.note})" if death.note else ""
        lines = [f"required node {death.node!r} died: {death.status}{note}; log: {death.log_path}"]
        if secondary is not None:
            lines.append(f"the env then failed with {type(secondary).__name__}: {secondary}")
        if self.tail:
            lines.append(f"last {len(self.tail)} lines of {death.log_path}:")
            lines += [f"  | {line}" for line in self.tail]
        else:
            lines.append(f"({death.log_path} is empty or unreadable)")
        super().__init__("\n".join(lines))


class Supervisor(Protocol):
    """What this module needs of the node supervisor
    (:class:`robot_rl.app.nodes.supervisor.Supervisor`)."""

    clock: Callable[[], float]
    """Monotonic time source, seconds."""
    stopping: bool
    """True once the supervisor is shutting the nodes down."""

    def required_death(self, since_s: float | None = None) -> Death | None:
        """A required node's death (reaping and restarting nodes on the way), or None."""
        ...

    def wait_required_death(self, grace_s: float, since_s: float | None = None) -> Death | None:
        """:meth:`required_death`, waiting up to ``grace_s`` for a node still dying."""
        ...

    def error(self, death: Death, secondary: BaseException | None = None) -> NodeDiedError:
        """The error that reports ``death`` (and what it caused)."""
        ...


def log_tail(path: Path, lines: int = TAIL_LINES, max_bytes: int = 16384) -> list[str]:
    """The last ``lines`` lines of the text file ``path`` (reads at most ``max_bytes`` from its
    end); [] if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    if len(data) == max_bytes and size > max_bytes:
        text = text[1:]  # the first line is cut
    return [line.rstrip() for line in text if line.strip()][-lines:]


def explain(
    supervisor: Supervisor | None,
    error: BaseException,
    since_s: float | None = None,
    grace_s: float = DEATH_GRACE_S,
) -> NodeDiedError | None:
    """The :class:`NodeDiedError` to raise instead of ``error`` if a required node died; None if
    ``error`` stands (no supervisor, no dead required node, already a NodeDiedError, or not an
    ``Exception``, e.g. Ctrl-C).

    Args:
        supervisor: The supervisor of the nodes.
        error: What the env (or its construction) raised.
        since_s: Deaths of restarted required nodes at or after this time (supervisor clock)
            count too (see ``Supervisor.required_death``).
        grace_s: For :data:`SECONDARY` errors, how long to wait for a running required node to
            exit, seconds.
    """
    if supervisor is None or isinstance(error, NodeDiedError) or not isinstance(error, Exception):
        return None
    wait = grace_s if isinstance(error, SECONDARY) else 0.0
    death = supervisor.wait_required_death(wait, since_s)
    return None if death is None else supervisor.error(death, error)


@contextlib.contextmanager
def dead_node_wins(
    supervisor: Supervisor | None, since_s: float | None = None, grace_s: float = DEATH_GRACE_S
) -> Iterator[None]:
    """Re-raise an exception of the body as :class:`NodeDiedError` (chained to it) if a
    required node died; see :func:`explain`."""
    try:
        yield
    except Exception as e:
        died = explain(supervisor, e, since_s, grace_s)
        if died is None:
            raise
        raise died from e


class SupervisedEnv(gym.Wrapper):
    """The env of a command that started the setup's nodes (see the module docstring).

    Args:
        env: The env over ROS 2.
        supervisor: The supervisor of the setup's nodes.
        watch_interval_s: How often the watch thread polls the supervisor, seconds.
        grace_s: See :func:`dead_node_wins`.
    """

    def __init__(
        self,
        env: gym.Env,
        supervisor: Supervisor,
        watch_interval_s: float = 0.2,
        grace_s: float = DEATH_GRACE_S,
    ) -> None:
        super().__init__(env)
        self._sup = supervisor
        self._grace_s = grace_s
        self._since_s = supervisor.clock()
        self._in_call = False  # in reset() / step(): the watch may interrupt
        self._interruptible = False  # in the wrapped env's reset() / step()
        self._pending: Death | None = None
        self._main: int | None = None
        self._old_handler: Any = None
        if threading.current_thread() is threading.main_thread():
            self._main = threading.main_thread().ident
            self._old_handler = signal.signal(_INTERRUPT, self._on_interrupt)
        self._stop = threading.Event()
        self._watch = threading.Thread(
            target=self._watch_loop, args=(watch_interval_s,), name="node-watch", daemon=True
        )
        self._watch.start()

    def reset(self, **kwargs: Any) -> Any:
        return self._call(self.env.reset, **kwargs)

    def step(self, action: Any) -> Any:
        return self._call(self.env.step, action)

    def close(self) -> None:
        """Stop the watch (no interrupt after this), then close the env."""
        self._stop.set()
        if self._watch.is_alive() and self._watch is not threading.current_thread():
            self._watch.join(timeout=5.0)
        if self._main is not None and threading.current_thread() is threading.main_thread():
            old = self._old_handler  # None: not set from Python
            signal.signal(_INTERRUPT, signal.SIG_DFL if old is None else old)
            self._main = None
        super().close()

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        on_main = threading.get_ident() == self._main  # signals reach the main thread only
        with dead_node_wins(self._sup, self._since_s, self._grace_s):
            self._in_call = on_main  # before reading _pending (the watch: the other way round)
            try:
                death = self._pending or self._sup.required_death()  # reaps, restarts
                self._interruptible = on_main  # fn only, never the supervisor's bookkeeping
                death = death or self._pending  # its signal came during the poll: ignored
                if death is not None and death.final:
                    raise self._sup.error(death)
                result = fn(*args, **kwargs)
            finally:
                self._in_call = self._interruptible = False
        self._since_s = self._sup.clock()
        return result

    def _watch_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s) and not self._sup.stopping:
            death = self._sup.required_death()
            if death is None or not death.final:
                continue
            self._pending = death
            if self._in_call and self._main is not None:
                signal.pthread_kill(self._main, _INTERRUPT)  # wakes a blocked wait
            return

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        # Runs in the main thread: interrupt only an env call (the env is dead anyway), never
        # the caller's own work between calls (the next call raises instead).
        if self._interruptible and self._pending is not None:
            raise self._sup.error(self._pending)
