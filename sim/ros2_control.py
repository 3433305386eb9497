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
import multiprocessing
from collections.abc import Sequence

import numpy as np

from drivers.feetech.protocol import TICKS_PER_TURN
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
            "dropped_after_reset": self.dropped_after_reset,
        }


TICK_ZERO = 2048
"""The twin's servos read :data:`TICK_ZERO` at joint angle 0 and count up with the angle (one
turn = :data:`TICKS_PER_TURN` ticks), as an STS3215 mounted at mid-range."""


class SharedServoState:
    """The servos' positions and their newest goals in shared memory, between the twin's process
    and its servo bus's process (:class:`ServoBusProcess`); either side holds :attr:`lock` for
    a copy only.

    Args:
        num_servos: Servos on the bus.
        context: The multiprocessing context the bus's process starts from (default: spawn).
    """

    def __init__(self, num_servos: int, context=None) -> None:
        ctx = context if context is not None else multiprocessing.get_context("spawn")
        self.num_servos = int(num_servos)
        self.lock = ctx.Lock()
        self.positions = ctx.RawArray("q", self.num_servos)
        self.goals = ctx.RawArray("q", self.num_servos)
        self.torque = ctx.RawArray("b", self.num_servos)
        self.goal_count = ctx.RawValue("q", 0)
        """Goals written so far (a reader applies goals when this moved)."""

    def read_positions(self) -> np.ndarray:
        """(N,) ticks as of the last :meth:`put_positions`."""
        with self.lock:
            return np.array(self.positions[:], dtype=np.int64)

    def put_positions(self, ticks: np.ndarray) -> None:
        with self.lock:
            self.positions[:] = [int(t) for t in ticks]

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        """The newest goals (replacing any not yet taken)."""
        goals = [int(t) for t in ticks]
        torque = [int(bool(on)) for on in torque_enabled]
        with self.lock:
            self.goals[:] = goals
            self.torque[:] = torque
            self.goal_count.value += 1

    def take_goals(self, seen: int) -> tuple[int, np.ndarray, np.ndarray] | None:
        """``(count, ticks, torque_enabled)`` if goals were written since count ``seen``."""
        with self.lock:
            count = self.goal_count.value
            if count == seen:
                return None
            return count, np.array(self.goals[:], np.int64), np.array(self.torque[:], bool)


