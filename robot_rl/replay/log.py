"""EpisodeLog: the durable, append-only zarr v3 record of every transition of a dataset or run.

Store layout (diffusion_policy style: time-major arrays plus episode boundaries)::

    <path>/                    root attrs: format, version, layout, action_dim, meta
      data/obs/state           (N_obs, S) float32       observation rows (see below)
      data/obs/images/<cam>    (N_obs, H, W, 3) uint8   chunk of 1 row (default), Blosc/zstd
      data/action              (N, A) float32           as executed, policy action space
      data/policy_action       (N, A) float32
      data/reward              (N,) float32
      data/terminated          (N,) bool
      data/truncated           (N,) bool
      data/intervened          (N,) bool
      data/policy_version      (N,) int64
      data/stamp_s             (N,) float64             monotonic time of next_obs
      meta/episode_ends        (E,) int64               exclusive end step of each episode
      meta (attrs)             "episodes": per-episode metadata (see :class:`EpisodeMeta`)
      commit (attrs)           the commit record: committed row counts and the open episode

Observations: an episode of T steps owns T + 1 observation rows (its first observation and the
T next observations), so next_obs is never stored twice: step t of episode i (global step
index ``s``) reads ``obs = obs_rows[s + i]`` and ``next_obs = obs_rows[s + i + 1]``.

Crash safety: steps are buffered in RAM and flushed every ``flush_every_steps`` steps or
``flush_interval_s`` seconds, whichever comes first (``auto_flush=False``: when the owner
says, e.g. :meth:`EpisodeLog.flush_in_background` while a real-time loop waits for its robot).
A flush writes the arrays first and then the commit record; every file is replaced atomically
by zarr's local store, so after a crash the commit record names a consistent prefix (rows
beyond it are ignored, and trimmed when opened for appending). An episode begun but not ended
is recorded as open in the commit record; on :meth:`EpisodeLog.open` it is completed as
truncated, dropped, or reported, by flag.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import zarr

from robot_rl.core.batch import ObsLayout
from robot_rl.replay.log_read import EpisodeLogReader
from robot_rl.replay.schema import (
    SOURCES,
    STEP_FIELDS,
    EpisodeMeta,
    UnfinishedEpisodeError,
    commit_record,
    create_store,
    layout_from_json,
    load_and_check,
    obs_fields,
    obs_row,
    open_store,
    step_fields,
    write_rows,
)

RECENT_ROWS = 32
"""Rows of each field the log keeps in memory after flushing them (see ``_remember``)."""


class EpisodeLog(EpisodeLogReader):
    """Append-only zarr v3 episode log. Build with :meth:`create` or :meth:`open` (the read
    side: :class:`robot_rl.replay.log_read.EpisodeLogReader`).

    Counts (:attr:`num_episodes`, :attr:`num_steps`, :attr:`episodes`) cover closed episodes
    only; the episode being written joins them at :meth:`end_episode`.
    """

    def __init__(
        self,
        root: zarr.Group,
        path: Path,
        mode: str,
        flush_every_steps: int,
        flush_interval_s: float,
        auto_flush: bool = True,
    ) -> None:
        if flush_every_steps < 1:
            raise ValueError(f"flush_every_steps must be >= 1, got {flush_every_steps}")
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s must be > 0, got {flush_interval_s}")
        self.path = path
        self.mode = mode
        self.flush_every_steps = flush_every_steps
        self.flush_interval_s = flush_interval_s
        self.auto_flush = auto_flush
        self._flusher: ThreadPoolExecutor | None = None  # flush_in_background's one worker
        self._flushing: Future | None = None
        self._root = root
        attrs = dict(root.attrs)
        self.layout: ObsLayout = layout_from_json(attrs["layout"])
        self.action_dim: int = int(attrs["action_dim"])
        self.meta: dict[str, Any] = dict(attrs.get("meta", {}))
        self._fields = {**step_fields(self.action_dim), **obs_fields(self.layout)}
        self._arrays: dict[str, zarr.Array] = {}
        self._episodes: list[EpisodeMeta] = []
        self._num_steps = 0  # committed rows
        self._num_obs = 0
        self._open: dict[str, Any] | None = None  # the episode being written
        self._pending_steps: list[dict[str, Any]] = []
        self._pending_obs: list[dict[str, np.ndarray]] = []
        self._last_next: dict[str, np.ndarray] | None = None
        self._n_open_steps = 0  # steps appended to the open episode
        self._pv_range: list[int | None] = [None, None]  # its policy versions (min, max)
        self._last_flush = time.monotonic()
        self._closed = False
        # (closed episodes, open one's durable part), replaced whole per commit (durable_episodes)
        self._durable: tuple[tuple[EpisodeMeta, ...], EpisodeMeta | None] = ((), None)
        # field -> (first row, the last rows this process flushed): read back from memory
        self._recent: dict[str, tuple[int, np.ndarray]] = {}

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | Path,
        layout: ObsLayout,
        action_dim: int,
        meta: Mapping[str, Any] | None = None,
        *,
        flush_every_steps: int = 10,
        flush_interval_s: float = 1.0,
        image_clevel: int = 3,
        image_chunk_steps: int = 1,
        auto_flush: bool = True,
    ) -> EpisodeLog:
        """Create a new, empty log at ``path`` (refuses to overwrite).

        Args:
            path: Directory of the zarr store; must not exist.
            layout: Learner observation layout of every step.
            action_dim: A, length of the action vector.
            meta: JSON-able dataset/run metadata (env settings, task, ...), kept as ``.meta``.
            flush_every_steps: Flush after this many buffered steps.
            flush_interval_s: ... or when this long has passed since the last flush.
            image_clevel: zstd level for images (1 fast .. 9 small).
            image_chunk_steps: Observation rows per image chunk. 1 (default) writes each frame
                once; larger chunks read back faster (resume) but a flush rewrites the partly
                filled chunk.
            auto_flush: Flush from :meth:`append` when due. False: the owner flushes
                (:meth:`flush_due`, :meth:`flush_in_background`); episode ends and
                :meth:`close` still flush.

        Raises:
            FileExistsError: ``path`` exists.
        """
        path = Path(path)
        if path.exists():
            raise FileExistsError(f"{path} exists; use EpisodeLog.open or another path")
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        if image_chunk_steps < 1:
            raise ValueError(f"image_chunk_steps must be >= 1, got {image_chunk_steps}")
        meta_json = json.loads(json.dumps(dict(meta or {})))  # fail early if not JSON-able
        root = create_store(path, layout, action_dim, meta_json, image_clevel, image_chunk_steps)
        log = cls(root, path, "a", flush_every_steps, flush_interval_s, auto_flush)
        log._arrays = {n: root[f"data/{n}"] for n in log._fields}
        return log

    @classmethod
    def open(
        cls,
        path: str | Path,
        unfinished: Literal["truncate", "drop", "error"] = "truncate",
        mode: Literal["r", "a"] = "r",
        *,
        flush_every_steps: int = 10,
        flush_interval_s: float = 1.0,
        auto_flush: bool = True,
    ) -> EpisodeLog:
        """Open an existing log, checking it and handling an episode left open by a crash.

        Args:
            path: The store directory.
            unfinished: What to do with an episode that was begun but never ended:
                ``"truncate"`` keeps its flushed steps as an episode cut by a time limit
                (last step ``truncated``, ``recovered="truncated"``, ``success=None``),
                ``"drop"`` discards it, ``"error"`` raises :class:`UnfinishedEpisodeError`.
                An open episode with no flushed step is dropped unless ``"error"``.
            mode: ``"r"`` never writes (the recovery is applied in memory only); ``"a"`` writes
                the recovery, trims uncommitted rows and allows appending episodes.
            flush_every_steps: See :meth:`create`.
            flush_interval_s: See :meth:`create`.
            auto_flush: See :meth:`create`.

        Raises:
            FileNotFoundError: No store at ``path``.
            CorruptLogError: The store is not a consistent log (message says what and how to
                recover).
            UnfinishedEpisodeError: ``unfinished="error"`` and an episode is open.
        """
        path = Path(path)
        if unfinished not in ("truncate", "drop", "error"):
            raise ValueError(f"unfinished must be truncate, drop or error, not {unfinished!r}")
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' or 'a', got {mode!r}")
        root = open_store(path, writable=mode == "a")
        log = cls(root, path, mode, flush_every_steps, flush_interval_s, auto_flush)
        log._load(unfinished)
        log._publish()
        return log

    def _load(self, unfinished: str) -> None:
        self._arrays, self._num_steps, self._num_obs, table, op = load_and_check(
            self._root, self.path, self._fields
        )
        self._episodes = [EpisodeMeta(**e) for e in table]
        if self.mode == "a":
            self._trim(self._num_steps, self._num_obs, len(self._episodes))
        if op is None:
            if self.mode == "a":
                self._write_commit()
            return
        k = self._num_steps - op["start_step"]  # flushed steps of the open episode
        if unfinished == "error":
            raise UnfinishedEpisodeError(
                f"{self.path}: episode {op['index']} ({op['source']}) was begun but never ended "
                f"({k} steps flushed); open with unfinished='truncate' to keep them or 'drop'"
            )
        if unfinished == "drop" or k == 0:
            self._num_steps, self._num_obs = op["start_step"], op["start_obs"]
            if self.mode == "a":  # commit first: a crash in between leaves rows to trim
                self._write_commit()
                self._trim(self._num_steps, self._num_obs, len(self._episodes))
            return
        pv = self._arrays["policy_version"][op["start_step"] : self._num_steps]
        em = EpisodeMeta(
            index=op["index"],
            source=op["source"],
            success=None,
            length=k,
            start_step=op["start_step"],
            start_obs=op["start_obs"],
            policy_version=op["policy_version"],
            policy_version_min=int(pv.min()),
            policy_version_max=int(pv.max()),
            seed=op["seed"],
            finished=True,
            recovered="truncated",
            extra=dict(op.get("meta", {})),
        )
        self._episodes.append(em)
        if self.mode == "a":
            last = self._num_steps - 1
            if not bool(self._arrays["terminated"][last]):
                self._arrays["truncated"][last : last + 1] = np.ones(1, dtype=bool)
            self._write_episode_table()
            self._write_commit()

    # -- writing -----------------------------------------------------------------------------

    def begin_episode(
        self,
        source: str,
        policy_version: int = 0,
        seed: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Start an episode; returns its index.

        Args:
            source: ``"demo"``, ``"online"``, ``"intervention"`` or ``"eval"``.
            policy_version: Weights version that starts acting.
            seed: Env reset seed, or None.
            meta: JSON-able extras known at the start (kept in the commit record): they reach
                :attr:`EpisodeMeta.extra` at :meth:`end_episode` (its keywords win) and when a
                crash-cut episode is recovered.
        """
        self._check_writable()
        self.join_flush()
        if self._open is not None:
            raise RuntimeError(f"episode {self._open['index']} is still open; end_episode first")
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        self._open = {
            "index": len(self._episodes),
            "source": source,
            "policy_version": int(policy_version),
            "seed": None if seed is None else int(seed),
            "start_step": self._num_steps,
            "start_obs": self._num_obs,
        }
        if meta:
            self._open["meta"] = json.loads(json.dumps(dict(meta)))  # fail early if not JSON-able
        self._last_next = None
        self._n_open_steps = 0
        self._pv_range = [None, None]
        self._write_commit()
        return self._open["index"]

    def append(
        self,
        obs_learner: Mapping[str, Any],
        action: np.ndarray,
        policy_action: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        intervened: bool,
        policy_version: int,
        stamp_s: float,
        next_obs_learner: Mapping[str, Any],
    ) -> None:
        """Buffer one step of the open episode (flushes when due).

        Args:
            obs_learner: Observation before the step, learner layout. From the second step on
                it must equal the previous step's ``next_obs_learner``.
            action: (A,) as executed, policy action space.
            policy_action: (A,) what the policy proposed.
            reward: Reward of the step.
            terminated: The task ended the episode (no bootstrap).
            truncated: A time limit cut the episode.
            intervened: A person chose ``action``.
            policy_version: Weights version that produced ``policy_action``.
            stamp_s: Monotonic time of ``next_obs_learner``.
            next_obs_learner: Observation after the step, learner layout.
        """
        self._check_writable()
        if self._open is None:
            raise RuntimeError("append before begin_episode")
        if self._last_next is None:
            self._pending_obs.append(obs_row(obs_learner, self.layout, "obs_learner"))
        else:
            row = obs_row(obs_learner, self.layout, "obs_learner")
            for k, v in row.items():
                if not np.array_equal(v, self._last_next[k], equal_nan=True):  # NaN: checks.py
                    raise ValueError(
                        f"obs_learner[{k}] differs from the previous step's next_obs_learner; "
                        "within an episode they must be equal (begin a new episode after a reset)"
                    )
        nxt = obs_row(next_obs_learner, self.layout, "next_obs_learner")
        self._pending_obs.append(nxt)
        self._last_next = nxt
        step = {
            "action": np.asarray(action, dtype=np.float32).copy(),
            "policy_action": np.asarray(policy_action, dtype=np.float32).copy(),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "intervened": bool(intervened),
            "policy_version": int(policy_version),
            "stamp_s": float(stamp_s),
        }
        for k in ("action", "policy_action"):
            if step[k].shape != (self.action_dim,):
                raise ValueError(f"{k} has shape {step[k].shape}, expected ({self.action_dim},)")
        self._pending_steps.append(step)
        pv = step["policy_version"]
        lo, hi = self._pv_range
        self._pv_range = [pv if lo is None else min(lo, pv), pv if hi is None else max(hi, pv)]
        self._n_open_steps += 1
        if self.auto_flush and self.flush_due():
            self.flush()

    def flush_due(self) -> bool:
        """Whether ``flush_every_steps`` steps are buffered or ``flush_interval_s`` has passed
        since the last flush (with steps buffered)."""
        if not self._pending_steps:
            return False
        due = time.monotonic() - self._last_flush >= self.flush_interval_s
        return len(self._pending_steps) >= self.flush_every_steps or due

    def flush_in_background(self) -> bool:
        """Start writing the buffered steps in a worker thread; False (nothing started) with
        nothing buffered, or while the previous background flush still runs (the steps wait
        for the next call). :meth:`append` goes on meanwhile (into a new buffer); every other
        write (:meth:`begin_episode`, :meth:`end_episode`, :meth:`flush`, :meth:`close`) waits
        for the flush first. A real-time loop starts it when a flush is due and never waits for
        it: the write (zarr's compression and file writes, 40-180 ms on a loaded 2-core machine)
        overlaps the wait for the robot and the next steps instead of delaying an action."""
        self._check_writable()
        if not self._pending_steps:
            return False
        if self._flushing is not None:
            if not self._flushing.done():
                return False
            self.join_flush()  # re-raises its error
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="episode-log-flush")
        batch = self._take_pending()
        self._flushing = self._flusher.submit(self._write_batch, *batch)
        return True

    @property
    def flushing(self) -> bool:
        """A :meth:`flush_in_background` was started and has not finished."""
        return self._flushing is not None and not self._flushing.done()

    def join_flush(self) -> None:
        """Wait for :meth:`flush_in_background` (no-op if none runs); re-raises its error."""
        flushing, self._flushing = self._flushing, None
        if flushing is not None:
            flushing.result()

    def end_episode(self, success: bool | None, **meta: Any) -> EpisodeMeta:
        """Close the open episode and flush it.

        Args:
            success: Task success (None if unknown).
            **meta: JSON-able extras, e.g. ``reward_model_id="sim_truth@1"``, ``policy="scripted"``.
        """
        self._check_writable()
        if self._open is None:
            raise RuntimeError("end_episode without an open episode")
        if self._n_open_steps == 0:
            raise ValueError("the open episode has no steps; append steps or abort_episode()")
        self.flush()
        op = self._open
        extra = {**op.get("meta", {}), **json.loads(json.dumps(meta))}
        em = EpisodeMeta(
            index=op["index"],
            source=op["source"],
            success=None if success is None else bool(success),
            length=self._num_steps - op["start_step"],
            start_step=op["start_step"],
            start_obs=op["start_obs"],
            policy_version=op["policy_version"],
            policy_version_min=int(self._pv_range[0]),
            policy_version_max=int(self._pv_range[1]),
            seed=op["seed"],
            finished=True,
            reward_model_id=extra.pop("reward_model_id", None),
            extra=extra,
        )
        self._episodes.append(em)
        self._open, self._last_next = None, None
        self._write_episode_table()
        self._write_commit()
        return em

    def abort_episode(self) -> None:
        """Discard the open episode (e.g. a teleoperator pressed "discard")."""
        self._check_writable()
        self.join_flush()
        if self._open is None:
            raise RuntimeError("abort_episode without an open episode")
        self._pending_steps, self._pending_obs = [], []
        self._num_steps, self._num_obs = self._open["start_step"], self._open["start_obs"]
        self._open, self._last_next = None, None
        self._write_commit()
        self._trim(self._num_steps, self._num_obs, len(self._episodes))

    def flush(self) -> None:
        """Write buffered steps, then the commit record (after a background flush, if one
        runs)."""
        self.join_flush()
        if self.mode != "a":
            return
        self._write_batch(*self._take_pending())

    def _take_pending(self) -> tuple[list[dict[str, Any]], list[dict[str, np.ndarray]]]:
        """The buffered steps and observation rows; the buffer starts again empty."""
        batch = (self._pending_steps, self._pending_obs)
        self._pending_steps, self._pending_obs = [], []
        self._last_flush = time.monotonic()
        return batch

    def _write_batch(self, steps: list[dict[str, Any]], obs: list[dict[str, np.ndarray]]) -> None:
        """Write ``steps`` and ``obs`` after the committed rows, then the commit record (on the
        worker of :meth:`flush_in_background`, or the caller's thread)."""
        if not steps:
            return
        n0, o0 = self._num_steps, self._num_obs
        n1, o1 = n0 + len(steps), o0 + len(obs)
        jobs = []
        for name in STEP_FIELDS:
            data = np.stack([np.asarray(s[name]) for s in steps])
            jobs.append((name, n0, n1, data.astype(self._fields[name][1])))
        for name in obs_fields(self.layout):
            data = np.stack([r[name] for r in obs])
            jobs.append((name, o0, o1, data))
        for name, lo, hi, data in jobs:  # all arrays (spare rows: resizes are a third of a
            write_rows(self._arrays[name], lo, hi, data, spare=True)  # flush), then commit
        self._num_steps, self._num_obs = n1, o1
        self._remember(jobs)
        self._write_commit()

    def _remember(self, jobs: list[tuple[str, int, int, np.ndarray]]) -> None:
        """Keep the last :data:`RECENT_ROWS` flushed rows of every field in memory: the
        actor's outbox reads each step back just after its flush to send it, and reading it
        from zarr (files, decompression) kept a real-time actor waiting."""
        recent = {}
        for name, lo, hi, data in jobs:
            old = self._recent.get(name)
            short = RECENT_ROWS - len(data)
            if short > 0 and old is not None and old[0] + len(old[1]) == lo:  # contiguous
                tail = old[1][-short:]  # only the old rows still kept: no whole-window copy
                data = np.concatenate([tail, data])
            recent[name] = (hi - min(len(data), RECENT_ROWS), data[-RECENT_ROWS:])
        self._recent = recent  # replaced whole: a reader holds one consistent dict

    def close(self) -> None:
        """Flush and release. An episode still open stays open (recoverable on reopen)."""
        if self._closed:
            return
        try:
            self.join_flush()
        finally:
            if self._flusher is not None:
                self._flusher.shutdown()
        if self.mode == "a":
            self.flush()
            self._trim(self._num_steps, self._num_obs, len(self._episodes))  # the spare rows
        self._closed = True

    def __enter__(self) -> EpisodeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.path}: log is closed")
        if self.mode != "a":
            raise RuntimeError(f"{self.path} is open read-only; open with mode='a' to write")

    def _write_commit(self) -> None:
        op = None
        if self._open is not None:
            op = dict(self._open)
        self._root["commit"].attrs.put(
            commit_record(self._num_steps, self._num_obs, len(self._episodes), op)
        )
        self._publish()

    def _publish(self) -> None:
        op, open_em = self._open, None
        if op is not None:
            lo, hi = self._pv_range
            open_em = EpisodeMeta(
                index=op["index"],
                source=op["source"],
                success=None,
                length=self._num_steps - op["start_step"],
                start_step=op["start_step"],
                start_obs=op["start_obs"],
                policy_version=op["policy_version"],
                policy_version_min=op["policy_version"] if lo is None else int(lo),
                policy_version_max=op["policy_version"] if hi is None else int(hi),
                seed=op["seed"],
                finished=False,
                extra=dict(op.get("meta", {})),
            )
        self._durable = (tuple(self._episodes), open_em)

    def _write_episode_table(self) -> None:
        ends = np.array([e.start_step + e.length for e in self._episodes], dtype=np.int64)
        arr = self._root["meta/episode_ends"]
        write_rows(arr, len(ends) - 1, len(ends), ends[-1:])
        self._root["meta"].attrs.put({"episodes": [asdict(e) for e in self._episodes]})

    def _trim(self, n_steps: int, n_obs: int, n_eps: int) -> None:
        """Cut every array to the committed sizes (uncommitted rows from a crash)."""
        self._recent = {}
        for name, arr in self._arrays.items():
            n = n_obs if name.startswith("obs/") else n_steps
            if arr.shape[0] > n:
                arr.resize((n, *arr.shape[1:]))
        ends = self._root["meta/episode_ends"]
        if ends.shape[0] > n_eps:
            ends.resize((n_eps,))
        table = self._root["meta"].attrs.get("episodes", [])
        if len(table) > n_eps:
            self._root["meta"].attrs.put({"episodes": table[:n_eps]})
