"""The on-disk schema of the episode log (see :mod:`robot_rl.replay.log` for the layout):
constants, per-episode metadata, layout (de)serialisation, and the consistency check run on
open."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec

FORMAT = "robot_rl.episode_log"
VERSION = 1
SOURCES = ("demo", "online", "intervention", "eval")
STEP_CHUNK = 1024
# name -> (per-step shape given action_dim A, dtype)
STEP_FIELDS = {
    "action": (("A",), "float32"),
    "policy_action": (("A",), "float32"),
    "reward": ((), "float32"),
    "terminated": ((), "bool"),
    "truncated": ((), "bool"),
    "intervened": ((), "bool"),
    "policy_version": ((), "int64"),
    "stamp_s": ((), "float64"),
}
STEP_FIELD_NAMES = tuple(STEP_FIELDS)


class CorruptLogError(RuntimeError):
    """The store is not a consistent episode log; the message says what is wrong and what to do."""


class UnfinishedEpisodeError(RuntimeError):
    """The log holds an episode that was begun but never ended (``unfinished="error"``)."""


@dataclass(frozen=True)
class EpisodeMeta:
    """Metadata of one episode.

    Attributes:
        index: Episode number in the log.
        source: ``"demo"``, ``"online"``, ``"intervention"`` or ``"eval"``.
        success: Task success as reported at ``end_episode`` (None if unknown, e.g. recovered).
        length: Number of steps T.
        start_step: Global index of the first step.
        start_obs: Global index of the first observation row (T + 1 rows per episode).
        policy_version: Version given to ``begin_episode``.
        policy_version_min: Smallest per-step policy version.
        policy_version_max: Largest per-step policy version.
        seed: Env reset seed, or None.
        finished: The episode is closed in the log: ended by ``end_episode``, or completed as
            truncated when reopened after a crash (then ``recovered="truncated"``).
        recovered: ``"truncated"`` if completed as truncated when reopened, else None.
        reward_model_id: Which reward model labelled the rewards (``end_episode`` keyword).
        extra: Any other ``end_episode`` keywords (JSON values).
    """

    index: int
    source: str
    success: bool | None
    length: int
    start_step: int
    start_obs: int
    policy_version: int
    policy_version_min: int
    policy_version_max: int
    seed: int | None
    finished: bool
    recovered: str | None = None
    reward_model_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def layout_to_json(layout: ObsLayout) -> dict[str, Any]:
    """An :class:`ObsLayout` as JSON."""
    return {
        "state_dim": layout.state_dim,
        "images": {c: {"shape": list(s.shape), "dtype": s.dtype} for c, s in layout.images.items()},
    }


def layout_from_json(d: Mapping[str, Any]) -> ObsLayout:
    """Inverse of :func:`layout_to_json`."""
    imgs = {
        c: ArraySpec(tuple(int(x) for x in v["shape"]), v["dtype"]) for c, v in d["images"].items()
    }
    return ObsLayout(state_dim=int(d["state_dim"]), images=imgs)


def obs_fields(layout: ObsLayout) -> dict[str, tuple[tuple[int, ...], str]]:
    """Array path under ``data/`` -> (per-row shape, dtype) for the observation rows."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    if layout.state_dim:
        out["obs/state"] = ((layout.state_dim,), "float32")
    for cam, spec in layout.images.items():
        out[f"obs/images/{cam}"] = (tuple(spec.shape), "uint8")
    return out


def step_fields(action_dim: int) -> dict[str, tuple[tuple[int, ...], str]]:
    return {
        k: (tuple(action_dim if d == "A" else d for d in shp), dt)
        for k, (shp, dt) in STEP_FIELDS.items()
    }


def obs_row(obs: Mapping[str, Any], layout: ObsLayout, what: str) -> dict[str, np.ndarray]:
    """Validate one learner observation and return owned copies keyed by array path."""
    row: dict[str, np.ndarray] = {}
    if layout.state_dim:
        s = np.asarray(obs[keys.STATE], dtype=np.float32)
        if s.shape != (layout.state_dim,):
            raise ValueError(f"{what}: state has shape {s.shape}, expected ({layout.state_dim},)")
        row["obs/state"] = s.copy()
    for cam, spec in layout.images.items():
        im = np.asarray(obs[keys.IMAGES][cam])
        if im.shape != spec.shape or im.dtype != np.uint8:
            raise ValueError(f"{what}: camera {cam!r} is {im.shape} {im.dtype}, expected {spec}")
        row[f"obs/images/{cam}"] = im.copy()
    return row


