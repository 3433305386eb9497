"""Between the durable log and the RAM buffers: rebuild on resume, load demos, salvage a
damaged log.

Loading refuses bad data with an error that names the dataset, episode, array and row and says
what to do (:mod:`robot_rl.replay.checks`): NaN / inf anywhere a learner reads refuses the whole
load (:class:`~robot_rl.replay.checks.NonFiniteDataError`); :func:`salvage` writes a copy that
skips those episodes (and unreadable ones) and never changes the source.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import zarr

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.features import FrameFeatures
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.checks import check_finite, nonfinite_in_episode, read_checked
from robot_rl.replay.feature_cache import attach_features, log_features
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import (
    STEP_FIELD_NAMES,
    CorruptLogError,
    layout_from_json,
)


def rebuild_buffer(
    log: EpisodeLog,
    buffer: ReplayBuffer,
    sources: Collection[str] | None = None,
    cache_dir: str | Path | None = None,
) -> int:
    """Refill ``buffer`` from ``log`` (on resume), oldest episode first.

    Only the most recent episodes that can still be in the buffer are read: the same contents
    as if every episode had been added, without reading what would be evicted. A buffer that
    stores backbone features gets them from the log's feature cache
    (:func:`robot_rl.replay.feature_cache.log_features`: computed for new frames, reused for
    the rest).

    Args:
        log: An open log (any mode).
        buffer: The buffer to add to (normally empty).
        sources: Only episodes of these sources (None: all).
        cache_dir: The feature cache's directory (None: beside the log).

    Returns:
        Number of transitions added.

    Raises:
        NonFiniteDataError: An episode to read holds NaN / inf (nothing is added).
        CorruptLogError: An episode cannot be read (a damaged chunk file).
    """
    if buffer.layout != log.layout or buffer.action_dim != log.action_dim:
        raise ValueError(
            f"buffer layout {buffer.layout} / action_dim {buffer.action_dim} differs from the "
            f"log's {log.layout} / {log.action_dim}"
        )
    eps = [e for e in log.episodes if sources is None or e.source in sources]
    first, steps, rows = len(eps), 0, 0
    while first > 0 and steps < buffer.capacity and rows < buffer.obs_capacity:
        first -= 1
        steps += eps[first].length
        rows += eps[first].length + 1
    check_finite(log, eps[first:])
    feats = {}
    if buffer.features is not None and eps[first:]:
        feats = {c: log_features(log, c, buffer.features, cache_dir) for c in log.layout.images}
    added = 0
    for e in eps[first:]:  # frames with features cached are not read twice
        ep = read_checked(log, e.index, images=not feats)
        buffer.add_episode(attach_features(ep, e.start_obs, feats) if feats else ep)
        added += e.length
    return added


def load_demos(
    path: str | Path,
    device: str | torch.device = "cpu",
    sources: Collection[str] | None = None,
    features: FrameFeatures | None = None,
    cache_dir: str | Path | None = None,
) -> ReplayBuffer:
    """A :class:`ReplayBuffer` holding every finished transition of a log written by
    :class:`EpisodeLog` (unfinished episodes are ignored; the store is not modified).

    Args:
        path: The zarr store.
        device: Device of sampled batches.
        sources: Only episodes of these sources (None: all).
        features: Hold this frozen backbone's features instead of the frames (the agent's
            ``frame_features``); they are cached on disk beside the store (or in
            ``cache_dir``) and recomputed only for other weights, another image size or
            other frames (:mod:`robot_rl.replay.feature_cache`).
        cache_dir: See ``features``.

    Raises:
        FileNotFoundError: No log at ``path``.
        CorruptLogError: Inconsistent or unreadable store (see :meth:`EpisodeLog.open`).
        NonFiniteDataError: NaN / inf in an episode (every one is listed; nothing is loaded).
    """
    with EpisodeLog.open(path, unfinished="drop", mode="r") as log:
        eps = [e for e in log.episodes if sources is None or e.source in sources]
        steps = sum(e.length for e in eps)
        buf = ReplayBuffer(
            max(steps, 1),
            log.layout,
            log.action_dim,
            device,
            obs_capacity=steps + len(eps) + 1,
            features=features if log.layout.images else None,
        )
        rebuild_buffer(log, buf, sources, cache_dir)
    return buf


@dataclass(frozen=True)
class SalvageReport:
    """What :func:`salvage` did.

    Attributes:
        copied: Episodes written to the new log.
        total: Episodes in the source's episode table.
        skipped: ``(episode index, why)`` for each episode not copied.
    """

    copied: int
    total: int
    skipped: tuple[tuple[int, str], ...]


def salvage(src: str | Path, dst: str | Path) -> SalvageReport:
    """Copy every finished episode of ``src`` that reads in full and is finite into a new log.

    For a store that :meth:`EpisodeLog.open` reports as corrupt (an incomplete copy, deleted or
    damaged chunk files, a shortened array, a lost commit record) or that a loader refuses for
    NaN / inf: each episode of the episode table is copied if all its rows read back and its
    float arrays are finite, and skipped (with the reason) otherwise; an episode a crash left
    open is reported as skipped. ``src`` is not modified.

    Raises:
        FileNotFoundError: No zarr store at ``src``.
        CorruptLogError: Not even the layout or episode table can be read.
    """
    if not (Path(src) / "zarr.json").exists():
        raise FileNotFoundError(f"no dataset at {src} (no zarr.json)")
    root = zarr.open_group(str(src), mode="r", zarr_format=3)
    try:
        attrs = dict(root.attrs)
        layout, action_dim = layout_from_json(attrs["layout"]), int(attrs["action_dim"])
        table = list(root["meta"].attrs["episodes"])
    except KeyError as e:
        raise CorruptLogError(f"{src}: cannot salvage, {e} is missing") from e
    n, skipped = 0, []
    try:  # an episode a crash left open is not in the table: say so
        op = dict(root["commit"].attrs).get("open_episode")
    except KeyError:
        op = None
    with EpisodeLog.create(
        dst, layout, action_dim, {**attrs.get("meta", {}), "salvaged_from": str(src)}
    ) as out:
        for e in table:
            if not e.get("finished", False):
                skipped.append((int(e["index"]), "never finished"))
                continue
            try:
                ep = _read_raw(root, layout, e)
            except Exception as err:  # noqa: BLE001 - a missing, short or damaged array: skip
                skipped.append((int(e["index"]), f"cannot be read ({err})"))
                continue
            flat = {k: ep[k] for k in STEP_FIELD_NAMES}
            if keys.STATE in ep["obs"]:
                flat["obs/state"] = ep["obs"][keys.STATE]
            bad = nonfinite_in_episode(flat, int(e["index"]), str(e["source"]))
            if bad:
                skipped.append((int(e["index"]), "; ".join(b.describe() for b in bad)))
                continue
            out.begin_episode(e["source"], e["policy_version"], e["seed"])
            for t in range(e["length"]):
                out.append(
                    obs_learner=_row(ep["obs"], t),
                    action=ep["action"][t],
                    policy_action=ep["policy_action"][t],
                    reward=ep["reward"][t],
                    terminated=ep["terminated"][t],
                    truncated=ep["truncated"][t],
                    intervened=ep["intervened"][t],
                    policy_version=ep["policy_version"][t],
                    stamp_s=ep["stamp_s"][t],
                    next_obs_learner=_row(ep["obs"], t + 1),
                )
            extra = dict(e.get("extra") or {})
            if e.get("reward_model_id") is not None:
                extra["reward_model_id"] = e["reward_model_id"]
            out.end_episode(e["success"], **extra)
            n += 1
    if op is not None:
        skipped.append(
            (
                int(op["index"]),
                "begun but never ended (a crash): not copied; on an otherwise whole store, "
                "EpisodeLog.open(path, unfinished='truncate') keeps its flushed steps",
            )
        )
    return SalvageReport(n, len(table), tuple(skipped))


def _read_raw(root: zarr.Group, layout: ObsLayout, e: dict) -> dict:
    """One episode's arrays straight from the store; raises if any row is missing."""
    s0, s1 = e["start_step"], e["start_step"] + e["length"]
    o0, o1 = e["start_obs"], e["start_obs"] + e["length"] + 1
    out = {}
    for name in STEP_FIELD_NAMES:
        a = root[f"data/{name}"]
        if a.shape[0] < s1:
            raise ValueError(f"data/{name} has {a.shape[0]} rows, the episode ends at {s1}")
        out[name] = a[s0:s1]
    obs = {}
    paths = {"state": "data/obs/state"} if layout.state_dim else {}
    paths.update({c: f"data/obs/images/{c}" for c in layout.images})
    for k, p in paths.items():
        a = root[p]
        if a.shape[0] < o1:
            raise ValueError(f"{p} has {a.shape[0]} rows, the episode ends at {o1}")
        obs[k] = a[o0:o1]
    out["obs"] = obs
    return out


