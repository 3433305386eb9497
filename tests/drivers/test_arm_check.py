"""``robot-rl arm check`` against the twin behind ROS 2 (real processes over DDS): the UR5e twin
passes (6 joints, every small move arrives and comes back; lockstep, so the moves count sim
ticks and no wall-clock timing enters);
a setup that describes another arm than the bridge serves fails, naming the mismatch."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("mink", reason="pip install -e '.[arms]' (the UR5e twin's IK)")


def _setup(tmp_path: Path, arm: str) -> Path:
    raw = {
        "name": "arm_check",
        "namespace": "arm",
        "robot": "twin",
        "arm": arm,
        "task": "reach",
        "clock": "lockstep",  # the moves count sim ticks: no wall-clock dependence
        "control_hz": 10.0,
        "nodes": [
            {
                "name": "twin",
                "module": "sim.ros_node",
                "args": [
                    "--task",
                    "reach",
                    "--ns",
                    "arm",
                    "--arm",
                    "ur5e",
                    "--cameras",
                    "--mode",
                    "${clock}",
                    "--control-hz",
                    "10",
                ],  # fmt: skip
                "restart": {"policy": "never"},
            }
        ],
    }
    path = tmp_path / f"check_{arm}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_ur5e_twin_passes_the_arm_check(tmp_path: Path, a2_domain: int) -> None:
    from robot_rl.app.arms.arm_check import ArmCheckConfig, run_arm_check

    cfg = ArmCheckConfig(
        setup=_setup(tmp_path, "ur5e"), launch=True, domain_id=a2_domain, progress=False
    )
    report = run_arm_check(cfg)
    assert report["ok"], report["problems"]
    assert report["joint_names"][0] == "shoulder_pan_joint" and len(report["joint_names"]) == 6
    assert report["state_rate_hz"] is None  # lockstep: states come with the steps
    assert [m["axis"] for m in report["moves"]] == ["x", "y", "z"]
    assert report["tracking_error_mm_max"] < 5.0


def test_a_setup_describing_another_arm_fails_the_check_naming_it(
    tmp_path: Path, a2_domain: int
) -> None:
    from robot_rl.app.arms.arm_check import ArmCheckConfig, run_arm_check

    cfg = ArmCheckConfig(
        setup=_setup(tmp_path, "fr3"), launch=True, domain_id=a2_domain, progress=False
    )
    report = run_arm_check(cfg)
    assert not report["ok"]
    assert "carries 6 arm joints but this env's arm description has 7" in report["problems"][0]
