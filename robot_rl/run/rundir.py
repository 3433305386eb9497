"""The run directory of the embedded trainer: names, errors, ``config.json``.

Layout (see :mod:`robot_rl.learner.loop`)::

    config.json  log.zarr/  checkpoints/  eval.jsonl  learning_curve.png  tb/  control
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.batch import ObsLayout

CONFIG_JSON = "config.json"
LOG_ZARR = "log.zarr"
EVAL_JSONL = "eval.jsonl"
CURVE_PNG = "learning_curve.png"
EFFORT_JSON = "human_effort.json"
"""The human's effort over the run (robot_rl.run.effort), rewritten at each evaluation."""
TB_DIR = "tb"
SOURCE_ONLINE = "online"
CONTROL_FILE = "control"
"""A person writes PAUSE, RESUME or STOP here to control a running run (either mode)."""
CONTROL_COMMANDS = ("PAUSE", "RESUME", "STOP")

log = logging.getLogger(__name__)


class RunExistsError(FileExistsError):
    """The run directory exists and ``resume`` was not requested."""


class NothingToResumeError(FileNotFoundError):
    """``resume`` was requested but the run directory holds no run."""


def jsonable(x: Any) -> Any:
    """Dataclasses, mappings, sequences, paths and numpy scalars -> JSON values (nested)."""
    if is_dataclass(x) and not isinstance(x, type):
        return jsonable(asdict(x))
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    return x


def take_control_command(run_dir: Path) -> str | None:
    """The PAUSE / RESUME / STOP written to ``run_dir/control`` (the file is consumed), or None.
    Any other word is logged and ignored. An empty file is left alone: its writer (``echo STOP >
    control`` creates the file before it writes) has not finished yet; the next poll reads it."""
    path = Path(run_dir) / CONTROL_FILE
    try:
        command = path.read_text().strip().upper()
    except FileNotFoundError:
        return None
    if not command:
        return None
    path.unlink(missing_ok=True)
    if command not in CONTROL_COMMANDS:
        log.warning("%s: %r is not PAUSE, RESUME or STOP; ignored", path, command)
        return None
    return command


def write_json_atomic(path: Path, obj: Any, fsync: bool = False) -> None:
    """Write ``obj`` as JSON to ``path`` through a temporary file and a rename: a reader sees
    the old or the new file, never half of one. Survives a process crash; with ``fsync`` the
    data reaches the disk before the rename (checkpoints)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def read_run_config(run_dir: Path) -> dict:
    """The run's ``config.json`` (raises :class:`NothingToResumeError` if absent)."""
    path = Path(run_dir) / CONFIG_JSON
    if not path.exists():
        raise NothingToResumeError(f"{run_dir} is not a run directory (no {CONFIG_JSON})")
    return json.loads(path.read_text())


def prepare_run_dir(
    d: Path,
    resume: bool,
    train_cfg: Any,
    layout: ObsLayout,
    action_dim: int,
    run_meta: Mapping[str, Any] | None,
    data_name: str = LOG_ZARR,
) -> None:
    """Check (resume) or create (new run: refuses a non-empty directory) the run directory and
    write ``config.json``: ``{"train": train_cfg, "layout", "action_dim", **run_meta}``.

    Raises:
        NothingToResumeError: ``resume`` without a run (config or ``data_name``: the log, or
            a distributed learner's actor logs) in ``d``.
        ValueError: ``resume`` with another observation layout or action size.
        RunExistsError: A new run in a non-empty directory.
    """
    d = Path(d)
    if resume:
        cfg = read_run_config(d)
        if not (d / data_name).exists():
            raise NothingToResumeError(f"{d} has no {data_name}; start a new run without resume")
        if cfg.get("action_dim") != action_dim or cfg.get("layout") != jsonable(layout):
            raise ValueError(
                f"the env's observation layout / action size differ from the run in {d}; "
                "resume with the same task and observation settings"
            )
        return
    if d.exists() and any(d.iterdir()):
        raise RunExistsError(
            f"run directory {d} already exists; pass --resume to continue it, or choose "
            "another --run"
        )
    d.mkdir(parents=True, exist_ok=True)
    config = {
        "train": jsonable(train_cfg),
        "layout": jsonable(layout),
        "action_dim": action_dim,
        **jsonable(dict(run_meta or {})),
    }
    write_json_atomic(d / CONFIG_JSON, config, fsync=True)
