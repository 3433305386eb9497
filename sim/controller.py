"""Cartesian impedance controller with reference limiting, run at every physics step.

    e     = [clip(p_target - p, +-max_error_m), clip(rotvec(q_target q^-1), +-max_error_rad)]
    F     = Kp e - Kd v                       # (6,) commanded wrench at the TCP, base frame
    tau   = J^T F + N (Kp_null (q_home - q) - Kd_null qd) + qfrc_bias
    tau   = clip(tau, -torque_limit, torque_limit)

``J`` is the (6, n) TCP site Jacobian of the n arm joints (linear rows first), ``v = J qd``
the TCP twist, ``N = I - J^T (J J^T + eps I)^-1 J`` the torque null-space projector, and
``qfrc_bias`` MuJoCo's gravity + Coriolis/centrifugal torques. Clipping the pose error per axis
(as SERL's Franka impedance controller does for contact-rich RL) bounds the commanded force in
contact by about ``kp_trans_n_per_m * max_error_m`` per axis, whatever target a policy sends.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.core import kinematics as kin


@dataclass(frozen=True)
class ControllerConfig:
    """Gains and limits of the Cartesian impedance controller.

    Attributes:
        kp_trans_n_per_m: Translational stiffness, N/m.
        kp_rot_nm_per_rad: Rotational stiffness, N m/rad.
        damping_ratio: Damping as a multiple of ``2 sqrt(Kp)`` (unit-mass critical damping).
        max_error_m: Per-axis clip of the position error, metres (force cap ``Kp * this``).
        max_error_rad: Per-axis clip of the rotation-vector error, rad.
        kp_null_nm_per_rad: Null-space stiffness pulling the elbow towards ``home_q_rad``.
        kd_null_nms_per_rad: Null-space joint damping, N m s/rad.
        home_q_rad: (N,) null-space posture.
        torque_limit_nm: (N,) joint torque limits, N m.
    """

    kp_trans_n_per_m: float = 2000.0
    kp_rot_nm_per_rad: float = 150.0
    damping_ratio: float = 1.0
    max_error_m: float = 0.02
    max_error_rad: float = 0.15
    kp_null_nm_per_rad: float = 10.0
    kd_null_nms_per_rad: float = 2.0 * np.sqrt(10.0)
    home_q_rad: tuple[float, ...] = kin.FR3_HOME_RAD
    torque_limit_nm: tuple[float, ...] = kin.FR3_TORQUE_LIMIT_NM

    def __post_init__(self) -> None:
        for name in ("kp_trans_n_per_m", "kp_rot_nm_per_rad", "max_error_m", "max_error_rad"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.damping_ratio < 0 or self.kp_null_nm_per_rad < 0 or self.kd_null_nms_per_rad < 0:
            raise ValueError("damping_ratio and the null-space gains must be >= 0")
        if len(self.home_q_rad) != len(self.torque_limit_nm) or not self.home_q_rad:
            raise ValueError(
                f"home_q_rad ({len(self.home_q_rad)}) and torque_limit_nm "
                f"({len(self.torque_limit_nm)}) must have one entry per arm joint"
            )

    @property
    def kd_trans_ns_per_m(self) -> float:
        return 2.0 * self.damping_ratio * float(np.sqrt(self.kp_trans_n_per_m))

    @property
    def kd_rot_nms_per_rad(self) -> float:
        return 2.0 * self.damping_ratio * float(np.sqrt(self.kp_rot_nm_per_rad))

    @property
    def max_force_n(self) -> float:
        """Per-axis bound of the stiffness force, ``kp_trans_n_per_m * max_error_m``, N."""
        return self.kp_trans_n_per_m * self.max_error_m


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """A slice for a contiguous increasing index array, else the array itself."""
    if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
        return slice(int(idx[0]), int(idx[0]) + len(idx))
    return idx


class CartesianImpedanceController:
    """Computes arm torques towards a TCP target; writes them into ``data.ctrl``.

    Call :meth:`compute` after ``mj_step1`` (kinematics and ``qfrc_bias`` current) and before
    ``mj_step2``. Arrays are preallocated; one call costs a Jacobian and a 6x6 solve.

    Args:
        model: The compiled model.
        data: Its data.
        config: Gains and limits.
        site_id: The TCP site.
        dof_adr: (N,) dof addresses of the arm joints (also their qpos addresses: hinges).
        qpos_adr: (N,) qpos addresses of the arm joints.
        actuator_ids: (N,) torque motor ids, in joint order.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        config: ControllerConfig,
        site_id: int,
        dof_adr: np.ndarray,
        qpos_adr: np.ndarray,
        actuator_ids: np.ndarray,
    ) -> None:
        self.model, self.data, self.config = model, data, config
        self.site_id = site_id
        self.dof_adr = np.asarray(dof_adr, dtype=np.int64)
        self.qpos_adr = np.asarray(qpos_adr, dtype=np.int64)
        self.actuator_ids = np.asarray(actuator_ids, dtype=np.int64)
        n = len(self.dof_adr)
        if not len(self.qpos_adr) == len(self.actuator_ids) == len(config.home_q_rad) == n:
            raise ValueError(
                f"{n} arm dofs, {len(self.qpos_adr)} qpos, {len(self.actuator_ids)} motors and "
                f"{len(config.home_q_rad)} home joints: give the controller one of each per joint"
            )
        c = config
        self._kp = np.array([c.kp_trans_n_per_m] * 3 + [c.kp_rot_nm_per_rad] * 3)
        self._kd = np.array([c.kd_trans_ns_per_m] * 3 + [c.kd_rot_nms_per_rad] * 3)
        self._emax = np.array([c.max_error_m] * 3 + [c.max_error_rad] * 3)
        self._home = np.asarray(c.home_q_rad, dtype=np.float64)
        self._tau_max = np.asarray(c.torque_limit_nm, dtype=np.float64)
        self._neg_emax, self._neg_tau_max = -self._emax, -self._tau_max
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._J = np.zeros((6, n))
        self._q_site = np.zeros(4)
        self._q_conj = np.zeros(4)
        self._q_err = np.zeros(4)
        self._e = np.zeros(6)
        self._e_rot = np.zeros(3)
        self._y = np.zeros(6)
        self._JJt = np.zeros((6, 6))
        self._eps_eye = 1e-4 * np.eye(6)
        # Contiguous index ranges become slices (views, no fancy-indexing copies).
        self._dofs = _as_slice(self.dof_adr)
        self._qadr = _as_slice(self.qpos_adr)
        self._acts = _as_slice(self.actuator_ids)
        self.target_pos = np.zeros(3)
        self.target_quat = np.array([1.0, 0.0, 0.0, 0.0])
        self.last_wrench = np.zeros(6)
        """(6,) last commanded TCP wrench ``F = Kp e - Kd v`` (base frame), [N, N m]."""
        self.last_torque = np.zeros(n)
        """(N,) last joint torques sent (after clipping), N m."""

    def set_target(self, pose: np.ndarray) -> None:
        """Track ``T_base_tcp`` target ``pose`` (7,) from now on."""
        self.target_pos[:] = pose[:3]
        q = np.asarray(pose[3:7], dtype=np.float64)
        self.target_quat[:] = q / np.linalg.norm(q)

    def pose_error(self) -> np.ndarray:
        """(6,) unclipped ``[p_target - p, rotvec(q_target q^-1)]`` in the base frame."""
        e = np.empty(6)
        self._pose_error(e)
        return e

    def _pose_error(self, e: np.ndarray) -> None:
        d = self.data
        np.subtract(self.target_pos, d.site_xpos[self.site_id], out=e[:3])
        mujoco.mju_mat2Quat(self._q_site, d.site_xmat[self.site_id])
        mujoco.mju_negQuat(self._q_conj, self._q_site)
        mujoco.mju_mulQuat(self._q_err, self.target_quat, self._q_conj)
        if self._q_err[0] < 0:
            self._q_err *= -1.0
        mujoco.mju_quat2Vel(self._e_rot, self._q_err, 1.0)
        e[3:] = self._e_rot

    def compute(self) -> np.ndarray:
        """Torques (N,) for the current state; also written to ``data.ctrl``."""
        m, d, c = self.model, self.data, self.config
        dofs, qadr = self._dofs, self._qadr
        mujoco.mj_jacSite(m, d, self._jacp, self._jacr, self.site_id)
        J = self._J
        J[:3] = self._jacp[:, dofs]
        J[3:] = self._jacr[:, dofs]
        qd = d.qvel[dofs]
        e = self._e
        self._pose_error(e)
        np.minimum(np.maximum(e, self._neg_emax, out=e), self._emax, out=e)  # clip, fast
        F = self._kp * e - self._kd * (J @ qd)
        tau = J.T @ F
        # Null-space posture torque, projected: tau0 - J^T (J J^T + eps)^-1 J tau0.
        tau0 = c.kp_null_nm_per_rad * (self._home - d.qpos[qadr]) - c.kd_null_nms_per_rad * qd
        JJt = self._JJt
        np.matmul(J, J.T, out=JJt)
        JJt += self._eps_eye
        mujoco.mju_cholFactor(JJt, 0.0)
        mujoco.mju_cholSolve(self._y, JJt, J @ tau0)
        tau += tau0 - J.T @ self._y
        tau += d.qfrc_bias[dofs]
        np.minimum(np.maximum(tau, self._neg_tau_max, out=tau), self._tau_max, out=tau)
        d.ctrl[self._acts] = tau
        self.last_wrench[:] = F
        self.last_torque[:] = tau
        return tau
