"""Frame helpers: the declared (w, x, y, z) convention, inverses and round trips."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from robot_rl.core import frames

finite = st.floats(-3.0, 3.0, allow_nan=False)
vec3 = st.tuples(finite, finite, finite).map(np.array)
quat = (
    st.tuples(finite, finite, finite, finite)
    .filter(lambda q: np.linalg.norm(q) > 1e-2)
    .map(lambda q: frames.quat_normalize(np.array(q)))
)


def test_convention_is_scalar_first():
    # 90 degrees about z: w = cos(45), z = sin(45).
    q = frames.quat_from_rotvec(np.array([0.0, 0.0, np.pi / 2]))
    np.testing.assert_allclose(q, [np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)], atol=1e-12)
    R = frames.quat_to_mat(q)
    np.testing.assert_allclose(R @ [1, 0, 0], [0, 1, 0], atol=1e-12)


def test_ros_order_round_trip():
    q = frames.quat_normalize(np.array([0.9, 0.1, -0.3, 0.2]))
    xyzw = frames.quat_to_xyzw(q)
    assert xyzw[3] == q[0]
    np.testing.assert_allclose(frames.quat_from_xyzw(xyzw), q)


def test_zero_quaternion_is_an_error():
    try:
        frames.quat_normalize(np.zeros(4))
    except ValueError as e:
        assert "(w, x, y, z)" in str(e)
    else:
        raise AssertionError("zero quaternion accepted")


@settings(max_examples=200, deadline=None)
@given(q=quat)
def test_matrix_round_trip(q):
    back = frames.mat_to_quat(frames.quat_to_mat(q))
    assert abs(abs(float(np.dot(back, q))) - 1.0) < 1e-9  # same rotation
    assert back[0] >= 0


@settings(max_examples=200, deadline=None)
@given(v=vec3)
def test_rotvec_round_trip(v):
    angle = np.linalg.norm(v)
    if angle > np.pi - 1e-3:  # rotation vectors are unique only for angles below pi
        v = v / angle * (np.pi - 1e-3)
    np.testing.assert_allclose(frames.quat_to_rotvec(frames.quat_from_rotvec(v)), v, atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(p1=vec3, q1=quat, p2=vec3, q2=quat)
def test_pose_compose_inverse(p1, q1, p2, q2):
    T_a_b = frames.pose(p1, q1)
    T_b_c = frames.pose(p2, q2)
    T_a_c = frames.pose_mul(T_a_b, T_b_c)
    np.testing.assert_allclose(
        frames.pose_to_mat(T_a_c), frames.pose_to_mat(T_a_b) @ frames.pose_to_mat(T_b_c), atol=1e-9
    )
    back = frames.pose_mul(frames.pose_inv(T_a_b), T_a_c)
    np.testing.assert_allclose(frames.pose_to_mat(back), frames.pose_to_mat(T_b_c), atol=1e-9)


@settings(max_examples=200, deadline=None)
@given(q_target=quat, q_current=quat)
def test_quat_error_recovers_target(q_target, q_current):
    e = frames.quat_error(q_target, q_current)
    q = frames.quat_mul(frames.quat_from_rotvec(e), q_current)
    assert abs(abs(float(np.dot(frames.quat_normalize(q), q_target))) - 1.0) < 1e-9


def test_euler_xyz_matches_matrices():
    rpy = np.array([0.3, -0.2, 1.1])
    Rx = frames.quat_to_mat(frames.quat_from_rotvec(np.array([rpy[0], 0, 0])))
    Ry = frames.quat_to_mat(frames.quat_from_rotvec(np.array([0, rpy[1], 0])))
    Rz = frames.quat_to_mat(frames.quat_from_rotvec(np.array([0, 0, rpy[2]])))
    np.testing.assert_allclose(
        frames.quat_to_mat(frames.quat_from_euler_xyz(rpy)), Rz @ Ry @ Rx, atol=1e-12
    )
