"""ReplayBuffer: the RAM ring buffer the learner samples from.

Observations are stored once, in an observation ring of preallocated numpy arrays (images as
uint8); a transition refers to its ``obs`` and ``next_obs`` rows by index, so consecutive steps
share a row (step t's next_obs is step t+1's obs). Rows and transitions carry monotonically
increasing ids; a transition is sampleable only while both its rows are still in the ring, so
wrap-around never yields a transition whose observation was overwritten.

Sizing: ``capacity`` transitions, and ``obs_capacity`` observation rows (default
``capacity + capacity // 10 + 1``: enough for episodes of 10 or more steps on average; with
shorter episodes the buffer holds fewer than ``capacity`` transitions when full).

Cached features (``features``, a :class:`robot_rl.core.features.FrameFeatures`): camera frames
go through the frozen backbone once, when their row is written, and the ring holds the uint8
features instead of the frames; batches then carry ``obs["features"][cam]`` (B, h, w, C) uint8
instead of ``obs["images"]``. Two cameras of 128x128: 40 KB per row instead of 98 KB, and no
backbone pass per update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from robot_rl.core import keys
from robot_rl.core.batch import Batch, ObsLayout
from robot_rl.core.features import FrameFeatures


class ReplayBuffer:
    """Ring buffer of transitions in the learner layout.

    Args:
        capacity: Maximum number of transitions kept (oldest evicted first).
        layout: Learner observation layout.
        action_dim: A.
        device: Torch device of sampled batches (storage stays in host RAM).
        obs_capacity: Observation rows; None for ``capacity + capacity // 10 + 1``.
        features: Store each camera's frozen-backbone features instead of its frames (see the
            module docstring); None stores the frames.
    """

    def __init__(
        self,
        capacity: int,
        layout: ObsLayout,
        action_dim: int,
        device: str | torch.device = "cpu",
        obs_capacity: int | None = None,
        features: FrameFeatures | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        obs_capacity = capacity + capacity // 10 + 1 if obs_capacity is None else obs_capacity
        if obs_capacity < 2:
            raise ValueError(f"obs_capacity must be >= 2, got {obs_capacity}")
        self.capacity, self.obs_capacity = int(capacity), int(obs_capacity)
        self.layout, self.action_dim, self.device = layout, int(action_dim), torch.device(device)
        n, m = self.capacity, self.obs_capacity
        self._state = np.zeros((m, layout.state_dim), np.float32) if layout.state_dim else None
        self.features = features
        self._cam_key = keys.IMAGES if features is None else keys.FEATURES  # what rows hold
        # camera -> (m, H, W, 3) frames, or (m, h, w, C) features
        self._cams = {
            c: np.zeros((m, *self._row_shape(s.shape)), np.uint8) for c, s in layout.images.items()
        }
        self._action = np.zeros((n, action_dim), np.float32)
        self._reward = np.zeros(n, np.float32)
        self._terminated = np.zeros(n, np.float32)
        self._intervened = np.zeros(n, bool)
        self._obs_id = np.zeros(n, np.int64)  # id of the obs row; next_obs is obs_id + 1...
        self._next_id = np.zeros(n, np.int64)  # ... not always: stored explicitly
        self._n_rows = 0  # observation rows ever written (next row id)
        self._n_trans = 0  # transitions ever added (next transition id)
        self._first = 0  # id of the oldest sampleable transition
        self._open_row: int | None = None  # id of the last next_obs an episode may continue from
        # Monte-Carlo returns-to-go (Cal-QL's floor), kept once track_returns(gamma) is called:
        # per transition the discounted sum of its stream's rewards from it to the stream's end
        # (NaN while the stream is open) and how many steps that sum covers.
        self.mc_gamma: float | None = None
        self._mc = np.full(n, np.nan, np.float32)
        self._mc_len = np.zeros(n, np.int32)
        self._stream_start: int | None = None  # transition id opening the open stream

    def _row_shape(self, image_shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.features is None:
            return tuple(image_shape)
        return tuple(self.features.feature_shape(tuple(image_shape[:2])))

    @property
    def feature_keys(self) -> dict[str, str] | None:
        """Camera -> the features' cache key (:meth:`FrameFeatures.cache_key`), or None when
        the buffer stores frames. Buffers sampled together must agree."""
        if self.features is None:
            return None
        return {c: self.features.cache_key(s.shape[:2]) for c, s in self.layout.images.items()}

    def _encode(self, cam: str, frames: np.ndarray) -> np.ndarray:
        """(N, H, W, 3) frames -> what the ring stores for ``cam`` (frames or features)."""
        if self.features is None:
            return frames
        out = self.features.encode(frames)
        want = self._cams[cam].shape[1:]
        if out.shape[1:] != want or out.dtype != np.uint8:
            raise ValueError(f"features of {cam!r}: {out.shape} {out.dtype}, expected (N, {want})")
        return out

    # -- size --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n_trans - self._first

    @property
    def num_obs_rows(self) -> int:
        """Observation rows currently held (each observation is stored once)."""
        return min(self._n_rows, self.obs_capacity)

    @property
    def nbytes(self) -> int:
        """Bytes of preallocated storage."""
        arrs = [self._action, self._reward, self._terminated, self._intervened, self._obs_id]
        arrs += [self._next_id, *self._cams.values()]
        if self._state is not None:
            arrs.append(self._state)
        return int(sum(a.nbytes for a in arrs))

    def relabel_rewards(self, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        """Replace every held reward with ``fn(reward, terminated)`` (float32 arrays, same
        shape), e.g. to relabel demos for a learned reward's binary cost."""
        new = np.asarray(fn(self._reward.copy(), self._terminated.copy()), np.float32)
        if new.shape != self._reward.shape or not np.isfinite(new).all():
            raise ValueError(f"relabel gave {new.shape} (want {self._reward.shape}) or non-finite")
        self._reward[:] = new
        if self.mc_gamma is not None:
            self.track_returns(self.mc_gamma)

    # -- Monte-Carlo returns ---------------------------------------------------------------

    def track_returns(self, gamma: float) -> None:
        """Keep each transition's Monte-Carlo return-to-go with discount ``gamma`` (sampled as
        ``mc_return`` into arrays from ``empty_arrays(..., returns=True)``): computed now for
        every held transition, then whenever a stream of steps ends (a termination, or an
        ``add`` that does not continue the last transition's next_obs; a logged episode at
        once). A stream still open has none (NaN). A stream cut by a time limit sums only the
        rewards it saw."""
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.mc_gamma = float(gamma)
        self._mc[:] = np.nan
        self._mc_len[:] = 0
        if len(self) == 0:
            return
        cap = self.capacity
        tid = np.arange(self._first, self._n_trans)
        ts = tid % cap
        cont = np.zeros(len(tid), bool)  # transition t's stream goes on with t + 1
        cont[:-1] = (self._obs_id[ts[1:]] == self._next_id[ts[:-1]]) & (
            self._terminated[ts[:-1]] == 0.0
        )
        ends = np.flatnonzero(~cont)
        last_open = self._open_row is not None and self._terminated[ts[-1]] == 0.0
        lo = 0
        for e in ends:
            if e == len(tid) - 1 and last_open:
                self._stream_start = int(tid[lo])
                break
            self._close_stream(int(tid[lo]), int(tid[e]))
            lo = e + 1
        else:
            self._stream_start = None

    def _close_stream(self, lo: int, hi: int) -> None:
        """Returns-to-go of transitions ``lo..hi`` (ids, one stream ending at ``hi``)."""
        g, acc, cap = self.mc_gamma, 0.0, self.capacity
        for k, t in enumerate(range(hi, max(lo, self._first) - 1, -1)):
            s = t % cap
            acc = float(self._reward[s]) + g * acc
            self._mc[s], self._mc_len[s] = acc, k + 1

    # -- adding ------------------------------------------------------------------------------

    def add(
        self,
        obs: Mapping[str, Any],
        action: np.ndarray,
        reward: float,
        next_obs: Mapping[str, Any],
        terminated: bool,
        intervened: bool = False,
    ) -> None:
        """Add one transition (learner layout, no batch dimension).

        ``obs`` shares the previous transition's ``next_obs`` row when it is equal to it and
        that transition did not terminate, so a stream of steps stores each observation once.
        """
        if self._open_row is not None and self._row_valid(self._open_row):
            if self._equal_row(self._open_row, obs):
                o = self._open_row
            else:
                o = self._write_row(obs)
        else:
            o = self._write_row(obs)
        if o != self._open_row:  # a new stream: the open one (if any) ended at the last step
            self._end_stream()
            self._stream_start = self._n_trans
        nx = self._write_row(next_obs)
        self._put_transition(o, nx, action, reward, terminated, intervened)
        self._open_row = None if terminated else nx
        if terminated:
            self._end_stream()

    def _end_stream(self) -> None:
        if self._stream_start is not None and self.mc_gamma is not None:
            self._close_stream(self._stream_start, self._n_trans - 1)
        self._stream_start = None

    def add_episode(self, episode: Mapping[str, Any]) -> None:
        """Add a whole episode as returned by :meth:`EpisodeLog.read_episode`.

        Writes its T + 1 observation rows and T transitions in bulk; an episode longer than the
        buffer keeps its last steps.

        Args:
            episode: ``obs``/``next_obs`` (T rows each, ``next_obs[t] == obs[t + 1]``),
                ``action`` (T, A), ``reward`` (T,), ``terminated`` (T,), ``intervened`` (T,).
                A buffer that stores features takes them from ``obs["features"]`` /
                ``next_obs["features"]`` when present (computed before, e.g. cached on disk:
                :mod:`robot_rl.replay.feature_cache`), else encodes the frames.
        """
        obs, nxt = episode["obs"], episode["next_obs"]
        t_len = int(np.asarray(episode["reward"]).shape[0])
        if t_len == 0:
            return
        self._end_stream()
        rows = {}
        if self._state is not None:
            rows["state"] = _chain(obs[keys.STATE], nxt[keys.STATE], "state", check=True)
        cached = self.features is not None and keys.FEATURES in obs
        for c in self._cams:
            src = keys.FEATURES if cached else keys.IMAGES
            a, b = obs[src][c], nxt[src][c]
            rows[c] = _chain(a, b, c, check=not np.shares_memory(a, b))
        keep = min(t_len, self.capacity, self.obs_capacity - 1)  # last `keep` steps
        s0 = t_len - keep
        ids = self._n_rows + np.arange(keep + 1)
        slots = ids % self.obs_capacity
        if self._state is not None:
            self._state[slots] = rows["state"][s0:]
        for c in self._cams:
            self._cams[c][slots] = rows[c][s0:] if cached else self._encode(c, rows[c][s0:])
        self._n_rows += keep + 1
        tids = self._n_trans + np.arange(keep)
        ts = tids % self.capacity
        self._action[ts] = np.asarray(episode["action"], np.float32)[s0:]
        self._reward[ts] = np.asarray(episode["reward"], np.float32)[s0:]
        self._terminated[ts] = np.asarray(episode["terminated"], np.float32)[s0:]
        self._intervened[ts] = np.asarray(episode["intervened"], bool)[s0:]
        self._obs_id[ts] = ids[:-1]
        self._next_id[ts] = ids[1:]
        self._n_trans += keep
        self._evict()
        self._open_row = None  # a logged episode is closed
        if self.mc_gamma is not None:
            self._close_stream(self._n_trans - keep, self._n_trans - 1)

    def resized(self, capacity: int, obs_capacity: int | None = None) -> ReplayBuffer:
        """A new buffer of ``capacity`` transitions holding this one's, oldest first.

        Observation rows stay shared as they are here, and an episode left open continues in
        the copy. Used to give a loaded demo buffer room for appends (HIL-SERL routes human
        interventions to it); samples draw the same transitions for the same generator state.

        Args:
            capacity: Transitions of the new buffer, >= ``len(self)``.
            obs_capacity: Observation rows (None: the default for ``capacity``).

        Raises:
            ValueError: The new buffer cannot hold every transition (or its rows).
        """
        out = self._compacted(capacity, obs_capacity)
        if self.mc_gamma is not None:
            out.track_returns(self.mc_gamma)
        return out

    def _compacted(self, capacity: int, obs_capacity: int | None) -> ReplayBuffer:
        """:meth:`resized` without the returns-to-go (the caller computes them once)."""
        out = ReplayBuffer(
            capacity, self.layout, self.action_dim, self.device, obs_capacity, self.features
        )
        n = len(self)
        if n > out.capacity:
            raise ValueError(f"capacity {capacity} < the {n} transitions to copy")
        if n == 0:
            return out
        ts = (self._first + np.arange(n)) % self.capacity  # (n,) slots, oldest first
        oid, nid = self._obs_id[ts], self._next_id[ts]
        rows = np.unique(np.concatenate([oid, nid]))  # (R,) sorted row ids in use
        if len(rows) > out.obs_capacity:
            raise ValueError(f"obs_capacity {out.obs_capacity} < the {len(rows)} rows to copy")
        src = rows % self.obs_capacity
        if self._state is not None:
            out._state[: len(rows)] = self._state[src]
        for c, b in self._cams.items():
            out._cams[c][: len(rows)] = b[src]
        out._n_rows = len(rows)
        out._action[:n] = self._action[ts]
        out._reward[:n] = self._reward[ts]
        out._terminated[:n] = self._terminated[ts]
        out._intervened[:n] = self._intervened[ts]
        out._obs_id[:n] = np.searchsorted(rows, oid)
        out._next_id[:n] = np.searchsorted(rows, nid)
        out._n_trans = n
        if self._open_row is not None:
            i = int(np.searchsorted(rows, self._open_row))
            out._open_row = i if i < len(rows) and rows[i] == self._open_row else None
        return out

    def with_features(self, features: FrameFeatures) -> ReplayBuffer:
        """A copy that holds ``features`` of this buffer's frames (same transitions, same
        sampling); e.g. a demo buffer loaded with frames, for a learner that caches features.

        Raises:
            ValueError: This buffer already holds features.
        """
        if self.features is not None:
            raise ValueError("this buffer already holds features")
        out = self._compacted(self.capacity, self.obs_capacity)  # rows compacted, oldest first
        enc = ReplayBuffer(
            out.capacity, self.layout, self.action_dim, self.device, out.obs_capacity, features
        )
        rows = out.num_obs_rows
        for name in ("_action", "_reward", "_terminated", "_intervened", "_obs_id", "_next_id"):
            getattr(enc, name)[:] = getattr(out, name)
        if out._state is not None:
            enc._state[:rows] = out._state[:rows]
        for c in enc._cams:
            for s in range(0, rows, 4096):  # bounded temporary memory
                e = min(rows, s + 4096)
                enc._cams[c][s:e] = enc._encode(c, out._cams[c][s:e])
        enc._n_rows, enc._n_trans, enc._first = out._n_rows, out._n_trans, out._first
        enc._open_row = out._open_row
        if self.mc_gamma is not None:
            enc.track_returns(self.mc_gamma)
        return enc

    def _write_row(self, obs: Mapping[str, Any]) -> int:
        rid = self._n_rows
        slot = rid % self.obs_capacity
        if self._state is not None:
            s = np.asarray(obs[keys.STATE], dtype=np.float32)
            if s.shape != (self.layout.state_dim,):
                raise ValueError(f"state {s.shape}, expected ({self.layout.state_dim},)")
            self._state[slot] = s
        for c, buf in self._cams.items():
            buf[slot] = self._row_content(obs, c)
        self._n_rows += 1
        return rid

    def _equal_row(self, rid: int, obs: Mapping[str, Any]) -> bool:
        slot = rid % self.obs_capacity
        if self._state is not None and not np.array_equal(
            self._state[slot], np.asarray(obs[keys.STATE], dtype=np.float32)
        ):
            return False
        return all(
            np.array_equal(b[slot], self._row_content(obs, c)) for c, b in self._cams.items()
        )

    def _row_content(self, obs: Mapping[str, Any], cam: str) -> np.ndarray:
        """What one row stores for camera ``cam``: the frame (checked against the layout), or
        its features (``obs["features"]`` when given, else encoded now)."""
        if self.features is not None and keys.FEATURES in obs:
            f = np.asarray(obs[keys.FEATURES][cam])
            want = self._cams[cam].shape[1:]
            if f.shape != want or f.dtype != np.uint8:
                raise ValueError(f"features of {cam!r}: {f.shape} {f.dtype}, expected {want}")
            return f
        im = np.asarray(obs[keys.IMAGES][cam])
        want = tuple(self.layout.images[cam].shape)
        if im.shape != want or im.dtype != np.uint8:
            raise ValueError(f"camera {cam!r}: {im.shape} {im.dtype}, expected {want} uint8")
        return self._encode(cam, im[None])[0] if self.features is not None else im

    def _row_valid(self, rid: int) -> bool:
        return rid >= self._n_rows - self.obs_capacity

    def _put_transition(self, o: int, nx: int, action, reward, terminated, intervened) -> None:
        a = np.asarray(action, dtype=np.float32)
        if a.shape != (self.action_dim,):
            raise ValueError(f"action {a.shape}, expected ({self.action_dim},)")
        ts = self._n_trans % self.capacity
        self._action[ts] = a
        self._reward[ts] = float(reward)
        self._terminated[ts] = float(bool(terminated))
        self._intervened[ts] = bool(intervened)
        self._obs_id[ts], self._next_id[ts] = o, nx
        self._mc[ts], self._mc_len[ts] = np.nan, 0
        self._n_trans += 1
        self._evict()

    def _evict(self) -> None:
        """Advance the oldest transition past ring overwrite and any overwritten obs row."""
        self._first = max(self._first, self._n_trans - self.capacity)
        oldest_row = self._n_rows - self.obs_capacity
        ids, cap = self._obs_id, self.capacity
        while self._first < self._n_trans and ids[self._first % cap] < oldest_row:
            self._first += 1

    # -- sampling ----------------------------------------------------------------------------

    def empty_arrays(
        self, batch_size: int, discount: bool = False, returns: bool = False
    ) -> dict[str, Any]:
        """Uninitialised numpy batch fields for ``batch_size`` transitions (see
        :meth:`sample_into`); with ``discount`` also the n-step ``discount`` field, with
        ``returns`` the Monte-Carlo ``mc_return`` (see :meth:`track_returns`)."""

        def obs() -> dict[str, Any]:
            out: dict[str, Any] = {}
            if self._state is not None:
                out[keys.STATE] = np.empty((batch_size, self.layout.state_dim), np.float32)
            if self._cams:
                out[self._cam_key] = {
                    c: np.empty((batch_size, *b.shape[1:]), np.uint8) for c, b in self._cams.items()
                }
            return out

        out = {
            "obs": obs(),
            "action": np.empty((batch_size, self.action_dim), np.float32),
            "reward": np.empty(batch_size, np.float32),
            "next_obs": obs(),
            "terminated": np.empty(batch_size, np.float32),
            "intervened": np.empty(batch_size, bool),
            "is_demo": np.zeros(batch_size, bool),
        }
        if discount:
            out["discount"] = np.empty(batch_size, np.float32)
        if returns:
            out["mc_return"] = np.empty(batch_size, np.float32)
        return out

    def sample_into(
        self,
        out: dict[str, Any],
        start: int,
        n: int,
        generator: np.random.Generator,
        n_step: int = 1,
        gamma: float = 1.0,
        reward_offset: float = 0.0,
    ) -> None:
        """Write ``n`` uniformly sampled transitions into rows ``[start, start + n)`` of
        ``out`` (from :meth:`empty_arrays`), gathering straight into place (no extra copy).

        With ``n_step`` > 1 each sampled transition is extended by the ones that follow it in
        the same stream (up to ``n_step`` in all): ``reward`` becomes their gamma-discounted
        sum, ``next_obs`` and ``terminated`` those of the last, and ``out["discount"]`` (which
        must exist: ``empty_arrays(..., discount=True)``) gamma ** (how many were summed). A
        stream ends at a termination, at the newest transition, and where the next
        transition's obs is not this one's next_obs (a new episode, or the gap between two
        interventions in the demo buffer); a time-limit truncation whose reset observation
        equals the last one exactly would be read as one stream. ``reward_offset`` is added to
        every step's reward (before the sum). With an ``out["mc_return"]`` field each row also
        gets its Monte-Carlo return-to-go (the buffer must :meth:`track_returns`), the offset
        added to each of the steps it sums; NaN where the stream is still open.
        """
        if len(self) == 0:
            raise ValueError("cannot sample from an empty ReplayBuffer")
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        tid = self._first + generator.integers(0, len(self), size=n)
        ts = tid % self.capacity  # (n,) transition slots
        sl = slice(start, start + n)
        next_ids = self._next_id[ts]
        if n_step > 1:
            next_ids = self._extend(tid, n_step, gamma, reward_offset, out, sl)
        else:
            np.take(self._reward, ts, out=out["reward"][sl])
            if reward_offset != 0.0:
                out["reward"][sl] += reward_offset
            np.take(self._terminated, ts, out=out["terminated"][sl])
            if "discount" in out:
                out["discount"][sl] = gamma
        for key, ids in (("obs", self._obs_id[ts]), ("next_obs", next_ids)):
            slots = ids % self.obs_capacity
            if self._state is not None:
                np.take(self._state, slots, axis=0, out=out[key][keys.STATE][sl])
            for c, b in self._cams.items():
                np.take(b, slots, axis=0, out=out[key][self._cam_key][c][sl])
        np.take(self._action, ts, axis=0, out=out["action"][sl])
        np.take(self._intervened, ts, out=out["intervened"][sl])
        if "mc_return" in out:
            out["mc_return"][sl] = self._mc_returns(ts, reward_offset)

    def _mc_returns(self, ts: np.ndarray, offset: float) -> np.ndarray:
        if self.mc_gamma is None:
            raise ValueError("mc_return needs ReplayBuffer.track_returns(gamma) first")
        mc = self._mc[ts].astype(np.float64)
        if offset != 0.0:
            g, n = self.mc_gamma, self._mc_len[ts]
            mc += offset * (n if g == 1.0 else (1.0 - g**n) / (1.0 - g))
        return mc

    def _extend(
        self,
        tid: np.ndarray,
        n_step: int,
        gamma: float,
        offset: float,
        out: dict[str, Any],
        sl: slice,
    ) -> np.ndarray:
        """n-step returns of transitions ``tid`` (see :meth:`sample_into`): writes reward,
        terminated and discount into ``out[...][sl]``, returns the next_obs row ids."""
        if "discount" not in out:
            raise ValueError("n-step sampling needs empty_arrays(..., discount=True)")
        cap = self.capacity
        ts = tid % cap
        reward = self._reward[ts].astype(np.float64) + offset
        term = self._terminated[ts].copy()
        next_id = self._next_id[ts].copy()
        disc = np.full(tid.shape, gamma, np.float64)  # gamma ** (rewards summed so far)
        going = term == 0.0
        for j in range(1, n_step):
            t = tid + j
            s = t % cap
            going &= t < self._n_trans
            going &= np.where(going, self._obs_id[s] == next_id, False)
            reward = np.where(going, reward + disc * (self._reward[s] + offset), reward)
            next_id = np.where(going, self._next_id[s], next_id)
            term = np.where(going, self._terminated[s], term)
            disc = np.where(going, disc * gamma, disc)
            going &= term == 0.0
        out["reward"][sl] = reward
        out["terminated"][sl] = term
        out["discount"][sl] = disc
        return next_id

    def sample_arrays(self, batch_size: int, generator: np.random.Generator) -> dict[str, Any]:
        """Uniformly sampled transitions as numpy arrays (the fields of :class:`Batch`)."""
        out = self.empty_arrays(batch_size)
        self.sample_into(out, 0, batch_size, generator)
        return out

    def sample(self, batch_size: int, generator: np.random.Generator) -> Batch:
        """A uniformly sampled :class:`Batch` of torch tensors on :attr:`device` (images or
        features uint8)."""
        return to_batch(self.sample_arrays(batch_size, generator), self.device)


