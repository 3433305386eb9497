"""Module-scoped datasets for the ``robot-rl dataset`` tests (built once per test module)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli as robot_rl
from dataset_helpers import FPS, make_dataset


@pytest.fixture(scope="module")
def pixels(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ds"), "pixels")


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ds"), "state")


@pytest.fixture(scope="module")
def exported(pixels, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "lerobot"
    proc = robot_rl(
        "dataset", "export", str(pixels), "--format", "lerobot", "--out", str(out),
        "--task-text", "pick up the red cube", "--repo-id", "local/pick", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["episodes"] == 4 and summary["fps"] == FPS
    return out