def _row(obs: dict, i: int) -> dict:
    row: dict = {}
    if keys.STATE in obs:
        row[keys.STATE] = obs[keys.STATE][i]
    cams = {k: v[i] for k, v in obs.items() if k != keys.STATE}
    if cams:
        row[keys.IMAGES] = cams
    return row


def load_checked_demos(
    path: str | Path,
    layout: ObsLayout,
    action_dim: int,
    settings_problem: Callable[[dict[str, Any] | None], str | None] | None = None,
    features: FrameFeatures | None = None,
) -> ReplayBuffer:
    """:func:`load_demos`, after checking the dataset against the learner before a single
    episode is read: its observation layout and action size, and (``settings_problem``) the
    env settings it was recorded with.

    Args:
        path: The zarr store.
        layout: The learner env's observation layout.
        action_dim: The learner env's action size.
        settings_problem: Called with the dataset's stored env settings (``meta["env"]``, None
            when it has none); returns what is wrong with them for this learner, or None.
        features: See :func:`load_demos`.

    Raises:
        ValueError: The settings or the layout differ (the message says how to fix it);
            bad data (NaN / inf, damaged chunks) as in :func:`load_demos`.
    """
    from robot_rl.replay.checks import layout_difference
    from robot_rl.replay.log import EpisodeLog

    path = Path(path)
    with EpisodeLog.open(path, unfinished="drop", mode="r") as log:
        stored = (getattr(log, "meta", None) or {}).get("env")
        have, have_adim = log.layout, log.action_dim
    problem = None if settings_problem is None else settings_problem(stored)
    if problem:
        raise ValueError(f"demos {path} {problem}")
    diff = layout_difference(have, have_adim, layout, action_dim)
    if diff:
        raise ValueError(
            f"demos {path} do not fit the env: {'; '.join(diff)}. Nothing was loaded. "
            f"`robot-rl dataset info {path}` shows the dataset's cameras and sizes; record the "
            "demos with the env's settings (--obs/--cameras/--image-size, the same robot and "
            "task), or train with the demos' settings"
        )
    return load_demos(path, features=features)
