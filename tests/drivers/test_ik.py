"""Differential IK (:mod:`drivers.ik`, on mink) for arms in joint mode: joint limits and the
per-tick joint step hold whatever the target (far away, behind a limit, at a singularity),
tracking is sub-millimetre, URDF and MJCF of one arm agree, and a kinematics file that does not
match the arm's description is a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mink", reason="pip install -e '.[arms]' (mink: differential IK)")

from drivers.ik import (  # noqa: E402
    DiffIK,
    DiffIKConfig,
    KinematicsError,
    joint_goal_solver,
    load_kinematics,
)
from robot_rl.core import frames  # noqa: E402
from robot_rl.core.arm import builtin_arm  # noqa: E402

FR3 = builtin_arm("fr3")
SO101 = builtin_arm("so101")
UR5E = builtin_arm("ur5e")

MODELS = Path(__file__).resolve().parents[2] / "sim" / "arms" / "models"
ARMS = {"ur5e": UR5E, "fr3": FR3, "so101": SO101}


def _ik(kind: str, suffix: str = "xml") -> DiffIK:
    arm = ARMS[kind]
    return DiffIK(MODELS / f"{kind}.{suffix}", arm, DiffIKConfig.for_arm(arm, 0.01))


def _run(ik: DiffIK, q: np.ndarray, target: np.ndarray, ticks: int) -> tuple[np.ndarray, float]:
    """Tick towards ``target``; return the final q and the largest step / bound ratio, asserting
    the limits at every tick."""
    lo, hi = np.array(ik.arm.joint_low_rad), np.array(ik.arm.joint_high_rad)
    worst = 0.0
    for _ in range(ticks):
        nxt = ik.step(q, target)
        assert np.all(np.isfinite(nxt))
        assert np.all(nxt >= lo) and np.all(nxt <= hi)
        worst = max(worst, float(np.max(np.abs(nxt - q) / ik.max_step_rad)))
        q = nxt
    return q, worst


@pytest.mark.parametrize("kind", sorted(ARMS))
def test_a_target_far_out_of_reach_moves_by_bounded_steps_within_the_limits(kind: str) -> None:
    ik = _ik(kind)
    q = np.array(ik.arm.home_q_rad)
    far = ik.fk(q)
    far[:3] = [2.0, -1.5, 1.0]  # metres beyond any of the three arms' reach
    q, worst = _run(ik, q, far, 300)
    assert worst <= 1.0 + 1e-9


def test_a_target_behind_a_joint_limit_stops_at_the_limit() -> None:
    """UR5e elbow near +pi: a TCP target that needs the elbow past its limit leaves it at the
    limit, never past it."""
    from sim.arms.chain import fk_tcp_mat
    from sim.arms.ur5e import ur5e_chain

    ik = _ik("ur5e")
    q = np.array(UR5E.home_q_rad)
    q[2] = np.pi - 0.05
    beyond = q.copy()
    beyond[2] = np.pi + 0.4  # the pose an elbow past +pi would give (plain FK, no limits)
    target = frames.mat_to_pose(fk_tcp_mat(ur5e_chain(), beyond))
    q, worst = _run(ik, q, target, 200)
    assert worst <= 1.0 + 1e-9 and np.pi - 1e-3 < q[2] <= np.pi  # against the limit, not past


def test_at_a_wrist_singularity_steps_stay_bounded_and_do_not_oscillate() -> None:
    """UR5e with wrist 2 at 0 (wrist 1 and 3 aligned): a small rotation target keeps every step
    within the bound, and once settled the joints do not chatter."""
    ik = _ik("ur5e")
    q = np.array(UR5E.home_q_rad)
    q[4] = 0.0
    pose = ik.fk(q)
    rot = frames.quat_from_euler_xyz(np.array([0.0, 0.3, 0.0]))
    target = np.concatenate([pose[:3], frames.quat_mul(rot, pose[3:7])])
    q, worst = _run(ik, q, target, 150)
    assert worst <= 1.0 + 1e-9
    tail = [q]
    for _ in range(20):
        tail.append(ik.step(tail[-1], target))
    assert np.max(np.abs(np.diff(tail, axis=0))) < 1e-3


@pytest.mark.parametrize("kind", ["ur5e", "fr3"])
def test_a_circle_at_the_bridge_rate_is_tracked_within_a_millimetre(kind: str) -> None:
    ik = _ik(kind)
    q = np.array(ik.arm.home_q_rad)
    start = ik.fk(q)
    errs = []
    for k in range(300):  # 3 s at 100 Hz, 6 cm radius, one turn
        a = 2 * np.pi * k / 300
        target = start.copy()
        target[:3] += 0.06 * np.array([np.cos(a) - 1.0, np.sin(a), 0.0])
        q = ik.step(q, target)
        if k > 30:
            errs.append(np.linalg.norm(ik.fk(q)[:3] - target[:3]))
    assert max(errs) < 1e-3, max(errs)


def test_urdf_and_mjcf_of_one_arm_give_the_same_kinematics_and_ik() -> None:
    a, b = _ik("ur5e", "xml"), _ik("ur5e", "urdf")
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(-2.0, 2.0, 6)
        np.testing.assert_allclose(a.fk(q)[:3], b.fk(q)[:3], atol=1e-9)
        assert abs(abs(float(np.dot(a.fk(q)[3:], b.fk(q)[3:]))) - 1.0) < 1e-9
    q = np.array(UR5E.home_q_rad)
    target = a.fk(q)
    target[0] += 0.02
    np.testing.assert_allclose(a.step(q, target), b.step(q, target), atol=1e-6)


def test_a_urdf_with_mesh_files_elsewhere_loads_for_ik(tmp_path: Path) -> None:
    """Vendor URDFs point at meshes in ROS packages; IK needs none of them."""
    text = (MODELS / "ur5e.urdf").read_text()
    mesh = '<visual><geometry><mesh filename="package://ur_description/meshes/x.dae"/></geometry></visual>'
    text = text.replace("</link>", mesh + "</link>", 1)
    path = tmp_path / "ur5e_meshes.urdf"
    path.write_text(text)
    assert load_kinematics(path).njnt == 6


def test_a_file_that_does_not_match_the_description_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KinematicsError, match=r"joint 'joint1' is not in the kinematics file"):
        DiffIK(MODELS / "ur5e.xml", FR3, DiffIKConfig())
    wide = UR5E.with_overrides(joint_high_rad=(7.0,) * 6)
    with pytest.raises(KinematicsError, match=r"'shoulder_pan_joint' limits .* reach beyond"):
        DiffIK(MODELS / "ur5e.xml", wide, DiffIKConfig())
    with pytest.raises(KinematicsError, match="tool frame 'tool0' is neither a site nor a body"):
        DiffIK(MODELS / "ur5e.xml", UR5E.with_overrides(tool_frame="tool0"), DiffIKConfig())
    with pytest.raises(KinematicsError, match="does not exist"):
        load_kinematics(tmp_path / "missing.urdf")
    bad = tmp_path / "bad.urdf"
    bad.write_text("<robot name='x'><link name='a'/><joint name='j' type='revolute'>")
    with pytest.raises(KinematicsError, match="does not compile"):
        load_kinematics(bad)
    ik = _ik("ur5e")
    with pytest.raises(ValueError, match="NaN or inf"):
        ik.step(np.array(UR5E.home_q_rad), np.full(7, np.nan))


def test_a_measured_position_a_hair_outside_its_limit_is_taken_back_inside() -> None:
    """Encoder noise can read a joint just past its limit; the next goal is inside, one bounded
    step from the limit, never an infeasible QP or a jump."""
    ik = _ik("ur5e")
    q = np.array(UR5E.home_q_rad)
    q[2] = np.pi + 1e-4
    nxt = ik.step(q, ik.fk(np.array(UR5E.home_q_rad)))
    step = np.abs(nxt - np.clip(q, -7, np.pi))
    assert nxt[2] <= np.pi and np.all(step <= ik.max_step_rad + 1e-12)
    assert ik.failures == 0


def test_the_joint_goal_solver_is_one_ik_tick_at_the_rate_and_refuses_no_file() -> None:
    """:func:`drivers.ik.joint_goal_solver` (what the twin of a joint arm runs, in and out of
    ROS 2) ticks exactly as a DiffIK at ``1 / rate_hz`` with the arm's defaults."""
    solve = joint_goal_solver(MODELS / "ur5e.xml", UR5E, 100.0)
    ik = _ik("ur5e")
    q = np.array(UR5E.home_q_rad)
    target = ik.fk(q)
    target[:3] += [0.05, -0.03, 0.02]
    np.testing.assert_array_equal(solve(q, target), ik.step(q, target))
    with pytest.raises(ValueError, match="names no kinematics file"):
        joint_goal_solver(None, UR5E, 100.0)
    with pytest.raises(ValueError, match="rate must be positive"):
        joint_goal_solver(MODELS / "ur5e.xml", UR5E, 0.0)
