"""The numpy FR3 forward kinematics equals the twin's MuJoCo ``tcp`` site."""

import mujoco
import numpy as np
import pytest

from robot_rl.core import frames
from robot_rl.core import kinematics as kin
from sim.model import build_mjcf


@pytest.fixture(scope="module")
def mj():
    model = mujoco.MjModel.from_xml_string(build_mjcf())
    return model, mujoco.MjData(model)


def test_home_pose_points_down_in_front_of_the_base():
    T = kin.fk_tcp(np.array(kin.FR3_HOME_RAD))
    np.testing.assert_allclose(T[:3], [0.3069, 0.0, 0.4869], atol=1e-4)
    # TCP z axis along -z of the base (pointing down).
    R = frames.quat_to_mat(T[3:7])
    np.testing.assert_allclose(R[:, 2], [0, 0, -1], atol=1e-9)


def test_fk_matches_mujoco_tcp_site_at_random_configurations(mj):
    model, data = mj
    sid = model.site("tcp").id
    adr = [model.joint(f"joint{i + 1}").qposadr[0] for i in range(7)]
    rng = np.random.default_rng(0)
    for _ in range(50):
        q = rng.uniform(kin.FR3_JOINT_LOW_RAD, kin.FR3_JOINT_HIGH_RAD)
        data.qpos[adr] = q
        mujoco.mj_kinematics(model, data)
        T = kin.fk_tcp(q)
        np.testing.assert_allclose(data.site_xpos[sid], T[:3], atol=1e-9)
        R_fk = frames.quat_to_mat(T[3:7])
        np.testing.assert_allclose(data.site_xmat[sid].reshape(3, 3), R_fk, atol=1e-9)


def test_flange_to_tcp_offset():
    q = np.array(kin.FR3_HOME_RAD) + 0.3
    T_f = frames.pose_to_mat(kin.fk_flange(q))
    T_t = frames.pose_to_mat(kin.fk_tcp(q))
    offset = np.linalg.inv(T_f) @ T_t
    np.testing.assert_allclose(offset[:3, 3], [0, 0, kin.TCP_OFFSET_M], atol=1e-12)
    yaw = np.arctan2(offset[1, 0], offset[0, 0])
    assert yaw == pytest.approx(kin.HAND_YAW_RAD)


def test_fk_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"\(7,\)"):
        kin.fk_tcp(np.zeros(6))
