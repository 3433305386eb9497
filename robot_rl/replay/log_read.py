"""The read side of :class:`robot_rl.replay.log.EpisodeLog`: counts, durable episodes, and the
arrays of an episode's steps (see that module's docstring for the layout and what is durable).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.replay.schema import STEP_FIELDS, EpisodeMeta, obs_fields


class EpisodeLogReader:
    """Reading an episode log; :class:`robot_rl.replay.log.EpisodeLog` keeps the state it reads
    (closed episodes, the last commit's durable view, the open arrays)."""

    layout: ObsLayout
    _episodes: list[EpisodeMeta]
    _durable: tuple[tuple[EpisodeMeta, ...], EpisodeMeta | None]
    _arrays: dict[str, zarr.Array]
    _recent: dict[str, tuple[int, np.ndarray]]

    @property
    def num_episodes(self) -> int:
        """Closed (and recovered) episodes."""
        return len(self._episodes)

    @property
    def num_steps(self) -> int:
        """Steps in closed (and recovered) episodes."""
        return int(sum(e.length for e in self._episodes))

    @property
    def episodes(self) -> list[EpisodeMeta]:
        """Metadata of the closed (and recovered) episodes, in order."""
        return list(self._episodes)

    @property
    def open_episode(self) -> EpisodeMeta | None:
        """The open episode's flushed part (``length``: durable steps; unfinished), or None."""
        return self._durable[1]

    def durable_episodes(self) -> list[EpisodeMeta]:
        """Closed episodes, then the open one's flushed part: every durable step, as of the last
        commit. Safe (with :meth:`read_episode`) on another thread while one thread writes."""
        closed, open_em = self._durable
        return [*closed, open_em] if open_em is not None else list(closed)

    def read_episode(
        self, i: int, start: int = 0, stop: int | None = None, images: bool = True
    ) -> dict[str, Any]:
        """Arrays of steps [start, stop) of episode ``i`` (numpy, bit-identical to what was
        appended); ``i`` may be the open episode (its flushed steps). ``stop=None``: to the end.
        ``images=False`` leaves the camera frames unread (no ``obs["images"]``), for a reader
        that has their features already (:mod:`robot_rl.replay.feature_cache`).

        Returns:
            ``obs`` and ``next_obs`` in the learner layout with T = stop - start rows each
            (views into one (T + 1)-row array: ``next_obs[t] is obs[t + 1]``'s storage), and
            ``action`` (T, A), ``policy_action`` (T, A), ``reward`` (T,), ``terminated`` (T,),
            ``truncated`` (T,), ``intervened`` (T,), ``policy_version`` (T,), ``stamp_s`` (T,),
            ``meta`` (:class:`EpisodeMeta`).

        Raises:
            IndexError: No such episode.
            ValueError: Steps beyond its durable ones.
        """
        open_em = self._durable[1]
        if 0 <= i < len(self._episodes):
            em = self._episodes[i]
        elif open_em is not None and open_em.index == i:
            em = open_em
        else:
            raise IndexError(
                f"episode {i}: the log has {len(self._episodes)} closed episodes"
                + ("" if open_em is None else f" and episode {open_em.index} open")
            )
        stop = em.length if stop is None else stop
        if not 0 <= start <= stop <= em.length:
            raise ValueError(
                f"steps [{start}, {stop}) of episode {i}: it has {em.length} durable steps"
            )
        s0, s1 = em.start_step + start, em.start_step + stop
        o0, o1 = em.start_obs + start, em.start_obs + stop + 1
        out: dict[str, Any] = {n: self._rows(n, s0, s1) for n in STEP_FIELDS}
        cut = em.recovered == "truncated" and stop == em.length and stop > start
        if cut and not out["terminated"][-1]:
            out["truncated"][-1] = True  # applied in memory for read-only opens
        fields = [n for n in obs_fields(self.layout) if images or not n.startswith("obs/images/")]
        rows = {n: self._rows(n, o0, o1) for n in fields}
        obs: dict[str, Any] = {}
        nxt: dict[str, Any] = {}
        if self.layout.state_dim:
            obs[keys.STATE], nxt[keys.STATE] = rows["obs/state"][:-1], rows["obs/state"][1:]
        if self.layout.images and images:
            obs[keys.IMAGES] = {c: rows[f"obs/images/{c}"][:-1] for c in self.layout.images}
            nxt[keys.IMAGES] = {c: rows[f"obs/images/{c}"][1:] for c in self.layout.images}
        out["obs"], out["next_obs"], out["meta"] = obs, nxt, em
        return out

    def _rows(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of array ``name``: a copy from the rows this process flushed last
        when they cover the range, else from the store."""
        recent = self._recent.get(name)
        if recent is not None:
            start, data = recent
            if start <= lo and hi <= start + len(data):
                return data[lo - start : hi - start].copy()
        return self._arrays[name][lo:hi]

    def read_camera_rows(self, camera: str, lo: int, hi: int) -> np.ndarray:
        """Frames of camera ``camera`` in observation rows [lo, hi) (global row indices, see the
        module docstring), committed rows only: (hi - lo, H, W, 3) uint8.

        Raises:
            KeyError: No such camera. ValueError: Rows beyond the committed ones.
        """
        if camera not in self.layout.images:
            raise KeyError(f"camera {camera!r}: the log has {sorted(self.layout.images)}")
        if not 0 <= lo <= hi <= self.num_durable_obs_rows:
            raise ValueError(f"rows [{lo}, {hi}): the log has {self.num_durable_obs_rows}")
        return self._arrays[f"obs/images/{camera}"][lo:hi]

    @property
    def num_durable_obs_rows(self) -> int:
        """Observation rows that belong to durable episodes (:meth:`durable_episodes`)."""
        eps = [e for e in self.durable_episodes() if e.length > 0]
        return max((e.start_obs + e.length + 1 for e in eps), default=0)

    def iter_episodes(self, sources: tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
        """``read_episode`` for every episode (optionally only these sources), in order."""
        for em in self._episodes:
            if sources is None or em.source in sources:
                yield self.read_episode(em.index)