class TwinServoModel:
    """The twin's arm behind a simulated servo bus (``drivers.feetech.sim_bus.SimServoBus``'s
    ``ServoModel``): servo ``i`` (ids 1..N) is arm joint ``i``, the last servo is the jaw.

    Positions come from physics and goals go back to angles through one calibration (the
    node's ``sim.ros2_control_node.twin_servo_calibration``, the file the SO-101 node loads:
    one conversion on both sides of the bus; the jaw's ticks from its closure). Goals
    go through :class:`ControlledArm` (checked against the joint limits, dropped after a scene
    reset until one near the arm arrives, fed to the watchdog) onto the twin's joint servos
    (:mod:`sim.joint_servo`: speed limit, deadband, play, sag), the jaw's as a closure. Torque
    off on a servo: its goal is not applied (the twin's servos hold, they do not go limp).

    The bus never waits for the twin, as a real servo answers from its own encoder whatever the
    PC is doing: the node calls :meth:`sync` under its lock at every physics event (the latest
    goals go in, the positions come out) through a :class:`SharedServoState`, and the bus
    answers from that snapshot and leaves goals there, in the bus's own process
    (:class:`ServoBusProcess`). Reading physics under the lock made a bus read wait while the
    node rendered its cameras or reset the scene; with a snapshot in the twin's process the bus
    thread still waited for the twin's GIL, and with a realtime-priority actor on the same two
    cores the twin fell 0.1-0.2 s behind: three unanswered 50 ms reads and the bridge faulted
    on a twin that was only busy.

    Args:
        ctl: The twin arm's controller interface (``interface="servo_bus"``).
        calibration: ``drivers.feetech.calibration.ArmCalibration`` of these servos (arm
            joints in the arm's order, then the jaw as the gripper).
        shared: The snapshot the bus reads (default: a new one).
    """

    def __init__(self, ctl: ControlledArm, calibration, shared: SharedServoState | None = None):
        if ctl.world.twin_arm.jaw is None:
            raise ValueError(f"the {ctl.arm.name} twin has no jaw gripper for a servo bus")
        self.ctl = ctl
        self.world = ctl.world
        self.num_servos = len(ctl.arm.joint_names) + 1
        if tuple(calibration.joint_names) != tuple(ctl.arm.joint_names):
            raise ValueError(
                f"calibration joints {calibration.joint_names} are not the {ctl.arm.name} "
                f"twin's {ctl.arm.joint_names}"
            )
        self.calibration = calibration
        self.shared = shared if shared is not None else SharedServoState(self.num_servos)
        if self.shared.num_servos != self.num_servos:
            raise ValueError(
                f"shared state of {self.shared.num_servos} servos, not {self.num_servos}"
            )
        self._seen = 0
        self.shared.put_positions(self._measure())

    def sync(self) -> None:
        """Under the node's physics lock: apply the newest goals the bus received since the
        last call, then take the servos' positions for the bus to answer with."""
        taken = self.shared.take_goals(self._seen)
        if taken is not None:
            self._seen, ticks, on = taken
            q = self.calibration.ticks_to_rad(ticks[:-1])
            closure = self.calibration.gripper_ticks_to_closure(float(ticks[-1]))
            if np.all(on[:-1]):
                self.ctl.joint_goal(self.ctl.arm.joint_names, list(q), float(self.world.data.time))
            if on[-1]:
                self.ctl.gripper_closure(closure)
        self.shared.put_positions(self._measure())

    def _measure(self) -> np.ndarray:
        arm = self.calibration.rad_to_ticks(self.world.joint_pos(), clip=False)
        jaw = self.calibration.gripper_closure_to_ticks(self.world.gripper_closure())
        return np.clip(np.append(arm, jaw), 0, TICKS_PER_TURN - 1).astype(np.int64)

    def read_positions(self) -> np.ndarray:
        """(N + 1,) ticks: the arm joints, then the jaw (as of the last :meth:`sync`)."""
        return self.shared.read_positions()

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        """Goals of the servos whose torque is on (all arm joints on: a joint goal), applied at
        the next :meth:`sync` (a newer write replaces one not yet applied)."""
        self.shared.write_goals(ticks, torque_enabled)


class ServoBusProcess:
    """The twin's simulated servo bus (``drivers.feetech.sim_bus.SimServoBus``) in a process of
    its own, answering from a :class:`SharedServoState` (see :class:`TwinServoModel`): the bus
    needs neither the twin's lock nor its interpreter, so a twin that is busy or starved of CPU
    delays what the servos report, never whether they answer.

    Args:
        shared: The snapshot the twin's node syncs.
        ids: Servo ids, one per shared slot.
        timeout_s: Wait for the process to open its pty, s (a start that takes longer fails).
    """

    def __init__(self, shared: SharedServoState, ids: Sequence[int], timeout_s: float = 30.0):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_serve_servo_bus, args=(shared, tuple(ids), child), name="twin-servo-bus"
        )
        self._process.daemon = True
        self._process.start()
        child.close()
        if not self._conn.poll(timeout_s):
            self.close()
            raise RuntimeError(f"the twin's servo bus process opened no pty in {timeout_s:.0f} s")
        self.port: str = self._conn.recv()
        """The pty's path (``/dev/pts/N``) a client opens."""

    def close(self) -> None:
        """Stop the process (idempotent)."""
        try:
            self._conn.send("stop")
        except (OSError, ValueError):
            pass
        self._conn.close()
        self._process.join(timeout=5.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


class _SharedBusModel:
    """The bus process's ``ServoModel``: the shared snapshot's positions out, goals in."""

    def __init__(self, shared: SharedServoState) -> None:
        self.shared = shared

    def read_positions(self) -> np.ndarray:
        return self.shared.read_positions()

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        self.shared.write_goals(ticks, torque_enabled)


def _serve_servo_bus(shared: SharedServoState, ids: tuple[int, ...], conn) -> None:
    """The bus process: serve until the twin says stop or goes away (the pipe closes)."""
    from drivers.feetech.sim_bus import SimServoBus

    with SimServoBus(ids=ids, model=_SharedBusModel(shared)) as bus:
        conn.send(bus.port)
        try:
            conn.recv()
        except (EOFError, OSError):
            pass
