"""The twin's arm as a ros2_control-driven arm presents itself, plain Python (no ROS):
:class:`ControlledArm` checks and applies the controllers' commands and runs the command
watchdog; ``sim/ros2_control_node.py`` is its ROS 2 adapter.

Joint commands (``joint_trajectory_controller``, forward position controller) become the twin's
joint servo goals (:mod:`sim.joint_servo`); a Cartesian target (a compliant Cartesian
controller's) becomes the twin's TCP target, which the twin turns into joint goals by IK at its
bridge rate. A command with other joint names than the arm's, a wrong length, NaN/inf or a goal
outside the joint limits is refused and counted, never executed.

A trajectory with its points' ``time_from_start`` is timed as a ``joint_trajectory_controller``
times one whose header stamp is zero: it starts on arrival, the first point is reached from the
servo goal of that moment (a point at time 0 at once), and every state period (:meth:`tick`)
the servo goal is interpolated linearly between the points; after the last point's time it
stays there. A new command replaces a running trajectory; the command watchdog counts a
trajectory as commanded until its end. Without times (and a forward position command), the last
point is the servo goal at once and the servos move at their speed limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from robot_rl.core.clock import LongestGap
from robot_rl.core.safety import CommandWatchdog
from sim.twin_arms import VENDOR_INTERFACES
from sim.world import SimWorld

INTERFACES = VENDOR_INTERFACES
"""The interfaces this twin plays (:data:`sim.twin_arms.VENDOR_INTERFACES`)."""
GRIPPER_JOINT = "robotiq_85_left_knuckle_joint"
GRIPPER_CLOSED_RAD = 0.8
"""The gripper in driver units: a Robotiq 2F-85's knuckle, 0 rad open .. 0.8 rad closed."""
RESYNC_RAD = 0.1
"""After a scene reset, joint commands further than this from the arm are dropped (rad) ..."""
RESYNC_M = 0.02
"""... and Cartesian targets further than this from the TCP (m)."""


