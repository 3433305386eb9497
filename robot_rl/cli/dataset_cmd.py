"""``robot-rl dataset info|export|salvage``: summarise a zarr dataset, export it to LeRobot
v3.0, or copy what is still good out of a damaged one.

    robot-rl dataset info demos.zarr [--json]
    robot-rl dataset salvage demos.zarr --out demos_fixed.zarr [--json]
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
from typing import Annotated, Literal, Union

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


DatasetCmd = Union[  # noqa: UP007 - tyro reads the subcommand names off this Union
    Annotated[DatasetInfoConfig, tyro.conf.subcommand("info")],
    Annotated[DatasetExportConfig, tyro.conf.subcommand("export")],
    Annotated[DatasetSalvageConfig, tyro.conf.subcommand("salvage")],
]


def dataset_command(
    cmd: Annotated[DatasetCmd, tyro.conf.OmitSubcommandPrefixes, tyro.conf.OmitArgPrefixes],
) -> DatasetInfoConfig | DatasetExportConfig:
    """Summarise a dataset (info) or export it to the LeRobot format (export)."""
    # tyro shows a subcommand's docstring as its summary; a bare Union has only typing.Union's,
    # so `robot-rl dataset` goes through this function, which returns the parsed config as is.
    return cmd


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


def print_salvage(r: dict) -> None:
    """What was copied, and each skipped episode with the reason."""
    print(f"copied {r['copied']} of {r['episodes']} episodes of {r['path']} to {r['out']}")
    for s in r["skipped"]:
        print(f"skipped episode {s['episode']}: {s['why']}")


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


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def print_info(r: dict) -> None:
    """Rich tables of :func:`run_info`'s result on stdout."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    env = (r["meta"] or {}).get("env") or {}
    title = f"{r['path']}  ({env.get('task', 'unknown task')}, {_size(r['size_bytes'])})"
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    succ, iv = r["success"], r["intervention"]
    lengths = r["episode_length"]
    t.add_row("episodes", str(r["episodes"]))
    t.add_row("steps", str(r["steps"]))
    if r["episodes"]:
        t.add_row("episode length", f"{lengths['min']} / {lengths['mean']:.1f} / {lengths['max']}")
    t.add_row(
        "success rate", f"{_pct(succ['rate'])} ({succ['successes']} of {succ['known']} known)"
    )
    t.add_row("intervened steps", f"{iv['steps']} ({_pct(iv['step_rate'])})")
    t.add_row("episodes with interventions", f"{iv['episodes']} ({_pct(iv['episode_rate'])})")
    t.add_row(
        "ended by the task / time limit", f"{r['terminated_episodes']} / {r['truncated_episodes']}"
    )
    if r["unfinished_episodes"]:
        t.add_row("unfinished (crash) episodes", str(r["unfinished_episodes"]))
    if bads := r["nonfinite"]:
        bad = "; ".join(f"episode {b['episode']}: {b['key']} row {b['row']}" for b in bads)
        t.add_row("[red]NaN / inf (loading refuses)[/red]", f"{bad} (fix: dataset salvage)")
    cams = ", ".join(f"{c} {'x'.join(map(str, s))}" for c, s in r["cameras"].items())
    t.add_row("cameras", cams or "none")
    t.add_row("state dim / action dim", f"{r['state_dim']} / {r['action_dim']}")
    fps = r["fps"] if r["fps"] is not None else r["fps_from_stamps"]
    how = "recorded" if r["fps"] is not None else "from stamps"
    t.add_row("control rate", "-" if fps is None else f"{fps:.2f} Hz ({how})")
    if r["policy_versions"] is not None:
        t.add_row("policy versions", "{} .. {}".format(*r["policy_versions"]))
    console.print(t)
    if r["by_source"]:
        s = Table(title="by source", title_justify="left")
        for col in ("source", "episodes", "steps", "success", "intervened steps", "episodes w/ iv"):
            s.add_column(col, justify="left" if col == "source" else "right")
        for name, v in r["by_source"].items():
            s.add_row(
                name,
                str(v["episodes"]),
                str(v["steps"]),
                _pct(v["success_rate"]),
                str(v["intervened_steps"]),
                str(v["intervened_episodes"]),
            )
        console.print(s)


def print_export(r: dict) -> None:
    """One line about what was written."""
    cams = ", ".join(r["cameras"]) or "no cameras"
    print(
        f"wrote LeRobot dataset {r['codebase_version']} to {r['out']}: {r['episodes']} episodes, "
        f"{r['frames']} frames at {r['fps']} fps, task {r['task']!r}, {cams}"
    )
