"""`robot-rl rehearse` on a hard task of stage 14 with the smallest budgets: plug_insert (grasp a
plug from a random pose, insert it with 0.5 mm clearance at a random socket pose) through every
step of the robot day against the real-time twin played as a real robot. The chain, not
learning (bench/rehearsal.py measures that)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_rehearse import _rehearsed

pytest.importorskip("rclpy")
pytest.importorskip("mujoco")


def test_a_hard_task_rehearses_end_to_end_and_the_report_says_what_failed(
    tmp_path: Path, a2_domain: int
) -> None:
    """The demos, the labels and the policy control the TCP's yaw (the task needs it); the
    simulated human records and corrects through the teleop topics; the report counts the
    final evaluation's failures by the stage they never reached, from the twin's truth."""
    out = tmp_path / "plug"
    # pixels: a state observation of plug_insert holds the twin's truth (the plug's pose),
    # which a day played as a real robot may not read. The expert takes ~70 steps on the direct
    # twin and ~100 over ROS 2 in real time: 160-step labelling episodes leave it room (the
    # classifier needs successes in 3 of the 4 to split them into train, validation and test).
    options = ["--task", "plug_insert", "--obs", "pixels", "--cameras", "front",
               "--image-size", "64", "--demos", "1", "--label-episodes", "4",
               "--label-max-steps", "160", "--label-near-miss-every", "0",
               "--robot-minutes", "0.2", "--target-episodes", "1", "--state-hz", "50",
               "--human-patience-steps", "12"]  # fmt: skip
    report = _rehearsed(out, a2_domain, options, 900)
    assert report["config"]["task"] == "plug_insert" and report["record"]["kept"] == 1
    learner = json.loads((out / "learner" / "config.json").read_text())
    assert learner["cli"]["env"]["control_rotation"] is True
    f = report["figures"]
    assert f["final_eval_ros_episodes"] == 1 and f["final_eval_ros_success"] in (0.0, 1.0)
    failed = f["final_eval_ros_failed_at"]
    assert failed is not None and sum(failed.values()) == int(f["final_eval_ros_success"] == 0.0)
    assert set(failed) <= {"grasp", "alignment", "insertion", "not_at_once"}
    assert f["failed_at_last"] is not None
    assert "What failed, by the twin's truth" in (out / "summary.md").read_text()
    assert report["train"]["privileged_readers"] == ["teleop"]