def commit_record(n_steps: int, n_obs: int, n_eps: int, open_ep: dict | None) -> dict[str, Any]:
    return {"num_steps": n_steps, "num_obs": n_obs, "num_episodes": n_eps, "open_episode": open_ep}


def write_rows(
    arr: zarr.Array, start: int, stop: int, data: np.ndarray, spare: bool = False
) -> None:
    """Write rows [start, stop) of a time-major array, growing it to ``stop`` rows (``spare``:
    to at least twice its rows, so that appends rarely resize; rows past the commit record are
    ignored by readers and cut on close and on reopen)."""
    if spare:
        if arr.shape[0] < stop:
            arr.resize((max(stop, 2 * arr.shape[0], 64), *arr.shape[1:]))
    elif arr.shape[0] != stop:
        arr.resize((stop, *arr.shape[1:]))
    arr[start:stop] = data


def salvage_advice(path: Path) -> str:
    """What to do about a damaged log at ``path`` (the tail of every :class:`CorruptLogError`)."""
    return (
        "the store was not modified. If files were lost or the copy is incomplete, restore "
        f"them from a backup, or copy every episode that is still complete and finite into a "
        f"new dataset: robot-rl dataset salvage {path} --out NEW_PATH "
        "(robot_rl.replay.salvage in Python)"
    )


def _cut_episodes(table: list[dict[str, Any]], rows: int, obs: bool) -> str:
    """Which committed episodes an array of ``rows`` rows cuts short (for the message)."""
    cut = [
        int(e["index"])
        for e in table
        if (e["start_obs"] + e["length"] + 1 if obs else e["start_step"] + e["length"]) > rows
    ]
    if not cut:
        return " (the open episode's rows)"
    return f" (episodes {cut[0]}..{cut[-1]} are incomplete, episodes before {cut[0]} are whole)"


def load_and_check(
    root: zarr.Group, path: Path, fields: Mapping[str, tuple[tuple[int, ...], str]]
) -> tuple[dict[str, zarr.Array], int, int, list[dict[str, Any]], dict[str, Any] | None]:
    """Read the commit record and check the arrays against it.

    Returns:
        (arrays by name, committed steps, committed obs rows, committed episode table,
        open episode record or None).

    Raises:
        CorruptLogError: Anything missing or inconsistent, with what to do about it.
    """
    advice = salvage_advice(path)
    try:
        commit = dict(root["commit"].attrs)
        n_steps, n_obs = int(commit["num_steps"]), int(commit["num_obs"])
        n_eps, op = int(commit["num_episodes"]), commit.get("open_episode")
    except (KeyError, TypeError, ValueError) as e:
        msg = (
            f"{path}: the commit record (commit/zarr.json) is missing or incomplete ({e!r}), so "
            f"which rows are complete is unknown; {advice}"
        )
        raise CorruptLogError(msg) from e
    try:
        table = list(root["meta"].attrs["episodes"])
        ends_arr = root["meta/episode_ends"]
    except KeyError as e:
        msg = f"{path}: missing {e} (the episode table, meta/); {advice}"
        raise CorruptLogError(msg) from e
    missing = [n for n in fields if f"data/{n}" not in root]
    if missing:
        raise CorruptLogError(f"{path}: missing arrays {['data/' + n for n in missing]}; {advice}")
    arrays = {n: root[f"data/{n}"] for n in fields}
    problems = []
    for n, (shape, dtype) in fields.items():
        a = arrays[n]
        if tuple(a.shape[1:]) != tuple(shape) or np.dtype(a.dtype) != np.dtype(dtype):
            problems.append(f"data/{n} is {a.shape[1:]} {a.dtype}, expected {shape} {dtype}")
        need = n_obs if n.startswith("obs/") else n_steps
        if a.shape[0] < need:
            problems.append(
                f"data/{n} has {a.shape[0]} rows but {need} are committed"
                + _cut_episodes(table[:n_eps], a.shape[0], n.startswith("obs/"))
            )
    if len(table) < n_eps or ends_arr.shape[0] < n_eps:
        problems.append(
            f"{n_eps} episodes are committed but the table has {len(table)} and "
            f"meta/episode_ends {ends_arr.shape[0]}"
        )
    else:
        table = table[:n_eps]
        ends = ends_arr[:n_eps]
        lengths = np.array([e["length"] for e in table], dtype=np.int64)
        starts = np.array([e["start_step"] for e in table], dtype=np.int64)
        if not np.array_equal(ends, starts + lengths) or not np.array_equal(
            starts, np.concatenate([[0], ends])[:-1]
        ):
            problems.append("meta/episode_ends disagrees with the episode table")
        closed_steps = int(ends[-1]) if n_eps else 0
        expect_start = op["start_step"] if op is not None else n_steps
        if closed_steps != expect_start:
            problems.append(f"episodes end at step {closed_steps} but {expect_start} are committed")
    if problems:
        raise CorruptLogError(f"{path} is inconsistent: {'; '.join(problems)}; {advice}")
    return arrays, n_steps, n_obs, table, op


