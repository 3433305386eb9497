"""Differential inverse kinematics for arms driven in joint mode, on mink (docs/ik.md says why).

Each bridge tick turns the safety-clipped Cartesian TCP target into the next joint goal::

    v*    = argmin_v  |e_tcp(q) - J v dt|^2_W + c_post |q_home - q - v dt|^2 + damping |v|^2
            s.t.      q_low <= q + v dt <= q_high,  |v_i| <= vel_max_i      (mink's QP)
    q'    = q + v* dt

``e_tcp`` is the TCP pose error (position, rotation; weights ``position_cost`` and
``orientation_cost``: a 5-joint arm weights rotation low), ``J`` the TCP Jacobian of the arm
joints, the posture term pulls towards home in the null space, and the Levenberg-Marquardt
damping ``lm_damping`` keeps steps finite near singularities and beyond reach. The velocity
bound makes every tick's joint step at most ``vel_max_i * dt_s`` (the arm's
``joint_vel_max_rad_s`` times the tick, scaled by ``speed_scale``): no jumps, whatever the target.

Kinematics come from the arm's file (:func:`load_kinematics`): an MJCF, or a URDF compiled by
MuJoCo after its meshes are dropped (IK needs frames and joints, not shapes). The arm's joint
names and tool frame must exist in it, and the description's limits must lie within the file's:
otherwise :class:`KinematicsError` says which joint or frame and what to change.
"""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from robot_rl.core import frames
from robot_rl.core.arm import ArmDescription


class KinematicsError(ValueError):
    """The kinematics file does not match the arm description (joints, limits, tool frame)."""


