"""Arm descriptions (:mod:`robot_rl.core.arm`): an arm is data, checked when it is built, with a
message that says what to change; the spec the env reads comes from it."""

from __future__ import annotations

import json

import pytest

from robot_rl.core import kinematics as kin
from robot_rl.core.arm import ArmDescription, builtin_arm, builtin_arm_kinds, load_arm_file
from robot_rl.core.protocols import RobotSpec

FR3 = builtin_arm("fr3")


def _six() -> dict:
    return dict(
        name="six",
        joint_names=[f"j{i}" for i in range(6)],
        joint_low_rad=[-3.0] * 6,
        joint_high_rad=[3.0] * 6,
        joint_vel_max_rad_s=[3.14] * 6,
        home_q_rad=[0.0] * 6,
        backend="ros2_joint",
    )


def test_fr3_is_the_twins_arm() -> None:
    assert FR3.num_joints == 7
    assert FR3.joint_names == tuple(f"joint{i}" for i in range(1, 8))
    assert FR3.joint_low_rad == kin.FR3_JOINT_LOW_RAD
    assert FR3.home_q_rad == tuple(float(q) for q in kin.FR3_HOME_RAD)
    assert builtin_arm("fr3") is FR3 and builtin_arm_kinds() == ("fr3", "so101", "ur5e")


def test_the_built_in_arms_are_data_files_with_a_setups_keys(tmp_path) -> None:
    """A built-in is a YAML file any user can copy: every kind loads from its file, a file of
    a user's arm loads the same way, and a broken one is refused naming the file and the fix."""
    import math

    ur5e = builtin_arm("ur5e")
    assert ur5e.num_joints == 6 and ur5e.backend == "ros2_joint"
    assert ur5e.home_q_rad[0] == math.pi and ur5e.joint_high_rad[2] == math.pi
    so101 = builtin_arm("so101")
    assert so101.num_joints == 5 and so101.gripper == "jaw"
    assert so101.joint_high_rad[0] == math.radians(110)
    mine = tmp_path / "mine.yaml"
    mine.write_text(json.dumps(_six()))
    assert load_arm_file(mine) == ArmDescription(**_six())
    mine.write_text(json.dumps({k: v for k, v in _six().items() if k != "home_q_rad"}))
    with pytest.raises(ValueError, match=r"mine.yaml: missing \['home_q_rad'\]"):
        load_arm_file(mine)
    mine.write_text(json.dumps({**_six(), "home_q_rad": ["up"] * 6}))
    with pytest.raises(ValueError, match="home_q_rad must be a list of numbers"):
        load_arm_file(mine)
    mine.write_text("- just a list")
    with pytest.raises(ValueError, match="expected a mapping of arm fields"):
        load_arm_file(mine)
    with pytest.raises(ValueError, match="no built-in arm kind '../arms/fr3'"):
        builtin_arm("../arms/fr3")


def test_any_joint_count_and_a_json_round_trip() -> None:
    arm = ArmDescription(**_six())
    assert arm.num_joints == 6 and isinstance(arm.joint_names, tuple)
    again = ArmDescription.from_dict(json.loads(json.dumps(arm.as_dict())))
    assert again == arm
    spec = RobotSpec.from_arm(arm)
    assert spec.num_joints == 6 and spec.joint_names == arm.joint_names
    assert spec.home_joint_pos_rad == arm.home_q_rad and spec.name == "six"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"joint_names": []}, "joint_names is empty"),
        ({"joint_names": ["a", "a", "b", "c", "d", "e"]}, r"\['a'\] appear more than once"),
        ({"joint_low_rad": [-3.0] * 5}, "joint_low_rad has 5 values for 6 joints"),
        ({"joint_high_rad": [3.0] * 5 + [-4.0]}, "joint 'j5' has joint_low_rad -3.0 >= "),
        ({"home_q_rad": [0.0] * 5 + [3.5]}, "home_q_rad of joint 'j5' is 3.5, outside"),
        ({"joint_vel_max_rad_s": [1.0] * 5 + [0.0]}, "must be positive"),
        ({"joint_low_rad": [float("nan")] * 6}, "not finite"),
        ({"gripper": "suction"}, "gripper 'suction' is not one of"),
        ({"backend": "ros1"}, "backend 'ros1' is not one of"),
        ({"name": ""}, "name must not be empty"),
    ],
)
def test_an_inconsistent_arm_is_refused_saying_what_to_change(change, message) -> None:
    with pytest.raises(ValueError, match=message):
        ArmDescription(**{**_six(), **change})


def test_overrides_are_checked_and_unknown_fields_refused() -> None:
    arm = FR3.with_overrides(home_q_rad=(0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.7))
    assert arm.home_q_rad[1] == -0.5 and arm.joint_names == FR3.joint_names
    with pytest.raises(ValueError, match="outside its limits"):
        FR3.with_overrides(home_q_rad=(9.0,) * 7)
    with pytest.raises(ValueError, match=r"\['joints'\] do not exist"):
        FR3.with_overrides(joints=3)
    with pytest.raises(ValueError, match="no built-in arm kind 'fr4'"):
        builtin_arm("fr4")


def test_a_spec_with_mismatched_lengths_is_refused() -> None:
    with pytest.raises(ValueError, match="joint_low_rad has 6 values for 7 joints"):
        RobotSpec("x", 7, (0.0,) * 6, (1.0,) * 7, (0.5,) * 7)
