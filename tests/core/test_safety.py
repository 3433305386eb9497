"""The shared safety layer: try to break the workspace box and the per-step limit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robot_rl.core import frames
from robot_rl.core.safety import CommandWatchdog, SafetyConfig, SafetyLayer
from robot_rl.core.types import ArmCommand, UnsafeCommandError

CFG = SafetyConfig(
    workspace_low_m=(0.3, -0.2, 0.05),
    workspace_high_m=(0.7, 0.2, 0.4),
    max_step_m=0.03,
    max_step_rad=0.2,
    orientation_max_rad=0.6,
)
LAYER = SafetyLayer(CFG)
LO, HI = np.array(CFG.workspace_low_m), np.array(CFG.workspace_high_m)
DOWN = np.array(CFG.orientation_center_quat)

big = st.floats(-1e6, 1e6, allow_nan=False)
unit = st.floats(-1.0, 1.0, allow_nan=False)


def inside_pose(u, rv):
    p = LO + (np.asarray(u) + 1) / 2 * (HI - LO)
    q = frames.quat_mul(frames.quat_from_rotvec(np.asarray(rv) * 0.6 / np.sqrt(3)), DOWN)
    return frames.pose(p, q)


def angle_between(q1, q2):
    return float(np.linalg.norm(frames.quat_error(q1, q2)))


@settings(max_examples=300, deadline=None)
@given(
    u=st.tuples(unit, unit, unit),
    rv=st.tuples(unit, unit, unit),
    target_p=st.tuples(big, big, big),
    target_q=st.tuples(unit, unit, unit, unit).filter(lambda q: np.linalg.norm(q) > 1e-3),
    gripper=st.floats(-1e3, 1e3, allow_nan=False),
)
def test_random_targets_never_leave_box_nor_exceed_step(u, rv, target_p, target_q, gripper):
    current = inside_pose(u, rv)
    cmd = ArmCommand(np.concatenate([target_p, target_q]), gripper)
    out, _ = LAYER.apply(cmd, current)
    assert LAYER.in_workspace(out.target_pose[:3], atol=1e-9)
    assert np.linalg.norm(out.target_pose[:3] - current[:3]) <= CFG.max_step_m + 1e-9
    assert angle_between(out.target_pose[3:], current[3:]) <= CFG.max_step_rad + 1e-9
    assert angle_between(out.target_pose[3:], DOWN) <= CFG.orientation_max_rad + 1e-9
    assert 0.0 <= out.gripper <= 1.0


def test_adversarial_walk_towards_a_corner_stays_in_box():
    """An attacker commands far outside the box every step, following the executed pose."""
    current = inside_pose((0, 0, 0), (0, 0, 0))
    far = np.array([10.0, -10.0, -10.0])
    for _ in range(200):
        out, report = LAYER.apply(ArmCommand(np.concatenate([far, DOWN]), 1.0), current)
        assert LAYER.in_workspace(out.target_pose[:3])
        assert np.linalg.norm(out.target_pose[:3] - current[:3]) <= CFG.max_step_m + 1e-12
        current = out.target_pose  # perfect tracking: the worst case for creeping out
    np.testing.assert_allclose(current[:3], [0.7, -0.2, 0.05], atol=1e-9)
    assert report.workspace_clipped


def test_outside_box_moves_back_with_limited_step():
    current = frames.pose(np.array([0.9, 0.0, 0.2]), DOWN)  # pushed out by a person
    out, report = LAYER.apply(ArmCommand(current.copy(), 0.0), current)
    assert report.workspace_clipped and report.step_clipped
    assert np.linalg.norm(out.target_pose[:3] - current[:3]) == pytest.approx(CFG.max_step_m)
    assert out.target_pose[0] < current[0]


def test_in_box_small_step_passes_unchanged():
    current = inside_pose((0, 0, 0), (0, 0, 0))
    target = frames.apply_delta(current, np.array([0.01, 0, 0]), np.array([0, 0, 0.05]))
    out, report = LAYER.apply(ArmCommand(target, 0.5), current)
    np.testing.assert_allclose(out.target_pose, target, atol=1e-12)
    assert report.as_dict() == dict.fromkeys(report.as_dict(), False)


@pytest.mark.parametrize(
    "target,gripper",
    [
        (np.array([np.nan, 0, 0, 1, 0, 0, 0]), 0.0),
        (np.array([0.5, 0, 0.2, 0, 1, 0, 0]), np.inf),
        (np.array([0.5, 0, 0.2, 0, 0, 0, 0]), 0.0),
        (np.zeros(6), 0.0),
    ],
)
def test_malformed_commands_are_refused(target, gripper):
    with pytest.raises(UnsafeCommandError):
        LAYER.apply(ArmCommand(target, gripper), inside_pose((0, 0, 0), (0, 0, 0)))


def test_bad_config_says_what_to_change():
    with pytest.raises(ValueError, match="workspace_low_m"):
        SafetyConfig(workspace_low_m=(0.5, 0, 0), workspace_high_m=(0.4, 1, 1))


def test_watchdog():
    wd = CommandWatchdog(0.5)
    assert not wd.expired(10.0)  # nothing commanded yet: nothing to hold
    wd.feed(10.0)
    assert not wd.expired(10.4)
    assert wd.expired(10.6)
    wd.feed(10.6)
    assert not wd.expired(10.7)
