"""Checks of a log's values on their way into a RAM buffer (demos, and a run's log on resume).

:meth:`EpisodeLog.open` checks the structure (commit record, array shapes and row counts); this
module checks what structure cannot:

- NaN / inf in the float arrays a learner reads (``action``, ``policy_action``, ``reward``,
  ``obs/state``; images are uint8, ``stamp_s`` is never learned from). **Policy: the whole load
  is refused** (:class:`NonFiniteDataError`, listing every bad episode, key and row), never
  skipped with a warning: a warning scrolls by, and demos are few and precious, so dropping
  some must be the user's decision. ``robot-rl dataset salvage`` writes a copy without them.
- chunks that no longer decode (a flipped or truncated chunk file): :func:`read_checked` names
  the episode and the array instead of zarr's bare codec error.
- a layout that differs from the learner's: :func:`layout_difference` says which key differs.

Nothing here writes to the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from robot_rl.core.batch import ObsLayout
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import STEP_FIELD_NAMES, CorruptLogError, EpisodeMeta, obs_fields

FINITE_STEP_FIELDS = ("action", "policy_action", "reward")
"""Per-step float arrays that must be finite (``stamp_s`` is metadata, not learned from)."""
FINITE_OBS_FIELDS = ("obs/state",)
"""Observation-row float arrays that must be finite (images are uint8)."""
_MAX_LISTED = 10


class NonFiniteDataError(CorruptLogError):
    """The log is consistent but holds NaN or inf where a learner reads; the message lists every
    bad episode, key and row and says how to write a copy without them."""


@dataclass(frozen=True)
class NonFinite:
    """NaN / inf in one array of one episode.

    Attributes:
        episode: Episode index.
        source: Its source (demo, online, ...).
        key: Array name under ``data/`` (``action``, ``obs/state``, ...).
        row: First bad row within the episode: step ``t`` (0..T-1) for step arrays,
            observation ``t`` (0..T) for ``obs/state``.
        count: Bad rows of ``key`` in the episode.
    """

    episode: int
    source: str
    key: str
    row: int
    count: int

    def describe(self) -> str:
        what = "observation" if self.key.startswith("obs/") else "step"
        more = f" ({self.count} rows)" if self.count > 1 else ""
        return f"episode {self.episode} ({self.source}): {self.key} at {what} {self.row}{more}"


def bad_rows(a: np.ndarray) -> np.ndarray:
    """Indices of the rows of a time-major array that hold a NaN or inf."""
    a = np.asarray(a)
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1))


def nonfinite_in_episode(ep: Mapping[str, Any], index: int, source: str) -> list[NonFinite]:
    """NaN / inf in one episode's arrays, given by array name (step arrays (T, ...), and
    ``"obs/state"``: its (T + 1) observation rows)."""
    out = []
    for key in (*FINITE_STEP_FIELDS, *FINITE_OBS_FIELDS):
        if key in ep:
            rows = bad_rows(ep[key])
            if len(rows):
                out.append(NonFinite(index, source, key, int(rows[0]), len(rows)))
    return out


def find_nonfinite(
    log: EpisodeLog, episodes: Sequence[EpisodeMeta] | None = None
) -> list[NonFinite]:
    """NaN / inf in the float arrays of ``episodes`` (default: every closed one) of ``log``.

    Reads the step and state arrays of the rows the episodes span (never an image), one read
    per array.
    """
    eps = list(log.episodes if episodes is None else episodes)
    if not eps:
        return []
    root = zarr.open_group(str(log.path), mode="r", zarr_format=3)
    fields = obs_fields(log.layout)
    keys = [*FINITE_STEP_FIELDS, *(k for k in FINITE_OBS_FIELDS if k in fields)]
    found: dict[tuple[int, str], list[int]] = {}
    for key in keys:
        is_obs = key.startswith("obs/")
        starts = np.array([e.start_obs if is_obs else e.start_step for e in eps], dtype=np.int64)
        ends = starts + np.array([e.length + is_obs for e in eps], dtype=np.int64)
        lo, hi = int(starts.min()), int(ends.max())
        rows = bad_rows(_read_rows(root, log, key, lo, hi)) + lo
        for r in rows:
            k = int(np.searchsorted(starts, r, side="right")) - 1
            if k >= 0 and r < ends[k]:  # rows between the episodes asked for are not theirs
                found.setdefault((k, key), []).append(int(r - starts[k]))
    order = {k: i for i, k in enumerate(keys)}
    return [
        NonFinite(eps[k].index, eps[k].source, key, rows[0], len(rows))
        for (k, key), rows in sorted(found.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))
    ]


def nonfinite_message(path: Any, problems: Sequence[NonFinite]) -> str:
    """The error for ``problems`` in the log at ``path``: what, where, and what to do."""
    listed = "; ".join(p.describe() for p in problems[:_MAX_LISTED])
    rest = len(problems) - _MAX_LISTED
    if rest > 0:
        listed += f"; and {rest} more"
    bad = sorted({p.episode for p in problems})
    return (
        f"{path}: NaN or inf in {len(bad)} episode(s): {listed}. Nothing was loaded (training on "
        "NaN/inf ruins the networks) and the dataset was not changed. Inspect it with "
        f"`robot-rl dataset info {path}`; then re-record those episodes, or write a copy "
        f"without them with `robot-rl dataset salvage {path} --out NEW_PATH` (it skips "
        "episodes with NaN/inf and keeps the rest) and use NEW_PATH"
    )


def check_finite(log: EpisodeLog, episodes: Sequence[EpisodeMeta] | None = None) -> None:
    """Raise :class:`NonFiniteDataError` if any of ``episodes`` holds NaN / inf (see module)."""
    problems = find_nonfinite(log, episodes)
    if problems:
        raise NonFiniteDataError(nonfinite_message(log.path, problems))


def read_checked(log: EpisodeLog, i: int, images: bool = True) -> dict[str, Any]:
    """:meth:`EpisodeLog.read_episode` ``(i, images=images)``, with an unreadable chunk reported
    as a :class:`CorruptLogError` naming the dataset, the episode, the array and the fix."""
    try:
        return log.read_episode(i, images=images)
    except IndexError:
        raise  # no such episode: a caller's mistake, not the store's
    except Exception as e:  # noqa: BLE001 - a codec or I/O error: find the array, re-raise
        em = next((m for m in log.durable_episodes() if m.index == i), None)
        where = "" if em is None else _unreadable_arrays(log, em)
        raise _damaged(log.path, f"episode {i}{where}", e) from e


def _damaged(path: Any, what: str, e: BaseException) -> CorruptLogError:
    return CorruptLogError(
        f"{path}: {what} cannot be read ({type(e).__name__}: {e}): a chunk file is damaged "
        "(disk error, interrupted copy). The store was not modified; restore it from a backup, "
        f"or write a copy without the unreadable episodes with `robot-rl dataset salvage {path} "
        "--out NEW_PATH` and use NEW_PATH"
    )


def _read_rows(root: zarr.Group, log: EpisodeLog, key: str, lo: int, hi: int) -> np.ndarray:
    try:
        return root[f"data/{key}"][lo:hi]
    except Exception as e:  # noqa: BLE001 - a codec or I/O error, re-raised with context
        raise _damaged(log.path, f"data/{key} rows {lo}..{hi - 1}", e) from e


def _unreadable_arrays(log: EpisodeLog, em: EpisodeMeta) -> str:
    root = zarr.open_group(str(log.path), mode="r", zarr_format=3)
    spans = {n: (em.start_step, em.start_step + em.length) for n in STEP_FIELD_NAMES}
    spans.update({n: (em.start_obs, em.start_obs + em.length + 1) for n in obs_fields(log.layout)})
    bad = []
    for name, (lo, hi) in spans.items():
        try:
            root[f"data/{name}"][lo:hi]
        except Exception:  # noqa: BLE001 - this is the probe
            bad.append(f"data/{name} rows {lo}..{hi - 1}")
    return f" ({', '.join(bad)})" if bad else ""


def layout_difference(
    have: ObsLayout, have_action_dim: int, want: ObsLayout, want_action_dim: int
) -> list[str]:
    """What differs between a dataset's layout (``have``) and the learner's (``want``), one
    phrase per key; empty if they are the same."""
    out = []
    if have.state_dim != want.state_dim:
        out.append(f"state has {have.state_dim} values, the env {want.state_dim}")
    for cam in sorted(set(have.images) | set(want.images)):
        h, w = have.images.get(cam), want.images.get(cam)
        if h is None:
            out.append(f"camera {cam!r} is missing (the env has it, {tuple(w.shape)})")
        elif w is None:
            out.append(f"camera {cam!r} is extra (the env has no such camera)")
        elif tuple(h.shape) != tuple(w.shape) or h.dtype != w.dtype:
            out.append(f"camera {cam!r} is {tuple(h.shape)} {h.dtype}, the env's {tuple(w.shape)}")
    if have_action_dim != want_action_dim:
        out.append(f"actions have {have_action_dim} values, the env {want_action_dim}")
    return out
