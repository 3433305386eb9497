"""The twin's physics: :class:`SimWorld` owns the MuJoCo model and data and steps them with the
impedance controller; :class:`SimClock` advances it one control period per ``tick()``.

How a task uses the world (see :mod:`sim.tasks.base`):

1. Before compilation the task contributes an :class:`sim.model.MjcfFragment` (objects with a
   ``<freejoint/>``, ``class="object"`` geoms); ``SimWorld(sim_cfg, [fragment])`` compiles it.
2. At reset the task calls :meth:`SimWorld.reset_physics` (fresh data, arm at home, gripper
   open), places its objects with :meth:`set_free_body_pose`, and returns the arm start pose.
   The robot then teleports the arm (``SimRobot.reset``) and afterwards runs the world's
   ``post_arm_reset_hooks``: a task that starts with an object in the hand registers one and
   calls :meth:`place_in_gripper` there (the TCP is at its start pose by then).
3. While running, the task only reads: :meth:`body_pose`, :meth:`tcp_pose`,
   :meth:`contact_force`, :meth:`gripper_closure`, ...

All poses are 7-vectors ``[x, y, z, qw, qx, qy, qz]`` in the robot base (= world) frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mujoco
import numpy as np

from robot_rl.core import frames
from robot_rl.core.clock import whole_ratio
from sim import model as mdl
from sim.config import SimConfig
from sim.controller import CartesianImpedanceController, ControllerConfig
from sim.gl import RenderThread
from sim.gripper import JawGripper, ParallelGripper
from sim.joint_servo import JointServoController
from sim.twin_arms import TwinArm, fr3_twin

_G = np.array([0.0, 0.0, -9.81])


OFFSCREEN_MIN_PX = 480
"""Smallest offscreen framebuffer side, pixels: out-of-band video cameras (``robot-rl eval
--video-size``) may be larger than the observation images."""


class SimWorld:
    """MuJoCo model + data + controller for one scene.

    Args:
        sim_cfg: Physics rate and camera sizes.
        fragments: Task MJCF fragments (see :class:`sim.model.MjcfFragment`).
        controller_cfg: Impedance controller gains and limits.
        arm: The arm kind (:mod:`sim.twin_arms`; default the FR3): its model, joints (by name),
            home, limits and control. Under ``joint`` control the world's Cartesian target
            (:meth:`set_target`) becomes joint goals through :attr:`joint_goal_solver`.

    Attributes:
        model, data: The MuJoCo model and data (tasks read them; only the world steps them).
        controller: The impedance controller (its target is the TCP target pose).
        dt_s: Physics timestep, seconds.
        step_count: Physics steps taken since construction (changes whenever the scene may
            have changed; cameras use it to tell a new frame from an old one).
        post_arm_reset_hooks: Called (no arguments) by the robot after it teleported the arm.
        step_hooks: Called (no arguments) at every physics step before the controller
            (the robot's command watchdog lives here).
    """

    def __init__(
        self,
        sim_cfg: SimConfig,
        fragments: Sequence[mdl.MjcfFragment] = (),
        controller_cfg: ControllerConfig | None = None,
        arm: TwinArm | None = None,
    ) -> None:
        self.sim_cfg = sim_cfg
        self.twin_arm = arm = arm or fr3_twin()
        self.arm = arm.arm
        xml = mdl.build_mjcf(
            fragments,
            sim_hz=sim_cfg.sim_hz,
            # Room for out-of-band cameras (videos) up to OFFSCREEN_MIN_PX, whatever the
            # observation size.
            offscreen_width=max(sim_cfg.image_width, OFFSCREEN_MIN_PX),
            offscreen_height=max(sim_cfg.image_height, OFFSCREEN_MIN_PX),
            arm_xml=arm.body_xml,
            motors_xml=arm.motors_xml,
            gripper=arm.gripper_mjcf,
            front_camera=arm.front_camera,
            noslip_iterations=arm.noslip_iterations,
        )
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.dt_s = float(self.model.opt.timestep)
        m = self.model
        self.tcp_site_id = m.site("tcp").id
        self.ft_site_id = m.site("ft").id
        self.hand_body_id = m.body("hand").id
        joints = [m.joint(name) for name in self.arm.joint_names]
        self.arm_qpos_adr = np.array([int(j.qposadr[0]) for j in joints])
        self.arm_dof_adr = np.array([int(j.dofadr[0]) for j in joints])
        self.gripper: JawGripper | ParallelGripper = (
            ParallelGripper(m, self.data) if arm.jaw is None else JawGripper(m, self.data, arm.jaw)
        )
        """The hand's gripper (:mod:`sim.gripper`): the parallel hand or a jaw."""
        self.pad_geom_ids = (m.geom("left_pad").id, m.geom("right_pad").id)
        self.table_geom_id = m.geom("table").id
        self._ft_force_adr = int(m.sensor_adr[m.sensor("ft_force").id])
        self._ft_torque_adr = int(m.sensor_adr[m.sensor("ft_torque").id])
        motors = self._motor_ids([j.id for j in joints])
        torque_limit = tuple(float(m.actuator_ctrlrange[i, 1]) for i in motors)
        if controller_cfg is None:  # the arm's home; torque limits from the motors' ranges
            controller_cfg = ControllerConfig(
                home_q_rad=self.arm.home_q_rad, torque_limit_nm=torque_limit
            )
        self.controller = CartesianImpedanceController(
            m,
            self.data,
            controller_cfg,
            self.tcp_site_id,
            self.arm_dof_adr,
            self.arm_qpos_adr,
            motors,
        )
        self.servo: JointServoController | None = None
        """The joint servos (``joint`` control), else None."""
        self.joint_goal_solver: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
        """``joint`` control: ``(joint goals (N,), T_base_tcp target (7,)) -> next joint goals
        (N,)``, called every :attr:`bridge_steps` physics steps (the bridge's differential IK
        tick); None: the goals stay where they are (a joint-commanded arm)."""
        self.bridge_steps = 1
        self._compute = self.controller.compute
        if arm.control == "joint":
            assert arm.servo is not None
            self.servo = JointServoController(
                m,
                self.data,
                arm.servo,
                self.arm_dof_adr,
                self.arm_qpos_adr,
                motors,
                np.asarray(torque_limit),
            )
            self._compute = self._servo_compute
        self._bridge_count = 0
        self.home_q_rad = np.asarray(self.arm.home_q_rad, dtype=np.float64)
        self._joint_low = np.asarray(self.arm.joint_low_rad, dtype=np.float64)
        self._joint_high = np.asarray(self.arm.joint_high_rad, dtype=np.float64)
        self.step_count = 0
        self.post_arm_reset_hooks: list[Callable[[], None]] = []
        self.step_hooks: list[Callable[[], None]] = []
        self._ik_data = mujoco.MjData(m)
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}  # render thread only
        self._gl = RenderThread()
        self._vel = np.zeros(6)
        self.reset_physics()

    def _motor_ids(self, joint_ids: Sequence[int]) -> np.ndarray:
        """The actuator driving each joint (a motor whose transmission is that joint), in order.

        Raises:
            ValueError: A joint has no actuator, or several.
        """
        m = self.model
        out = []
        for jid in joint_ids:
            hits = np.flatnonzero(
                (m.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT) & (m.actuator_trnid[:, 0] == jid)
            )
            if len(hits) != 1:
                raise ValueError(
                    f"joint {m.joint(jid).name!r} has {len(hits)} actuators; the arm needs one "
                    "torque motor per joint"
                )
            out.append(int(hits[0]))
        return np.array(out)

    # -- stepping ---------------------------------------------------------------------------

    def reset_physics(self) -> None:
        """Fresh data: arm at home, gripper open, target = home TCP pose, time 0."""
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[self.arm_qpos_adr] = self.home_q_rad
        self.set_gripper_target(0.0)
        self.gripper.set_closure(0.0)
        mujoco.mj_forward(self.model, self.data)
        self.controller.set_target(self.tcp_pose())
        if self.servo is not None:
            self.servo.settle()
        self.forward()

    def step(self, n: int) -> None:
        """Advance ``n`` physics steps (controller every step), then ``mj_forward`` so that every
        derived quantity (site poses, sensors, contacts) matches the new state."""
        m, d = self.model, self.data
        hooks = self.step_hooks
        compute = self._compute
        for _ in range(n):
            mujoco.mj_step1(m, d)
            for hook in hooks:
                hook()
            compute()
            mujoco.mj_step2(m, d)
        mujoco.mj_forward(m, d)
        self.step_count += n

    def forward(self) -> None:
        """Recompute derived quantities after a teleport (positions set by hand).

        Runs the controller once in between so that accelerations and the wrist sensor reflect
        an arm held by its controller (not one falling under gravity with zero torque).
        """
        mujoco.mj_forward(self.model, self.data)
        self._compute()
        mujoco.mj_forward(self.model, self.data)
        self.step_count += 1

    def _servo_compute(self) -> None:
        # Joint control: the bridge's IK tick every bridge_steps physics steps, then the servos.
        servo = self.servo
        assert servo is not None
        self._bridge_count += 1
        if self.joint_goal_solver is not None and self._bridge_count >= self.bridge_steps:
            self._bridge_count = 0
            c = self.controller
            target = np.concatenate([c.target_pos, c.target_quat])
            servo.set_goal(self.joint_goal_solver(servo.goal.copy(), target))
        servo.compute()

    def settle_joints(self) -> None:
        """After a teleport of the arm: the servos hold where the joints are (``joint``
        control; nothing to do under impedance control)."""
        if self.servo is not None:
            self.servo.settle()
            self._bridge_count = 0

    # -- arm --------------------------------------------------------------------------------

    def tcp_pose(self) -> np.ndarray:
        """(7,) ``T_base_tcp``."""
        q = np.zeros(4)
        mujoco.mju_mat2Quat(q, self.data.site_xmat[self.tcp_site_id])
        return frames.pose(self.data.site_xpos[self.tcp_site_id], q)

    def tcp_twist(self) -> np.ndarray:
        """(6,) TCP twist ``[v (m/s), w (rad/s)]`` in the base frame."""
        mujoco.mj_objectVelocity(
            self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self.tcp_site_id, self._vel, 0
        )
        return np.concatenate([self._vel[3:], self._vel[:3]])

    def tcp_wrench(self) -> np.ndarray:
        """(6,) external wrench on the hand at the TCP, base frame, ``[f (N), tau (N m)]``.

        From the wrist F/T sensor (site ``ft``, between link 7 and the hand), compensated for
        the weight of everything it carries (hand + fingers, mass and live centre of mass from
        ``body_subtreemass`` / ``subtree_com``): ``f_ext = -f_parent - m g`` with ``f_parent``
        the force link 7 exerts on the hand, and likewise for the torque, which is then moved
        to the TCP. Sign: a table pushing the fingers up gives ``f_z > 0``. Like a real F/T
        sensor it also sees the hand's inertial forces while accelerating.
        """
        d, m = self.data, self.model
        R = d.site_xmat[self.ft_site_id].reshape(3, 3)
        # MuJoCo's force/torque sensors report the wrench the parent (link 7) exerts on the
        # child (the hand), in the site frame (checked: a hand at rest reads +m g upwards).
        f_parent = R @ d.sensordata[self._ft_force_adr : self._ft_force_adr + 3]
        t_parent = R @ d.sensordata[self._ft_torque_adr : self._ft_torque_adr + 3]
        mass = float(m.body_subtreemass[self.hand_body_id])
        p_site = d.site_xpos[self.ft_site_id]
        com = d.subtree_com[self.hand_body_id]
        f_ext = -f_parent - mass * _G
        t_ext_site = -t_parent - np.cross(com - p_site, mass * _G)
        p_tcp = d.site_xpos[self.tcp_site_id]
        t_ext_tcp = t_ext_site + np.cross(p_site - p_tcp, f_ext)
        return np.concatenate([f_ext, t_ext_tcp])

    def joint_pos(self) -> np.ndarray:
        """(N,) arm joint positions, rad."""
        return self.data.qpos[self.arm_qpos_adr].copy()

    def joint_vel(self) -> np.ndarray:
        """(N,) arm joint velocities, rad/s."""
        return self.data.qvel[self.arm_dof_adr].copy()

    def gripper_closure(self) -> float:
        """Measured closure in [0, 1]: 0 fully open, 1 fully closed."""
        return self.gripper.closure()

    def set_target(self, pose: np.ndarray) -> None:
        """Controller target ``T_base_tcp`` (7,)."""
        self.controller.set_target(pose)

    def set_gripper_target(self, closure: float) -> None:
        """Gripper closure target in [0, 1] (0 open, 1 closed)."""
        self.gripper.set_target(closure)

    def gripper_target(self) -> float:
        """Current gripper closure target in [0, 1]."""
        return self.gripper.target()

    def set_arm_joints(self, q_rad: np.ndarray) -> None:
        """Teleport the arm to ``q_rad`` (N,) with zero velocity (call :meth:`forward` after)."""
        self.data.qpos[self.arm_qpos_adr] = q_rad
        self.data.qvel[self.arm_dof_adr] = 0.0

    def set_gripper_closure(self, closure: float) -> None:
        """Teleport the gripper to ``closure`` in [0, 1] (0 open, 1 closed on nothing)."""
        self.gripper.set_closure(closure)

    def set_gripper_width(self, width_m: float) -> None:
        """Teleport the gripper to hold an object ``width_m`` wide between its pads."""
        self.gripper.set_width(width_m)

    def solve_ik(
        self, pose: np.ndarray, q_init: np.ndarray | None = None, iters: int = 200
    ) -> tuple[np.ndarray, float]:
        """Damped-least-squares IK for the TCP (on a scratch copy; ``data`` is untouched).

        Args:
            pose: (7,) target ``T_base_tcp``.
            q_init: (N,) start configuration (default: home).
            iters: Iteration cap.

        Returns:
            ``(q (N,), residual)`` where residual is the final ``|e|`` (metres + radians).
        """
        m, d = self.model, self._ik_data
        d.qpos[:] = self.data.qpos
        q = (self.home_q_rad if q_init is None else np.asarray(q_init, dtype=np.float64)).copy()
        lo, hi = self._joint_low, self._joint_high
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        qs, qc, qe = np.zeros(4), np.zeros(4), np.zeros(4)
        target_q = frames.quat_normalize(pose[3:7])
        e = np.zeros(6)
        err = np.inf
        for _ in range(iters):
            d.qpos[self.arm_qpos_adr] = q
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            e[:3] = pose[:3] - d.site_xpos[self.tcp_site_id]
            mujoco.mju_mat2Quat(qs, d.site_xmat[self.tcp_site_id])
            mujoco.mju_negQuat(qc, qs)
            mujoco.mju_mulQuat(qe, target_q, qc)
            if qe[0] < 0:
                qe *= -1
            mujoco.mju_quat2Vel(e[3:], qe, 1.0)
            err = float(np.linalg.norm(e))
            if err < 1e-6:
                break
            mujoco.mj_jacSite(m, d, jacp, jacr, self.tcp_site_id)
            J = np.vstack([jacp[:, self.arm_dof_adr], jacr[:, self.arm_dof_adr]])
            JJt = J @ J.T + 1e-4 * np.eye(6)
            dq = J.T @ np.linalg.solve(JJt, e)
            null = self.home_q_rad - q
            dq += 0.1 * (null - J.T @ np.linalg.solve(JJt, J @ null))
            q = np.clip(q + dq, lo, hi)
        return q, err

    # -- objects ----------------------------------------------------------------------------

    def body_pose(self, name: str) -> np.ndarray:
        """(7,) pose of body ``name`` in the base frame."""
        b = self.model.body(name).id
        return frames.pose(self.data.xpos[b], self.data.xquat[b])

    def _free_joint_adr(self, body: str) -> tuple[int, int]:
        b = self.model.body(body)
        jnt = int(b.jntadr[0])
        if b.jntnum[0] < 1 or self.model.jnt_type[jnt] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"body {body!r} has no free joint; add <freejoint/> to its MJCF")
        return int(self.model.jnt_qposadr[jnt]), int(self.model.jnt_dofadr[jnt])

    def set_free_body_pose(self, body: str, pose: np.ndarray) -> None:
        """Teleport a free body (with ``<freejoint/>``) to ``pose`` (7,), zero velocity.

        Call :meth:`forward` (or let the robot's reset do it) afterwards.
        """
        qa, da = self._free_joint_adr(body)
        self.data.qpos[qa : qa + 7] = np.concatenate([pose[:3], frames.quat_normalize(pose[3:7])])
        self.data.qvel[da : da + 6] = 0.0

    def body_velocity(self, body: str) -> np.ndarray:
        """(6,) ``[v, w]`` of a body in the base frame (at its origin)."""
        vel = np.zeros(6)
        b = self.model.body(body).id
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, b, vel, 0)
        return np.concatenate([vel[3:], vel[:3]])

    def geom_ids_of_body(self, body: str) -> tuple[int, ...]:
        """Ids of the geoms attached directly to ``body``."""
        b = self.model.body(body).id
        return tuple(int(g) for g in np.flatnonzero(self.model.geom_bodyid == b))

    def contact_force(self, geoms_a: Sequence[int], geoms_b: Sequence[int]) -> float:
        """Total normal contact force between any geom of ``geoms_a`` and any of ``geoms_b``, N."""
        d = self.data
        if d.ncon == 0:
            return 0.0
        g1, g2 = d.contact.geom1, d.contact.geom2
        a, b = np.asarray(geoms_a), np.asarray(geoms_b)
        hit = (np.isin(g1, a) & np.isin(g2, b)) | (np.isin(g1, b) & np.isin(g2, a))
        total = 0.0
        f = np.zeros(6)
        for i in np.flatnonzero(hit):
            mujoco.mj_contactForce(self.model, d, int(i), f)
            total += abs(f[0])
        return total

    def held_by_pads(self, geoms: Sequence[int]) -> bool:
        """Every finger pad (:attr:`pad_geom_ids`) touches one of ``geoms``: the object is held
        (the tasks' grasp test)."""
        return all(self.contact_force([pad], geoms) > 0.0 for pad in self.pad_geom_ids)

    def place_in_gripper(self, body: str, T_tcp_obj: np.ndarray, width_m: float) -> None:
        """At reset: put free body ``body`` between the fingers and close the gripper on it.

        Sets the jaws ``width_m`` apart (the object's width between the pads), the body
        to ``T_base_tcp * T_tcp_obj``, the gripper target to fully closed (the servo then
        squeezes with its full force), and calls :meth:`forward`. Call it from a
        ``post_arm_reset_hooks`` callback (the arm is at its start pose by then).
        """
        self.set_gripper_width(width_m)
        self.set_gripper_target(1.0)
        self.set_free_body_pose(body, frames.pose_mul(self.tcp_pose(), T_tcp_obj))
        self.forward()

    # -- rendering --------------------------------------------------------------------------

    def render(self, camera: str, height: int, width: int, repeat: int = 1) -> np.ndarray:
        """Render MJCF camera ``camera`` as it sees :attr:`data` now.

        Runs on the world's render thread (:mod:`sim.gl`: every OpenGL context of this world
        lives on one thread, as EGL requires), whatever thread calls; a renderer per image
        size is created once and reused (shadows, reflections and skybox off).

        Args:
            camera: MJCF camera name.
            height: Image height, pixels.
            width: Image width, pixels.
            repeat: Render this many times (benchmarks); the last image is returned.

        Returns:
            (height, width, 3) uint8 RGB, a new array.
        """
        return self._gl.call(self._render, camera, height, width, repeat)

    def _render(self, camera: str, height: int, width: int, repeat: int) -> np.ndarray:
        key = (height, width)
        r = self._renderers.get(key)
        if r is None:
            r = mujoco.Renderer(self.model, height=height, width=width)
            r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
            r.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
            r.scene.flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = False
            self._renderers[key] = r
        for _ in range(max(1, repeat)):
            r.update_scene(self.data, camera=camera)
            image = r.render()
        return image

    def _free_renderers(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    def close(self) -> None:
        """Free the renderers (OpenGL contexts, on their thread) and stop the render thread.
        The world stays usable: a later :meth:`render` starts a new render thread."""
        self._gl.close(final=self._free_renderers)
        self._gl = RenderThread()


class SimClock:
    """Implements :class:`robot_rl.core.protocols.Clock` for the twin: ``tick()`` advances physics
    by one control period (``round(sim_hz / control_hz)`` steps, checked to be whole).

    Args:
        world: The world to step.
        control_hz: Control rate.
    """

    def __init__(self, world: SimWorld, control_hz: float) -> None:
        self.world = world
        self.period_s = 1.0 / control_hz
        self.n_substeps = whole_ratio(self.period_s, world.dt_s, "control period / sim timestep")
        self.overruns = 0

    def now_s(self) -> float:
        """Simulation time, seconds."""
        return float(self.world.data.time)

    def reset(self) -> None:
        """Nothing to re-schedule in simulation; overruns stay 0."""
        self.overruns = 0

    def tick(self) -> None:
        """Advance one control period of physics."""
        self.world.step(self.n_substeps)