class ControlledArm:
    """The twin's arm as ros2_control presents it (plain Python): checks and applies commands,
    runs the command watchdog. Call under the node's physics lock.

    Args:
        world: The twin (its servos in ``joint``; its Cartesian target in ``cartesian``).
        interface: One of :data:`INTERFACES`.
        watchdog_s: Hold after this long without an arm command, sim seconds.
    """

    def __init__(self, world: SimWorld, interface: str, watchdog_s: float) -> None:
        if interface not in INTERFACES:
            raise ValueError(f"interface {interface!r}: choose one of {INTERFACES}")
        if interface in ("joint", "servo_bus") and world.servo is None:
            raise ValueError(
                f"the {world.arm.name} twin is torque-controlled (impedance); use --interface "
                "cartesian"
            )
        self.world, self.interface, self.arm = world, interface, world.arm
        self.low = np.asarray(self.arm.joint_low_rad)
        self.high = np.asarray(self.arm.joint_high_rad)
        self.watchdog = CommandWatchdog(watchdog_s)
        self.accepted = 0
        self.refused = 0
        self.last_refusal: str | None = None
        self.watchdog_holds = 0
        self.dropped_after_reset = 0
        self.command_gap = LongestGap()
        """The longest time between two accepted arm commands since the start (sim s; a scene
        reset, which turns the watchdog off, starts a new stream): the watchdog fires only
        where this exceeded it (a commander starved of CPU, or gone)."""
        self._resync = False
        self._plan: tuple[float, np.ndarray, np.ndarray] | None = None
        """The running timed trajectory: start (sim s), knot times (K + 1,) from the start (s),
        knot goals (K + 1, N) rad; knot 0 is the servo goal at acceptance."""

    def refuse(self, why: str) -> bool:
        """Count a refused command (also one the node could not decode); returns False."""
        self.refused += 1
        self.last_refusal = why
        return False

    def _accept(self, now_s: float) -> bool:
        self.accepted += 1
        self.command_gap.event(now_s)
        self.watchdog.feed(now_s)
        return True

    def _checked(self, names: Sequence[str], positions: Sequence[float]) -> np.ndarray | str:
        """Joint goals (N,) in the arm's order, or why they are refused."""
        names, wanted = list(names), list(self.arm.joint_names)
        if sorted(names) != sorted(wanted):
            return f"joint names {names}: the controller's joints are {wanted}"
        if len(positions) != len(names):
            return f"{len(positions)} positions for {len(names)} joints"
        q = np.asarray(positions, dtype=np.float64)[[names.index(j) for j in wanted]]
        if not np.all(np.isfinite(q)):
            return f"a joint position is not finite: {q}"
        out = np.flatnonzero((q < self.low) | (q > self.high))
        if out.size:
            i = int(out[0])
            return (
                f"joint {wanted[i]!r} goal {q[i]:.4f} rad is outside [{self.low[i]:.4f}, "
                f"{self.high[i]:.4f}]"
            )
        return q

    def joint_goal(self, names: Sequence[str], positions: Sequence[float], now_s: float) -> bool:
        """Servo goals from ``positions`` under ``names`` (any order); False if refused."""
        return self.trajectory(names, [positions], now_s)

    def trajectory(
        self,
        names: Sequence[str],
        points: Sequence[Sequence[float]],
        now_s: float,
        times_s: Sequence[float] | None = None,
    ) -> bool:
        """A ``JointTrajectory``: every point checked; False if refused.

        Args:
            names: The joint names of the points' positions (any order).
            points: (K,) points, each (N,) joint positions, rad.
            now_s: Sim time of arrival, s: the trajectory's start.
            times_s: (K,) each point's ``time_from_start``, s (finite, non-decreasing, >= 0):
                followed by :meth:`tick` from the present servo goal. None: the last point is
                the servo goal at once.

        After a scene reset, a timed trajectory is dropped if its first point is far from the
        arm (a planner's starts at the arm), an untimed one if its last point is.
        """
        if not points:
            return self.refuse("a trajectory without points")
        goals = []
        for positions in points:
            q = self._checked(names, positions)
            if isinstance(q, str):
                return self.refuse(q)
            goals.append(q)
        servo = self.world.servo
        assert servo is not None
        if times_s is None:
            if self._stale_after_reset(
                float(np.max(np.abs(goals[-1] - self.world.joint_pos()))), RESYNC_RAD
            ):
                return False
            self._plan = None
            servo.set_goal(goals[-1])
            return self._accept(now_s)
        t = np.asarray(times_s, dtype=np.float64)
        if t.shape != (len(goals),):
            return self.refuse(f"{t.size} time_from_start values for {len(goals)} points")
        if not (np.all(np.isfinite(t)) and t[0] >= 0 and np.all(np.diff(t) >= 0)):
            return self.refuse(
                f"time_from_start must be finite, >= 0 and non-decreasing: {t.tolist()}"
            )
        # the first point is where the motion starts (a planner's: the arm's pose)
        if self._stale_after_reset(
            float(np.max(np.abs(goals[0] - self.world.joint_pos()))), RESYNC_RAD
        ):
            return False
        self._plan = (now_s, np.append(0.0, t), np.vstack([servo.goal, *goals]))
        self._follow(now_s)
        return self._accept(now_s + float(t[-1]))  # commanded until its end

    def _follow(self, now_s: float) -> None:
        """The running trajectory's servo goal at ``now_s``; past its end: the last point, done."""
        if self._plan is None:
            return
        start_s, times, goals = self._plan
        t = max(now_s - start_s, 0.0)
        servo = self.world.servo
        assert servo is not None
        if t >= times[-1]:
            servo.set_goal(goals[-1])
            self._plan = None
            return
        i = int(np.searchsorted(times, t, side="right"))  # times[i - 1] <= t < times[i]
        a = (t - times[i - 1]) / (times[i] - times[i - 1])
        servo.set_goal(goals[i - 1] + a * (goals[i] - goals[i - 1]))

    def cartesian_target(self, pose: np.ndarray, now_s: float) -> bool:
        """The Cartesian target ``T_base_tcp`` (7,), already decoded (unit quaternion)."""
        if pose.shape != (7,) or not np.all(np.isfinite(pose)):
            return self.refuse(f"target pose is not a finite (7,): {pose}")
        if self._stale_after_reset(
            float(np.linalg.norm(pose[:3] - self.world.tcp_pose()[:3])), RESYNC_M
        ):
            return False
        self._plan = None
        self.world.set_target(pose)
        return self._accept(now_s)

    def scene_reset(self) -> None:
        """After the arm was teleported (``task/reset``): the watchdog is off, and arm commands
        far from the new pose are dropped (counted in ``dropped_after_reset``) until one near
        it arrives: they were meant for the old pose (no real arm teleports; the commander
        needs a moment to notice)."""
        self.watchdog.reset()
        self.command_gap.restart()
        self._plan = None
        self._resync = True

    def _stale_after_reset(self, distance: float, tolerance: float) -> bool:
        if not self._resync:
            return False
        if distance > tolerance:
            self.dropped_after_reset += 1
            return True
        self._resync = False
        return False

    def gripper(self, value: float) -> bool:
        """Gripper command in knuckle rad (clipped to 0..0.8)."""
        if not math.isfinite(value):
            return self.refuse(f"gripper command {value} is not finite")
        self.world.set_gripper_target(min(max(value, 0.0), GRIPPER_CLOSED_RAD) / GRIPPER_CLOSED_RAD)
        return True

    def gripper_closure(self, closure: float) -> bool:
        """Gripper command as a closure in [0, 1] (clipped; a servo bus's jaw)."""
        if not math.isfinite(closure):
            return self.refuse(f"gripper closure {closure} is not finite")
        self.world.set_gripper_target(min(max(closure, 0.0), 1.0))
        return True

    def tick(self, now_s: float) -> None:
        """Every state period: the running trajectory's servo goal; hold once when the command
        stream stopped (a trajectory counts as commanded until its end)."""
        self._follow(now_s)
        if self.watchdog.expired(now_s):
            self.watchdog.reset()
            self.watchdog_holds += 1
            self.hold()

    def hold(self) -> None:
        """Stop where the arm is (servo goals at the motors; Cartesian target at the TCP); a
        running trajectory ends."""
        self._plan = None
        servo = self.world.servo
        if self.interface != "cartesian" and servo is not None:
            servo.set_goal(servo.motor.copy())
        else:
            self.world.set_target(self.world.tcp_pose())

    def status(self) -> dict:
        return {
            "interface": self.interface,
            "accepted": self.accepted,
            "refused": self.refused,
            "last_refusal": self.last_refusal,
            "watchdog_holds": self.watchdog_holds,
            "watchdog_s": self.watchdog.timeout_s,
            "max_command_gap_s": self.command_gap.max_s,
            "dropped_after_reset": self.dropped_after_reset,
        }
