"""Summary of a robot_rl dataset (a zarr episode log): what ``robot-rl dataset info`` shows.

Counts come from the log's committed episode table; per-step flags (interventions,
termination, time limits, stamps) are read from the time-major step arrays only, so a pixel
dataset is summarised without decompressing a single image; the action, reward and state
arrays are checked for NaN / inf (which loaders refuse, :mod:`robot_rl.replay.checks`). The log
is opened read-only: an episode a crash left open is counted as an unfinished episode (its
flushed steps are kept, as ``EpisodeLog.open(..., unfinished="truncate")`` does) and nothing is
written.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from robot_rl.replay.checks import find_nonfinite
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import FORMAT, SOURCES, VERSION, CorruptLogError, salvage_advice


def disk_size_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (apparent size)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:  # a file removed while walking
                pass
    return total


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _success_rate(eps: list) -> dict[str, Any]:
    known = [e.success for e in eps if e.success is not None]
    return {
        "episodes": len(eps),
        "known": len(known),
        "successes": int(sum(known)),
        "rate": _rate(int(sum(known)), len(known)),
    }


def dataset_info(path: str | Path) -> dict[str, Any]:
    """A JSON-able summary of the episode log at ``path``.

    Returns:
        ``path``, ``format``/``version``, ``episodes`` and ``steps`` (total and ``by_source``),
        ``episode_length`` (min / mean / max steps), ``success`` (rate over episodes whose
        success is known, overall and per source), ``intervention`` (intervened steps / steps
        and episodes with at least one intervened step), ``cameras`` (name -> [H, W, 3]),
        ``state_dim``, ``action_dim``, ``fps`` (``control_hz`` if recorded in the metadata,
        else None) and ``fps_from_stamps`` (1 / median step interval), ``terminated_episodes``
        / ``truncated_episodes`` (how the last step ended), ``unfinished_episodes`` (indices of
        episodes a crash left open), ``nonfinite`` (NaN / inf a loader refuses: episode, key,
        first row, count), ``policy_versions`` ([min, max]), ``mean_return``,
        ``meta`` (the log's metadata) and ``size_bytes`` on disk.

    Raises:
        FileNotFoundError: No episode log at ``path``.
        CorruptLogError: ``path`` is not a consistent episode log.
    """
    path = Path(path)
    log = EpisodeLog.open(path, unfinished="truncate", mode="r")
    eps = log.episodes
    n_steps = log.num_steps
    root = zarr.open_group(str(path), mode="r")
    try:
        step = {
            k: np.asarray(root[f"data/{k}"][:n_steps])
            for k in ("intervened", "terminated", "truncated", "reward", "stamp_s")
        }
    except Exception as e:  # noqa: BLE001 - a damaged chunk file: say so, with the fix
        msg = f"{path}: a step array cannot be read ({e}); {salvage_advice(path)}"
        raise CorruptLogError(msg) from e
    nonfinite = [asdict(p) for p in find_nonfinite(log, eps)]
    by_source_eps = Counter(e.source for e in eps)
    by_source_steps: Counter[str] = Counter()
    intervened_eps: Counter[str] = Counter()
    intervened_steps: Counter[str] = Counter()
    returns, dts = [], []
    n_term = n_trunc = 0
    for e in eps:
        s0, s1 = e.start_step, e.start_step + e.length
        by_source_steps[e.source] += e.length
        k = int(step["intervened"][s0:s1].sum())
        intervened_steps[e.source] += k
        intervened_eps[e.source] += int(k > 0)
        returns.append(float(step["reward"][s0:s1].sum()))
        dts.append(np.diff(step["stamp_s"][s0:s1]))
        if e.length and bool(step["terminated"][s1 - 1]):
            n_term += 1
        elif e.length and (bool(step["truncated"][s1 - 1]) or e.recovered == "truncated"):
            n_trunc += 1
    dt = np.concatenate(dts) if dts else np.zeros(0)
    dt = dt[dt > 0]
    lengths = np.array([e.length for e in eps], dtype=np.int64)
    sources = [s for s in SOURCES if by_source_eps[s]] + sorted(
        s for s in by_source_eps if s not in SOURCES
    )
    meta = dict(log.meta or {})
    hz = meta.get("control_hz", (meta.get("env") or {}).get("control_hz"))
    total_iv_steps = sum(intervened_steps.values())
    total_iv_eps = sum(intervened_eps.values())
    return {
        "path": str(path),
        "format": FORMAT,
        "version": VERSION,
        "episodes": len(eps),
        "steps": n_steps,
        "by_source": {
            s: {
                "episodes": by_source_eps[s],
                "steps": by_source_steps[s],
                "success_rate": _success_rate([e for e in eps if e.source == s])["rate"],
                "intervened_steps": intervened_steps[s],
                "intervened_episodes": intervened_eps[s],
            }
            for s in sources
        },
        "episode_length": {
            "min": int(lengths.min()) if len(lengths) else None,
            "mean": float(lengths.mean()) if len(lengths) else None,
            "max": int(lengths.max()) if len(lengths) else None,
        },
        "success": _success_rate(eps),
        "intervention": {
            "steps": total_iv_steps,
            "step_rate": _rate(total_iv_steps, n_steps),
            "episodes": total_iv_eps,
            "episode_rate": _rate(total_iv_eps, len(eps)),
        },
        "cameras": {c: list(s.shape) for c, s in log.layout.images.items()},
        "state_dim": log.layout.state_dim,
        "action_dim": log.action_dim,
        "fps": float(hz) if hz is not None else None,
        "fps_from_stamps": float(1.0 / np.median(dt)) if len(dt) else None,
        "terminated_episodes": n_term,
        "truncated_episodes": n_trunc,
        "unfinished_episodes": [e.index for e in eps if e.recovered is not None],
        "nonfinite": nonfinite,
        "policy_versions": (
            [min(e.policy_version_min for e in eps), max(e.policy_version_max for e in eps)]
            if eps
            else None
        ),
        "mean_return": float(np.mean(returns)) if returns else None,
        "meta": meta,
        "size_bytes": disk_size_bytes(path),
    }
