"""Joint position servos, run at every physics step: how a position-controlled arm holds its
joints (a UR under ros2_control's position interface, the STS3215 servos of an SO-101).

Each joint has a motor (the servo's own shaft, an internal state) that follows the commanded
joint target at a bounded speed and ignores changes smaller than its deadband, and a gear train
between motor and joint with backlash and a stiffness::

    m    <- m + clip(q_goal - m, +-vel_max * dt)      if |q_goal - m| > deadband, else m
    gap  = m - q
    e    = gap - clip(gap, -backlash / 2, +backlash / 2)   # zero while the gears float in play
    tau  = clip(kp e - kd qd + g(q) * gravity_compensation, +-torque_limit)

``g(q)`` is MuJoCo's ``qfrc_bias`` (gravity + Coriolis): an industrial arm's controller
compensates it, a hobby servo does not (it sags under load by ``g / kp``, and a load above the
torque limit stalls it). Torques are written to the arm's torque motors (``data.ctrl``), the
same actuators the Cartesian impedance controller drives.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class JointServoConfig:
    """Gains and imperfections of the joint position servos (one value for all joints, or one
    per joint).

    Attributes:
        kp_nm_per_rad: Stiffness from motor to joint, N m/rad.
        kd_nms_per_rad: Joint damping of the servo, N m s/rad.
        vel_max_rad_s: Motor speed limit, rad/s.
        deadband_rad: The motor does not move for a goal closer than this, rad.
        backlash_rad: Total play of the gear train, rad (the joint floats within it).
        gravity_compensation: Add MuJoCo's bias torque (gravity, Coriolis) as a feed-forward.
    """

    kp_nm_per_rad: float | tuple[float, ...] = 2000.0
    kd_nms_per_rad: float | tuple[float, ...] = 60.0
    vel_max_rad_s: float | tuple[float, ...] = 3.14
    deadband_rad: float | tuple[float, ...] = 0.0
    backlash_rad: float | tuple[float, ...] = 0.0
    gravity_compensation: bool = True

    def __post_init__(self) -> None:
        for name in ("kp_nm_per_rad", "vel_max_rad_s"):
            if np.any(np.asarray(getattr(self, name)) <= 0):
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("kd_nms_per_rad", "deadband_rad", "backlash_rad"):
            if np.any(np.asarray(getattr(self, name)) < 0):
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def per_joint(self, name: str, n: int) -> np.ndarray:
        """(n,) values of field ``name``.

        Raises:
            ValueError: A tuple of another length than ``n``.
        """
        v = np.asarray(getattr(self, name), dtype=np.float64)
        if v.ndim == 0:
            return np.full(n, float(v))
        if v.shape != (n,):
            raise ValueError(f"{name} has {v.size} values for {n} joints")
        return v.copy()


class JointServoController:
    """Drives the arm's torque motors so that each joint follows its position goal as a servo
    would (see the module docstring). Call :meth:`compute` after ``mj_step1``.

    Args:
        model: The compiled model.
        data: Its data.
        config: Servo gains and imperfections.
        dof_adr: (N,) dof addresses of the arm joints.
        qpos_adr: (N,) qpos addresses of the arm joints.
        actuator_ids: (N,) torque motor ids, in joint order.
        torque_limit_nm: (N,) largest torque per joint, N m.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        config: JointServoConfig,
        dof_adr: np.ndarray,
        qpos_adr: np.ndarray,
        actuator_ids: np.ndarray,
        torque_limit_nm: np.ndarray,
    ) -> None:
        self.model, self.data, self.config = model, data, config
        self.dof_adr = np.asarray(dof_adr, dtype=np.int64)
        self.qpos_adr = np.asarray(qpos_adr, dtype=np.int64)
        self.actuator_ids = np.asarray(actuator_ids, dtype=np.int64)
        n = len(self.dof_adr)
        self._kp = config.per_joint("kp_nm_per_rad", n)
        self._kd = config.per_joint("kd_nms_per_rad", n)
        self._step = config.per_joint("vel_max_rad_s", n) * float(model.opt.timestep)
        self._deadband = config.per_joint("deadband_rad", n)
        self._half_play = 0.5 * config.per_joint("backlash_rad", n)
        self._tau_max = np.asarray(torque_limit_nm, dtype=np.float64)
        if self._tau_max.shape != (n,):
            raise ValueError(f"torque_limit_nm has {self._tau_max.size} values for {n} joints")
        self.goal = data.qpos[self.qpos_adr].copy()
        """(N,) joint position goals, rad."""
        self.motor = self.goal.copy()
        """(N,) motor (servo shaft) positions, rad."""
        self.last_torque = np.zeros(n)
        """(N,) last joint torques sent (after clipping), N m."""

    def set_goal(self, q_rad: np.ndarray) -> None:
        """Joint position goals (N,), rad, from now on."""
        self.goal[:] = q_rad

    def settle(self) -> None:
        """Motors at the measured joints and goals there (after a teleport): nothing moves."""
        self.motor[:] = self.data.qpos[self.qpos_adr]
        self.goal[:] = self.motor

    def compute(self) -> np.ndarray:
        """Torques (N,) for the current state; also written to ``data.ctrl``."""
        d = self.data
        q = d.qpos[self.qpos_adr]
        err = self.goal - self.motor
        move = np.abs(err) > self._deadband
        self.motor += np.where(move, np.clip(err, -self._step, self._step), 0.0)
        gap = self.motor - q
        e = gap - np.clip(gap, -self._half_play, self._half_play)
        tau = self._kp * e - self._kd * d.qvel[self.dof_adr]
        if self.config.gravity_compensation:
            tau += d.qfrc_bias[self.dof_adr]
        np.clip(tau, -self._tau_max, self._tau_max, out=tau)
        d.ctrl[self.actuator_ids] = tau
        self.last_torque[:] = tau
        return tau
