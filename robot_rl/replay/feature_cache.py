"""Frozen-backbone features of a log's frames, cached on disk beside the log.

A demo dataset is read at the start of every run, and a run's own log at every resume; running
the backbone over all their frames each time costs ~10-20 ms per frame on a CPU. The cache keeps
the features of every observation row of a log, per camera, in a directory beside it (the log
itself stays backbone-independent)::

    demos.zarr.features/
        front.efficientnet-lite0-<weights hash>-128x128-u8.npy    (R, h, w, C) uint8
        front.efficientnet-lite0-<weights hash>-128x128-u8.json   rows, BLAKE2b of their frames

The file name carries :meth:`FrameFeatures.cache_key` (the backbone's weights hash, the image
size, the dtype): other weights or another image size use other files, so a stale entry is never
read. The manifest holds the BLAKE2b digest of the frames the features were computed from: a log
that was replaced or rewritten (a salvage, a re-recording with another camera) has other frames
and is recomputed; a log that grew (appends never change earlier rows) reuses the cached rows
and encodes only the new ones. Files are written to a temporary name and renamed (the manifest
last), so a crash leaves the previous cache or none. A cache directory that cannot be written
is skipped with a warning (the features are then computed in memory).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

from robot_rl.core import keys
from robot_rl.core.features import FrameFeatures
from robot_rl.replay.log import EpisodeLog

READ_ROWS = 1024
"""Frames read (and hashed or encoded) per chunk: bounded memory for large logs."""
CACHE_FORMAT = "robot_rl.feature_cache"


def default_cache_dir(log_path: str | Path) -> Path:
    """``<log>.features`` beside the log."""
    p = Path(log_path)
    return p.with_name(p.name + ".features")


def _frames_digest(log: EpisodeLog, cam: str, rows: int) -> str:
    h = hashlib.blake2b(digest_size=20)
    for lo in range(0, rows, READ_ROWS):
        h.update(np.ascontiguousarray(log.read_camera_rows(cam, lo, min(rows, lo + READ_ROWS))))
    return h.hexdigest()


def _load_manifest(path: Path) -> dict | None:
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("format") == CACHE_FORMAT else None


def log_features(
    log: EpisodeLog, cam: str, features: FrameFeatures, cache_dir: str | Path | None = None
) -> np.ndarray:
    """Features of camera ``cam`` for every durable observation row of ``log``.

    Args:
        log: An open log (any mode).
        cam: One of the log's cameras.
        features: The frozen backbone.
        cache_dir: Where the cache lives (None: :func:`default_cache_dir` of the log).

    Returns:
        (R, h, w, C) uint8, row ``i`` the features of observation row ``i``
        (R = ``log.num_durable_obs_rows``); read-only when served from the cache.
    """
    rows = log.num_durable_obs_rows
    hw = tuple(log.layout.images[cam].shape[:2])
    shape = tuple(features.feature_shape(hw))
    key = features.cache_key(hw)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir(log.path)
    npy, manifest = root / f"{cam}.{key}.npy", root / f"{cam}.{key}.json"
    cached = _reusable_rows(log, cam, npy, manifest, shape, rows)
    if cached is not None and cached[0] == rows:
        return np.load(npy, mmap_mode="r")[:rows]
    n_old = 0 if cached is None else cached[0]
    out = np.empty((rows, *shape), np.uint8)
    if n_old:
        out[:n_old] = np.load(npy, mmap_mode="r")[:n_old]
    h = hashlib.blake2b(digest_size=20)
    for lo in range(0, rows, READ_ROWS):
        hi = min(rows, lo + READ_ROWS)
        frames = log.read_camera_rows(cam, lo, hi)
        h.update(np.ascontiguousarray(frames))
        if hi > n_old:
            first = max(lo, n_old)
            out[first:hi] = features.encode(frames[first - lo :])
    _write(root, npy, manifest, out, {"rows": rows, "frames_blake2b": h.hexdigest(), "key": key})
    return out


def _reusable_rows(
    log: EpisodeLog, cam: str, npy: Path, manifest: Path, shape: tuple, rows: int
) -> tuple[int] | None:
    """(cached rows,) when the cache's rows are a prefix of the log's frames, else None."""
    m = _load_manifest(manifest)
    if m is None or not npy.is_file():
        return None
    n = int(m.get("rows", -1))
    if not 0 < n <= rows:
        return None
    try:
        arr = np.load(npy, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if arr.shape[0] < n or tuple(arr.shape[1:]) != shape or arr.dtype != np.uint8:
        return None
    if _frames_digest(log, cam, n) != m.get("frames_blake2b"):
        return None
    return (n,)


def _write(root: Path, npy: Path, manifest: Path, arr: np.ndarray, meta: dict) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        manifest.unlink(missing_ok=True)  # no manifest while the array is replaced
        tmp = npy.with_name(npy.name + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.save(f, arr)
        os.replace(tmp, npy)
        tmp_m = manifest.with_name(manifest.name + f".tmp{os.getpid()}")
        tmp_m.write_text(json.dumps({"format": CACHE_FORMAT, **meta}))
        os.replace(tmp_m, manifest)
    except OSError as e:
        warnings.warn(
            f"feature cache {root} not written ({e}); features are recomputed next time "
            "(pass a writable cache directory to keep them)",
            stacklevel=3,
        )


def attach_features(episode: dict, start_obs: int, feats: dict[str, np.ndarray]) -> dict:
    """Put the features of an episode read from a log (:meth:`EpisodeLog.read_episode`, all
    steps) beside its frames: ``obs["features"]`` / ``next_obs["features"]``, sliced from
    :func:`log_features` rows (``start_obs``: the episode's first observation row)."""
    t = int(np.asarray(episode["reward"]).shape[0])
    episode["obs"][keys.FEATURES] = {c: f[start_obs : start_obs + t] for c, f in feats.items()}
    episode["next_obs"][keys.FEATURES] = {
        c: f[start_obs + 1 : start_obs + t + 1] for c, f in feats.items()
    }
    return episode
