"""The arm models (sim.arms): MJCF and URDF compile, agree with each other and with the published
kinematics, the committed files are current, and the home poses reach over the table."""

import dataclasses
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from robot_rl.core import frames
from robot_rl.core import kinematics as kin
from sim.arms import chain as ch
from sim.arms import ur5e
from sim.arms.export import ARM_CHAINS, MODELS_DIR, model_texts
from sim.arms.fr3 import fr3_chain
from sim.arms.so101 import so101_chain

KINDS = ("fr3", "ur5e", "so101")
EXPECTED_ARM_JOINTS = {
    "fr3": tuple(f"joint{i}" for i in range(1, 8)),
    "ur5e": (
        "shoulder_pan_joint",
        "shoulder_lift_joint",
        "elbow_joint",
        "wrist_1_joint",
        "wrist_2_joint",
        "wrist_3_joint",
    ),
    "so101": ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"),
}
EXPECTED_GRIPPER_JOINT = {"fr3": None, "ur5e": None, "so101": "gripper"}
TOL = 1e-9


@pytest.fixture(scope="module")
def models():
    """kind -> (chain, MJCF model, URDF model)."""
    out = {}
    for kind in KINDS:
        chain = ARM_CHAINS[kind]()
        mjcf = mujoco.MjModel.from_xml_string(ch.to_mjcf_model(chain))
        urdf = mujoco.MjModel.from_xml_string(ch.to_urdf(chain))
        out[kind] = (chain, mjcf, urdf)
    return out


def _set_q(model, data, names, q):
    for name, qi in zip(names, q, strict=True):
        data.qpos[model.joint(name).qposadr[0]] = qi
    mujoco.mj_kinematics(model, data)


def _T(xpos, xmat):
    T = np.eye(4)
    T[:3, :3] = np.asarray(xmat).reshape(3, 3)
    T[:3, 3] = xpos
    return T


def _mjcf_tcp(model, data):
    site = data.site("tcp")
    return _T(site.xpos, site.xmat)


def _urdf_tcp(model, data):
    body = data.body("tcp")
    return _T(body.xpos, body.xmat)


def _random_q(chain, rng):
    return rng.uniform(chain.lower_rad, chain.upper_rad)


@pytest.mark.parametrize("kind", KINDS)
def test_mjcf_has_the_expected_joints_limits_and_motors(models, kind):
    chain, mjcf, _ = models[kind]
    gripper = EXPECTED_GRIPPER_JOINT[kind]
    expected = EXPECTED_ARM_JOINTS[kind] + ((gripper,) if gripper else ())
    assert tuple(mjcf.joint(i).name for i in range(mjcf.njnt)) == expected
    assert chain.arm_joint_names == EXPECTED_ARM_JOINTS[kind]
    assert all(mjcf.jnt_type == mujoco.mjtJoint.mjJNT_HINGE)
    assert all(mjcf.jnt_limited)
    for j in chain.all_joints:
        np.testing.assert_array_equal(mjcf.joint(j.name).range, [j.lower_rad, j.upper_rad])
        act = mjcf.actuator(j.name)
        assert act.trnid[0] == mjcf.joint(j.name).id
        np.testing.assert_array_equal(act.ctrlrange, [-j.effort_nm, j.effort_nm])
    assert mjcf.nu == mjcf.njnt
    assert mjcf.body("flange").id > 0 and mjcf.site("tcp").bodyid[0] == mjcf.body("flange").id


def test_published_limits_are_the_ones_in_the_models(models):
    fr3, fr3_mj, _ = models["fr3"]
    np.testing.assert_array_equal(fr3.lower_rad, kin.FR3_JOINT_LOW_RAD)
    np.testing.assert_array_equal(fr3.upper_rad, kin.FR3_JOINT_HIGH_RAD)
    np.testing.assert_array_equal(
        [fr3_mj.actuator(f"joint{i}").ctrlrange[1] for i in range(1, 8)], kin.FR3_TORQUE_LIMIT_NM
    )
    u, _, _ = models["ur5e"]
    np.testing.assert_allclose(u.upper_rad, [2 * np.pi] * 2 + [np.pi] + [2 * np.pi] * 3)
    np.testing.assert_allclose(u.lower_rad, -u.upper_rad)
    assert [j.effort_nm for j in u.joints] == [150.0] * 3 + [28.0] * 3
    assert [j.velocity_rad_s for j in u.joints] == pytest.approx([np.pi] * 6)
    assert [j.mass_kg for j in u.joints] == [3.761, 8.058, 2.846, 1.37, 1.3, 0.365]
    s, _, _ = models["so101"]
    assert s.gripper is not None and s.gripper.name not in s.arm_joint_names
    assert all(j.effort_nm < 3.0 for j in s.all_joints)
    assert sum(j.mass_kg for j in s.all_joints) < 1.0


