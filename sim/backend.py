"""Build the twin for a task: world, robot, cameras, task, clock, expert. The CLI's composition
root (``robot_rl.app.envs.build``) calls :func:`make_sim_backend` and wraps the result in
``robot_rl.envs.RobotEnv``.

CONTRACT (all helpers code against this; fill in, do not change, without telling the others):

    backend = make_sim_backend("pick_cube", SimConfig(...), EnvConfig(...), safety=None)
    backend.robot    # sim.robot.SimRobot, implements robot_rl.core.protocols.Robot
    backend.cameras  # tuple[sim.camera.SimCamera, ...], in SimConfig.cameras order
    backend.task     # implements robot_rl.core.protocols.Task (reads backend.world)
    backend.clock    # sim.world.SimClock, implements Clock; tick() steps physics one control period
    backend.world    # sim.world.SimWorld: model, data, step helpers, render helpers
    backend.make_expert()  # a fresh scripted expert: .reset(rng) and .act(obs, info) -> action
    backend.safety   # the SafetyConfig in force (task default unless overridden)

    TASKS: dict[str, TaskInfo]  # explicit registry (no registration by import)
    TaskInfo.description, TaskInfo.default_safety (SafetyConfig), TaskInfo.max_episode_steps
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from robot_rl.core.clock import whole_ratio
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
from sim.camera import SimCamera
from sim.config import DEFAULT_ARM, SimConfig
from sim.controller import ControllerConfig
from sim.experts.base import Expert
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.robot import SimRobot
from sim.tasks import assemble, cable_route, peg_insert, plug_insert, reach
from sim.tasks.base import SimTask
from sim.twin_arms import TwinArm, twin_arm
from sim.world import SimClock, SimWorld

JointIKFactory = Callable[[TwinArm], Callable[[np.ndarray, np.ndarray], np.ndarray]]
"""Builds, for a joint-controlled arm, ``(joint goals (N,), T_base_tcp target (7,)) -> next
joint goals (N,)`` (one differential-IK tick)."""


@dataclass(frozen=True)
class TaskInfo:
    """A registered task.

    Attributes:
        description: One paragraph: scene, goal, success and failure.
        default_safety: Safety limits suited to the task (workspace box reaches the objects).
        max_episode_steps: Default episode length at the default 10 Hz control rate.
        task_class: ``"module:Class"`` of the :class:`sim.tasks.base.SimTask` subclass
            (imported lazily, when the task is built).
        expert_class: ``"module:Class"`` of the scripted expert; constructed as
            ``Class(env_cfg, layout)`` (:meth:`make_expert`).
        state_objects: Entries of the task's ``privileged_spec`` that a state-based policy
            needs besides the robot state (where the object is); ``--obs state`` observes
            them through ``robot_rl.wrappers.ObjectState``. Empty when the robot state
            suffices.
        action_scale_m: TCP translation per step for an action of 1.0, metres (the env's
            ``EnvConfig.action_scale_m`` for this task unless a caller sets one).
        fixed_gripper: Gripper command the learner's env holds, dropping the gripper from the
            policy's actions (``robot_rl.wrappers.FixedGripper``); None: the policy commands it.
        layout: Where the task lies for the twin's arm (:mod:`sim.layout`; set by
            :func:`task_info`).
        needs_rotation: The task cannot be done without turning the TCP (plug_insert: the
            plug's yaw to the socket's): learner envs refuse it without rotation control.
    """

    description: str
    default_safety: SafetyConfig
    max_episode_steps: int
    task_class: str
    expert_class: str
    state_objects: tuple[str, ...] = ()
    action_scale_m: float = 0.02
    fixed_gripper: float | None = None
    layout: TaskLayout = FR3_LAYOUT
    needs_rotation: bool = False

    def make_expert(self, env_cfg: EnvConfig) -> Expert:
        """A fresh scripted expert for this task on its arm, acting in ``env_cfg``'s action
        space (it reads the task's truth from ``info["privileged"]``)."""
        return _load(self.expert_class)(env_cfg, self.layout)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


TASKS: dict[str, TaskInfo] = {
    "pick_cube": TaskInfo(
        description=(
            "Pick up a 4 cm cube lying at a random position and yaw on the table in front of "
            "the robot. The TCP starts at a random point above the table, pointing down, "
            "gripper open. Success: the cube is held between both finger pads and its bottom "
            "face is at least 5 cm above the table. Failure: the cube leaves the table. "
            "Dense cost in [-1, 0): reach + grasp + lift - 1 (0 on success, -100 on failure)."
        ),
        default_safety=SafetyConfig(
            workspace_low_m=(0.3, -0.28, 0.015),
            workspace_high_m=(0.7, 0.28, 0.35),
            orientation_center_quat=DOWN_QUAT,
            orientation_max_rad=0.8,
            max_step_m=0.05,
            max_step_rad=0.3,
            watchdog_timeout_s=0.5,
        ),
        max_episode_steps=100,
        task_class="sim.tasks.pick_cube:PickCubeTask",
        expert_class="sim.experts.pick_cube:PickCubeExpert",
        state_objects=("cube_pos", "tcp_to_cube"),
    ),
    "peg_insert": TaskInfo(
        description=peg_insert.DESCRIPTION,
        default_safety=peg_insert.DEFAULT_SAFETY,
        max_episode_steps=peg_insert.MAX_EPISODE_STEPS,
        task_class="sim.tasks.peg_insert:PegInsertTask",
        expert_class="sim.experts.peg_insert:PegInsertExpert",
        state_objects=("peg_to_hole", "hole_pos"),
        action_scale_m=peg_insert.ACTION_SCALE_M,
        fixed_gripper=1.0,  # the peg is grasped from the start; opening drops it
    ),
    "plug_insert": TaskInfo(
        description=plug_insert.DESCRIPTION,
        default_safety=plug_insert.DEFAULT_SAFETY,
        max_episode_steps=plug_insert.MAX_EPISODE_STEPS,
        task_class="sim.tasks.plug_insert:PlugInsertTask",
        expert_class="sim.experts.plug_insert:PlugInsertExpert",
        state_objects=("tcp_to_grasp", "grasp_yaw_error", "tip_to_socket", "socket_yaw_error"),
        action_scale_m=plug_insert.ACTION_SCALE_M,
        needs_rotation=True,
    ),
    "assemble": TaskInfo(
        description=assemble.DESCRIPTION,
        default_safety=assemble.DEFAULT_SAFETY,
        max_episode_steps=assemble.MAX_EPISODE_STEPS,
        task_class="sim.tasks.assemble:AssembleTask",
        expert_class="sim.experts.assemble:AssembleExpert",
        state_objects=(
            "tcp_to_bracket_grasp",
            "bracket_grasp_yaw_error",
            "bracket_to_nest",
            "nest_yaw_error",
            "seated",
            "tcp_to_pin_grasp",
            "pin_grasp_yaw_error",
            "pin_tip_to_hole",
            "hole_yaw_error",
        ),
        action_scale_m=assemble.ACTION_SCALE_M,
        needs_rotation=True,
    ),
    "cable_route": TaskInfo(
        description=cable_route.DESCRIPTION,
        default_safety=cable_route.DEFAULT_SAFETY,
        max_episode_steps=cable_route.MAX_EPISODE_STEPS,
        task_class="sim.tasks.cable_route:CableRouteTask",
        expert_class="sim.experts.cable_route:CableRouteExpert",
        state_objects=("anchor_pos", "clip_pos", "clip_quat", "cable_at_clip"),
        action_scale_m=cable_route.ACTION_SCALE_M,
        fixed_gripper=1.0,  # the tab is held from the start; opening drops it
    ),
    "reach": TaskInfo(
        description=reach.DESCRIPTION,
        default_safety=reach.DEFAULT_SAFETY,
        max_episode_steps=reach.MAX_EPISODE_STEPS,
        task_class="sim.tasks.reach:ReachTask",
        expert_class="sim.experts.reach:ReachExpert",
    ),
}


ARM_TASKS: dict[str, tuple[str, ...]] = {"so101": ("pick_cube", "reach")}
"""Arms of the twin that cannot do every task, and the tasks they do (the others: all).
The SO-101-class arm has no peg_insert: a 3 mm-clearance insertion with a peg held in a
one-sided jaw needs positioning that its servos' 0.6 deg of play (about 2 mm at the tool)
and its 5 joints (no free tilt about the approach axis' normal) do not give."""


def task_info(task_name: str, arm: str | None = None) -> TaskInfo:
    """:data:`TASKS` ``[task_name]`` for the twin's arm ``arm`` (None: the default,
    :data:`sim.config.DEFAULT_ARM`): its safety box and action scale mapped by the arm's
    :class:`~sim.layout.TaskLayout` (unchanged for the FR3 and UR5e), and the layout itself.

    Raises:
        ValueError: Unknown task or arm, or a task the arm does not do (:data:`ARM_TASKS`).
    """
    if task_name not in TASKS:
        raise ValueError(f"unknown task {task_name!r}; known tasks: {', '.join(sorted(TASKS))}")
    info = TASKS[task_name]
    arm = arm or DEFAULT_ARM
    allowed = ARM_TASKS.get(arm)
    if allowed is not None and task_name not in allowed:
        raise ValueError(
            f"the {arm} twin does not do {task_name!r}; it does {', '.join(allowed)} "
            "(see docs/arms.md)"
        )
    layout = twin_arm(arm).layout
    if layout.identity:
        return info  # its layout: FR3_LAYOUT, the tasks as written
    cx, cy = layout.centre_xy_m
    return replace(
        info,
        description=(
            f"{info.description} On the {arm} twin, distances and heights are {layout.scale:g} "
            f"of these around ({cx:g}, {cy:g}) m and objects {layout.object_scale:g} of these "
            "sizes (sim/layout.py)."
        ),
        default_safety=layout.safety(info.default_safety),
        action_scale_m=layout.length(info.action_scale_m),
        layout=layout,
    )


@dataclass
class SimBackend:
    """Everything the composition root needs to build a :class:`RobotEnv` on the twin."""

    world: SimWorld
    robot: SimRobot
    cameras: tuple[SimCamera, ...]
    task: SimTask
    clock: SimClock
    safety: SafetyConfig
    env_cfg: EnvConfig
    info: TaskInfo

    def make_expert(self) -> Expert:
        """A fresh scripted expert for this task (acts in the base env's action space)."""
        return self.info.make_expert(self.env_cfg)

    def close(self) -> None:
        """Free renderers (OpenGL contexts)."""
        self.world.close()


def make_sim_backend(
    task_name: str,
    sim_cfg: SimConfig,
    env_cfg: EnvConfig,
    safety: SafetyConfig | None = None,
    controller_cfg: ControllerConfig | None = None,
    joint_ik: JointIKFactory | None = None,
) -> SimBackend:
    """Build world, robot, cameras, task and clock for ``task_name``.

    Args:
        task_name: A key of :data:`TASKS`.
        sim_cfg: Physics rate, cameras, image size, randomisation.
        env_cfg: Control rate (for the clock) and action layout (for the expert).
        safety: Safety limits (None: the task's ``default_safety``).
        controller_cfg: Impedance controller gains (None: defaults).
        joint_ik: For an arm under joint control (``sim_cfg.arm``, e.g. ``ur5e``): builds the
            differential IK from the arm's :class:`sim.twin_arms.TwinArm` (the robot side's own,
            ``robot_rl.app.envs.build.twin_joint_ik``; the twin does not import the drivers).

    Raises:
        ValueError: Unknown task name (the message lists the known ones), or an arm under joint
            control without ``joint_ik``.
    """
    if task_name not in TASKS:
        raise ValueError(f"unknown task {task_name!r}; known tasks: {', '.join(sorted(TASKS))}")
    info = TASKS[task_name]
    period_s = 1.0 / env_cfg.control_hz
    if sim_cfg.action_delay_s >= period_s:
        raise ValueError(
            f"action delay {sim_cfg.action_delay_s * 1e3:g} ms must be shorter than the control "
            f"period ({period_s * 1e3:g} ms at {env_cfg.control_hz:g} Hz)"
        )
    arm = twin_arm(sim_cfg.arm)
    info = task_info(task_name, sim_cfg.arm)
    task: SimTask = _load(info.task_class)()
    task.layout = arm.layout
    world = SimWorld(sim_cfg, [task.mjcf_fragment()], controller_cfg, arm)
    if arm.control == "joint":
        if joint_ik is None:
            raise ValueError(
                f"the {arm.arm.name} twin is driven in joint mode: pass joint_ik "
                "(robot_rl.app.envs.build.twin_joint_ik) to turn Cartesian targets into joint goals"
            )
        world.bridge_steps = whole_ratio(1.0 / arm.bridge_hz, world.dt_s, "bridge tick / sim step")
        world.joint_goal_solver = joint_ik(arm)
    task.bind(world)
    safety = safety or info.default_safety
    robot = SimRobot(world, safety, action_delay_s=sim_cfg.action_delay_s)
    cameras = tuple(
        SimCamera(world, name, sim_cfg.image_height, sim_cfg.image_width)
        for name in sim_cfg.cameras
    )
    clock = SimClock(world, env_cfg.control_hz)
    return SimBackend(
        world=world,
        robot=robot,
        cameras=cameras,
        task=task,
        clock=clock,
        safety=safety,
        env_cfg=env_cfg,
        info=info,
    )
