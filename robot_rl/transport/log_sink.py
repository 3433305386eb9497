"""The learner's durable TransitionSink (:mod:`robot_rl.transport.sink`): one log per actor.

Each actor's transitions go to ``<directory>/<actor_id>/log.zarr``, an
:class:`~robot_rl.replay.log.EpisodeLog` created on first contact. Sequence number ``s`` of an
actor is its ``s``-th transition, and its log holds seqs ``0..acked_through`` in order, so
``acked_through`` is the log's step count minus one: nothing else is stored, and a restarted
learner recovers it by reopening the logs (``unfinished="truncate"``).

Rows become log episodes: a log episode opens at each new actor ``episode`` value and ends on a
terminated or truncated row (``ended_by`` in its metadata), or when rows of a later actor episode
arrive first (``ended_by="next_episode"``: the actor restarted mid-episode). Every log episode
records ``actor_id``, ``actor_episode`` and ``first_step`` (the actor's step of its first row),
so the rows read back exactly as they were sent (:meth:`LogSink.iter_transitions`). Success is
unknown at the learner (``success=None``).

:meth:`LogSink.accept` appends, flushes, and only then returns (the Ack is a promise that the rows
survive a crash of the learner process; there is no fsync, so not a power cut). An episode cut
by a learner crash is kept as truncated: its last row reads ``truncated=True`` from then on, and
the actor's later rows of that episode open a new log episode.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.features import FrameFeatures
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import layout_to_json
from robot_rl.transport.codec import (
    EPISODE,
    FEATURES_PREFIX,
    NEXT_OBS_PREFIX,
    OBS_PREFIX,
    STEP,
    shipped_features,
    transition_fields,
)
from robot_rl.transport.outbox import episode_transitions
from robot_rl.transport.sink import ACTOR_ID_RE, check_actor_id

log = logging.getLogger(__name__)

LOG_NAME = "log.zarr"
_NEVER = {"flush_every_steps": 2**62, "flush_interval_s": 1e18}  # accept() flushes itself

OnRows = Callable[[str, dict[str, np.ndarray]], None]


@dataclass
class _Actor:
    log: EpisodeLog
    acked: int = -1  # last durable seq
    episode: int = -1  # actor episode of the last stored row (-1: none)
    step: int = -1  # its step
    ended: bool = False  # the last stored row ended its actor episode
    open: bool = False  # a log episode is open (rows of `episode` may continue it)
    last_next: dict[str, np.ndarray] = field(default_factory=dict)  # next_obs of the last row
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_log(cls, elog: EpisodeLog) -> _Actor:
        st = cls(elog, acked=elog.num_steps - 1)
        if elog.episodes:
            em = elog.episodes[-1]
            if "actor_episode" not in em.extra or "first_step" not in em.extra:
                raise ValueError(
                    f"{elog.path} was not written by LogSink (episode {em.index} has no "
                    "actor_episode/first_step): move it out of the sink's directory"
                )
            st.episode = int(em.extra["actor_episode"])
            st.step = int(em.extra["first_step"]) + em.length - 1
            st.ended = em.extra.get("ended_by") in ("terminated", "truncated")
        return st


class LogSink:
    """A :class:`~robot_rl.transport.sink.TransitionSink` writing one EpisodeLog per actor.

    Args:
        directory: Where the actors' logs live (created if missing); existing logs are reopened.
        layout: The learner's observation layout.
        action_dim: The learner's action size A.
        on_rows: ``(actor_id, steps)`` after each accepted batch is durable (e.g. to add the rows
            to the learner's replay buffer with :func:`add_rows`); ``steps`` includes the
            actor's ``next_obs/features/<cam>`` when it sent them (they are never logged).
            Called from the server's threads, never concurrently; an exception there is logged
            (the rows stay acked).

    Raises:
        ValueError: A log in ``directory`` was written for another layout or action size.
    """

    def __init__(
        self,
        directory: str | Path,
        layout: ObsLayout,
        action_dim: int,
        on_rows: OnRows | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.layout, self.action_dim, self.on_rows = layout, int(action_dim), on_rows
        self._fields = transition_fields(layout, self.action_dim)
        self._lock = threading.Lock()  # the actor table
        self._rows_lock = threading.Lock()  # on_rows, one call at a time
        self._actors: dict[str, _Actor] = {}
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.directory.glob(f"*/{LOG_NAME}")):
            actor_id = path.parent.name
            if ACTOR_ID_RE.fullmatch(actor_id):
                self._actors[actor_id] = _Actor.from_log(self._open(path))

    # -- TransitionSink ----------------------------------------------------------------------

    def acked_through(self, actor_id: str) -> int:
        """Last durable seq of ``actor_id``; -1 for an actor without a log (an invalid id
        included: it never gets one, :meth:`accept` refuses it with the reason)."""
        with self._lock:
            st = self._actors.get(actor_id)
        return -1 if st is None else st.acked

    def accept(self, actor_id: str, first_seq: int, steps: dict[str, np.ndarray]) -> int:
        """Append N rows to the actor's log, flush, and return the new acked_through.

        Raises:
            ValueError: Bad actor id, ``first_seq != acked_through + 1``, arrays that do not fit
                the layout, or rows that do not continue the actor's stream (episode going
                back, an ended episode continued, a step skipped, an observation chain broken).
                Nothing was stored.
            Exception: Writing failed; the log was reopened from disk and acked_through says
                what is durable (the actor resends the rest).
        """
        st = self._actor(check_actor_id(actor_id))
        with st.lock:
            if first_seq != st.acked + 1:
                raise ValueError(
                    f"actor {actor_id!r}: rows from seq {first_seq}, but the log holds seqs "
                    f"0..{st.acked}; send from {st.acked + 1}"
                )
            n = self._check(actor_id, st, steps)
            try:
                self._write(st, actor_id, steps, n)
            except BaseException:
                log.exception("actor %r: writing rows failed; reopening its log", actor_id)
                self._reload(actor_id, st)
                raise
            acked = st.acked
        if self.on_rows is not None:
            with self._rows_lock:
                try:
                    self.on_rows(actor_id, steps)
                except Exception:  # the rows are durable: the learner can rebuild from the log
                    log.exception("on_rows failed for actor %r", actor_id)
        return acked

    # -- reading -----------------------------------------------------------------------------

    def actors(self) -> list[str]:
        """Ids of the actors with a log."""
        with self._lock:
            return sorted(self._actors)

    def log_of(self, actor_id: str) -> EpisodeLog:
        """The actor's EpisodeLog (read it only while no batch of that actor is accepted)."""
        st = self._get(actor_id)
        return st.log

    def iter_transitions(self, actor_id: str) -> Iterator[dict[str, np.ndarray]]:
        """The actor's stored rows in seq order, one codec-format dict per log episode.

        Rows read back as sent, except the last row of an episode cut by a learner crash, which
        reads ``truncated=True``.
        """
        st = self._get(actor_id)
        with st.lock:
            episodes = st.log.durable_episodes()
        for em in episodes:
            with st.lock:
                ep = st.log.read_episode(em.index, 0, em.length)
            a_ep, s0 = int(em.extra["actor_episode"]), int(em.extra["first_step"])
            yield episode_transitions(ep, self.layout, a_ep, s0)

    def rebuild(self, buffer: ReplayBuffer, actors: list[str] | None = None) -> int:
        """Refill ``buffer`` from the logs (e.g. a learner restarting); returns rows added.

        Adds every log episode of the given actors (default all), actor by actor.
        """
        added = 0
        for actor_id in self.actors() if actors is None else actors:
            st = self._get(actor_id)
            with st.lock:
                for em in st.log.durable_episodes():
                    buffer.add_episode(st.log.read_episode(em.index, 0, em.length))
                    added += em.length
        return added

    def close(self) -> None:
        """Close every log (a log episode left open is recovered as truncated on reopen)."""
        with self._lock:
            actors = list(self._actors.values())
        for st in actors:
            with st.lock:
                st.log.close()

    # -- internals ---------------------------------------------------------------------------

    def _open(self, path: Path) -> EpisodeLog:
        elog = EpisodeLog.open(path, unfinished="truncate", mode="a", **_NEVER)
        if layout_to_json(elog.layout) != layout_to_json(self.layout) or (
            elog.action_dim != self.action_dim
        ):
            raise ValueError(
                f"{path} holds transitions of another layout/action size "
                f"({layout_to_json(elog.layout)}, A={elog.action_dim}; the learner has "
                f"{layout_to_json(self.layout)}, A={self.action_dim}): use another directory"
            )
        return elog

    def _get(self, actor_id: str) -> _Actor:
        with self._lock:
            st = self._actors.get(check_actor_id(actor_id))
        if st is None:
            raise KeyError(f"no log for actor {actor_id!r}; actors: {self.actors()}")
        return st

    def _actor(self, actor_id: str) -> _Actor:
        """The actor's state, creating its log on first contact (atomically: a crash leaves
        either no log or an empty complete one)."""
        with self._lock:
            st = self._actors.get(actor_id)
            if st is None:
                path = self.directory / actor_id / LOG_NAME
                tmp = path.with_name(LOG_NAME + ".creating")
                shutil.rmtree(tmp, ignore_errors=True)
                meta = {"actor_id": actor_id, "written_by": "robot_rl.transport.log_sink"}
                EpisodeLog.create(tmp, self.layout, self.action_dim, meta).close()
                tmp.rename(path)
                st = self._actors[actor_id] = _Actor.from_log(self._open(path))
        return st

    def _reload(self, actor_id: str, st: _Actor) -> None:
        """Forget the in-memory log (unflushed rows) and reopen it from disk."""
        fresh = _Actor.from_log(self._open(st.log.path))
        st.log, st.acked, st.episode, st.step = fresh.log, fresh.acked, fresh.episode, fresh.step
        st.ended, st.open, st.last_next = fresh.ended, False, {}

    def _check(self, actor_id: str, st: _Actor, steps: Mapping[str, np.ndarray]) -> int:
        """Validate a batch against the layout and the actor's stream; returns N."""
        missing = sorted(set(self._fields) - set(steps))
        feats = shipped_features(steps, self.layout.images) or {}
        extra = sorted(set(steps) - set(self._fields) - {FEATURES_PREFIX + c for c in feats})
        if missing or extra:
            raise ValueError(f"actor {actor_id!r}: missing arrays {missing}, unexpected {extra}")
        n = len(steps[EPISODE])
        for c, f in feats.items():  # passed on to on_rows, never logged (the log keeps the frames)
            if f.dtype != np.uint8 or len(f) != n:
                raise ValueError(f"{FEATURES_PREFIX}{c}: {f.dtype} {f.shape}, expected uint8 N={n}")
        for name, (shape, dtype) in self._fields.items():
            a = steps[name]
            if a.shape != (n, *shape) or a.dtype != np.dtype(dtype):
                raise ValueError(f"{name}: {a.dtype} {a.shape}, expected {dtype} (N={n}, *{shape})")
        if n == 0:
            raise ValueError(f"actor {actor_id!r}: empty batch")
        obs_names = [k[len(OBS_PREFIX) :] for k in self._fields if k.startswith(OBS_PREFIX)]
        eps, stp = steps[EPISODE].tolist(), steps[STEP].tolist()
        ends = np.logical_or(steps["terminated"], steps["truncated"]).tolist()
        prev_e, prev_s, prev_end = st.episode, st.step, st.ended
        for r in range(n):
            e, s = eps[r], stp[r]
            where = f"actor {actor_id!r} seq {st.acked + 1 + r} (episode {e}, step {s})"
            if prev_e >= 0 and e < prev_e:
                raise ValueError(f"{where}: episode goes back from {prev_e}")
            if e == prev_e and prev_end:
                raise ValueError(f"{where}: episode {e} already ended at step {prev_s}")
            if e == prev_e and s != prev_s + 1:
                raise ValueError(f"{where}: follows step {prev_s}; steps must be consecutive")
            if e == prev_e and (r > 0 or st.open):
                for name in obs_names:
                    before = steps[NEXT_OBS_PREFIX + name][r - 1] if r else st.last_next[name]
                    if not np.array_equal(steps[OBS_PREFIX + name][r], before):
                        raise ValueError(
                            f"{where}: obs/{name} differs from the previous step's next_obs; "
                            "within an episode they must be equal"
                        )
            prev_e, prev_s, prev_end = e, s, ends[r]
        return n

    def _write(self, st: _Actor, actor_id: str, steps: Mapping[str, np.ndarray], n: int) -> None:
        elog, lay = st.log, self.layout
        eps, stp = steps[EPISODE].tolist(), steps[STEP].tolist()
        term, trunc = steps["terminated"].tolist(), steps["truncated"].tolist()
        for r in range(n):
            if st.open and eps[r] != st.episode:
                elog.end_episode(None, ended_by="next_episode")
                st.open = False
            if not st.open:
                meta = {"actor_id": actor_id, "actor_episode": eps[r], "first_step": stp[r]}
                pv = int(steps["policy_version"][r])
                elog.begin_episode("online", policy_version=pv, meta=meta)
                st.open = True
            elog.append(
                row_obs(steps, OBS_PREFIX, r, lay),
                steps["action"][r], steps["policy_action"][r], steps["reward"][r],
                term[r], trunc[r], steps["intervened"][r], steps["policy_version"][r],
                steps["stamp_s"][r], row_obs(steps, NEXT_OBS_PREFIX, r, lay),
            )  # fmt: skip
            st.episode, st.step, st.ended = eps[r], stp[r], term[r] or trunc[r]
            if st.ended:
                elog.end_episode(None, ended_by="terminated" if term[r] else "truncated")
                st.open = False
        elog.flush()
        names = [
            k[len(NEXT_OBS_PREFIX) :]
            for k in steps
            if k.startswith(NEXT_OBS_PREFIX) and not k.startswith(FEATURES_PREFIX)
        ]
        st.last_next = {k: steps[NEXT_OBS_PREFIX + k][n - 1].copy() for k in names}
        st.acked += n


