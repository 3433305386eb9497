"""FrameLog: labelled frames for success classifiers (``robot-rl label``), zarr v3, append-only.

Each frame is one observation of the env (after a reset or after a step) with a binary label:
1 while the person held the ``success`` button for that frame, 0 otherwise (HIL-SERL style).
Reward-classifier training (stage 5) reads this format.

Store layout::

    <path>/                     root attrs: format "robot_rl.frame_labels", version 1,
                                layout (state_dim + cameras, as the episode log), meta
      data/state                (N, S) float32      robot state, learner layout (absent if S = 0)
      data/images/<cam>         (N, H, W, 3) uint8  one chunk per frame, Blosc/zstd
      data/label                (N,) uint8          1 success button held, 0 not
      data/episode              (N,) int64          episode index of the frame
      data/step                 (N,) int64          frame index in its episode (0: after reset)
      data/stamp_s              (N,) float64        observation stamp (robot clock), seconds
      data/task_success         (N,) int8           the task's own success (twin): 1 / 0; -1 unknown
      meta (attrs)              "episodes": [{index, start, length, positives, seed, extra}]
      commit (attrs)            {"num_frames", "num_episodes"}: the committed prefix

Crash safety: frames are written every ``flush_every_frames`` frames, but the commit record
advances only when an episode ends, so a reader (and a writer reopening the store) sees only
whole episodes; rows past the commit record (an episode open at a crash or an abort) are
ignored, and trimmed when the store is opened for appending.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.replay.schema import (
    CorruptLogError,
    layout_from_json,
    layout_to_json,
    obs_row,
    write_rows,
)

FRAMES_FORMAT = "robot_rl.frame_labels"
FRAMES_VERSION = 1
_SCALARS = {
    "label": "uint8",
    "episode": "int64",
    "step": "int64",
    "stamp_s": "float64",
    "task_success": "int8",
}


def _obs_arrays(layout: ObsLayout) -> dict[str, tuple[tuple[int, ...], str]]:
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    if layout.state_dim:
        out["state"] = ((layout.state_dim,), "float32")
    for cam, spec in layout.images.items():
        out[f"images/{cam}"] = (tuple(spec.shape), "uint8")
    return out


class FrameLog:
    """Append-only labelled frames (see the module docstring). Build with :meth:`create` or
    :meth:`open`; counts cover committed (whole) episodes only."""

    def __init__(self, root: zarr.Group, path: Path, mode: str, flush_every_frames: int) -> None:
        if flush_every_frames < 1:
            raise ValueError(f"flush_every_frames must be >= 1, got {flush_every_frames}")
        self.path, self.mode, self._root = path, mode, root
        self.flush_every_frames = flush_every_frames
        attrs = dict(root.attrs)
        self.layout: ObsLayout = layout_from_json(attrs["layout"])
        self.meta: dict[str, Any] = dict(attrs.get("meta", {}))
        self._fields = {**_obs_arrays(self.layout), **{k: ((), v) for k, v in _SCALARS.items()}}
        try:
            self._arrays = {n: root[f"data/{n}"] for n in self._fields}
            commit = dict(root["commit"].attrs)
            self._episodes: list[dict[str, Any]] = list(root["meta"].attrs.get("episodes", []))
        except KeyError as e:
            raise CorruptLogError(f"{path}: missing {e}; not a complete frame store") from e
        self._num_frames = int(commit["num_frames"])
        self._episodes = self._episodes[: int(commit["num_episodes"])]
        short = [n for n, a in self._arrays.items() if a.shape[0] < self._num_frames]
        if short:
            raise CorruptLogError(f"{path}: arrays {short} are shorter than the commit record")
        self._written = self._num_frames  # rows on disk (committed + open episode)
        self._pending: list[dict[str, np.ndarray]] = []
        self._open: dict[str, Any] | None = None
        self._closed = False
        if mode == "a":
            self._trim()

    @classmethod
    def create(
        cls,
        path: str | Path,
        layout: ObsLayout,
        meta: Mapping[str, Any] | None = None,
        *,
        flush_every_frames: int = 10,
        image_clevel: int = 3,
    ) -> FrameLog:
        """A new, empty store at ``path`` (refuses to overwrite)."""
        path = Path(path)
        if path.exists():
            raise FileExistsError(f"{path} already exists; choose another path or open it")
        root = zarr.open_group(str(path), mode="w-", zarr_format=3)
        root.attrs.put(
            {
                "format": FRAMES_FORMAT,
                "version": FRAMES_VERSION,
                "layout": layout_to_json(layout),
                "meta": dict(meta or {}),
            }
        )
        blosc = BloscCodec(cname="zstd", clevel=image_clevel, shuffle="noshuffle")
        fields = {**_obs_arrays(layout), **{k: ((), v) for k, v in _SCALARS.items()}}
        for name, (shape, dtype) in fields.items():
            image = name.startswith("images/")
            root.create_array(
                f"data/{name}",
                shape=(0, *shape),
                chunks=(1 if image else 1024, *shape),
                dtype=dtype,
                compressors=blosc if image else "auto",
                fill_value=0,
            )
        root.create_group("meta").attrs.put({"episodes": []})
        root.create_group("commit").attrs.put({"num_frames": 0, "num_episodes": 0})
        return cls(root, path, "a", flush_every_frames)

    @classmethod
    def open(cls, path: str | Path, mode: str = "r", *, flush_every_frames: int = 10) -> FrameLog:
        """Open an existing store, ``mode`` "r" (read) or "a" (append).

        Raises:
            FileNotFoundError: No store at ``path``.
            CorruptLogError: Not a frame store, or inconsistent.
        """
        path = Path(path)
        if mode not in ("r", "a"):
            raise ValueError(f"mode must be 'r' or 'a', got {mode!r}")
        if not (path / "zarr.json").exists():
            raise FileNotFoundError(f"no frame store at {path} (no zarr.json)")
        root = zarr.open_group(str(path), mode="r" if mode == "r" else "r+", zarr_format=3)
        attrs = dict(root.attrs)
        if attrs.get("format") != FRAMES_FORMAT:
            raise CorruptLogError(f"{path} is a zarr store but not a robot_rl frame store")
        if attrs.get("version") != FRAMES_VERSION:
            raise CorruptLogError(f"{path}: version {attrs.get('version')} != {FRAMES_VERSION}")
        return cls(root, path, mode, flush_every_frames)

    # -- writing -------------------------------------------------------------------------------

    def begin_episode(self, seed: int | None = None) -> int:
        """Start an episode; returns its index."""
        self._check_writable()
        if self._open is not None:
            raise RuntimeError("an episode is open; end_episode or abort_episode first")
        self._open = {"index": len(self._episodes), "start": self._num_frames, "seed": seed}
        self._open.update(length=0, positives=0)
        return self._open["index"]

    def append(
        self,
        obs_learner: Mapping[str, Any],
        label: bool,
        stamp_s: float,
        task_success: bool | None = None,
    ) -> None:
        """Buffer one frame of the open episode (written every ``flush_every_frames``)."""
        self._check_writable()
        op = self._open
        if op is None:
            raise RuntimeError("append before begin_episode")
        row = {
            k.removeprefix("obs/"): v for k, v in obs_row(obs_learner, self.layout, "frame").items()
        }
        row.update(
            label=np.uint8(bool(label)),
            episode=np.int64(op["index"]),
            step=np.int64(op["length"]),
            stamp_s=np.float64(stamp_s),
            task_success=np.int8(-1 if task_success is None else int(bool(task_success))),
        )
        self._pending.append(row)
        op["length"] += 1
        op["positives"] += int(bool(label))
        if len(self._pending) >= self.flush_every_frames:
            self._write_pending()

    def end_episode(self, **extra: Any) -> dict[str, Any]:
        """Write and commit the open episode; ``extra`` (JSON values) goes into its record."""
        self._check_writable()
        op = self._open
        if op is None or op["length"] == 0:
            raise RuntimeError("end_episode needs an open episode with at least one frame")
        self._write_pending()
        record = {k: op[k] for k in ("index", "start", "length", "positives", "seed")}
        record["extra"] = dict(extra)
        self._episodes.append(record)
        self._num_frames = op["start"] + op["length"]
        self._open = None
        self._root["meta"].attrs.put({"episodes": self._episodes})
        self._root["commit"].attrs.put(
            {"num_frames": self._num_frames, "num_episodes": len(self._episodes)}
        )
        return record

    def abort_episode(self) -> None:
        """Drop the open episode (nothing of it is committed)."""
        self._check_writable()
        self._pending, self._open = [], None
        self._trim()

    def close(self) -> None:
        """Release. An open episode is dropped (it was never committed)."""
        if self._closed:
            return
        if self.mode == "a" and self._open is not None:
            self.abort_episode()
        self._closed = True

    def __enter__(self) -> FrameLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        n0, n1 = self._written, self._written + len(self._pending)
        for name in self._fields:
            write_rows(self._arrays[name], n0, n1, np.stack([r[name] for r in self._pending]))
        self._written, self._pending = n1, []

    def _trim(self) -> None:
        for arr in self._arrays.values():
            if arr.shape[0] > self._num_frames:
                arr.resize((self._num_frames, *arr.shape[1:]))
        self._written = self._num_frames

    def _check_writable(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.path}: frame store is closed")
        if self.mode != "a":
            raise RuntimeError(f"{self.path} is open read-only; open with mode='a' to write")

    # -- reading -------------------------------------------------------------------------------

    @property
    def num_frames(self) -> int:
        """Committed frames."""
        return self._num_frames

    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    @property
    def episodes(self) -> list[dict[str, Any]]:
        return [dict(e) for e in self._episodes]

    @property
    def positives(self) -> int:
        """Committed frames labelled 1."""
        return int(sum(e["positives"] for e in self._episodes))

    @property
    def negatives(self) -> int:
        """Committed frames labelled 0."""
        return self._num_frames - self.positives

    def read(self, start: int = 0, stop: int | None = None) -> dict[str, Any]:
        """Committed frames ``[start, stop)``: ``obs`` in the learner layout (``state``,
        ``images``) plus ``label``, ``episode``, ``step``, ``stamp_s``, ``task_success``."""
        stop = self._num_frames if stop is None else min(stop, self._num_frames)
        out: dict[str, Any] = {k: self._arrays[k][start:stop] for k in _SCALARS}
        obs: dict[str, Any] = {}
        if self.layout.state_dim:
            obs[keys.STATE] = self._arrays["state"][start:stop]
        if self.layout.images:
            obs[keys.IMAGES] = {
                c: self._arrays[f"images/{c}"][start:stop] for c in self.layout.images
            }
        out["obs"] = obs
        return out
