"""IK library wrappers for ``bench/ik_compare.py`` (its docstring states the problem each one is
given): the problem's parameters (``IKParams``), rotations and the TCP pose error, the arms
(``Arm``, ``load_arm``) with their MuJoCo kinematics (``MjArm``, the ground truth), and one
class per library with ``__init__(arm, params)`` and ``step(q, T_target) -> q_next``
(``WRAPPERS``). Not a script: ``bench/ik_compare.py`` puts ``bench/`` on ``sys.path`` and
imports it.
"""

from __future__ import annotations

import dataclasses
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parents[1] / "sim" / "arms" / "models"


@dataclass(frozen=True)
class IKParams:
    """The differential-IK problem every library is given (where it allows)."""

    control_hz: float = 10.0
    """IK steps per second (the policy rate; dt = 1 / control_hz)."""
    max_joint_step_rad: float = 0.1
    """Largest change of any joint per tick, rad (1 rad/s at 10 Hz)."""
    max_tcp_step_m: float = 0.01
    """Largest target translation per tick (the safety clip), metres."""
    max_tcp_step_rad: float = 0.05
    """Largest target rotation per tick, rad."""
    damping: float = 1e-3
    """Tikhonov weight on ||dq||^2 (added to the QP Hessian diagonal), cost^2 / rad^2."""
    position_cost: float = 1.0
    """Weight of the TCP position error, cost / m."""
    orientation_cost: float = 1.0
    """Weight of the TCP rotation error, cost / rad (low for arms with fewer than 6 joints)."""
    posture_cost: float = 0.005
    """Weight pulling q towards home, cost / rad: a soft task, small enough to act mostly in
    the null space of the TCP task (the FR3's seventh joint)."""
    lm_damping: float = 1.0
    """Levenberg-Marquardt damping: ``lm_damping * ||C e||^2`` joins ``damping`` (mink's
    FrameTask ``lm_damping``); large only while the target is far (unreachable), unitless."""

    @property
    def dt_s(self) -> float:
        """Control period, s."""
        return 1.0 / self.control_hz


# ---------------------------------------------------------------------------------------------
# Rotations.


def so3_log(R: np.ndarray) -> np.ndarray:
    """(3,) rotation vector of a (3, 3) rotation, rad."""
    c = np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0)
    angle = float(np.arccos(c))
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if angle < 1e-9:
        return 0.5 * w
    if np.pi - angle < 1e-6:  # near pi: (R + I) / 2 ~ axis axis^T; take its longest column
        B = (R + np.eye(3)) / 2.0
        axis = B[:, int(np.argmax(np.diag(B)))]
        return angle * axis / np.linalg.norm(axis)
    return angle / (2.0 * np.sin(angle)) * w


def so3_exp(w: np.ndarray) -> np.ndarray:
    """(3, 3) rotation of a rotation vector ``w`` (3,), rad."""
    angle = float(np.linalg.norm(w))
    if angle < 1e-12:
        return np.eye(3)
    k = w / angle
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def pose_error(T_target: np.ndarray, T: np.ndarray) -> np.ndarray:
    """(6,) ``[p_target - p, log(R_target R^T)]`` in the base frame (m, rad)."""
    return np.concatenate([T_target[:3, 3] - T[:3, 3], so3_log(T_target[:3, :3] @ T[:3, :3].T)])


# ---------------------------------------------------------------------------------------------
# Arms.


@dataclass(frozen=True)
class Arm:
    """One arm kind: its standalone model files, IK joints and benchmark geometry."""

    name: str
    mjcf: Path
    urdf: Path
    joint_names: tuple[str, ...]
    """IK joints base to flange (the order of every q in this file)."""
    q_home: np.ndarray
    """(n,) home configuration, rad."""
    lower: np.ndarray
    """(n,) lower joint limits, rad."""
    upper: np.ndarray
    """(n,) upper joint limits, rad."""
    circle_radius_m: float
    """Radius of the tracked circle, metres."""
    box_half_m: float
    """Half-extent of the waypoint box around the home TCP, metres."""
    singular_q: np.ndarray
    """A singular configuration to start the singularity scenario from."""
    orientation_cost: float
    """Weight of the TCP rotation error for this arm, cost / rad (low with < 6 joints)."""
    source: str
    """Where the model files came from."""


