"""The simulated human's answer to the frame a lockstep loop holds (``record``, ``label``,
``train --human sim``), matched by stamp; see :class:`HumanAnswers`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robot_rl.app.teleop.teleop_env import TeleopOptions, TeleopSession

ANSWER_TIMEOUT_S = 2.0
"""How long a loop waits for the simulated human's answer to one observation, seconds."""


class HumanAnswers:
    """The simulated human's answer to the observation a loop holds, matched by stamp.

    In lockstep with the simulated human (``--teleop sim-expert``, ``train --human sim``),
    ``sim.human_node`` answers every observation with a reading stamped with that observation's
    robot time. :meth:`wait` blocks until that answer has arrived, so the next ``teleop.read()``
    is the answer to this frame (its twist, its gripper and the buttons it holds, e.g. success
    while the task's success holds) and not whatever arrived last. Without it a loop that runs
    faster than the human's node reads answers to older frames (``label`` then marks positives
    late), and a loop that starts before the human's node hears the twin's ``task/status``
    steps whole episodes with no input at all: DDS discovery takes 0.1 s to a few seconds and is
    not symmetric (this reader matching the human's publisher does not mean the human's reader
    matches the twin's). In real time, and for any other teleop source, nothing is matched (a
    person's device does not answer frames): build it with ``on=False`` and :meth:`wait`
    returns at once.

    The first answer of a session is awaited up to ``first_timeout_s`` (discovery); none is a
    broken setup (:class:`TimeoutError`). After that a missing answer (the human's node short of
    CPU for ``timeout_s``) is counted in :attr:`late` and reported; the loop goes on with the
    newest reading.

    Args:
        teleop: The connected :class:`drivers.ros_teleop.RosTeleop`.
        on: Whether answers are matched (lockstep and the simulated human).
        report: Where a late answer is reported (one line).
        node_ended: Whether the human's node has exited (a wait then ends at once, unanswered).
        log_hint: Where the human's node logs (for the error message).
    """

    def __init__(
        self,
        teleop: Any,
        on: bool,
        report: Callable[[str], None],
        node_ended: Callable[[], bool] = lambda: False,
        *,
        timeout_s: float = ANSWER_TIMEOUT_S,
        first_timeout_s: float = 30.0,
        log_hint: str = "",
    ) -> None:
        self.teleop, self.on, self.report, self.node_ended = teleop, on, report, node_ended
        self.timeout_s, self.first_timeout_s = float(timeout_s), float(first_timeout_s)
        self.log_hint = log_hint
        self.late = 0
        self._answered = False

    @classmethod
    def of_session(cls, sess: TeleopSession, opts: TeleopOptions, view: Any) -> HumanAnswers:
        """For ``record`` / ``label``: on in lockstep with ``--teleop sim-expert``."""
        node = sess.supervisor.nodes[0] if sess.supervisor is not None else None
        return cls(
            sess.teleop,
            sess.lockstep and opts.teleop == "sim-expert",
            view.event,
            sess.teleop_ended,
            first_timeout_s=opts.teleop_wait_s,
            log_hint=f"; see its log {node.log_path}" if node is not None else "",
        )

    def wait(self, robot_t: float) -> bool:
        """Wait for the answer stamped ``robot_t``; False if it did not come (counted and
        reported, unless the node has exited). True at once when off.

        Raises:
            TimeoutError: No answer at all within the session's first ``first_timeout_s``.
        """
        if not self.on:
            return True
        timeout = self.timeout_s if self._answered else self.first_timeout_s
        deadline = time.monotonic() + timeout
        while not self.teleop.wait_for_stamp(robot_t, min(1.0, deadline - time.monotonic())):
            if self.node_ended():
                return False
            if time.monotonic() >= deadline:
                break
        else:
            self._answered = True
            return True
        if not self._answered:
            raise TimeoutError(
                f"the simulated human (sim.human_node) did not answer the first observation "
                f"(robot time {robot_t:.3f} s) within {timeout:g} s: it does not hear the twin's "
                f"task/status, or runs another task than the twin{self.log_hint}"
            )
        self.late += 1
        self.report(
            f"teleop: no answer from the simulated human for robot time {robot_t:.3f} s within "
            f"{timeout:g} s ({self.late} so far); going on with the newest reading"
        )
        return False
