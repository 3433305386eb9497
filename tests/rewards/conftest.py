"""Session fixtures: twin frames and one classifier trained on them through the CLI (about two
minutes), shared by the classifier tests and the RL-with-a-learned-reward tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twin_cli import EPISODES, robot_rl


@pytest.fixture(scope="session")
def twin_frames(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("frames") / "pick_cube.zarr"
    proc = robot_rl(
        "reward", "frames", "--task", "pick_cube", "--out", str(out),
        "--episodes", str(EPISODES), "--image-size", "64", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    # Near misses and wandering are hard negatives: none of them may reach success.
    assert result["successful_episodes_by_kind"]["near_miss"] == 0
    assert result["successful_episodes_by_kind"]["wander"] == 0
    assert result["successful_episodes_by_kind"]["success"] == result["episodes_by_kind"]["success"]
    assert result["positives"] > 50 and result["negatives"] > 2 * result["positives"]
    return out


@pytest.fixture(scope="session")
def trained(twin_frames: Path, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("rm") / "rm"
    proc = robot_rl(
        "reward", "train", "--frames", str(twin_frames), "--out", str(out),
        "--augment-copies", "1", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout)