class MjArm:
    """MuJoCo forward kinematics of an arm's standalone MJCF: the ground truth here."""

    def __init__(self, arm: Arm) -> None:
        import mujoco

        self.mj = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(arm.mjcf))
        self.data = mujoco.MjData(self.model)
        ids = [self.model.joint(n).id for n in arm.joint_names]
        self.qadr = np.array([self.model.jnt_qposadr[i] for i in ids])
        self.dadr = np.array([self.model.jnt_dofadr[i] for i in ids])
        self.site = self.model.site("tcp").id
        key = self.model.key("home").id if self.model.nkey else None
        if key is not None:
            self.data.qpos[:] = self.model.key_qpos[key]
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))

    def fk(self, q: np.ndarray) -> np.ndarray:
        """(4, 4) ``T_base_tcp`` at arm joints ``q`` (n,)."""
        self.data.qpos[self.qadr] = q
        self.mj.mj_kinematics(self.model, self.data)
        T = np.eye(4)
        T[:3, :3] = self.data.site_xmat[self.site].reshape(3, 3)
        T[:3, 3] = self.data.site_xpos[self.site]
        return T

    def jac(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(T_base_tcp (4, 4), J (6, n))``: base-frame TCP twist [v; w] per joint velocity."""
        T = self.fk(q)
        self.mj.mj_comPos(self.model, self.data)
        self.mj.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site)
        return T, np.vstack([self._jacp[:, self.dadr], self._jacr[:, self.dadr]])


def load_arm(name: str, tmp: Path) -> Arm:
    """Model files, IK joints, limits and home of one arm kind (``sim.arms``).

    The files are ``sim/arms/models/<name>.{xml,urdf}``; while those are not written yet, the
    same text from ``sim.arms.export`` goes to ``tmp``.
    """
    from sim.arms import chain as ch
    from sim.arms.export import ARM_CHAINS

    c = ARM_CHAINS[name]()
    mjcf, urdf = MODELS / f"{name}.xml", MODELS / f"{name}.urdf"
    source = "sim/arms/models"
    if not (mjcf.exists() and urdf.exists()):
        mjcf, urdf = tmp / f"{name}.xml", tmp / f"{name}.urdf"
        mjcf.write_text(ch.to_mjcf_model(c))
        urdf.write_text(ch.to_urdf(c))
        source = "sim.arms.export (the files were not written yet)"
    names, n = c.arm_joint_names, len(c.arm_joint_names)
    q_home = np.array(c.home_rad)
    arm = Arm(name, mjcf, urdf, names, q_home, c.lower_rad, c.upper_rad, 0, 0, None, 1, source)
    mj = MjArm(arm)
    if name == "ur5e":  # the wrist singularity: wrist_2 = 0 lines up wrist_1 and wrist_3
        singular = q_home.copy()
        singular[names.index("wrist_2_joint")] = 0.0
    else:  # the single-joint move from home that brings sigma_min(J) closest to 0
        singular = _most_singular(mj, q_home, c.lower_rad, c.upper_rad)
    big = float(np.linalg.norm(mj.fk(q_home)[:3, 3])) > 0.4
    return dataclasses.replace(
        arm,
        circle_radius_m=0.08 if big else 0.05,
        box_half_m=0.15 if big else 0.06,
        singular_q=singular,
        orientation_cost=1.0 if n >= 6 else 0.02,
    )


def _most_singular(mj: MjArm, q_home: np.ndarray, lower: np.ndarray, upper: np.ndarray):
    """``q_home`` with one joint moved (within its limits) to where sigma_min(J) is smallest."""
    best, best_s = q_home.copy(), np.inf
    for j in range(len(q_home)):
        for v in np.linspace(lower[j], upper[j], 721):
            q = q_home.copy()
            q[j] = v
            s = np.linalg.svd(mj.jac(q)[1], compute_uv=False)[-1]
            if s < best_s:
                best, best_s = q, s
    return best


# ---------------------------------------------------------------------------------------------
# Library wrappers: __init__(arm, params); step(q (n,), T_target (4, 4)) -> q_next (n,).


def _bound_step(q: np.ndarray, dq: np.ndarray, arm: Arm, p: IKParams) -> np.ndarray:
    """Clamp ``q + dq`` to the limits, then scale ``dq`` so no joint moves more than the bound."""
    dq = np.clip(dq, arm.lower - q, arm.upper - q)
    biggest = float(np.max(np.abs(dq)))
    if biggest > p.max_joint_step_rad:
        dq = dq * (p.max_joint_step_rad / biggest)
    return q + dq


def _dls(J: np.ndarray, e: np.ndarray, q: np.ndarray, arm: Arm, p: IKParams) -> np.ndarray:
    """Closed-form minimiser of the (unconstrained) objective in ``ik_compare.py``'s docstring."""
    c = np.array([p.position_cost] * 3 + [arm.orientation_cost] * 3)
    Jc = J * c[:, None]
    w2 = p.posture_cost**2
    mu = p.lm_damping * float(np.sum((c * e) ** 2))
    H = Jc.T @ Jc + (p.damping + mu + w2) * np.eye(len(q))
    g = Jc.T @ (c * e) + w2 * (arm.q_home - q)
    return np.linalg.solve(H, g)


class MujocoDLS:
    """Baseline, no IK library: MuJoCo kinematics (mj_kinematics + mj_jacSite) and numpy."""

    def __init__(self, arm: Arm, p: IKParams) -> None:
        self.arm, self.p, self.mj = arm, p, MjArm(arm)

    def step(self, q: np.ndarray, T_target: np.ndarray) -> np.ndarray:
        T, J = self.mj.jac(q)
        return _bound_step(
            q, _dls(J, pose_error(T_target, T), q, self.arm, self.p), self.arm, self.p
        )


class PinDLS:
    """pinocchio kinematics from the URDF (frame Jacobian, LOCAL_WORLD_ALIGNED); same DLS."""

    def __init__(self, arm: Arm, p: IKParams) -> None:
        import pinocchio as pin

        self.pin, self.arm, self.p = pin, arm, p
        self.model = pin.buildModelFromUrdf(str(arm.urdf))
        self.data = self.model.createData()
        self.frame = self.model.getFrameId("tcp")
        # Our joint order -> pinocchio's q / v index (revolute: one each); other joints
        # (a gripper jaw) stay at 0 and their Jacobian columns are dropped.
        self.qi = np.array([self.model.idx_qs[self.model.getJointId(n)] for n in arm.joint_names])
        self.vi = np.array([self.model.idx_vs[self.model.getJointId(n)] for n in arm.joint_names])

    def fk(self, q: np.ndarray) -> np.ndarray:
        """(4, 4) ``T_base_tcp``."""
        qp = np.zeros(self.model.nq)
        qp[self.qi] = q
        self.pin.framesForwardKinematics(self.model, self.data, qp)
        return self.data.oMf[self.frame].homogeneous

    def step(self, q: np.ndarray, T_target: np.ndarray) -> np.ndarray:
        pin = self.pin
        qp = np.zeros(self.model.nq)
        qp[self.qi] = q
        J = pin.computeFrameJacobian(
            self.model, self.data, qp, self.frame, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        )[:, self.vi]
        pin.updateFramePlacement(self.model, self.data, self.frame)
        T = self.data.oMf[self.frame].homogeneous
        return _bound_step(
            q, _dls(J, pose_error(T_target, T), q, self.arm, self.p), self.arm, self.p
        )


class Mink:
    """mink: the QP above (FrameTask, PostureTask, ConfigurationLimit, VelocityLimit)."""

    solver = "daqp"

    def __init__(self, arm: Arm, p: IKParams) -> None:
        import mink

        self.mink, self.arm, self.p = mink, arm, p
        self.mj = MjArm(arm)
        model = self.mj.model
        self.cfg = mink.Configuration(model)
        self.q_full = self.mj.data.qpos.copy()  # non-arm joints (gripper) stay at home
        self.q_full[self.mj.qadr] = arm.q_home
        self.frame = mink.FrameTask(
            "tcp", "site", p.position_cost, arm.orientation_cost, lm_damping=p.lm_damping
        )
        post_cost = np.zeros(model.nv)
        post_cost[self.mj.dadr] = p.posture_cost
        self.posture = mink.PostureTask(model, cost=post_cost)
        self.posture.set_target(self.q_full)
        vmax = p.max_joint_step_rad / p.dt_s
        vel = {n: vmax for n in arm.joint_names}
        self.limits = [mink.ConfigurationLimit(model, gain=1.0), mink.VelocityLimit(model, vel)]
        others = [d for d in range(model.nv) if d not in set(self.mj.dadr)]
        self.constraints = [mink.DofFreezingTask(model, dof_indices=others)] if others else None

    def step(self, q: np.ndarray, T_target: np.ndarray) -> np.ndarray:
        self.q_full[self.mj.qadr] = q
        self.cfg.update(self.q_full)
        self.frame.set_target(self.mink.SE3.from_matrix(T_target))
        v = self.mink.solve_ik(
            self.cfg,
            [self.frame, self.posture],
            self.p.dt_s,
            solver=self.solver,
            damping=self.p.damping,
            limits=self.limits,
            constraints=self.constraints,
        )
        return self.cfg.integrate(v, self.p.dt_s)[self.mj.qadr]


class MinkQuadprog(Mink):
    """mink with the quadprog QP solver instead of daqp."""

    solver = "quadprog"


class Placo:
    """placo KinematicsSolver: frame task, joints task, regularization, joint + velocity limits."""

    def __init__(self, arm: Arm, p: IKParams) -> None:
        import placo

        self.arm, self.p = arm, p
        self.robot = placo.RobotWrapper(str(arm.urdf), placo.Flags.ignore_collisions)
        self.solver = placo.KinematicsSolver(self.robot)
        self.solver.mask_fbase(True)
        for n in self.robot.joint_names():
            if n not in arm.joint_names:
                self.solver.mask_dof(n)
        self.solver.dt = p.dt_s
        self.solver.enable_joint_limits(True)
        self.solver.enable_velocity_limits(True)
        for n in arm.joint_names:
            self.robot.set_velocity_limit(n, p.max_joint_step_rad / p.dt_s)
        # placo's soft weight w multiplies the squared error (w ||e||^2): squares of our costs.
        self.frame = self.solver.add_frame_task("tcp", np.eye(4))
        self.frame.configure("tcp", "soft", p.position_cost**2, arm.orientation_cost**2)
        self.posture = self.solver.add_joints_task()
        self.posture.set_joints(dict(zip(arm.joint_names, arm.q_home.tolist(), strict=True)))
        self.posture.configure("posture", "soft", p.posture_cost**2)
        self.reg = self.solver.add_regularization_task(p.damping)
        self.cost = np.array([p.position_cost] * 3 + [arm.orientation_cost] * 3)

    def fk(self, q: np.ndarray) -> np.ndarray:
        """(4, 4) ``T_base_tcp``."""
        for n, v in zip(self.arm.joint_names, q, strict=True):
            self.robot.set_joint(n, float(v))
        self.robot.update_kinematics()
        return self.robot.get_T_world_frame("tcp")

    def step(self, q: np.ndarray, T_target: np.ndarray) -> np.ndarray:
        for n, v in zip(self.arm.joint_names, q, strict=True):
            self.robot.set_joint(n, float(v))
        self.robot.update_kinematics()
        # placo has no LM term: set the regularization weight to damping + mu by hand.
        e = self.cost * pose_error(T_target, self.robot.get_T_world_frame("tcp"))
        mu = self.p.lm_damping * float(e @ e)
        self.reg.set_weight(self.p.damping + mu)  # (re-configure() would square it)
        self.frame.T_world_frame = T_target
        self.solver.solve(True)
        return np.array([self.robot.get_joint(n) for n in self.arm.joint_names])


class Ikpy:
    """ikpy: its bounded least-squares IK (scipy) from the current q, then the step bound."""

    def __init__(self, arm: Arm, p: IKParams) -> None:
        import ikpy.chain
        import ikpy.inverse_kinematics

        self.arm, self.p = arm, p
        root = ET.parse(arm.urdf).getroot()
        parent_of = {j.find("child").get("link"): j for j in root.iter("joint")}
        elements, link = ["tcp"], "tcp"
        while link in parent_of:  # the explicit base -> tcp path (the jaw is a side branch)
            j = parent_of[link]
            link = j.find("parent").get("link")
            elements = [link, j.get("name"), *elements]
        with warnings.catch_warnings():  # "fixed link set as active": the mask comes next
            warnings.simplefilter("ignore", UserWarning)
            chain = ikpy.chain.Chain.from_urdf_file(str(arm.urdf), base_elements=elements)
        mask = [lk.joint_type != "fixed" and lk.name in arm.joint_names for lk in chain.links]
        self.chain = ikpy.chain.Chain(chain.links, active_links_mask=mask)
        self.idx = np.array([[lk.name for lk in chain.links].index(n) for n in arm.joint_names])
        # ikpy weighs rotation-matrix differences by a module constant, not per call.
        ikpy.inverse_kinematics.ORIENTATION_COEFF = arm.orientation_cost / p.position_cost

    def _full(self, q: np.ndarray) -> np.ndarray:
        full = np.zeros(len(self.chain.links))
        full[self.idx] = q
        return full

    def fk(self, q: np.ndarray) -> np.ndarray:
        """(4, 4) ``T_base_tcp``."""
        return self.chain.forward_kinematics(self._full(q))

    def step(self, q: np.ndarray, T_target: np.ndarray) -> np.ndarray:
        sol = self.chain.inverse_kinematics_frame(
            T_target, initial_position=self._full(q), orientation_mode="all"
        )
        return _bound_step(q, np.asarray(sol)[self.idx] - q, self.arm, self.p)


WRAPPERS: dict[str, Callable] = {
    "mujoco_dls": MujocoDLS,
    "mink_daqp": Mink,
    "mink_quadprog": MinkQuadprog,
    "pin_dls": PinDLS,
    "placo": Placo,
    "ikpy": Ikpy,
}