@pytest.mark.parametrize("kind", KINDS)
def test_urdf_limits_velocities_and_efforts(kind):
    chain = ARM_CHAINS[kind]()
    root = ET.fromstring(ch.to_urdf(chain))
    joints = {j.get("name"): j for j in root.iter("joint")}
    for spec in chain.all_joints:
        el = joints[spec.name]
        assert el.get("type") == "revolute"
        limit = el.find("limit")
        got = [float(limit.get(k)) for k in ("lower", "upper", "velocity", "effort")]
        assert got == [spec.lower_rad, spec.upper_rad, spec.velocity_rad_s, spec.effort_nm]
    assert joints["tcp_joint"].get("type") == "fixed"
    assert joints["tcp_joint"].find("parent").get("link") == "flange"


@pytest.mark.parametrize("kind", KINDS)
def test_urdf_tcp_equals_mjcf_tcp_at_random_configurations(models, kind):
    chain, mjcf, urdf = models[kind]
    d_mj, d_ur = mujoco.MjData(mjcf), mujoco.MjData(urdf)
    names = [j.name for j in chain.all_joints]
    assert tuple(urdf.joint(i).name for i in range(urdf.njnt)) == tuple(names)
    rng = np.random.default_rng(0)
    for _ in range(50):
        q = rng.uniform(
            [j.lower_rad for j in chain.all_joints], [j.upper_rad for j in chain.all_joints]
        )
        _set_q(mjcf, d_mj, names, q)
        _set_q(urdf, d_ur, names, q)
        T_mj = _mjcf_tcp(mjcf, d_mj)
        np.testing.assert_allclose(_urdf_tcp(urdf, d_ur), T_mj, rtol=0, atol=TOL)
        np.testing.assert_allclose(ch.fk_tcp_mat(chain, q[: len(chain.joints)]), T_mj, atol=TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_urdf_and_mjcf_have_the_same_mass_properties(models, kind):
    chain, mjcf, urdf = models[kind]
    for link in [chain.base_link] + [j.link_name for j in chain.all_joints]:
        a, b = mjcf.body(link), urdf.body(link)
        assert a.mass[0] == pytest.approx(b.mass[0], rel=1e-12)
        np.testing.assert_allclose(a.ipos, b.ipos, atol=1e-12)
        I_a = frames.quat_to_mat(a.iquat) @ np.diag(a.inertia) @ frames.quat_to_mat(a.iquat).T
        I_b = frames.quat_to_mat(b.iquat) @ np.diag(b.inertia) @ frames.quat_to_mat(b.iquat).T
        np.testing.assert_allclose(I_a, I_b, rtol=1e-9, atol=1e-15)


def test_ur5e_fk_dh_at_zero_is_the_published_stretched_pose():
    # q = 0: flange at (a2 + a3, -(d4 + d6), d1 - d5), its z axis along -y of the base.
    T = ur5e.fk_dh(np.zeros(6))
    np.testing.assert_allclose(T[:3, 3], [-0.8172, -0.2329, 0.0628], atol=1e-12)
    np.testing.assert_allclose(T[:3, 2], [0.0, -1.0, 0.0], atol=1e-12)


def test_ur5e_mjcf_flange_equals_standard_dh(models):
    chain, mjcf, _ = models["ur5e"]
    data = mujoco.MjData(mjcf)
    T_tcp_flange = np.linalg.inv(chain.tcp.matrix())
    np.testing.assert_allclose(T_tcp_flange[:3, 3], [0, 0, -ur5e.TCP_OFFSET_M], atol=1e-15)
    rng = np.random.default_rng(1)
    for _ in range(50):
        q = _random_q(chain, rng)
        _set_q(mjcf, data, chain.arm_joint_names, q)
        T_flange = _mjcf_tcp(mjcf, data) @ T_tcp_flange
        np.testing.assert_allclose(T_flange, ur5e.fk_dh(q), atol=TOL)
        body = data.body("flange")
        np.testing.assert_allclose(_T(body.xpos, body.xmat), ur5e.fk_dh(q), atol=TOL)


def test_fr3_mjcf_tcp_equals_core_kinematics(models):
    chain, mjcf, _ = models["fr3"]
    data = mujoco.MjData(mjcf)
    rng = np.random.default_rng(2)
    for _ in range(50):
        q = _random_q(chain, rng)
        _set_q(mjcf, data, chain.arm_joint_names, q)
        np.testing.assert_allclose(
            _mjcf_tcp(mjcf, data), frames.pose_to_mat(kin.fk_tcp(q)), atol=TOL
        )
        body = data.body("flange")
        np.testing.assert_allclose(_T(body.xpos, body.xmat), kin.fk_flange_mat(q), atol=TOL)


def test_so101_reach_is_about_40_cm():
    chain = so101_chain()
    rng = np.random.default_rng(3)
    reach = max(
        np.linalg.norm(ch.fk_tcp_mat(chain, _random_q(chain, rng))[:2, 3]) for _ in range(3000)
    )
    assert 0.35 < reach < 0.45


def test_committed_model_files_are_current():
    texts = model_texts()
    assert sorted(texts) == sorted(f"{k}.{e}" for k in KINDS for e in ("xml", "urdf"))
    for name, text in texts.items():
        path = MODELS_DIR / name
        assert path.is_file(), f"{path} is missing: run python -m sim.arms.export sim/arms/models"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} is stale: run python -m sim.arms.export sim/arms/models"
        )
        # the committed files load by path too
        mujoco.MjModel.from_xml_path(str(path))


