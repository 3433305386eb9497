"""Between the durable log and the RAM buffers: rebuild on resume, load demos, salvage a
damaged log."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import torch
import zarr

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import STEP_FIELD_NAMES, CorruptLogError, layout_from_json


def rebuild_buffer(
    log: EpisodeLog, buffer: ReplayBuffer, sources: Collection[str] | None = None
) -> int:
    """Refill ``buffer`` from ``log`` (on resume), oldest episode first.

    Only the most recent episodes that can still be in the buffer are read: the same contents
    as if every episode had been added, without reading what would be evicted.

    Args:
        log: An open log (any mode).
        buffer: The buffer to add to (normally empty).
        sources: Only episodes of these sources (None: all).

    Returns:
        Number of transitions added.
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
    added = 0
    for e in eps[first:]:
        buffer.add_episode(log.read_episode(e.index))
        added += e.length
    return added


def load_demos(
    path: str | Path,
    device: str | torch.device = "cpu",
    sources: Collection[str] | None = None,
) -> ReplayBuffer:
    """A :class:`ReplayBuffer` holding every finished transition of a log written by
    :class:`EpisodeLog` (unfinished episodes are ignored; the store is not modified).

    Args:
        path: The zarr store.
        device: Device of sampled batches.
        sources: Only episodes of these sources (None: all).
    """
    with EpisodeLog.open(path, unfinished="drop", mode="r") as log:
        eps = [e for e in log.episodes if sources is None or e.source in sources]
        steps = sum(e.length for e in eps)
        buf = ReplayBuffer(
            max(steps, 1), log.layout, log.action_dim, device, obs_capacity=steps + len(eps) + 1
        )
        rebuild_buffer(log, buf, sources)
    return buf


def salvage(src: str | Path, dst: str | Path) -> int:
    """Copy every still-readable finished episode of a damaged log into a new log at ``dst``.

    For a store that :meth:`EpisodeLog.open` reports as corrupt (an incomplete copy, deleted
    chunk files, a shortened array): episodes are copied in order until the first one that
    cannot be read in full. ``src`` is not modified.

    Returns:
        Number of episodes copied.

    Raises:
        CorruptLogError: Not even the layout or episode table can be read.
    """
    root = zarr.open_group(str(src), mode="r", zarr_format=3)
    try:
        attrs = dict(root.attrs)
        layout, action_dim = layout_from_json(attrs["layout"]), int(attrs["action_dim"])
        table = list(root["meta"].attrs["episodes"])
    except KeyError as e:
        raise CorruptLogError(f"{src}: cannot salvage, {e} is missing") from e
    n = 0
    with EpisodeLog.create(
        dst, layout, action_dim, {**attrs.get("meta", {}), "salvaged_from": str(src)}
    ) as out:
        for e in table:
            if not e.get("finished", False):
                break
            try:
                ep = _read_raw(root, layout, e)
            except Exception:  # noqa: BLE001 - a missing or short array ends the salvage
                break
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
    return n


def _read_raw(root: zarr.Group, layout: ObsLayout, e: dict) -> dict:
    """One episode's arrays straight from the store; raises if any row is missing."""
    s0, s1 = e["start_step"], e["start_step"] + e["length"]
    o0, o1 = e["start_obs"], e["start_obs"] + e["length"] + 1
    out = {}
    for name in STEP_FIELD_NAMES:
        a = root[f"data/{name}"]
        if a.shape[0] < s1:
            raise ValueError(f"data/{name} too short")
        out[name] = a[s0:s1]
    obs = {}
    paths = {"state": "data/obs/state"} if layout.state_dim else {}
    paths.update({c: f"data/obs/images/{c}" for c in layout.images})
    for k, p in paths.items():
        a = root[p]
        if a.shape[0] < o1:
            raise ValueError(f"{p} too short")
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
