"""`robot-rl label` through ROS 2 against the lockstep twin, and the frame store it writes.

- FrameLog (no ROS): only whole episodes are visible; an episode open at a crash is absent
  and its rows are trimmed when the store is reopened for appending;
- label with a recorded keyboard event file (tests/drivers/data/label_keyboard.jsonl: drive,
  hold success 1 s, reset; drive, hold success twice 0.5 s, reset): positive frames appear
  only while the button was held (one run in the first episode, two in the second), every
  other frame is negative, images of both cameras are stored.

Event timing is wall-clock under lockstep: assertions are on labels, runs and counts with
generous bounds, not exact lengths.
ROS domain ids: the a2_domain fixture (30..49, leased across processes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.replay.frames import FrameLog

DATA = Path(__file__).with_name("data")


def _frame(v: int) -> dict:
    return {
        "state": np.full(3, v, np.float32),
        "images": {"front": np.full((8, 8, 3), v, np.uint8)},
    }


def test_frame_log_keeps_whole_episodes_only(tmp_path: Path) -> None:
    layout = ObsLayout(state_dim=3, images={"front": ArraySpec((8, 8, 3), "uint8")})
    path = tmp_path / "frames.zarr"
    log = FrameLog.create(path, layout, {"kind": "frame_labels"}, flush_every_frames=3)
    labels = [0, 0, 1, 1, 0, 0, 0]
    for ep in range(2):
        log.begin_episode(seed=ep)
        for t, y in enumerate(labels):
            log.append(_frame(10 * ep + t), bool(y), float(t), task_success=bool(y))
        log.end_episode(end_reason="reset")
    log.begin_episode()
    for _ in range(5):  # flushed in part, never ended: a crash here
        log.append(_frame(99), True, 0.0)

    store = FrameLog.open(path)
    assert (store.num_episodes, store.num_frames, store.positives, store.negatives) == (
        2,
        14,
        4,
        10,
    )
    d = store.read()
    np.testing.assert_array_equal(d["label"], labels * 2)
    np.testing.assert_array_equal(d["episode"], [0] * 7 + [1] * 7)
    np.testing.assert_array_equal(d["step"], list(range(7)) * 2)
    np.testing.assert_array_equal(d["task_success"], labels * 2)
    assert d["obs"]["images"]["front"][8, 0, 0, 0] == 11 and d["obs"]["state"][13, 0] == 16

    again = FrameLog.open(path, mode="a")  # trims the crashed episode's rows, then appends
    assert again._arrays["label"].shape[0] == 14
    again.begin_episode()
    again.append(_frame(7), False, 0.0)
    again.end_episode()
    again.close()
    assert FrameLog.open(path).read()["obs"]["state"][14, 0] == 7
    with pytest.raises(FileExistsError):
        FrameLog.create(path, layout)


def _runs(labels: np.ndarray) -> list[int]:
    """Lengths of the runs of 1s."""
    runs, n = [], 0
    for v in [*labels.tolist(), 0]:
        if v:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


def test_label_positives_only_while_held(tmp_path: Path, a2_domain: int) -> None:
    pytest.importorskip("rclpy")
    pytest.importorskip("mujoco")
    from record_helpers import lockstep_setup, run_cli

    setup = lockstep_setup(tmp_path / "setup.yaml", cameras=("front", "wrist"), image=64)
    out = tmp_path / "frames.zarr"
    args = ["label", "--setup", str(setup), "--launch", "--out", str(out), "--episodes", "2"]
    args += ["--teleop-events", str(DATA / "label_keyboard.jsonl")]
    args += ["--image-size", "64", "--log-dir", str(tmp_path / "logs"), "--json"]
    result = json.loads(run_cli(args, a2_domain, 240)[0])

    store = FrameLog.open(out)
    d = store.read()
    assert store.num_episodes == 2 and result["kept"] == 2
    assert (result["positives"], result["negatives"]) == (store.positives, store.negatives)
    assert [e["extra"]["end_reason"] for e in store.episodes] == ["reset", "reset"]
    runs = [_runs(d["label"][d["episode"] == e]) for e in range(2)]
    assert len(runs[0]) == 1 and len(runs[1]) == 2, runs
    assert 6 <= runs[0][0] <= 16, runs  # held 1 s at 10 Hz
    assert all(3 <= n <= 10 for n in runs[1]), runs  # held 0.5 s twice
    for e in range(2):  # driving before the first hold and after the last: negatives
        labels = d["label"][d["episode"] == e]
        assert labels[:5].sum() == 0 and labels[-3:].sum() == 0, labels
    assert set(np.unique(d["task_success"])) <= {0, 1}  # the twin's own truth, not unknown
    for cam in ("front", "wrist"):
        images = d["obs"]["images"][cam]
        assert images.shape == (store.num_frames, 64, 64, 3) and images.std() > 0
    assert d["obs"]["state"].shape[0] == store.num_frames
    steps = d["step"][d["episode"] == 1]
    np.testing.assert_array_equal(steps, np.arange(len(steps)))