@pytest.mark.parametrize("kind", KINDS)
def test_home_keyframe_puts_the_tool_down_over_the_table(models, kind):
    chain, mjcf, _ = models[kind]
    data = mujoco.MjData(mjcf)
    mujoco.mj_resetDataKeyframe(mjcf, data, mjcf.key("home").id)
    mujoco.mj_kinematics(mjcf, data)
    T = _mjcf_tcp(mjcf, data)
    np.testing.assert_allclose(T, ch.fk_tcp_mat(chain, chain.home_rad), atol=TOL)
    x, y, z = T[:3, 3]
    assert x > 0.15 and abs(y) < 0.2 and 0.05 < z < 0.5  # in front of the base, above z = 0
    # tool z axis pointing down
    np.testing.assert_allclose(T[:3, 2], [0.0, 0.0, -1.0], atol=TOL)


def test_home_poses_of_fr3_and_ur5e():
    T = ch.fk_tcp_mat(fr3_chain(), fr3_chain().home_rad)
    np.testing.assert_allclose(
        T, frames.pose_to_mat(kin.fk_tcp(np.array(kin.FR3_HOME_RAD))), atol=TOL
    )
    u = ur5e.ur5e_chain()
    T = ch.fk_tcp_mat(u, u.home_rad)
    assert 0.4 <= T[0, 3] <= 0.5 and 0.2 <= T[2, 3] <= 0.3
    # same tool orientation as the FR3 home: x along base +x, z down
    np.testing.assert_allclose(T[:3, :3], np.diag([1.0, -1.0, -1.0]), atol=TOL)


def test_inverted_joint_limits_raise_a_clear_error():
    joint = ur5e.ur5e_chain().joints[2]
    with pytest.raises(ValueError, match=r"elbow_joint.*lower limit .* not below upper limit"):
        dataclasses.replace(joint, lower_rad=1.0, upper_rad=-1.0)


def test_home_outside_the_limits_raises():
    chain = so101_chain()
    with pytest.raises(ValueError, match="outside"):
        dataclasses.replace(chain, home_rad=(0.0, 0.0, 0.0, 3.0, 0.0))


@pytest.mark.parametrize("kind", KINDS)
def test_committed_urdf_tcp_in_pinocchio_equals_the_chain(kind):
    """An independent URDF parser (pinocchio, when installed) reads the same kinematics."""
    pin = pytest.importorskip("pinocchio")
    chain = ARM_CHAINS[kind]()
    model = pin.buildModelFromUrdf(str(MODELS_DIR / f"{kind}.urdf"))
    data = model.createData()
    tcp = model.getFrameId("tcp")
    idx_q = [model.joints[model.getJointId(n)].idx_q for n in chain.arm_joint_names]
    rng = np.random.default_rng(4)
    for _ in range(50):
        q = _random_q(chain, rng)
        q_full = pin.neutral(model)
        q_full[idx_q] = q
        pin.framesForwardKinematics(model, data, q_full)
        np.testing.assert_allclose(data.oMf[tcp].homogeneous, ch.fk_tcp_mat(chain, q), atol=TOL)
