"""ArmBridge: the safety layer between commands from the env and an :class:`ArmBackend`.

Plain Python (no ROS), unit-tested on its own; :mod:`drivers.arm_bridge.node` and
``sim/ros_node.py`` wrap it. Commands arrive at any rate (:meth:`ArmBridge.submit_target`,
:meth:`ArmBridge.submit_gripper`); the newest one is executed once per control period
(:meth:`ArmBridge.tick`), clipped against the pose measured at that tick. So the target is
never more than ``max_step_m`` / ``max_step_rad`` from where the arm was at the start of the
period, however fast a publisher floods.

Safety, in order:

1. validation at submit: shape (7,), finite, unit quaternion, optional stamp age. A bad
   command is rejected (counted, ``last_error`` says why), the pending command is dropped and
   the arm holds; it is never executed;
2. at tick: :class:`robot_rl.core.safety.SafetyLayer` (workspace box, orientation cone,
   per-step limit from the measured pose), counted per limit in ``status()["clipped"]``;
3. watchdog: no fresh command within ``watchdog_timeout_s`` (in the caller's time base) ->
   ``backend.hold()`` once, counted; the next valid command resumes motion;
4. e-stop: hold and refuse every command (counted as rejected) and every reset until
   :meth:`ArmBridge.clear_error`;
5. backend error (e.g. a Franka reflex): no command reaches the backend until the error is
   cleared (by :meth:`ArmBridge.clear_error`, or at tick if ``auto_recover``).

Reset in three steps, so that a node never holds its lock while the arm travels (seconds on a
Franka): :meth:`ArmBridge.begin_reset` (validate, state ``resetting``, ``backend.start_move``),
then :meth:`ArmBridge.poll_reset` until it returns True (each call short: one
``backend.move_done()``), with the lock released in between. Meanwhile commands are refused
(counted), ticks neither execute nor run the watchdog, and :meth:`ArmBridge.estop`,
:meth:`ArmBridge.hold`, :meth:`ArmBridge.clear_error` or a backend error interrupt the reset:
the arm holds and the next ``poll_reset`` raises, naming the cause. :meth:`ArmBridge.reset`
does the three steps in one call (for a backend whose move ends at once, e.g. the twin).

Not thread-safe: the node serialises all calls (one lock around the bridge and the backend).
Times (``now_s``, stamps) are seconds in one time base chosen by the caller: sim time for the
twin, ``time.monotonic()`` on hardware.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from drivers.arm_bridge.backend import ArmBackend
from robot_rl.core.safety import CommandWatchdog, SafetyConfig, SafetyLayer
from robot_rl.core.types import ArmCommand, UnsafeCommandError

STATES = ("idle", "moving", "holding", "resetting", "estop", "error")
"""Values of ``status()["state"]``."""
BACKEND_ERROR = "backend error: "
"""In the message of a reset refused or ended for an error of the backend's own (a servo that
did not answer, a reflex; never an e-stop, hold or clear_error): the arm holds and may move
again once the error clears (``auto_recover``, or ``clear_error``). ``RosRobot.reset`` raises
:class:`~robot_rl.core.types.ArmFaultError` for it, which the actor waits out."""
TARGET_INTERVAL_PERIODS = 0.8
"""The nodes' ``BridgeConfig.min_target_interval_s`` in control periods: a target is executed
as soon as it arrives unless the previous one was executed less than 0.8 periods ago, which
absorbs a late action's jitter within the following one or two targets while bounding the speed
at ``max_step_m`` per 0.8 periods."""


class ResetJob:
    """One reset under way (from :meth:`ArmBridge.begin_reset`); pass it to
    :meth:`ArmBridge.poll_reset`.

    Attributes:
        pose: The goal (7,) after validation.
        gripper: The gripper closure goal in [0, 1].
        interrupted: Why the reset was ended before arrival (e.g. ``"interrupted by e-stop"``),
            or None while it runs or once it has arrived.
    """

    def __init__(self, pose: np.ndarray, gripper: float) -> None:
        self.pose = pose
        self.gripper = gripper
        self.interrupted: str | None = None


@dataclass(frozen=True)
class ClearJob:
    """A :meth:`ArmBridge.clear_error` (or an automatic recovery) split in three, so that the
    backend's recovery, which may take seconds on a real arm, runs without the caller's lock:
    :meth:`ArmBridge.begin_clear_error` (fast, under the lock), ``backend.clear_error()`` (slow,
    no lock), :meth:`ArmBridge.finish_clear_error` (fast, under the lock)."""

    estops: int  # e-stops so far: one more by the finish means an e-stop came meanwhile
    had_error: bool  # the backend reported an error at the start
    clear_estop: bool  # a clear_error call (True) or an automatic recovery at tick (False)


@dataclass(frozen=True)
class BridgeConfig:
    """How the bridge treats commands.

    Attributes:
        safety: Workspace box, orientation cone, per-step limit, watchdog timeout.
        unit_quat_tol: Largest accepted ``| |q| - 1 |`` of a target quaternion.
        max_command_age_s: A command whose stamp is older than this at submit time is rejected
            as stale (None: stamps are not checked, e.g. when the sender's clock differs).
        auto_recover: At tick, try ``backend.clear_error()`` when the backend reports an error
            (Franka reflexes); counted in ``status()["recoveries"]``. E-stop is never cleared
            automatically.
        min_target_interval_s: A queued target is executed at a tick only this long after the
            previous target was (it waits for a later tick otherwise), in the caller's time
            base. The per-step limit bounds each target against the pose measured when it is
            executed, so this interval bounds the speed at ``max_step_m`` per interval however
            fast targets come. A caller that ticks often (at every state period, or when a
            target arrives) executes each target as soon as it may: the policy's action acts
            at once, and one late target delays the next by at most the interval's shortfall
            (not by a whole control period, as fixed per-period windows would, for every
            target after it). 0: every tick executes the newest target.
    """

    safety: SafetyConfig = SafetyConfig()
    unit_quat_tol: float = 1e-3
    max_command_age_s: float | None = None
    auto_recover: bool = False
    min_target_interval_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.unit_quat_tol < 0.5:
            raise ValueError(f"unit_quat_tol {self.unit_quat_tol} must be in (0, 0.5)")
        if self.max_command_age_s is not None and self.max_command_age_s <= 0:
            raise ValueError("max_command_age_s must be positive (or None to disable)")
        if not 0.0 <= self.min_target_interval_s < float("inf"):
            raise ValueError(
                f"min_target_interval_s must be >= 0 and finite, got {self.min_target_interval_s}"
            )


class ArmBridge:
    """Safety between commands and a backend.

    Args:
        backend: The arm (connected by the caller before the first tick).
        config: Limits and command checks.
    """

    def __init__(self, backend: ArmBackend, config: BridgeConfig) -> None:
        self.backend = backend
        self.config = config
        self.safety = SafetyLayer(config.safety)
        self.watchdog = CommandWatchdog(config.safety.watchdog_timeout_s)
        self._pending_pose: np.ndarray | None = None
        self._pending_stamp_s: float | None = None
        self._gripper = 0.0
        self._gripper_pending = False
        self._state = "idle"
        self._estop = False
        self._estops = 0  # e-stops so far (a clear in flight checks it)
        self._clearing = False  # a ClearJob is in flight
        self._reset: ResetJob | None = None
        self._stamp_s = 0.0
        self.last_command_s: float | None = None
        """``now_s`` of the last accepted target (None before the first)."""
        self.last_executed: ArmCommand | None = None
        """The last command handed to ``backend.command`` (after safety)."""
        self.last_executed_s: float | None = None
        """``now_s`` of the tick that handed it over (its safety clip read the pose then)."""
        self._last_target_s: float | None = None  # now_s of the last target executed
        self.deferred_ticks = 0
        """Ticks that left a queued target waiting for ``min_target_interval_s``."""
        self.watchdog_holds = 0
        self.last_watchdog_hold_s: float | None = None
        """``now_s`` of the tick at which the watchdog last held the arm (None: never)."""
        self.rejected = 0
        self.recoveries = 0
        self.clipped = {"box": 0, "step": 0, "rotation": 0}
        self.last_error: str | None = None

    # -- commands ---------------------------------------------------------------------------

    def submit_target(self, pose: np.ndarray, now_s: float, stamp_s: float | None = None) -> bool:
        """Queue an absolute TCP target (7,) ``[x, y, z, qw, qx, qy, qz]``; executed at the next
        :meth:`tick`. Newest wins.

        Args:
            pose: The target in the base frame.
            now_s: Current time (feeds the watchdog).
            stamp_s: The command's own stamp, checked against ``max_command_age_s``.

        Returns:
            True if accepted. False if rejected (e-stop active, a reset under way, or malformed:
            NaN/inf, wrong shape, non-unit quaternion, stale stamp); a malformed command also
            drops the pending one and makes the arm hold (except during a reset, which goes on).
        """
        self._stamp_s = now_s
        if self._estop:
            return self._refuse("e-stop active: command refused; call clear_error first")
        if self._reset is not None:
            return self._refuse("reset under way: command refused; send it after the reset")
        try:
            target = self._validate_pose(pose)
            if stamp_s is not None and self.config.max_command_age_s is not None:
                age = now_s - stamp_s
                if not math.isfinite(age) or age > self.config.max_command_age_s:
                    raise UnsafeCommandError(
                        f"stale command: stamp {stamp_s:.3f} s is {age:.3f} s old at "
                        f"{now_s:.3f} s (limit {self.config.max_command_age_s} s)"
                    )
        except UnsafeCommandError as e:
            return self.reject_malformed(str(e), now_s)
        self._pending_pose = target
        self._pending_stamp_s = stamp_s
        self.last_command_s = now_s
        self.watchdog.feed(now_s)
        return True

    def reject_malformed(self, reason: str, now_s: float) -> bool:
        """Count a malformed command (also one that failed to parse at the node), drop the
        pending target and hold (a reset under way goes on). Always returns False."""
        self._stamp_s = now_s
        self._refuse(reason)
        self._pending_pose = None
        if not self._estop and self._reset is None:
            self.backend.hold()
            if self._state == "moving":
                self._state = "holding"
        return False

    def submit_gripper(self, closure: float, now_s: float) -> bool:
        """Set the gripper closure target in [0, 1] (clipped); sent with the next target, or at
        the next tick if no target comes.

        Returns:
            False (rejected, counted) on NaN/inf or during e-stop.
        """
        self._stamp_s = now_s
        if self._estop:
            return self._refuse("e-stop active: gripper command refused; call clear_error first")
        if self._reset is not None:
            return self._refuse("reset under way: gripper command refused")
        if not math.isfinite(closure):
            return self._refuse(
                f"gripper command {closure} is not finite; send a closure in [0, 1]"
            )
        self._gripper = float(min(max(closure, 0.0), 1.0))
        self._gripper_pending = True
        return True

    def _validate_pose(self, pose: np.ndarray) -> np.ndarray:
        try:
            target = np.asarray(pose, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise UnsafeCommandError(f"target pose is not numeric: {e}") from e
        if target.shape != (7,):
            raise UnsafeCommandError(
                f"target pose must have shape (7,) [x, y, z, qw, qx, qy, qz], got {target.shape}"
            )
        if not np.all(np.isfinite(target)):
            raise UnsafeCommandError(f"target pose contains NaN or inf: {target}")
        with np.errstate(over="ignore"):  # 1e300 components: norm inf, rejected below
            n = float(np.linalg.norm(target[3:7]))
        if not abs(n - 1.0) <= self.config.unit_quat_tol:
            raise UnsafeCommandError(
                f"target quaternion {target[3:7]} has norm {n:.6g}; send a unit quaternion "
                "(w, x, y, z)"
            )
        return target.copy()

    def _refuse(self, reason: str) -> bool:
        self.rejected += 1
        self.last_error = reason
        return False

    # -- control period ---------------------------------------------------------------------

    def tick(self, now_s: float, recover: bool = True) -> bool:
        """Run one control period's decisions at ``now_s``: backend error handling, watchdog,
        then execute the pending command (if any) clipped against the measured pose.

        During a reset only a backend error is acted on (it interrupts the reset).

        Args:
            now_s: The time base's now.
            recover: With ``auto_recover``, recover a backend error here (blocking for as long
                as ``backend.clear_error()`` takes). False: only hold; the caller sees
                :attr:`recovery_due` and recovers outside its lock with a :class:`ClearJob`
                (the ROS node: e-stop and state publishing must not wait for a recovery).

        Returns:
            True if a command was sent to the backend.
        """
        self._stamp_s = now_s
        if self._estop:
            return False
        if self._reset is not None:
            if self.backend.error is None:
                return False  # the reset's move owns the arm: no commands, no watchdog
            self._interrupt_reset(f"{BACKEND_ERROR}{self.backend.error}")
        if self.backend.error is not None:
            self.last_error = self.backend.error
            self._state = "error"
            self._pending_pose = None
            if self._clearing or not (self.config.auto_recover and recover):
                return False
            job = self.begin_clear_error(now_s, clear_estop=False)
            if not self.finish_clear_error(job, bool(self.backend.clear_error())):
                return False
        if self.watchdog.expired(now_s):
            self.watchdog_holds += 1
            self.last_watchdog_hold_s = now_s
            self.watchdog.reset()
            self._pending_pose = None
            self.backend.hold()
            self._state = "holding"
            return False
        if self._pending_pose is None and not self._gripper_pending:
            return False
        if self._pending_pose is not None and self._too_soon(now_s):
            self.deferred_ticks += 1
            return False  # the target (and its gripper command) waits for a later tick
        current = self.backend.read_state().tcp_pose
        if self._pending_pose is None:
            if self.last_executed is None or self._state != "moving":
                target = current  # gripper only: keep the arm where it is
            else:
                target = self.last_executed.target_pose
        else:
            target = self._pending_pose
        executed, report = self.safety.apply(ArmCommand(target, self._gripper), current)
        self.clipped["box"] += int(report.workspace_clipped)
        self.clipped["step"] += int(report.step_clipped)
        self.clipped["rotation"] += int(report.orientation_clipped)
        self.backend.command(executed.target_pose, executed.gripper)
        self.last_executed, self.last_executed_s = executed, now_s
        if self._pending_pose is not None:
            self._state = "moving"
            self._last_target_s = now_s
        self._pending_pose = None
        self._gripper_pending = False
        return True

    def _too_soon(self, now_s: float) -> bool:
        last = self._last_target_s
        gap = self.config.min_target_interval_s
        return last is not None and gap > 0 and last <= now_s < last + gap - 1e-9

    @property
    def has_pending(self) -> bool:
        """A target is queued for the next tick."""
        return self._pending_pose is not None

    @property
    def pending_stamp_s(self) -> float | None:
        """Stamp of the queued target (None if none or unstamped)."""
        return self._pending_stamp_s if self._pending_pose is not None else None

    # -- services ---------------------------------------------------------------------------

    def hold(self, now_s: float, why: str = "hold") -> None:
        """Stop and hold the current pose until the next valid command.

        Args:
            now_s: Current time.
            why: Names the cause in the failure of a reset this interrupts.
        """
        self._stamp_s = now_s
        self._interrupt_reset(why)
        self._pending_pose = None
        self.watchdog.reset()
        self.backend.hold()
        if not self._estop:
            self._state = "holding"

    def estop(self, now_s: float) -> None:
        """Hold and refuse every command and reset until :meth:`clear_error`; a reset under
        way ends (its next :meth:`poll_reset` raises "interrupted by e-stop")."""
        self._stamp_s = now_s
        self._interrupt_reset("e-stop")
        self._estop = True
        self._estops += 1
        self._pending_pose = None
        self._gripper_pending = False
        self.watchdog.reset()
        self.backend.hold()
        self._state = "estop"
        self.last_error = "e-stop"

    def clear_error(self, now_s: float) -> bool:
        """Clear the e-stop and any backend error. Nothing queued before is executed.

        Blocks for as long as ``backend.clear_error()`` takes; a caller that holds a lock others
        need (the ROS node) uses :meth:`begin_clear_error` / :meth:`finish_clear_error` instead.

        Returns:
            True if the arm may move again (``backend.clear_error()`` succeeded).
        """
        job = self.begin_clear_error(now_s)
        return self.finish_clear_error(job, bool(self.backend.clear_error()))

    @property
    def recovery_due(self) -> bool:
        """``auto_recover`` and the backend reports an error that no e-stop or clear covers:
        the caller of ``tick(recover=False)`` should recover (a :class:`ClearJob`)."""
        return (
            self.config.auto_recover
            and self.backend.error is not None
            and not (self._estop or self._clearing)
        )

    def begin_clear_error(self, now_s: float, clear_estop: bool = True) -> ClearJob:
        """Start a clear (``clear_estop``: a clear_error call) or an automatic recovery (False,
        as :meth:`tick` does with ``auto_recover``): the pending target is dropped; a clear_error
        call also drops the gripper command and ends a reset under way. Then call
        ``backend.clear_error()`` (without the lock) and :meth:`finish_clear_error`."""
        self._stamp_s = now_s
        self._clearing = True
        self._pending_pose = None
        if clear_estop:
            self._gripper_pending = False
            self._interrupt_reset("clear_error")
            self.watchdog.reset()
        else:
            self.last_error = self.backend.error
            self._state = "error"
        return ClearJob(self._estops, self.backend.error is not None, clear_estop)

    def finish_clear_error(self, job: ClearJob, backend_ok: bool) -> bool:
        """End a :class:`ClearJob` with what ``backend.clear_error()`` returned. An e-stop that
        came meanwhile stands (False). Returns True if the arm may move again."""
        self._clearing = False
        if self._estops != job.estops:
            return False  # estop() set the state; the arm holds
        ok = backend_ok and (self.backend.error is None or not job.had_error)
        if job.had_error and ok:
            self.recoveries += 1
        if not ok:
            self._state = "error"
            self.last_error = self.backend.error or "backend could not clear its error"
            return False
        if job.clear_estop:
            self._estop = False
            self.backend.hold()
            self._state = "idle"
            self.last_error = None
        else:
            self._state = "holding"
        return True

    def begin_reset(self, pose: np.ndarray, gripper: float, now_s: float) -> ResetJob:
        """Start moving to ``pose`` (7,) and the gripper to ``gripper`` (returns at once).

        Drops the pending command and disarms the watchdog; state ``resetting`` until
        :meth:`poll_reset` reports arrival or the reset is interrupted.

        Raises:
            RuntimeError: E-stop active, backend error (clear it first), a reset already under
                way, or the backend refused to start the move.
            UnsafeCommandError: ``pose`` is malformed or outside the workspace box / cone.
        """
        self._stamp_s = now_s
        if self._estop or self.backend.error is not None:
            why = "e-stop is active" if self._estop else f"{BACKEND_ERROR}{self.backend.error}"
            raise RuntimeError(f"cannot reset: {why}; call clear_error first")
        if self._reset is not None:
            raise RuntimeError("cannot reset: a reset is already under way; wait for its answer")
        target = self._validate_pose(pose)
        if not math.isfinite(gripper):
            raise UnsafeCommandError(f"reset gripper {gripper} is not finite")
        boxed, report = self.safety.apply(ArmCommand(target, gripper), target)
        if report.workspace_clipped or report.orientation_clipped:
            raise UnsafeCommandError(
                f"reset pose {target} is outside the workspace box or orientation cone; choose "
                "a pose inside the safety limits"
            )
        self._pending_pose = None
        self._gripper_pending = False
        self.watchdog.reset()
        job = ResetJob(boxed.target_pose, boxed.gripper)
        self._reset = job
        self._state = "resetting"
        try:
            self.backend.start_move(job.pose, job.gripper)
        except Exception as e:  # noqa: BLE001 - any backend failure ends the reset
            self._fail_reset(job, f"the arm could not start the move: {e}")
        return job

    def poll_reset(self, job: ResetJob, now_s: float) -> bool:
        """One short check of a reset under way.

        Returns:
            True once the arm (and gripper) arrived: the bridge is ``idle``, nothing pending.
            False while moving: call again (without holding the node's lock in between).

        Raises:
            RuntimeError: The reset ended without arriving: interrupted (e-stop, hold,
                clear_error, backend error; the message names it) or the backend gave up (a
                reflex, not reached in its time limit; the arm then holds).
        """
        self._stamp_s = now_s
        if job.interrupted is not None:
            raise RuntimeError(job.interrupted)
        if job is not self._reset:
            raise RuntimeError("this reset is not the one under way")
        try:
            done = bool(self.backend.move_done())
        except Exception as e:  # noqa: BLE001 - any backend failure ends the reset
            self._fail_reset(job, str(e))
        if not done:
            return False
        self._reset = None
        self._gripper = job.gripper
        self.last_executed = None
        self._last_target_s = None  # a new episode (the twin's sim time restarts)
        self._state = "idle"
        return True

    def reset(self, pose: np.ndarray, gripper: float, now_s: float, poll_s: float = 0.01) -> None:
        """Move to ``pose`` (7,) and the gripper to ``gripper``, blocking until there.

        :meth:`begin_reset` then :meth:`poll_reset` every ``poll_s`` seconds in one call: for a
        caller that may block (the twin, whose move ends at once, under its physics lock).

        Raises:
            RuntimeError, UnsafeCommandError: As :meth:`begin_reset` and :meth:`poll_reset`.
        """
        job = self.begin_reset(pose, gripper, now_s)
        while not self.poll_reset(job, now_s):
            time.sleep(poll_s)

    @property
    def resetting(self) -> bool:
        """A reset is under way (between :meth:`begin_reset` and its end)."""
        return self._reset is not None

    def _interrupt_reset(self, why: str) -> None:
        """End the reset under way (if any) without arrival; the caller makes the arm hold."""
        if self._reset is not None:
            self._reset.interrupted = f"interrupted by {why}"
            self._reset = None
            self.last_error = f"reset interrupted by {why}"

    def _fail_reset(self, job: ResetJob, reason: str) -> NoReturn:
        """The backend ended the reset: hold (unless it is in error), record, raise."""
        if self.backend.error is not None and BACKEND_ERROR not in reason:
            reason = f"{BACKEND_ERROR}{reason}"
        job.interrupted = reason
        self._reset = None
        self.last_error = f"reset failed: {reason}"
        if self.backend.error is None:
            self.backend.hold()
            self._state = "holding"
        else:
            self._state = "error"
        raise RuntimeError(reason)

    # -- status -----------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """One of :data:`STATES`."""
        return self._state

    @property
    def estopped(self) -> bool:
        return self._estop

    def status(self) -> dict:
        """The bridge status JSON object of the contract (plus ``last_command_s``,
        ``last_watchdog_hold_s``, ``executed_pose``: the last target sent to the backend, after
        the safety clip, or None, and ``executed_s``: when)."""
        executed = self.last_executed
        return {
            "stamp_s": float(self._stamp_s),
            "state": self._state,
            "watchdog_holds": self.watchdog_holds,
            "clipped": dict(self.clipped),
            "rejected": self.rejected,
            "last_error": self.last_error,
            "recoveries": self.recoveries,
            "last_command_s": self.last_command_s,
            "last_watchdog_hold_s": self.last_watchdog_hold_s,
            "executed_pose": None if executed is None else [float(v) for v in executed.target_pose],
            "executed_s": self.last_executed_s,
            "deferred_ticks": self.deferred_ticks,
            "backend": self._backend_telemetry(),
        }

    def _backend_telemetry(self) -> dict:
        """The backend's own figures (``telemetry()``, optional in :class:`ArmBackend`; e.g. the
        Franka's command success rate), or {}."""
        telemetry = getattr(self.backend, "telemetry", None)
        return telemetry() if callable(telemetry) else {}
