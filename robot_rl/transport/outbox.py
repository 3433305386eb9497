"""The actor's outbox: its own episode log seen as a numbered stream of transitions.

Sequence number ``s`` is the ``s``-th durable (flushed) step of the log's online episodes, in
log order: the closed episodes, then the flushed part of the open one. Those numbers never
change while the actor appends, nor when it restarts after a crash, as long as the log is
reopened with ``EpisodeLog.open(..., unfinished="truncate", mode="a")`` (flushed steps of a
cut episode are kept). Never ``abort_episode`` an online episode whose steps may have been
flushed: sequence numbers must not be reused. Each row carries the log's episode index as
``episode`` and the step within that log episode as ``step``.

The actor pushes from :attr:`LearnerClient.next_seq` on (see :mod:`robot_rl.transport.client`)::

    outbox = LogOutbox(log)
    while (s := client.next_seq) is not None and s < outbox.end_seq:
        if not client.push(s, outbox.read(s, min(s + B, outbox.end_seq))):
            break

Reading is safe while the actor appends, on the same thread or another one of the process (the
log publishes one consistent snapshot per commit, and zarr replaces chunk files atomically).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import STEP_FIELD_NAMES, EpisodeMeta
from robot_rl.transport.codec import EPISODE, NEXT_OBS_PREFIX, OBS_PREFIX, STEP


def episode_transitions(
    ep: Mapping[str, Any], layout: ObsLayout, episode: int, first_step: int
) -> dict[str, np.ndarray]:
    """Rows of ``EpisodeLog.read_episode`` in the codec's transition format.

    Args:
        ep: What ``read_episode`` returned (T steps).
        layout: The log's observation layout.
        episode: Value of the ``episode`` column.
        first_step: ``step`` of the first row (the rest count up by one).

    Returns:
        Array name -> (T, ...) array, as :func:`robot_rl.transport.codec.transition_fields`.
    """
    out: dict[str, np.ndarray] = {}
    for prefix, obs in ((OBS_PREFIX, ep["obs"]), (NEXT_OBS_PREFIX, ep["next_obs"])):
        if layout.state_dim:
            out[prefix + "state"] = np.ascontiguousarray(obs[keys.STATE])
        for cam in layout.images:
            out[f"{prefix}images/{cam}"] = np.ascontiguousarray(obs[keys.IMAGES][cam])
    for name in STEP_FIELD_NAMES:
        out[name] = np.asarray(ep[name])
    t_len = len(out["reward"])
    out[EPISODE] = np.full(t_len, episode, np.int64)
    out[STEP] = first_step + np.arange(t_len, dtype=np.int64)
    return out


def concat_rows(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate transition dicts row-wise (one part is returned as is)."""
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class LogOutbox:
    """Sequence-numbered, read-only view of an actor's :class:`EpisodeLog`.

    Args:
        log: The actor's log (the actor keeps appending to it).
        sources: Episode sources streamed to the learner.
    """

    def __init__(self, log: EpisodeLog, sources: tuple[str, ...] = ("online",)) -> None:
        if not sources:
            raise ValueError("sources is empty: give the episode sources to stream, e.g. online")
        self.log = log
        self.sources = tuple(sources)
        # Closed episodes of those sources with the seq of their first step (grows only).
        self._closed: list[EpisodeMeta] = []
        self._starts: list[int] = []  # seq of each closed episode's first step
        self._closed_end = 0  # seqs held by closed episodes
        self._scanned = 0  # closed log episodes looked at so far

    def _index(self) -> tuple[list[EpisodeMeta], list[int], int]:
        """(episodes, first seqs, end_seq) of one consistent snapshot of the log."""
        durable = self.log.durable_episodes()
        closed = [e for e in durable if e.finished]
        if len(closed) < self._scanned:
            raise RuntimeError(
                f"{self.log.path}: episodes disappeared from the log ({self._scanned} were "
                f"closed, now {len(closed)}); sequence numbers must never be reused"
            )
        for em in closed[self._scanned :]:
            if em.source in self.sources:
                self._closed.append(em)
                self._starts.append(self._closed_end)
                self._closed_end += em.length
        self._scanned = len(closed)
        eps, starts, end = self._closed, self._starts, self._closed_end
        open_em = durable[-1] if durable and not durable[-1].finished else None
        if open_em is not None and open_em.source in self.sources and open_em.length > 0:
            eps, starts = [*eps, open_em], [*starts, end]
            end += open_em.length
        return eps, starts, end

    @property
    def end_seq(self) -> int:
        """Number of durable rows: seqs 0..end_seq - 1 can be read."""
        return self._index()[2]

    def read(self, first_seq: int, stop_seq: int) -> dict[str, np.ndarray]:
        """Transitions [first_seq, stop_seq) in the codec's format.

        Args:
            first_seq: First sequence number, >= 0.
            stop_seq: End (exclusive), <= :attr:`end_seq`, > first_seq.

        Returns:
            Array name -> (stop_seq - first_seq, ...) array (obs/..., next_obs/..., action,
            policy_action, reward, terminated, truncated, intervened, policy_version, stamp_s,
            episode, step).

        Raises:
            ValueError: An empty range, or rows that are not durable (yet).
        """
        eps, starts, end = self._index()
        if not 0 <= first_seq < stop_seq <= end:
            raise ValueError(
                f"read({first_seq}, {stop_seq}): give 0 <= first_seq < stop_seq <= end_seq={end} "
                "(only flushed steps can be sent)"
            )
        parts = []
        k = bisect.bisect_right(starts, first_seq) - 1
        s = first_seq
        while s < stop_seq:
            em, s0 = eps[k], starts[k]
            t0, t1 = s - s0, min(stop_seq - s0, em.length)
            ep = self.log.read_episode(em.index, t0, t1)
            parts.append(episode_transitions(ep, self.log.layout, em.index, t0))
            s, k = s0 + t1, k + 1
        return concat_rows(parts)