def _chain(a: np.ndarray, b: np.ndarray, name: str, check: bool) -> np.ndarray:
    """(T, ...) obs and (T, ...) next_obs -> (T + 1, ...) rows, checking they chain."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"{name}: obs {a.shape} and next_obs {b.shape} differ in shape")
    if check and not np.array_equal(a[1:], b[:-1]):
        raise ValueError(f"{name}: next_obs[t] != obs[t + 1]; not one contiguous episode")
    return np.concatenate([a, b[-1:]], axis=0)


def to_batch(arrays: Mapping[str, Any], device: torch.device) -> Batch:
    """Numpy batch fields -> :class:`Batch` of torch tensors on ``device``."""

    def obs_t(o: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if keys.STATE in o:
            out[keys.STATE] = torch.from_numpy(o[keys.STATE]).to(device)
        for cam_key in (keys.IMAGES, keys.FEATURES):
            if cam_key in o:
                out[cam_key] = {c: torch.from_numpy(v).to(device) for c, v in o[cam_key].items()}
        return out

    return Batch(
        obs=obs_t(arrays["obs"]),
        action=torch.from_numpy(arrays["action"]).to(device),
        reward=torch.from_numpy(arrays["reward"]).to(device),
        next_obs=obs_t(arrays["next_obs"]),
        terminated=torch.from_numpy(arrays["terminated"]).to(device),
        intervened=torch.from_numpy(arrays["intervened"]).to(device),
        is_demo=torch.from_numpy(arrays["is_demo"]).to(device),
        discount=torch.from_numpy(arrays["discount"]).to(device) if "discount" in arrays else None,
        mc_return=(
            torch.from_numpy(arrays["mc_return"]).to(device) if "mc_return" in arrays else None
        ),
    )