def row_obs(steps: Mapping[str, np.ndarray], prefix: str, r: int, layout: ObsLayout) -> dict:
    """Row ``r`` of obs/ or next_obs/ as a learner observation."""
    out: dict = {}
    if layout.state_dim:
        out[keys.STATE] = steps[prefix + "state"][r]
    if layout.images:
        out[keys.IMAGES] = {c: steps[f"{prefix}images/{c}"][r] for c in layout.images}
    return out


def warm_rows(features: FrameFeatures | None, layout: ObsLayout) -> int:
    """Rows per :func:`warm_features` call whose frames fit ``features``' memo (0: no memo, no
    cameras or no backbone: nothing to warm)."""
    memo = int(getattr(features, "memo_frames", 0)) if features is not None else 0
    return memo // len(layout.images) if layout.images else 0


def warm_features(
    features: FrameFeatures, steps: Mapping[str, np.ndarray], layout: ObsLayout, rows: slice
) -> None:
    """Encode ``rows``' next_obs frames ahead of adding them one row at a time, in one backbone
    pass per image size, so that the backbone's memo (``memo_frames``, e.g.
    ``policies.features.EfficientNetFeatures``) serves each row's add. One frame per pass
    costs ~1.5x per frame what six per pass do on a CPU (EfficientNet-Lite0, 128x128, 1 thread:
    9.4 against 6.2 ms, ``bench/pixel_features.py --only encode``), and encoding arriving
    frames is most of a pixel learner's main thread (docs/real_robot.md). Keep ``rows`` within
    :func:`warm_rows`' count, or the memo forgets the first frames before their rows are
    added."""
    by_size: dict[tuple[int, ...], list[np.ndarray]] = {}
    for cam in layout.images:
        frames = steps[f"{NEXT_OBS_PREFIX}images/{cam}"][rows]
        by_size.setdefault(frames.shape[1:], []).append(frames)
    for group in by_size.values():
        if len(group) and len(group[0]):
            features.encode(np.concatenate(group))


def add_rows(buffer: ReplayBuffer, steps: Mapping[str, np.ndarray]) -> None:
    """Add codec-format rows to a replay buffer, one transition each (e.g. from ``on_rows``)."""
    lay = buffer.layout
    for r in range(len(steps[EPISODE])):
        buffer.add(
            row_obs(steps, OBS_PREFIX, r, lay),
            steps["action"][r],
            float(steps["reward"][r]),
            row_obs(steps, NEXT_OBS_PREFIX, r, lay),
            bool(steps["terminated"][r]),
            bool(steps["intervened"][r]),
        )
