"""Rotation and mass-property helpers for :mod:`sim.arms.chain` (pure numpy).

Roll-pitch-yaw follows URDF: fixed axes, ``R = Rz(yaw) Ry(pitch) Rx(roll)``, radians. Inertias
are those MuJoCo computes for its primitive geoms, so a URDF ``<inertial>`` written from them
matches the MJCF geom with the same mass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_SEGMENT_M = 1e-3
"""A link geom shorter than this (metres) is written as a sphere instead of a capsule."""


def rpy_to_mat(rpy_rad: Sequence[float]) -> np.ndarray:
    """(3, 3) rotation of URDF roll-pitch-yaw ``R = Rz(yaw) Ry(pitch) Rx(roll)``, rad."""
    r, p, y = (float(v) for v in rpy_rad)
    cr, sr = math.cos(r), math.sin(r)
    cp, sp = math.cos(p), math.sin(p)
    cy, sy = math.cos(y), math.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def mat_to_rpy(R: np.ndarray) -> np.ndarray:
    """URDF roll-pitch-yaw (3,) of a (3, 3) rotation; roll = 0 at pitch = +-pi/2 (gimbal lock)."""
    R = np.asarray(R, dtype=np.float64)
    cp = math.hypot(R[0, 0], R[1, 0])
    pitch = math.atan2(-R[2, 0], cp)
    if cp > 1e-12:
        return np.array([math.atan2(R[2, 1], R[2, 2]), pitch, math.atan2(R[1, 0], R[0, 0])])
    return np.array([0.0, pitch, math.atan2(-R[0, 1], R[1, 1])])


def axis_angle_mat(axis: Sequence[float], angle_rad: float) -> np.ndarray:
    """(3, 3) rotation by ``angle_rad`` about the unit vector ``axis`` (Rodrigues)."""
    k = np.asarray(axis, dtype=np.float64)
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.eye(3) * c + s * K + (1.0 - c) * np.outer(k, k)


def z_to_axis_angle(u: np.ndarray) -> tuple[np.ndarray, float]:
    """Axis and angle of a rotation taking +z to the unit vector ``u``."""
    z = np.array([0.0, 0.0, 1.0])
    c = np.cross(z, u)
    s = float(np.linalg.norm(c))
    if s < 1e-12:
        return np.array([1.0, 0.0, 0.0]), 0.0 if u[2] > 0 else math.pi
    return c / s, math.atan2(s, float(u[2]))


def capsule_inertia(
    mass_kg: float, radius_m: float, p0: np.ndarray, p1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Centre of mass (3,) and inertia (3, 3) about it of a solid capsule (or sphere).

    The capsule has hemispherical caps centred at ``p0`` and ``p1`` (a sphere at ``p0`` when
    they are closer than :data:`MIN_SEGMENT_M`); the mass splits between the cylinder and the
    caps by volume, as MuJoCo's geom inertia does. Frame: that of ``p0`` and ``p1``.
    """
    m, r = mass_kg, radius_m
    seg = p1 - p0
    h = float(np.linalg.norm(seg))
    if h < MIN_SEGMENT_M:
        return np.array(p0, dtype=np.float64), np.eye(3) * (0.4 * m * r * r)
    m_sph = m * 4.0 * r / (4.0 * r + 3.0 * h)
    m_cyl = m - m_sph
    i_axis = m_cyl * r * r / 2.0 + m_sph * 0.4 * r * r
    i_perp = (
        m_cyl * (3.0 * r * r + h * h) / 12.0
        + m_sph * 0.4 * r * r
        + m_sph * h * (3.0 * r + 2.0 * h) / 8.0
    )
    u = seg / h
    inertia = i_perp * np.eye(3) + (i_axis - i_perp) * np.outer(u, u)
    return 0.5 * (p0 + p1), inertia


def cylinder_inertia(mass_kg: float, radius_m: float, height_m: float) -> np.ndarray:
    """(3, 3) inertia about its centre of a solid cylinder with its axis along z."""
    m, r, h = mass_kg, radius_m, height_m
    i_perp = m * (3.0 * r * r + h * h) / 12.0
    return np.diag([i_perp, i_perp, m * r * r / 2.0])
