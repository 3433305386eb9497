"""``robot-rl dataset info|export|import|salvage``: summarise a zarr dataset, export it to
LeRobot v3.0, import a LeRobot dataset (v2.1, v3.0; :mod:`robot_rl.dataset.lerobot_import`), or
copy what is still good out of a damaged one.

    robot-rl dataset info demos.zarr [--json]
    robot-rl dataset salvage demos.zarr --out demos_fixed.zarr [--json]
    robot-rl dataset import lerobot_dir --out demos.zarr [--state observation.state]
    robot-rl dataset export demos.zarr --format lerobot --out lerobot_demos [--fps 10]
        [--task-text "pick up the cube"] [--repo-id local/pick_cube]

``info`` reads only the log's tables and step flags (no image is decoded). ``export`` writes a
new folder that ``lerobot.datasets.lerobot_dataset.LeRobotDataset(repo_id, root=...)`` loads;
see :mod:`robot_rl.dataset.lerobot_export` for the layout and the frame mapping. ``salvage``
writes a new dataset with every episode that reads in full and holds no NaN / inf, and lists
the ones it skipped (:func:`robot_rl.replay.salvage`); the source is never modified.
Bad input (no dataset at the path, a corrupt store, an existing --out, missing export extra)
exits with status 2 and a message that says what to change.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

from robot_rl.replay.schema import SOURCES


@dataclass(frozen=True)
class DatasetInfoConfig:
    """Summarise a dataset: episodes, steps, success and intervention rates, cameras, size."""

    path: tyro.conf.Positional[Path]
    """The zarr dataset (from robot-rl collect, record or train)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""


@dataclass(frozen=True)
class DatasetExportConfig:
    """Export a dataset to another format (LeRobot dataset v3.0)."""

    path: tyro.conf.Positional[Path]
    """The zarr dataset to export."""
    out: Path
    """New folder to write (must not exist)."""
    format: Literal["lerobot"] = "lerobot"
    """Output format: lerobot (LeRobotDataset, codebase v3.0)."""
    fps: int | None = None
    """Frames per second of the export (default: the dataset's control rate)."""
    task_text: str | None = None
    """Task description stored with every frame (default: the dataset's task name)."""
    repo_id: str = "local/robot_rl"
    """Dataset name for the LeRobot hub ('user/name'; local/... for local use)."""
    robot_type: str | None = None
    """robot_type in meta/info.json (e.g. franka_fr3)."""
    sources: tuple[str, ...] = ()
    """Export only episodes of these sources (demo, online, intervention, eval); empty: all."""
    only_success: bool = False
    """Export only successful episodes."""
    unfinished: Literal["truncate", "drop"] = "truncate"
    """An episode a crash left open: keep its steps as a time-limited episode, or drop it."""
    video_codec: Literal["libsvtav1", "h264"] = "libsvtav1"
    """Camera stream codec: libsvtav1 (AV1, LeRobot's default) or h264."""
    video_crf: int = 30
    """Constant rate factor of the camera streams (lower: better quality, larger files)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""

    def __post_init__(self) -> None:
        bad = [s for s in self.sources if s not in SOURCES]
        if bad:
            raise ValueError(f"--sources {bad} unknown; choose from {', '.join(SOURCES)}")
        if "/" not in self.repo_id:
            raise ValueError(f"--repo-id {self.repo_id!r} must look like 'user/name'")


@dataclass(frozen=True)
class DatasetSalvageConfig:
    """Copy every complete, finite episode of a damaged dataset into a new one."""

    path: tyro.conf.Positional[Path]
    """The damaged zarr dataset (read only, never modified)."""
    out: Path
    """New dataset to write (must not exist)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""


@dataclass(frozen=True)
class DatasetImportConfig:
    """Import a LeRobot dataset directory (v2.1 or v3.0) into a zarr dataset."""

    path: tyro.conf.Positional[Path]
    """The LeRobot dataset directory (meta/info.json, data/, videos/)."""
    out: Path
    """New zarr dataset to write (must not exist)."""
    state: tuple[str, ...] | None = None
    """Features that form the state vector, in order (None: observation.state)."""
    cameras: tuple[str, ...] | None = None
    """Camera features, `feature` or `name=feature` (None: every observation.images.*, named
    by its suffix)."""
    action: str = "action"
    """The action feature."""
    action_norm: Literal["auto", "none", "minmax"] = "auto"
    """How actions enter the policy's [-1, 1]: none (already there), minmax (scaled from the
    dataset's per-dimension min / max, stored in the log's metadata), auto (none when every
    action is in [-1, 1], else minmax)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""


def run_import(cfg: DatasetImportConfig, progress: bool = True) -> dict:
    """Import ``cfg.path`` into ``cfg.out``; returns the mapping used and the counts.

    Raises:
        ValueError: The dataset or the mapping cannot be used, or the export extra (pyarrow,
            pandas) is missing.
    """
    from robot_rl.dataset.lerobot_import import ImportMapping, import_lerobot

    mapping = ImportMapping(
        state=cfg.state, cameras=cfg.cameras, action=cfg.action, action_norm=cfg.action_norm
    )

    def report(done: int, total: int) -> None:
        print(f"import: episode {done}/{total}", file=sys.stderr)

    try:
        return import_lerobot(cfg.path, cfg.out, mapping, progress=report if progress else None)
    except ImportError as e:
        raise ValueError(str(e)) from e


def run_info(cfg: DatasetInfoConfig) -> dict:
    """The summary of ``cfg.path`` (see :func:`robot_rl.dataset.info.dataset_info`)."""
    from robot_rl.dataset.info import dataset_info

    return dataset_info(cfg.path)


def run_salvage(cfg: DatasetSalvageConfig) -> dict:
    """Salvage ``cfg.path`` into ``cfg.out``; returns what was copied and skipped.

    Raises:
        FileNotFoundError: No dataset at ``cfg.path``.
        FileExistsError: ``cfg.out`` exists.
    """
    from robot_rl.replay import salvage

    if cfg.out.exists():
        raise FileExistsError(f"--out {cfg.out} exists; choose a new path")
    r = salvage(cfg.path, cfg.out)
    return {
        "path": str(cfg.path),
        "out": str(cfg.out),
        "episodes": r.total,
        "copied": r.copied,
        "skipped": [{"episode": i, "why": why} for i, why in r.skipped],
    }


def run_export(cfg: DatasetExportConfig, progress: bool = True) -> dict:
    """Export ``cfg.path``; returns the export summary.

    Raises:
        ValueError: Bad options, nothing to export, or the export extra is missing.
    """
    from robot_rl.dataset.lerobot_export import LeRobotExportOptions, export_lerobot

    opts = LeRobotExportOptions(
        fps=cfg.fps,
        task_text=cfg.task_text,
        repo_id=cfg.repo_id,
        robot_type=cfg.robot_type,
        sources=tuple(cfg.sources) or None,
        only_success=cfg.only_success,
        unfinished=cfg.unfinished,
        video_codec=cfg.video_codec,
        video_crf=cfg.video_crf,
    )

    def report(done: int, total: int, frames: int) -> None:
        print(f"export: episode {done}/{total} ({frames} frames)", file=sys.stderr)

    try:
        return export_lerobot(cfg.path, cfg.out, opts, progress=report if progress else None)
    except ImportError as e:  # the optional export extra is not installed
        raise ValueError(str(e)) from e
