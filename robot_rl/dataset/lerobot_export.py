"""Export a robot_rl episode log (zarr) to the LeRobot dataset format, codebase v3.0.

Layout written (LeRobot v3.0, what ``LeRobotDataset(repo_id, root=DIR)`` reads)::

    DIR/meta/info.json                 codebase_version "v3.0", fps, features, path templates
    DIR/meta/stats.json                per-feature min/max/mean/std/count/q01..q99
    DIR/meta/tasks.parquet             one task: index "task" (the text), column task_index
    DIR/meta/episodes/chunk-000/file-000.parquet
                                       one row per episode: length, tasks, frame range,
                                       file indices, video time spans, stats/<feature>/<stat>
    DIR/data/chunk-XXX/file-XXX.parquet
                                       one row per frame (one row group per episode)
    DIR/videos/observation.images.<cam>/chunk-XXX/file-XXX.mp4
                                       every episode of a camera, back to back, yuv420p
    DIR/meta/robot_rl_export.json      provenance: source log, its metadata, episode mapping

How steps become frames: :mod:`robot_rl.dataset.lerobot_frames`. Statistics:
:mod:`robot_rl.dataset.lerobot_stats`. Chunked files: :mod:`robot_rl.dataset.lerobot_files`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robot_rl.core import keys
from robot_rl.dataset import lerobot_stats as lst
from robot_rl.dataset.lerobot_files import (
    DATA_PATH,
    EPISODES_PATH,
    VIDEO_PATH,
    ParquetFiles,
    VideoCodec,
    VideoFiles,
    VideoSettings,
)
from robot_rl.dataset.lerobot_frames import (
    arrow_schema,
    build_features,
    control_fps,
    episode_columns,
    to_table,
)
from robot_rl.replay.log import EpisodeLog
from robot_rl.replay.schema import SOURCES

CODEBASE_VERSION = "v3.0"
_MISSING_DEPS = "LeRobot export needs pyarrow and pandas: pip install 'robot_rl[export]'"


@dataclass(frozen=True)
class LeRobotExportOptions:
    """What to export and how.

    Attributes:
        fps: Frame rate written to the dataset (an integer); None: the log's control rate.
        task_text: The task description of every frame; None: the log's task name.
        repo_id: Hub name recorded in the provenance file (``local/<name>`` for local use).
        robot_type: ``robot_type`` in info.json (None: unknown).
        sources: Export only episodes of these sources (None: all).
        only_success: Export only episodes that ended in success.
        unfinished: An episode a crash left open: ``truncate`` keeps its steps as a
            time-limited episode, ``drop`` leaves it out.
        video_codec: ``libsvtav1`` (AV1, LeRobot's default) or ``h264``.
        video_crf: Constant rate factor of the camera streams (LeRobot uses 30).
        chunks_size: Files per chunk folder (LeRobot default 1000).
        data_files_size_in_mb: Size at which a data parquet file is closed (default 100).
        video_files_size_in_mb: Size at which an mp4 file is closed (default 200).
    """

    fps: int | None = None
    task_text: str | None = None
    repo_id: str = "local/robot_rl"
    robot_type: str | None = None
    sources: tuple[str, ...] | None = None
    only_success: bool = False
    unfinished: Literal["truncate", "drop"] = "truncate"
    video_codec: VideoCodec = "libsvtav1"
    video_crf: int = 30
    chunks_size: int = 1000
    data_files_size_in_mb: int = 100
    video_files_size_in_mb: int = 200

    def __post_init__(self) -> None:
        if self.fps is not None and self.fps < 1:
            raise ValueError(f"fps must be a positive integer, got {self.fps}")
        if self.task_text is not None and not self.task_text.strip():
            raise ValueError("task_text must not be empty")
        bad = [s for s in self.sources or () if s not in SOURCES]
        if bad:
            raise ValueError(f"unknown sources {bad}; choose from {SOURCES}")
        if self.chunks_size < 1 or self.data_files_size_in_mb < 1:
            raise ValueError("chunks_size and data_files_size_in_mb must be >= 1")
        if self.video_files_size_in_mb < 1:
            raise ValueError("video_files_size_in_mb must be >= 1")


def export_lerobot(
    src: str | Path,
    out: str | Path,
    opts: LeRobotExportOptions | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, Any]:
    """Write the LeRobot v3.0 dataset of the episode log ``src`` into the new folder ``out``.

    The export is built in a hidden sibling folder and renamed to ``out`` when complete, so
    ``out`` never holds a half-written dataset.

    Args:
        src: The zarr episode log (``robot-rl collect`` / ``train`` output).
        out: Folder to create; must not exist.
        opts: Export options (defaults: all episodes, fps from the log).
        progress: Called as ``progress(done, total, frames)`` after each episode.

    Returns:
        A JSON-able summary (out, episodes, frames, fps, cameras, files, ...).

    Raises:
        FileExistsError: ``out`` exists.
        FileNotFoundError / CorruptLogError: ``src`` is not a readable episode log.
        ValueError: Nothing to export, odd image sides, or no whole frame rate.
        ImportError: pyarrow / pandas missing (the ``export`` extra).
    """
    opts = opts or LeRobotExportOptions()
    src, out = Path(src), Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new --out folder")
    try:
        import pandas as pd
        import pyarrow as pa
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(_MISSING_DEPS) from e
    log = EpisodeLog.open(src, unfinished=opts.unfinished, mode="r")
    chosen = [
        em
        for em in log.episodes
        if (opts.sources is None or em.source in opts.sources)
        and (not opts.only_success or em.success is True)
    ]
    if not chosen:
        raise ValueError(
            f"{src}: no episode to export ({log.num_episodes} in the log; filters: sources="
            f"{opts.sources}, only_success={opts.only_success})"
        )
    fps = opts.fps if opts.fps is not None else control_fps(log)
    env = log.meta.get("env") or {}
    task = opts.task_text or str(env.get("env") or env.get("task") or "robot_rl task")
    features = build_features(log)
    schema = arrow_schema(features)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    settings = VideoSettings(fps=fps, codec=opts.video_codec, crf=opts.video_crf)
    data = ParquetFiles(tmp, DATA_PATH, schema, opts.data_files_size_in_mb, opts.chunks_size)
    videos = {
        f"observation.images.{c}": VideoFiles(
            tmp,
            f"observation.images.{c}",
            tuple(spec.shape[:2]),
            settings,
            opts.video_files_size_in_mb,
            opts.chunks_size,
        )
        for c, spec in log.layout.images.items()
    }  # (the writers check their settings here and touch the disk on the first append)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    ep_stats: list[dict[str, lst.Stats]] = []
    frames = 0
    try:
        for k, em in enumerate(chosen):
            ep = log.read_episode(em.index)
            cols = episode_columns(ep, k, frames, fps)
            n = len(cols["action"])
            stats = {name: lst.vector_stats(v) for name, v in cols.items()}
            chunk, file = data.append(to_table(cols, schema))
            row: dict[str, Any] = {
                "episode_index": k,
                "tasks": [task],
                "length": n,
                "data/chunk_index": chunk,
                "data/file_index": file,
                "dataset_from_index": frames,
                "dataset_to_index": frames + n,
            }
            for cam in log.layout.images:
                key = f"observation.images.{cam}"
                imgs = np.asarray(ep["obs"][keys.IMAGES][cam])
                stats[key] = lst.image_stats(imgs)
                span = videos[key].append(imgs)
                row[f"videos/{key}/chunk_index"] = span.chunk_index
                row[f"videos/{key}/file_index"] = span.file_index
                row[f"videos/{key}/from_timestamp"] = span.from_timestamp
                row[f"videos/{key}/to_timestamp"] = span.to_timestamp
            stats = {f: stats[f] for f in features if f in stats}  # info.json order
            for f, st in stats.items():
                for s, v in st.items():
                    row[f"stats/{f}/{s}"] = np.asarray(v).tolist()
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            row["robot_rl/source"] = em.source
            row["robot_rl/success"] = em.success
            row["robot_rl/log_episode_index"] = em.index
            rows.append(row)
            ep_stats.append(stats)
            frames += n
            if progress is not None:
                progress(k + 1, len(chosen), frames)
        data.close()
        for v in videos.values():
            v.close()
        for key, v in videos.items():
            features[key]["info"] = v.feature_info()
        ep_path = tmp / EPISODES_PATH.format(chunk_index=0, file_index=0)
        ep_path.parent.mkdir(parents=True, exist_ok=True)
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), str(ep_path), compression="snappy")
        tasks = pd.DataFrame({"task_index": [0]}, index=pd.Index([task], name="task"))
        tasks.to_parquet(tmp / "meta" / "tasks.parquet")
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": opts.robot_type,
            "total_episodes": len(rows),
            "total_frames": frames,
            "total_tasks": 1,
            "chunks_size": opts.chunks_size,
            "data_files_size_in_mb": opts.data_files_size_in_mb,
            "video_files_size_in_mb": opts.video_files_size_in_mb,
            "fps": fps,
            "splits": {"train": f"0:{len(rows)}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if videos else None,
            "features": features,
        }
        _write_json(tmp / "meta" / "info.json", info)
        _write_json(tmp / "meta" / "stats.json", lst.to_json(lst.aggregate_all(ep_stats)))
        provenance = {
            "exported_by": "robot_rl",
            "repo_id": opts.repo_id,
            "source": str(src.resolve()),
            "source_meta": log.meta,
            "log_episode_index": [em.index for em in chosen],
            "task_text": task,
        }
        _write_json(tmp / "meta" / "robot_rl_export.json", provenance)
        tmp.rename(out)
    except BaseException:
        data.close()
        for v in videos.values():
            v.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "out": str(out),
        "format": "lerobot",
        "codebase_version": CODEBASE_VERSION,
        "repo_id": opts.repo_id,
        "episodes": len(rows),
        "frames": frames,
        "fps": fps,
        "task": task,
        "cameras": list(log.layout.images),
        "video_codec": opts.video_codec if videos else None,
        "data_files": len(data.paths),
        "video_files": sum(len(v.paths) for v in videos.values()),
    }


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4) + "\n")
