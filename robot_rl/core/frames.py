"""Frame and rotation helpers with one declared quaternion convention.

Convention (everywhere in robot_rl): quaternions are **scalar-first** ``(w, x, y, z)``, unit
norm, Hamilton product, and canonicalised to ``w >= 0`` when they leave a helper that
produces them (``q`` and ``-q`` are the same rotation). MuJoCo uses the same order. ROS
messages are ``(x, y, z, w)``: convert with :func:`quat_from_xyzw` / :func:`quat_to_xyzw` at the
ROS edge only.

A pose is a 7-vector ``[x, y, z, qw, qx, qy, qz]`` (metres, unit quaternion). ``T_a_b`` names the
pose of frame ``b`` expressed in frame ``a``. Rotation vectors (axis * angle, radians) are used
for small rotations (actions, errors).
"""

from __future__ import annotations

import numpy as np

_EPS = 1e-12


def quat_normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternion with ``w >= 0`` (first non-zero component positive when ``w == 0``).

    Raises on a zero or non-finite quaternion.
    """
    q = np.asarray(q, dtype=np.float64)
    n = float(np.linalg.norm(q))
    if not np.isfinite(n) or n < _EPS:
        raise ValueError(f"quaternion {q} is zero or not finite; expected (w, x, y, z) unit norm")
    q = q / n
    if q[0] < 0 or (q[0] == 0 and q[np.flatnonzero(q)[0]] < 0):
        q = -q
    return q


def quat_mul(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Hamilton product ``q1 * q2`` (apply ``q2`` first, then ``q1``). Not canonicalised."""
    w1, x1, y1, z1 = q1
    w2, x2, y2, z2 = q2
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ],
        dtype=np.float64,
    )


def quat_conj(q: np.ndarray) -> np.ndarray:
    """Conjugate (the inverse of a unit quaternion)."""
    return np.array([q[0], -q[1], -q[2], -q[3]], dtype=np.float64)


def quat_from_xyzw(q_xyzw: np.ndarray) -> np.ndarray:
    """ROS ``(x, y, z, w)`` -> robot_rl ``(w, x, y, z)``."""
    x, y, z, w = q_xyzw
    return quat_normalize(np.array([w, x, y, z]))


def quat_to_xyzw(q: np.ndarray) -> np.ndarray:
    """robot_rl ``(w, x, y, z)`` -> ROS ``(x, y, z, w)``."""
    return np.array([q[1], q[2], q[3], q[0]], dtype=np.float64)


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a unit quaternion (w, x, y, z)."""
    w, x, y, z = quat_normalize(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def mat_to_quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z), ``w >= 0``, of a rotation matrix (3, 3)."""
    R = np.asarray(R, dtype=np.float64)
    tr = np.trace(R)
    if tr > 0:
        s = np.sqrt(tr + 1.0) * 2
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2]) * 2
        q = [(R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s]
    elif R[1, 1] > R[2, 2]:
        s = np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2]) * 2
        q = [(R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s]
    else:
        s = np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1]) * 2
        q = [(R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s]
    return quat_normalize(np.array(q))


def quat_from_rotvec(v: np.ndarray) -> np.ndarray:
    """Quaternion of a rotation vector (axis * angle, radians)."""
    v = np.asarray(v, dtype=np.float64)
    angle = float(np.linalg.norm(v))
    if angle < 1e-9:
        q = np.array([1.0, 0.5 * v[0], 0.5 * v[1], 0.5 * v[2]])
        return quat_normalize(q)
    axis = v / angle
    return quat_normalize(np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis]))


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """Rotation vector (axis * angle, angle in [0, pi]) of a unit quaternion."""
    q = quat_normalize(q)
    s = float(np.linalg.norm(q[1:]))
    if s < 1e-9:
        return 2.0 * q[1:]
    angle = 2.0 * np.arctan2(s, q[0])
    return q[1:] / s * angle


def quat_from_euler_xyz(rpy: np.ndarray) -> np.ndarray:
    """Quaternion from extrinsic roll-pitch-yaw (rotate about x, then y, then z; fixed axes)."""
    r, p, y = rpy
    qx = quat_from_rotvec(np.array([r, 0.0, 0.0]))
    qy = quat_from_rotvec(np.array([0.0, p, 0.0]))
    qz = quat_from_rotvec(np.array([0.0, 0.0, y]))
    return quat_normalize(quat_mul(qz, quat_mul(qy, qx)))


def quat_error(q_target: np.ndarray, q_current: np.ndarray) -> np.ndarray:
    """Rotation vector ``e`` in the base frame with ``q_target = exp(e) * q_current``."""
    return quat_to_rotvec(quat_mul(q_target, quat_conj(q_current)))


def pose(position: np.ndarray, quat: np.ndarray) -> np.ndarray:
    """Pack a pose 7-vector ``[x, y, z, qw, qx, qy, qz]``."""
    return np.concatenate([np.asarray(position, dtype=np.float64), quat_normalize(quat)])


def pose_to_mat(p: np.ndarray) -> np.ndarray:
    """Homogeneous matrix (4, 4) of a pose 7-vector."""
    T = np.eye(4)
    T[:3, :3] = quat_to_mat(p[3:7])
    T[:3, 3] = p[:3]
    return T


def mat_to_pose(T: np.ndarray) -> np.ndarray:
    """Pose 7-vector of a homogeneous matrix (4, 4)."""
    return pose(T[:3, 3], mat_to_quat(T[:3, :3]))


def pose_mul(T_a_b: np.ndarray, T_b_c: np.ndarray) -> np.ndarray:
    """Compose poses: ``T_a_c = T_a_b * T_b_c``."""
    R_a_b = quat_to_mat(T_a_b[3:7])
    p = T_a_b[:3] + R_a_b @ T_b_c[:3]
    return pose(p, quat_mul(T_a_b[3:7], T_b_c[3:7]))


def pose_inv(T_a_b: np.ndarray) -> np.ndarray:
    """Inverse pose: ``T_b_a``."""
    q_inv = quat_conj(quat_normalize(T_a_b[3:7]))
    R_b_a = quat_to_mat(q_inv)
    return pose(-R_b_a @ T_a_b[:3], q_inv)


def apply_delta(T_base_ee: np.ndarray, dpos_m: np.ndarray, drot_rad: np.ndarray) -> np.ndarray:
    """Move a pose by a base-frame translation and a base-frame rotation vector.

    The rotation is applied about the end-effector's own origin:
    ``q_new = exp(drot) * q``, ``p_new = p + dpos``.
    """
    q_new = quat_mul(quat_from_rotvec(drot_rad), T_base_ee[3:7])
    return pose(T_base_ee[:3] + dpos_m, q_new)
