"""``robot-rl rehearse --driver ros2_control`` (:mod:`robot_rl.app.rehearsal.rehearse_setup`): the
setup it
writes puts the arm's own bridge (node ``arm_bridge``) in front of the ros2_control-shaped twin
for each arm kind, with the task's safety limits in the arm's size; the setup keys it relies on
(``bridge_node``, ``time_base`` on a twin) are checked; an arm without a driver stand-in and a
bad combination are refused. The end-to-end rehearsal over it is in ``test_rehearse.py``'s
style below (short budgets: the chain, not the target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.setup import SetupError, load_setup, parse_setup
from robot_rl.app.rehearsal.rehearse import RehearseConfig
from robot_rl.app.rehearsal.rehearse_setup import write_setup


@pytest.mark.parametrize(
    ("arm", "interface", "bridge"),
    [
        ("ur5e", "joint", "drivers.ros2_arm.node"),
        ("fr3", "cartesian", "drivers.ros2_arm.node"),
        ("so101", "servo_bus", "drivers.so101.node"),
    ],
)
def test_the_driver_setup_puts_the_arms_bridge_in_front_of_the_twin(
    tmp_path: Path, arm: str, interface: str, bridge: str
) -> None:
    setup = load_setup(write_setup(RehearseConfig(out=tmp_path, arm=arm, driver="ros2_control")))
    assert (setup.robot, setup.bridge_node, setup.time_base) == ("twin", "arm_bridge", "monotonic")
    assert not setup.privileged and setup.arm.name == arm
    twin, node = setup.node("twin"), setup.node("arm_bridge")
    assert twin.module == "sim.ros2_control_node"
    assert twin.args[twin.args.index("--interface") + 1] == interface
    assert "--score-log" in twin.args and twin.args[twin.args.index("--status-stamps") + 1] == "sim"
    assert node.module == bridge
    safety = dict(node.parameters)
    from sim.backend import task_info

    box = task_info("pick_cube", arm).default_safety
    assert tuple(safety["workspace_high_m"]) == pytest.approx(box.workspace_high_m)
    if interface == "servo_bus":  # the bridge opens the twin's bus with the twin's calibration
        port = twin.args[twin.args.index("--port") + 1]
        assert node.args[node.args.index("--port") + 1] == port
        assert node.args[node.args.index("--calibration") + 1] == f"{port}.json"


def test_the_twin_driver_setup_is_unchanged(tmp_path: Path) -> None:
    setup = load_setup(write_setup(RehearseConfig(out=tmp_path, arm="ur5e")))
    assert (setup.bridge_node, setup.time_base) == ("twin", "stream")
    assert [n.module for n in setup.nodes] == ["sim.ros_node"]


def test_bridge_node_and_time_base_are_checked() -> None:
    base = {"task": "pick_cube", "nodes": [{"name": "twin", "module": "sim.ros_node"}]}
    with pytest.raises(SetupError, match="the twin stamps with sim time"):
        parse_setup({**base, "time_base": "monotonic"})
    ok = parse_setup({**base, "time_base": "monotonic", "bridge_node": "arm_bridge"})
    assert ok.bridge_node == "arm_bridge"
    with pytest.raises(SetupError, match="bridge_node"):
        parse_setup({**base, "bridge_node": "driver"})
    hw = {**base, "robot": "hardware", "privileged": False, "bridge_node": "twin"}
    hw["reset_pose"] = [0.5, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0]
    with pytest.raises(SetupError, match="hardware is bridged by arm_bridge"):
        parse_setup(hw)


@pytest.mark.parametrize(
    ("arm", "bridge", "interface"),
    [
        ("fr3", "drivers.ros2_arm.node", "cartesian"),
        ("ur5e", "drivers.ros2_arm.node", "joint"),
        ("so101", "drivers.so101.node", "servo_bus"),
    ],
)
def test_each_twin_arm_is_driven_through_its_vendor_interface_by_its_bridge(
    tmp_path: Path, arm: str, bridge: str, interface: str
) -> None:
    """`--driver ros2_control`: the twin plays the arm kind's vendor driver (its
    ``TwinArm.vendor_interface``) and the arm's own bridge stands in front of it."""
    cfg = RehearseConfig(arm=arm, driver="ros2_control", out=tmp_path)
    setup = load_setup(write_setup(cfg))
    nodes = {n.name: n for n in setup.nodes}
    assert nodes["twin"].module == "sim.ros2_control_node"
    args = list(nodes["twin"].args)
    assert args[args.index("--interface") + 1] == interface
    assert args[args.index("--arm") + 1] == arm
    assert nodes["arm_bridge"].module == bridge
    assert setup.bridge_node == "arm_bridge"


def test_a_twin_arm_with_an_unknown_vendor_interface_is_refused() -> None:
    from dataclasses import replace

    from sim.twin_arms import fr3_twin

    with pytest.raises(ValueError, match="vendor_interface 'ethercat' is not one of"):
        replace(fr3_twin(), vendor_interface="ethercat")


def test_the_so101_day_over_its_servo_bus_runs_and_is_scored(
    tmp_path: Path, a2_domain: int
) -> None:
    """`--arm so101 --driver ros2_control`: the SO-101 bridge drives the twin's SO-101-class arm
    byte for byte over its simulated servo bus through the whole day (demos by the simulated
    human, labels, the classifier, training, both evaluations); the twin scores its episodes.
    Smallest budgets: the chain, not learning."""
    import json

    import yaml
    from test_rehearse import _rehearsed, _small_day

    out = tmp_path / "so101"
    options = ["--arm", "so101", "--driver", "ros2_control", *_small_day(2, 3, 0.25, 2)]
    report = _rehearsed(out, a2_domain, options, 900)
    assert report["arm"] == "so101" and report["record"]["kept"] == 2
    setup = yaml.safe_load((out / "setup.yaml").read_text())
    assert [n["module"] for n in setup["nodes"]] == ["sim.ros2_control_node", "drivers.so101.node"]
    assert report["figures"]["final_eval_ros_episodes"] == 2
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) >= 2 + 3 + 2  # demos, labelling and evaluation episodes, at least
    assert report["train"]["privileged_readers"] == ["teleop"]
