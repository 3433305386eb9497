"""Forward kinematics of a Franka FR3 arm from its modified (Craig) Denavit-Hartenberg table.

Pure numpy: the real Franka driver uses it to compute the TCP pose from joint positions, and the
MuJoCo twin builds its kinematic tree from the same table (so the twin's ``tcp`` site equals
:func:`fk_tcp` exactly).

Convention (Craig, "modified" DH): the transform from frame ``i-1`` to frame ``i`` is
``RotX(alpha_i) * TransX(a_i) * RotZ(q_i) * TransZ(d_i)``. After joint 7: the flange is
``TransZ(FLANGE_D_M)``, the hand is rotated ``HAND_YAW_RAD`` about the flange z axis, and the TCP
is ``TCP_OFFSET_M`` further along the hand z axis (between the fingertips).
"""

from __future__ import annotations

import numpy as np

from robot_rl.core import frames

# (a_m, d_m, alpha_rad) per joint, modified DH (Craig).
FR3_DH: tuple[tuple[float, float, float], ...] = (
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -np.pi / 2),
    (0.0, 0.316, np.pi / 2),
    (0.0825, 0.0, np.pi / 2),
    (-0.0825, 0.384, -np.pi / 2),
    (0.0, 0.0, np.pi / 2),
    (0.088, 0.0, np.pi / 2),
)
FLANGE_D_M = 0.107
"""Flange offset along joint 7's z axis, metres."""
HAND_YAW_RAD = -np.pi / 4
"""Rotation of the hand about the flange z axis, rad."""
TCP_OFFSET_M = 0.1034
"""TCP offset beyond the flange along the hand z axis, metres."""

FR3_JOINT_LOW_RAD = (-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159)
FR3_JOINT_HIGH_RAD = (2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159)
FR3_TORQUE_LIMIT_NM = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
FR3_HOME_RAD = (0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4)


def dh_link_transform(a_m: float, d_m: float, alpha_rad: float, q_rad: float) -> np.ndarray:
    """(4, 4) ``RotX(alpha) TransX(a) RotZ(q) TransZ(d)``."""
    ca, sa = np.cos(alpha_rad), np.sin(alpha_rad)
    cq, sq = np.cos(q_rad), np.sin(q_rad)
    return np.array(
        [
            [cq, -sq, 0.0, a_m],
            [ca * sq, ca * cq, -sa, -sa * d_m],
            [sa * sq, sa * cq, ca, ca * d_m],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


def _check_q(q_rad: np.ndarray) -> np.ndarray:
    q = np.asarray(q_rad, dtype=np.float64)
    if q.shape != (7,):
        raise ValueError(f"joint positions must have shape (7,), got {q.shape}")
    return q


def fk_matrices(q_rad: np.ndarray) -> list[np.ndarray]:
    """(4, 4) ``T_base_link_i`` for i = 1..7 (joint frames) at joint positions ``q_rad`` (7,)."""
    q = _check_q(q_rad)
    T = np.eye(4)
    out = []
    for (a, d, alpha), qi in zip(FR3_DH, q, strict=True):
        T = T @ dh_link_transform(a, d, alpha, float(qi))
        out.append(T)
    return out


def T_flange_tcp_mat() -> np.ndarray:
    """(4, 4) constant transform from the flange to the TCP (hand yaw, then TCP offset)."""
    c, s = np.cos(HAND_YAW_RAD), np.sin(HAND_YAW_RAD)
    T = np.eye(4)
    T[:2, :2] = [[c, -s], [s, c]]
    T[2, 3] = TCP_OFFSET_M
    return T


def fk_flange_mat(q_rad: np.ndarray) -> np.ndarray:
    """(4, 4) ``T_base_flange``."""
    T = fk_matrices(q_rad)[-1].copy()
    T_7_f = np.eye(4)
    T_7_f[2, 3] = FLANGE_D_M
    return T @ T_7_f


def fk_flange(q_rad: np.ndarray) -> np.ndarray:
    """(7,) ``T_base_flange`` pose ``[x, y, z, qw, qx, qy, qz]``."""
    return frames.mat_to_pose(fk_flange_mat(q_rad))


def fk_tcp(q_rad: np.ndarray) -> np.ndarray:
    """(7,) ``T_base_tcp`` pose ``[x, y, z, qw, qx, qy, qz]``."""
    return frames.mat_to_pose(fk_flange_mat(q_rad) @ T_flange_tcp_mat())