def create_store(
    path: Path,
    layout: ObsLayout,
    action_dim: int,
    meta: dict[str, Any],
    image_clevel: int,
    image_chunk_steps: int,
) -> zarr.Group:
    """A new, empty log store at ``path`` (see :meth:`robot_rl.replay.EpisodeLog.create`):
    empty arrays, episode table, commit record and root attributes. Built beside ``path`` and
    renamed into place, so a reader that polls for the log (a rehearsal's report, another
    process) never opens a half-made store.

    Raises:
        FileExistsError: ``path`` appeared meanwhile.
    """
    from zarr.codecs import BloscCodec

    tmp = path.with_name(f".{path.name}.creating-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash of this pid's predecessor
    try:
        root = zarr.open_group(str(tmp), mode="w-", zarr_format=3)
        img_codec = BloscCodec(cname="zstd", clevel=image_clevel, shuffle="noshuffle")
        for name, (shape, dtype) in {**step_fields(action_dim), **obs_fields(layout)}.items():
            is_img = name.startswith("obs/images/")
            root.create_array(
                f"data/{name}",
                shape=(0, *shape),
                chunks=(image_chunk_steps if is_img else STEP_CHUNK, *shape),
                dtype=dtype,
                compressors=img_codec if is_img else "auto",
                fill_value=0,
            )
        root.create_array(
            "meta/episode_ends", shape=(0,), chunks=(STEP_CHUNK,), dtype="int64", fill_value=0
        )
        root["meta"].attrs.put({"episodes": []})
        root.create_group("commit").attrs.put(commit_record(0, 0, 0, None))
        root.attrs.put(
            {
                "format": FORMAT,
                "version": VERSION,
                "layout": layout_to_json(layout),
                "action_dim": int(action_dim),
                "meta": meta,
            }
        )
        try:
            os.rename(tmp, path)  # atomic on one filesystem; refuses an existing non-empty dir
        except OSError as e:
            raise FileExistsError(f"{path} exists; use EpisodeLog.open or another path") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return zarr.open_group(str(path), mode="r+", zarr_format=3)


def open_store(path: Path, writable: bool) -> zarr.Group:
    """The log store at ``path``, checked to be a robot_rl episode log of this version.

    Raises:
        FileNotFoundError: No store at ``path``.
        CorruptLogError: Not readable, not an episode log, or another version.
    """
    if not (path / "zarr.json").exists():
        raise FileNotFoundError(f"no episode log at {path} (no zarr.json); create one first")
    try:
        root = zarr.open_group(str(path), mode="r+" if writable else "r", zarr_format=3)
        attrs = dict(root.attrs)
    except Exception as e:  # noqa: BLE001 - re-raised with context
        raise CorruptLogError(f"{path}: cannot read the zarr root ({e})") from e
    if attrs.get("format") != FORMAT:
        raise CorruptLogError(f"{path} is a zarr store but not a robot_rl episode log")
    if attrs.get("version") != VERSION:
        raise CorruptLogError(f"{path}: log version {attrs.get('version')}, expected {VERSION}")
    return root
