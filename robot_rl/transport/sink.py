"""Where the learner's gRPC server puts the transitions it receives.

The server (:mod:`robot_rl.transport.server`) decodes and checks each batch, drops the rows the
sink already holds (sequence numbers at or below :meth:`TransitionSink.acked_through`), refuses a
batch that would leave a gap, and hands only the new rows, starting exactly at
``acked_through + 1``, to :meth:`TransitionSink.accept`. The sink stores them durably (the
learner's replay log) before it returns: an Ack is a promise that the rows survive a crash.

:class:`MemorySink` keeps rows in RAM (tests, benchmarks); the learner's zarr-backed sink comes
with the ``robot-rl learner`` command. Actor ids are checked by the server at ``Hello``
(:func:`check_actor_id`: safe directory names).
"""

from __future__ import annotations

import re
import threading
from typing import Protocol

import numpy as np

ACTOR_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""Actor ids: safe directory names (the learner keeps one log per actor)."""


def check_actor_id(actor_id: str) -> str:
    """Return ``actor_id`` if it is a safe directory name, else raise ValueError saying why."""
    if not isinstance(actor_id, str) or not ACTOR_ID_RE.fullmatch(actor_id):
        raise ValueError(
            f"actor id {actor_id!r} is not a safe directory name: use 1 to 64 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit (e.g. 'franka-left')"
        )
    return actor_id


class TransitionSink(Protocol):
    """Durable store of transitions, per actor, in sequence order.

    Called from several gRPC threads, never twice at once for the same actor (the server
    holds a per-actor lock around :meth:`acked_through` + :meth:`accept`).
    """

    def acked_through(self, actor_id: str) -> int:
        """Last sequence number of ``actor_id`` held durably, -1 for none."""
        ...

    def accept(self, actor_id: str, first_seq: int, steps: dict[str, np.ndarray]) -> int:
        """Store N new transitions durably and return the new :meth:`acked_through`.

        Args:
            actor_id: The sending actor.
            first_seq: Sequence number of the first row; always ``acked_through(actor_id) + 1``.
            steps: Array name -> (N, ...) array, N >= 1, checked against the learner layout
                (:func:`robot_rl.transport.codec.decode_transitions`).

        Returns:
            The new last durable sequence number, normally ``first_seq + N - 1``.

        Raises:
            Exception: Nothing was stored (the server answers the batch with an error Ack and
                the actor resends it later).
        """
        ...


class MemorySink:
    """A :class:`TransitionSink` in RAM: survives a server restart, not a process crash."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: dict[str, list[dict[str, np.ndarray]]] = {}
        self._acked: dict[str, int] = {}

    def acked_through(self, actor_id: str) -> int:
        with self._lock:
            return self._acked.get(actor_id, -1)

    def accept(self, actor_id: str, first_seq: int, steps: dict[str, np.ndarray]) -> int:
        n = len(next(iter(steps.values())))
        with self._lock:
            expected = self._acked.get(actor_id, -1) + 1
            if first_seq != expected:
                raise ValueError(
                    f"actor {actor_id!r}: rows from seq {first_seq}, expected {expected} "
                    "(the server must drop duplicates and refuse gaps)"
                )
            self._batches.setdefault(actor_id, []).append({k: v.copy() for k, v in steps.items()})
            self._acked[actor_id] = first_seq + n - 1
            return self._acked[actor_id]

    def actors(self) -> list[str]:
        """Ids of the actors that sent at least one row."""
        with self._lock:
            return sorted(self._batches)

    def rows(self, actor_id: str) -> dict[str, np.ndarray]:
        """Every stored row of ``actor_id`` in sequence order (row i is seq i); {} for none."""
        with self._lock:
            batches = list(self._batches.get(actor_id, ()))
        if not batches:
            return {}
        return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