@dataclass(frozen=True)
class DiffIKConfig:
    """Weights and bounds of one differential-IK tick.

    Attributes:
        dt_s: The bridge tick the IK runs at, seconds (a joint step is velocity times this).
        position_cost: Weight of the TCP position error (per metre).
        orientation_cost: Weight of the TCP rotation error (per radian); low (e.g. 0.05) for
            an arm with fewer than 6 joints, which cannot reach every orientation.
        posture_cost: Weight of the pull towards the home configuration (null space).
        lm_damping: Levenberg-Marquardt damping of the TCP task (steps stay bounded where the
            target is out of reach or the arm is singular).
        damping: Tikhonov damping on the joint velocities.
        speed_scale: Fraction of the arm's ``joint_vel_max_rad_s`` a tick may use, in (0, 1].
        solver: The QP solver (``daqp`` or ``quadprog``).
    """

    dt_s: float = 0.01
    position_cost: float = 1.0
    orientation_cost: float = 1.0
    posture_cost: float = 0.005
    lm_damping: float = 1.0
    damping: float = 1e-3
    speed_scale: float = 1.0
    solver: str = "daqp"

    def __post_init__(self) -> None:
        if not self.dt_s > 0:
            raise ValueError(f"dt_s must be positive, got {self.dt_s}")
        if not 0 < self.speed_scale <= 1:
            raise ValueError(f"speed_scale must be in (0, 1], got {self.speed_scale}")
        for name in ("position_cost", "orientation_cost", "posture_cost", "lm_damping", "damping"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.solver not in ("daqp", "quadprog"):
            raise ValueError(f"solver {self.solver!r}: choose daqp or quadprog")

    @classmethod
    def for_arm(cls, arm: ArmDescription, dt_s: float) -> DiffIKConfig:
        """The defaults for ``arm`` at a tick of ``dt_s``: full orientation weight for an arm
        that reaches every orientation (6 joints or more), 0.05 for one with fewer (it trades
        orientation for position)."""
        return cls(dt_s=dt_s, orientation_cost=1.0 if arm.num_joints >= 6 else 0.05)


def _urdf_without_meshes(text: str) -> str:
    """The URDF with ``<visual>`` and ``<collision>`` removed (their meshes often live in ROS
    packages MuJoCo cannot resolve) and fixed frames kept (``fusestatic="false"``)."""
    root = ET.fromstring(text)
    for link in root.iter("link"):
        for tag in ("visual", "collision"):
            for child in link.findall(tag):
                link.remove(child)
    for old in root.findall("mujoco"):
        root.remove(old)
    mj = ET.SubElement(root, "mujoco")
    ET.SubElement(mj, "compiler", fusestatic="false", discardvisual="true")
    return ET.tostring(root, encoding="unicode")


def load_kinematics(path: str | Path) -> mujoco.MjModel:
    """The MuJoCo model of an arm's kinematics file (``.xml`` MJCF or ``.urdf``).

    Raises:
        KinematicsError: Missing file, unknown suffix, or a file MuJoCo cannot compile (the
            message carries MuJoCo's reason).
    """
    p = Path(path)
    if not p.is_file():
        raise KinematicsError(f"kinematics file {p} does not exist")
    try:
        if p.suffix.lower() == ".urdf":
            return mujoco.MjModel.from_xml_string(_urdf_without_meshes(p.read_text()))
        if p.suffix.lower() in (".xml", ".mjcf"):
            return mujoco.MjModel.from_xml_path(str(p))
    except (ValueError, ET.ParseError) as e:
        raise KinematicsError(f"kinematics file {p} does not compile: {e}") from e
    raise KinematicsError(f"kinematics file {p}: expected a .urdf or an MJCF .xml")


class DiffIK:
    """One differential-IK step per bridge tick for an arm described by ``arm`` (see the
    module docstring).

    Args:
        model: The arm's kinematics (:func:`load_kinematics`), or a path to them.
        arm: The arm: joint names, limits, speeds, home and tool frame (a site or a body).
        config: Weights and bounds.

    Raises:
        KinematicsError: The model lacks a joint or the tool frame, or the description's limits
            reach beyond the model's.
    """

    def __init__(
        self, model: mujoco.MjModel | str | Path, arm: ArmDescription, config: DiffIKConfig
    ) -> None:
        import mink  # the IK library; here so that importing drivers needs no mink

        self._mink = mink
        # A copy: the limits below are written into it.
        self.model = (
            copy.copy(model) if isinstance(model, mujoco.MjModel) else load_kinematics(model)
        )
        self.arm, self.config = arm, config
        m = self.model
        self._qadr, self._dadr = [], []
        for i, name in enumerate(arm.joint_names):
            jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
            if jid < 0:
                names = [m.joint(j).name for j in range(m.njnt)]
                raise KinematicsError(
                    f"arm {arm.name!r}: joint {name!r} is not in the kinematics file (its joints: "
                    f"{names}); make the description's joint_names match the file"
                )
            if int(m.jnt_type[jid]) not in (
                int(mujoco.mjtJoint.mjJNT_HINGE),
                int(mujoco.mjtJoint.mjJNT_SLIDE),
            ):
                raise KinematicsError(f"arm {arm.name!r}: joint {name!r} is not a 1-dof joint")
            if m.jnt_limited[jid]:
                lo, hi = m.jnt_range[jid]
                if arm.joint_low_rad[i] < lo - 1e-9 or arm.joint_high_rad[i] > hi + 1e-9:
                    raise KinematicsError(
                        f"arm {arm.name!r}: joint {name!r} limits [{arm.joint_low_rad[i]}, "
                        f"{arm.joint_high_rad[i]}] reach beyond the kinematics file's "
                        f"[{lo}, {hi}]; narrow them in the description"
                    )
            self._qadr.append(int(m.jnt_qposadr[jid]))
            self._dadr.append(int(m.jnt_dofadr[jid]))
        self._qadr_a = np.array(self._qadr)
        self._frame_type = self._tool_frame_type(arm.tool_frame)
        self.configuration = mink.Configuration(m)
        self._q_full = self.configuration.q.copy()
        self._q_full[self._qadr_a] = arm.home_q_rad
        self.task = mink.FrameTask(
            arm.tool_frame,
            self._frame_type,
            position_cost=config.position_cost,
            orientation_cost=config.orientation_cost,
            lm_damping=config.lm_damping,
        )
        posture_cost = np.zeros(m.nv)
        posture_cost[self._dadr] = config.posture_cost
        self.posture = mink.PostureTask(m, cost=posture_cost)
        self.posture.set_target(self._q_full)
        vmax = np.asarray(arm.joint_vel_max_rad_s) * config.speed_scale
        self.max_step_rad = vmax * config.dt_s
        """(N,) the largest joint step of one tick, rad."""
        # The QP's limits: joints within the description's range (which lies within the
        # file's), speeds within the arm's; every other dof of the file frozen.
        for i, jname in enumerate(arm.joint_names):
            jid = m.joint(jname).id
            m.jnt_range[jid] = (arm.joint_low_rad[i], arm.joint_high_rad[i])
            m.jnt_limited[jid] = 1
        self.limits = [
            mink.ConfigurationLimit(m, gain=1.0),
            mink.VelocityLimit(m, dict(zip(arm.joint_names, vmax, strict=True))),
        ]
        self._low = np.asarray(arm.joint_low_rad, dtype=np.float64)
        self._high = np.asarray(arm.joint_high_rad, dtype=np.float64)
        self.failures = 0
        """Ticks on which the QP had no solution (the joints were held)."""
        self.last_failure: str | None = None
        others = [d for d in range(m.nv) if d not in set(self._dadr)]
        self.constraints = [mink.DofFreezingTask(m, dof_indices=others)] if others else None

    def _tool_frame_type(self, name: str) -> str:
        m = self.model
        if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, name) >= 0:
            return "site"
        if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name) >= 0:
            return "body"
        raise KinematicsError(
            f"arm {self.arm.name!r}: tool frame {name!r} is neither a site nor a body (link) of "
            "the kinematics file; set tool_frame to the TCP's frame name"
        )

    def fk(self, q_rad: np.ndarray) -> np.ndarray:
        """(7,) ``T_base_tool`` at arm joints ``q_rad`` (N,)."""
        self._q_full[self._qadr_a] = q_rad
        self.configuration.update(self._q_full)
        T = self.configuration.get_transform_frame_to_world(self.arm.tool_frame, self._frame_type)
        return frames.pose(T.translation(), T.rotation().wxyz)

    def step(self, q_rad: np.ndarray, target_pose: np.ndarray) -> np.ndarray:
        """The next joint goal (N,): one tick from ``q_rad`` (N,) towards ``target_pose`` (7,)
        ``T_base_tool``, within the joint limits and at most :attr:`max_step_rad` away from
        ``q_rad`` clipped into the limits. A tick without a QP solution returns that clipped
        ``q_rad`` (held) and is counted in :attr:`failures`.

        Raises:
            ValueError: A non-finite input, or a wrong shape.
        """
        q = np.asarray(q_rad, dtype=np.float64)
        target = np.asarray(target_pose, dtype=np.float64)
        if q.shape != (self.arm.num_joints,) or target.shape != (7,):
            raise ValueError(
                f"step needs q ({self.arm.num_joints},) and a pose (7,), got {q.shape} and "
                f"{target.shape}"
            )
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(target))):
            raise ValueError("step got a NaN or inf joint position or target")
        mink = self._mink
        lo, hi = self._low, self._high
        # A measured q a hair outside its limits (sensor noise) would make the QP infeasible.
        q = np.clip(q, lo, hi)
        self._q_full[self._qadr_a] = q
        self.configuration.update(self._q_full)
        quat = frames.quat_normalize(target[3:7])
        self.task.set_target(mink.SE3.from_rotation_and_translation(mink.SO3(quat), target[:3]))
        try:
            v = mink.solve_ik(
                self.configuration,
                [self.task, self.posture],
                self.config.dt_s,
                solver=self.config.solver,
                damping=self.config.damping,
                limits=self.limits,
                constraints=self.constraints,
            )
        except mink.exceptions.MinkError as e:  # no solution this tick: hold, count, go on
            self.failures += 1
            self.last_failure = str(e)
            return q
        dq = v[self._dadr] * self.config.dt_s
        # The QP's bounds hold to solver tolerance; make them exact.
        dq = np.clip(dq, -self.max_step_rad, self.max_step_rad)
        return np.clip(q + dq, lo, hi)


def joint_goal_solver(
    kinematics: str | Path | None, arm: ArmDescription, rate_hz: float
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The joint-goal solver of an arm in joint mode: one :class:`DiffIK` tick at ``rate_hz``
    with the arm's defaults (:meth:`DiffIKConfig.for_arm`), ``(q (N,), T_base_tool target (7,))
    -> next joint goal (N,)``. What the twin of a joint-controlled arm runs at its bridge rate
    (``sim.twin_arms.TwinArm``: ``kinematics``, ``arm``, ``bridge_hz``), so that it exercises
    the IK a real arm in joint mode runs.

    Args:
        kinematics: The arm's kinematics file (:func:`load_kinematics`).
        arm: The arm's description.
        rate_hz: The tick rate, Hz.

    Raises:
        ValueError: No kinematics file, or a rate that is not positive.
        KinematicsError: The file does not match the description.
    """
    if kinematics is None:
        raise ValueError(f"the {arm.name} arm names no kinematics file for its IK")
    if not rate_hz > 0:
        raise ValueError(f"the IK rate must be positive, got {rate_hz} Hz")
    return DiffIK(kinematics, arm, DiffIKConfig.for_arm(arm, 1 / rate_hz)).step
