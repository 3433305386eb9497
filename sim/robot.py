"""SimRobot: the twin's arm behind :class:`robot_rl.core.protocols.Robot`.

Commands go through the same :class:`robot_rl.core.safety.SafetyLayer` as on the real arm
(workspace box, orientation cone, per-step limit against the measured pose); the impedance
controller then tracks the executed target at every physics step. A
:class:`robot_rl.core.safety.CommandWatchdog` on simulation time holds the current pose when no
command arrived for ``watchdog_timeout_s``.

With ``action_delay_s`` a command takes effect that long after it was sent (the previous target
holds meanwhile), the way a real arm's does: the observation an action answers is older than
the arm when the action lands (over ROS 2 on the real-robot path, 70-140 ms). The command is
clipped against the pose at sending.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.protocols import RobotSpec
from robot_rl.core.safety import CommandWatchdog, SafetyConfig, SafetyLayer
from robot_rl.core.types import ArmCommand, RobotState, SafetyReport, UnsafeCommandError
from sim.config import check_action_delay_s
from sim.world import SimWorld

IK_TOLERANCE = 1e-3
"""Largest accepted IK residual at reset (metres + radians)."""


class SimRobot:
    """The twin's arm and gripper.

    Args:
        world: The world whose arm this is.
        safety: Limits applied to every command.
        action_delay_s: Each command takes effect this long after :meth:`send_command`
            (0: at once).
    """

    def __init__(self, world: SimWorld, safety: SafetyConfig, action_delay_s: float = 0.0) -> None:
        self.world = world
        self.action_delay_s = check_action_delay_s(action_delay_s)
        self._due: tuple[float, ArmCommand] | None = None  # (sim time, command) not yet applied
        self.safety = SafetyLayer(safety)
        self.watchdog = CommandWatchdog(safety.watchdog_timeout_s)
        self._spec = RobotSpec.from_arm(world.arm, name=f"{world.arm.name}-twin")
        self._connected = False
        self.watchdog_holds = 0
        """How many times the watchdog made the arm hold (diagnostics)."""
        world.step_hooks.append(self._check_watchdog)
        if self.action_delay_s > 0:
            world.step_hooks.append(self._apply_due)

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def _require_connected(self) -> None:
        if not self._connected:
            raise RuntimeError("SimRobot is not connected; call connect() first")

    def reset(self, start_pose: np.ndarray, gripper: float = 0.0) -> None:
        """Teleport the arm to ``start_pose`` (7,) (IK from home), zero velocity, controller
        target = start pose, gripper at ``gripper``; then run the world's post-arm-reset hooks
        (a task may place an object in the hand there).

        Raises:
            ValueError: ``start_pose`` is unreachable (IK residual above ``IK_TOLERANCE``).
        """
        self._require_connected()
        self._due = None
        w = self.world
        start_pose = np.asarray(start_pose, dtype=np.float64)
        q, residual = w.solve_ik(start_pose)
        if residual > IK_TOLERANCE:
            raise ValueError(
                f"start pose {start_pose} is unreachable (IK residual {residual:.2e}); "
                "choose a start pose inside the arm's workspace"
            )
        w.set_arm_joints(q)
        w.settle_joints()
        w.set_gripper_closure(gripper)
        w.set_gripper_target(gripper)
        w.forward()
        w.set_target(w.tcp_pose())
        for hook in w.post_arm_reset_hooks:
            hook()
        w.forward()
        self.watchdog.reset()

    def read_state(self) -> RobotState:
        w = self.world
        return RobotState(
            stamp_s=float(w.data.time),
            tcp_pose=w.tcp_pose(),
            tcp_vel=w.tcp_twist(),
            tcp_wrench=w.tcp_wrench(),
            gripper_pos=w.gripper_closure(),
            joint_pos=w.joint_pos(),
            joint_vel=w.joint_vel(),
        )

    def send_command(self, command: ArmCommand) -> tuple[ArmCommand, SafetyReport]:
        """Clip ``command`` with the safety layer against the measured pose; track the result
        (``action_delay_s`` later, if set).

        Raises:
            UnsafeCommandError: Malformed command (NaN, inf, wrong shape); the arm holds.
        """
        self._require_connected()
        try:
            executed, report = self.safety.apply(command, self.world.tcp_pose())
        except UnsafeCommandError:
            self.hold()
            raise
        now_s = float(self.world.data.time)
        if self.action_delay_s > 0:
            self._due = (now_s + self.action_delay_s, executed)
        else:
            self._apply(executed)
        self.watchdog.feed(now_s)
        return executed, report

    def hold(self) -> None:
        """Target = current measured pose (gripper target unchanged); a delayed command not yet
        applied is dropped."""
        self._due = None
        self.world.set_target(self.world.tcp_pose())
        self.watchdog.reset()

    def _apply(self, executed: ArmCommand) -> None:
        self.world.set_target(executed.target_pose)
        self.world.set_gripper_target(executed.gripper)

    def _apply_due(self) -> None:
        # A physics-step hook (with action_delay_s): the delayed command lands on time. Half a
        # physics step of slack: sim time is a float sum of steps.
        due = self._due
        if due is not None and float(self.world.data.time) >= due[0] - 0.5 * self.world.dt_s:
            self._due = None
            self._apply(due[1])

    def _check_watchdog(self) -> None:
        # Called at every physics step (cheap unless expired).
        if self.watchdog.expired(float(self.world.data.time)):
            self.watchdog_holds += 1
            self.hold()
