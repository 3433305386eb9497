"""Feature statistics in the LeRobot v3.0 layout (``meta/stats.json`` and the ``stats/...``
columns of ``meta/episodes``), computed from the source data, never from decoded video.

Per feature: ``min``, ``max``, ``mean``, ``std`` (population), ``count`` and the quantiles
``q01``, ``q10``, ``q50``, ``q90``, ``q99``.

* Vector features ``(T, D)``: statistics over frames, each of shape ``(D,)``.
* Scalar features ``(T,)`` (stored as shape ``(1,)`` features): shape ``(1,)``.
* Camera features ``(T, H, W, 3)`` uint8: per channel over pixels of a sample of frames (all
  frames up to 100, then ``T ** 0.75`` evenly spaced, at most 10 000; sides over 300 px
  subsampled to about 150 px, as LeRobot does), scaled to [0, 1], shape ``(3, 1, 1)``;
  ``count`` is the number of sampled frames.
* ``count`` is ``[n]`` (frames).

Dataset statistics aggregate episode statistics as LeRobot does: min of mins, max of maxes,
count-weighted mean, pooled variance (exact), and count-weighted means of the episode quantiles
(an approximation, as in LeRobot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)

Stats = dict[str, np.ndarray]


def num_image_samples(n_frames: int) -> int:
    """How many frames of an episode image statistics sample (LeRobot's heuristic)."""
    low = min(100, n_frames)
    return max(low, min(int(n_frames**0.75), 10_000))


def image_sample_indices(n_frames: int) -> np.ndarray:
    """Evenly spaced frame indices, first and last included."""
    n = num_image_samples(n_frames)
    return np.round(np.linspace(0, n_frames - 1, n)).astype(np.int64)


def _downsample(images: np.ndarray) -> np.ndarray:
    """(N, H, W, 3) -> every k-th pixel when a side is >= 300 px (k = side // 150)."""
    h, w = images.shape[1:3]
    if max(h, w) < 300:
        return images
    k = int(max(h, w) / 150)
    return images[:, ::k, ::k]


def _basic(values: np.ndarray, count: int) -> Stats:
    """Statistics over axis 0 of (N, D) float64 ``values``."""
    q = np.quantile(values, QUANTILES, axis=0)  # (5, D)
    out: Stats = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([count], dtype=np.int64),
    }
    for key, row in zip(QUANTILE_KEYS, q, strict=True):
        out[key] = row
    return out


def vector_stats(data: np.ndarray) -> Stats:
    """Statistics of a (T,) or (T, D) feature over its T frames (booleans count as 0 / 1).

    Returns:
        Each statistic with shape (1,) for (T,) data and (D,) for (T, D) data.
    """
    arr = np.asarray(data)
    if arr.ndim not in (1, 2) or arr.shape[0] == 0:
        raise ValueError(f"expected (T,) or (T, D) data with T > 0, got {arr.shape}")
    values = arr.reshape(arr.shape[0], -1).astype(np.float64)
    return _basic(values, arr.shape[0])


def image_stats(frames: np.ndarray) -> Stats:
    """Per-channel statistics of (T, H, W, 3) uint8 frames, in [0, 1], shape (3, 1, 1)."""
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"expected (T, H, W, 3) uint8 frames, got {frames.shape} {frames.dtype}")
    idx = image_sample_indices(frames.shape[0])
    sample = _downsample(frames[idx])
    pixels = sample.reshape(-1, 3).astype(np.float64) / 255.0
    st = _basic(pixels, len(idx))
    return {k: v if k == "count" else v.reshape(3, 1, 1) for k, v in st.items()}


def aggregate(per_episode: Sequence[Stats]) -> Stats:
    """Dataset statistics of one feature from its episode statistics (see module docstring)."""
    if not per_episode:
        raise ValueError("aggregate needs at least one episode's statistics")
    counts = np.array([int(s["count"][0]) for s in per_episode], dtype=np.float64)
    total = counts.sum()
    means = np.stack([s["mean"] for s in per_episode])
    w = counts.reshape(-1, *([1] * (means.ndim - 1)))
    mean = (means * w).sum(axis=0) / total
    var = ((np.stack([s["std"] for s in per_episode]) ** 2 + (means - mean) ** 2) * w).sum(
        axis=0
    ) / total
    out: Stats = {
        "min": np.min(np.stack([s["min"] for s in per_episode]), axis=0),
        "max": np.max(np.stack([s["max"] for s in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(var),
        "count": np.array([int(total)], dtype=np.int64),
    }
    for key in QUANTILE_KEYS:
        out[key] = (np.stack([s[key] for s in per_episode]) * w).sum(axis=0) / total
    return out


def aggregate_all(per_episode: Sequence[Mapping[str, Stats]]) -> dict[str, Stats]:
    """:func:`aggregate` for every feature of a list of ``{feature: stats}``."""
    names = list(per_episode[0]) if per_episode else []
    return {n: aggregate([ep[n] for ep in per_episode]) for n in names}


def to_json(stats: Mapping[str, Stats]) -> dict[str, dict[str, list]]:
    """``{feature: {stat: nested lists}}`` for ``meta/stats.json``."""
    return {f: {k: np.asarray(v).tolist() for k, v in st.items()} for f, st in stats.items()}
