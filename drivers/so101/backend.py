"""The SO-101 arm backend: six Feetech STS3215 servos on one serial bus behind the arm bridge.

:class:`So101Backend` implements :class:`drivers.arm_bridge.backend.ArmBackend` over
:class:`drivers.feetech.bus.FeetechBus` and an :class:`~drivers.feetech.calibration.ArmCalibration`
file. A thread ticks at ``bridge_hz`` (default 50 Hz); each tick is

1. one SYNC_READ of the six present positions -> joint angles (rad) and jaw closure through the
   calibration -> TCP pose by forward kinematics (:meth:`drivers.ik.DiffIK.fk` on the SO-101's
   kinematics file), TCP twist and joint speeds by finite difference over the previous tick,
   zero wrench (the servos measure no force); this is the state :meth:`read_state` returns;
2. the next joint goal from what was asked: a Cartesian target (:meth:`command`) -> one
   :class:`~drivers.ik.DiffIK` step from the previous goal (the servos track the goal; stepping
   from the goal, not the lagging measurement, keeps the goals smooth); a move
   (:meth:`start_move`) -> the same at ``move_speed_rad_s``; a hold -> the positions measured at
   :meth:`hold`; joint teleop (:meth:`follow_joints`) -> the given joint targets;
3. one SYNC_WRITE of the six goals (ticks through the calibration).

Every goal passes one funnel (:meth:`So101Backend._send_goals`) before it reaches the bus: within
the joint limits (the description's, narrowed to the calibrated ranges) and within
``speed_scale * joint_vel_max_rad_s / bridge_hz`` of the previous goal, whatever was asked; the
jaw's closure goal moves at most ``gripper_speed_per_s / bridge_hz`` per tick. The only goals
written outside the funnel are the present positions themselves, at :meth:`connect` and
:meth:`clear_error` (hold where the arm is before torque goes on).

Errors: a servo that does not answer or answers garbage (:class:`FeetechTimeoutError`,
:class:`FeetechProtocolError`, after the bus's retries), or a lost serial port, puts the backend
in error (:attr:`error` names the servo and its joint; the bridge then refuses commands): one
last SYNC_WRITE holds the last good positions (torque stays on: the arm has no brakes), then
nothing is sent until :meth:`clear_error` pings every servo, writes the present positions as
goals, switches torque on (a servo that browned out restarts limp) and holds there.

Threads: any method from any thread, returning at once (``connect`` and ``clear_error`` talk to
the bus: tens of ms, more for a silent servo's retries). Requests go to the tick thread under a
small lock; the bus has its own. State stamps: ``time.monotonic()`` when the positions arrived.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from drivers.feetech import calibration as cal
from drivers.feetech.bus import FeetechBus
from drivers.feetech.protocol import FeetechError
from drivers.ik import DiffIK, DiffIKConfig
from drivers.so101.config import SO101_SAFETY, So101Config, So101Error, calibrated_arm
from robot_rl.core import frames
from robot_rl.core.safety import SafetyConfig
from robot_rl.core.types import RobotState

log = logging.getLogger(__name__)

try:  # pyserial is the bus's dependency (extra "arms"); without it connect fails anyway
    from serial import SerialTimeoutException as _WriteTimeout
except ImportError:  # pragma: no cover - depends on the environment
    _WriteTimeout = ()  # type: ignore[assignment,misc]

BUS_FAILURES = (FeetechError, OSError)
"""What a bus call raises when the arm cannot be reached: a servo silent or garbled
(:class:`FeetechError`), the serial port gone (``serial.SerialException`` is an ``OSError``)."""


@dataclass
class _Move:
    """A move of :meth:`So101Backend.start_move`."""

    pose: np.ndarray
    gripper: float
    deadline_s: float
    arrived: bool = False
    distance_m: float = float("inf")
    ended: str | None = None


def _check_pose(pose: np.ndarray) -> np.ndarray:
    p = np.asarray(pose, dtype=np.float64)
    if p.shape != (7,) or not np.all(np.isfinite(p)) or np.linalg.norm(p[3:7]) < 1e-6:
        raise ValueError(f"pose must be 7 finite numbers [x, y, z, qw, qx, qy, qz], got {pose!r}")
    return np.concatenate([p[:3], frames.quat_normalize(p[3:7])])


def _check_closure(gripper: float) -> float:
    g = float(gripper)
    if not np.isfinite(g):
        raise ValueError(f"gripper closure {gripper!r} is not finite; give a value in [0, 1]")
    return float(np.clip(g, 0.0, 1.0))


class So101Backend:
    """ArmBackend for an SO-101 (see the module docstring).

    Args:
        config: Port, calibration file, rates and tolerances.
        joint_safety: The workspace box that joint teleop (:meth:`follow_joints`, which does not
            pass the bridge) must respect: a joint goal whose TCP would leave it is not sent.
    """

    def __init__(self, config: So101Config, joint_safety: SafetyConfig = SO101_SAFETY) -> None:
        self.config = config
        self._box_low = np.asarray(joint_safety.workspace_low_m, dtype=np.float64)
        self._box_high = np.asarray(joint_safety.workspace_high_m, dtype=np.float64)
        self._lock = threading.Lock()  # guards the requests, the state and the counters
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bus: FeetechBus | None = None
        self.calibration: cal.ArmCalibration | None = None
        self.ik: DiffIK | None = None
        self.q_low = self.q_high = self.max_step_rad = np.zeros(0)
        # requests (under _lock)
        self._mode = "hold"
        self._target: np.ndarray | None = None  # track: the Cartesian target
        self._hold_q: np.ndarray | None = None  # hold: joint goals
        self._joint_target: np.ndarray | None = None  # joints: teleop targets
        self._gripper_target = 0.0
        self._move: _Move | None = None
        # the goals on the bus (tick thread, and connect / clear_error while it is idle)
        self._last_goal = np.zeros(0)
        self._last_gripper_goal = 0.0
        # the latest good reading (under _lock)
        self._state: RobotState | None = None
        self._error: str | None = None
        self.last_error: str | None = None
        """The last error message, kept after it was cleared."""
        self.ticks = 0
        """Ticks run since connect (in error too)."""
        self.overruns = self.bus_errors = self.recoveries = 0
        self.joint_goals_refused = 0
        """Joint-teleop goals not sent because their TCP would leave the box."""
        self.late_writes = 0
        """Bus writes repeated after pyserial's write timeout (see ``_retry_late_write``)."""
        self._tick_s: collections.deque[float] = collections.deque(maxlen=1000)
        self._write_s: collections.deque[float] = collections.deque(maxlen=1000)
        self._read_s: collections.deque[float] = collections.deque(maxlen=1000)

    # -- ArmBackend: lifecycle ---------------------------------------------------------------

    def connect(self) -> None:
        """Load the calibration, open the bus, ping the six servos, hold the present positions
        (goals = present, then torque on) and start the tick thread.

        Raises:
            So101Error: The calibration file is missing or does not fit the description, the
                port cannot be opened, a servo does not answer (named), or a joint reads outside
                its calibrated range by more than ``limit_margin_rad``.
        """
        if self._thread is not None:
            return
        cfg = self.config
        try:
            calib = cal.load(cfg.calibration, cfg.arm.joint_names, cal.SO101_GRIPPER)
        except cal.CalibrationError as e:
            raise So101Error(
                f"{e} (record one with: robot-rl arm calibrate --port {cfg.port} "
                f"--out {cfg.calibration})"
            ) from None
        self.calibration = calib
        self._setup_limits(calib)
        try:
            bus = FeetechBus(
                cfg.port, cfg.baudrate, self.servo_ids, cfg.bus_timeout_s, cfg.bus_retries
            )
        except OSError as e:
            raise So101Error(f"cannot open the SO-101's serial port {cfg.port}: {e}") from e
        try:
            ticks = self._hold_present(bus, what="connect")
            q = calib.ticks_to_rad(ticks[:-1])
            margin = cfg.limit_margin_rad
            bad = (q < self.q_low - margin) | (q > self.q_high + margin)
            if np.any(bad):
                i = int(np.flatnonzero(bad)[0])
                raise So101Error(
                    f"joint {self.joint_names[i]!r} (servo {self.servo_ids[i]}) reads "
                    f"{q[i]:.3f} rad, outside its range [{self.q_low[i]:.3f}, "
                    f"{self.q_high[i]:.3f}] rad by more than {margin} rad: is {cfg.calibration} "
                    "this arm's calibration? Recalibrate, or move the joint into its range"
                )
            bus.set_torque(None, True)
        except (So101Error, *BUS_FAILURES) as e:
            bus.close()
            with self._lock:
                self._state = None  # not connected: read_state must not return a reading
            if isinstance(e, So101Error):
                raise
            raise So101Error(f"connect: {self._describe(e)}") from e
        self._bus = bus
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="so101-tick", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Stop the tick thread and close the bus (idempotent). The servos keep holding their
        last goal unless ``torque_off_on_disconnect`` (see :class:`So101Config` for why)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        bus, self._bus = self._bus, None
        if bus is None:
            return
        if self.config.torque_off_on_disconnect:
            try:
                bus.set_torque(None, False)
            except BUS_FAILURES as e:
                log.error("SO-101: torque off at disconnect failed: %s", self._describe(e))
        bus.close()

    # -- ArmBackend: state and commands ------------------------------------------------------

    def read_state(self) -> RobotState:
        """The newest tick's reading (stamped when the positions arrived; after an error, the
        last good one, whose stamp then ages).

        Raises:
            So101Error: Not connected.
        """
        with self._lock:
            if self._state is None:
                raise So101Error("no SO-101 state yet; call connect() first")
            return self._state

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        """Track ``target_pose`` (7,) (already safe) from the next tick on; gripper closure in
        [0, 1].

        Raises:
            ValueError: A malformed pose or closure (nothing changes).
        """
        pose, closure = _check_pose(target_pose), _check_closure(gripper)
        with self._lock:
            self._end_move("a new command")
            self._mode, self._target, self._gripper_target = "track", pose, closure

    def hold(self) -> None:
        """Hold the joint positions measured now (gripper target unchanged); ends a move."""
        with self._lock:
            self._end_move("hold")
            if self._state is not None:
                self._mode, self._hold_q = "hold", self._state.joint_pos.copy()

    def start_move(self, pose: np.ndarray, gripper: float) -> None:
        """Start moving the TCP to ``pose`` (7,) with every joint at most ``move_speed_rad_s``
        and the jaw to ``gripper``; poll :meth:`move_done`.

        Raises:
            ValueError: A malformed pose or closure.
            So101Error: Not connected, or in error.
        """
        pose, closure = _check_pose(pose), _check_closure(gripper)
        with self._lock:
            if self._state is None or self._error is not None:
                raise So101Error(self._error or "not connected; call connect() first")
            self._end_move("a new move")
            deadline = time.monotonic() + self.config.move_timeout_s
            self._move = _Move(pose, closure, deadline)
            self._mode, self._gripper_target = "move", closure

    def move_done(self) -> bool:
        """True once the move arrived: TCP within ``move_tolerance_m`` of the goal, every joint
        within ``move_tolerance_rad`` of its (settled) goal, the jaw at its goal or stopped.

        Raises:
            So101Error: No move, the move was ended (hold, another command), a bus error, or
                not arrived within ``move_timeout_s``.
        """
        with self._lock:
            move, error = self._move, self._error
        if error is not None:
            raise So101Error(f"move aborted: {error}")
        if move is None:
            raise So101Error("move_done() without a move; call start_move() first")
        if move.ended is not None:
            raise So101Error(f"the move was ended by {move.ended}")
        if move.arrived:
            return True
        if time.monotonic() > move.deadline_s:
            raise So101Error(
                f"the move did not arrive within {self.config.move_timeout_s} s: the TCP is "
                f"{move.distance_m * 1000:.1f} mm from {np.round(move.pose[:3], 4).tolist()} "
                f"(tolerance {self.config.move_tolerance_m * 1000:.1f} mm); is it within reach?"
            )
        return False

    def clear_error(self) -> bool:
        """After a bus error: ping every servo, hold the present positions (goals = present,
        torque on) and resume; True if the arm can move again. False (error kept, updated)
        while a servo is still silent or garbled."""
        with self._lock:
            if self._error is None:
                return self._bus is not None
            bus = self._bus
        if bus is None:
            return False
        try:
            ticks = self._hold_present(bus, what="clear_error")
            bus.set_torque(None, True)
        except (So101Error, *BUS_FAILURES) as e:
            why = str(e) if isinstance(e, So101Error) else self._describe(e)
            with self._lock:
                self._error = self.last_error = f"{why}; still holding"
            return False
        with self._lock:
            self._error = None
            self.recoveries += 1
        log.info("SO-101: error cleared at %s", ticks.tolist())
        return True

    @property
    def error(self) -> str | None:
        """The current error (names the servo and joint), or None when the arm can move."""
        with self._lock:
            return self._error

    # -- joint teleop (not part of ArmBackend) -----------------------------------------------

    def follow_joints(self, q_rad: np.ndarray, gripper: float) -> None:
        """Joint teleop (a leader arm, :mod:`drivers.teleop.so101_leader`): track joint targets
        ``q_rad`` (N,) from the next tick on, through the same funnel (limits, per-tick step),
        and never to a goal whose TCP would leave ``joint_safety``'s box (further than the
        previous goal's). The bridge never calls this: it is for an in-process leader loop.

        Raises:
            ValueError: Wrong shape or non-finite values.
        """
        q = np.asarray(q_rad, dtype=np.float64)
        if q.shape != (len(self.joint_names),) or not np.all(np.isfinite(q)):
            raise ValueError(f"q_rad must be {len(self.joint_names)} finite angles, got {q_rad!r}")
        closure = _check_closure(gripper)
        with self._lock:
            self._end_move("joint teleop")
            self._mode, self._joint_target, self._gripper_target = "joints", q, closure

    # -- facts ---------------------------------------------------------------------------------

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.config.arm.joint_names

    @property
    def servo_ids(self) -> tuple[int, ...]:
        """Bus ids: the arm joints in chain order, then the jaw (from the calibration)."""
        assert self.calibration is not None and self.calibration.gripper is not None
        return (*self.calibration.joint_ids, self.calibration.gripper[1].servo_id)

    def home_pose(self) -> np.ndarray:
        """(7,) TCP pose at the description's home, from the kinematics file (no bus)."""
        arm = self.config.arm  # an IK of its own: the tick thread's is not shared
        ik = DiffIK(self.config.kinematics_path, arm, DiffIKConfig.for_arm(arm, 1.0))
        return ik.fk(np.asarray(arm.home_q_rad))

    def telemetry(self) -> dict:
        """Figures for the bridge status: ticks, overruns of the ``bridge_hz`` period, bus
        errors, recoveries, refused joint-teleop goals, and the tick / sync read / sync write
        durations (ms, median and max over the last 1000 ticks)."""

        def ms(d: collections.deque[float]) -> dict:
            a = np.asarray(d) * 1e3 if d else np.zeros(1)
            return {"median": round(float(np.median(a)), 3), "max": round(float(a.max()), 3)}

        with self._lock:
            return {
                "ticks": self.ticks,
                "overruns": self.overruns,
                "bus_errors": self.bus_errors,
                "recoveries": self.recoveries,
                "joint_goals_refused": self.joint_goals_refused,
                "late_writes": self.late_writes,
                "ik_failures": 0 if self.ik is None else self.ik.failures,
                "tick_ms": ms(self._tick_s),
                "sync_read_ms": ms(self._read_s),
                "sync_write_ms": ms(self._write_s),
            }

    # -- internals -----------------------------------------------------------------------------

    def _setup_limits(self, calib: cal.ArmCalibration) -> None:
        """Joint limits = the description's within the calibrated ranges; the IK on them."""
        arm = calibrated_arm(self.config.arm, calib)
        ik_cfg = replace(
            DiffIKConfig.for_arm(arm, self.config.tick_s), speed_scale=self.config.speed_scale
        )
        self.ik = DiffIK(self.config.kinematics_path, arm, ik_cfg)
        self.q_low = np.asarray(arm.joint_low_rad)
        self.q_high = np.asarray(arm.joint_high_rad)
        self.max_step_rad = self.ik.max_step_rad.copy()

    def _hold_present(self, bus: FeetechBus, what: str) -> np.ndarray:
        """Ping every servo, read the present positions and write them as goals (so that torque
        on holds the arm where it is); the funnel starts from there. Returns the ticks."""
        assert self.calibration is not None
        for servo_id in self.servo_ids:
            try:
                bus.ping(servo_id)
            except FeetechError as e:
                raise So101Error(
                    f"{self._servo_name(servo_id)} did not answer PING at {what} on "
                    f"{self.config.port}: check its cable and the arm's power "
                    f"({type(e).__name__}: {e})"
                ) from e
        ticks = bus.sync_read_positions()
        bus.sync_write_goal_positions(None, ticks)
        q = self.calibration.ticks_to_rad(ticks[:-1])
        closure = self.calibration.gripper_ticks_to_closure(ticks[-1])
        self._last_goal, self._last_gripper_goal = q.copy(), closure
        with self._lock:
            self._state = self._make_state(time.monotonic(), q, closure, previous=None)
            self._end_move(what)
            self._mode, self._hold_q, self._gripper_target = "hold", q.copy(), closure
        return ticks

    def _servo_name(self, servo_id: int | None) -> str:
        names = dict(zip(self.servo_ids, (*self.joint_names, "gripper"), strict=True))
        return f"servo {servo_id} ({names.get(servo_id, 'not on this arm')})"

    def _describe(self, e: BaseException) -> str:
        servo_id = getattr(e, "servo_id", None)
        who = self._servo_name(servo_id) if servo_id is not None else "the bus"
        return f"{who}: {type(e).__name__}: {e}"

    def _end_move(self, why: str) -> None:
        """Under ``_lock``: a move under way ends (its ``move_done`` then raises, naming why)."""
        if self._move is not None and not self._move.arrived and self._move.ended is None:
            self._move.ended = why

    def _make_state(
        self, stamp_s: float, q: np.ndarray, closure: float, previous: RobotState | None
    ) -> RobotState:
        assert self.ik is not None
        pose = self.ik.fk(q)
        vel, dq = np.zeros(6), np.zeros(len(q))
        if previous is not None and stamp_s > previous.stamp_s:
            dt = stamp_s - previous.stamp_s
            vel[:3] = (pose[:3] - previous.tcp_pose[:3]) / dt
            vel[3:] = frames.quat_error(pose[3:7], previous.tcp_pose[3:7]) / dt
            dq = (q - previous.joint_pos) / dt
        return RobotState(
            stamp_s=stamp_s,
            tcp_pose=pose,
            tcp_vel=vel,
            tcp_wrench=np.zeros(6),
            gripper_pos=float(closure),
            joint_pos=q.copy(),
            joint_vel=dq,
        )

    def _run(self) -> None:
        period = self.config.tick_s
        next_s = time.monotonic()
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                self._tick()
            except Exception as e:  # noqa: BLE001 - any failure holds the arm and is reported
                log.exception("SO-101 tick failed")
                self._fail(e)
            now = time.monotonic()
            with self._lock:
                self.ticks += 1
                self._tick_s.append(now - start)
                next_s += period
                if now > next_s:
                    self.overruns += 1
                    next_s = now
            self._stop.wait(next_s - now)

    def _tick(self) -> None:
        with self._lock:
            if self._error is not None:
                return  # holding; nothing is sent until clear_error
        assert self._bus is not None and self.calibration is not None and self.ik is not None
        t0 = time.monotonic()
        try:
            ticks = self._retry_late_write(self._bus.sync_read_positions)
        except BUS_FAILURES as e:
            self._fail(e)
            return
        stamp = time.monotonic()
        q = self.calibration.ticks_to_rad(ticks[:-1])
        closure = self.calibration.gripper_ticks_to_closure(ticks[-1])
        with self._lock:
            self._read_s.append(stamp - t0)
            previous = self._state
            state = self._make_state(stamp, q, closure, previous)
            self._state = state
            mode, target, hold_q = self._mode, self._target, self._hold_q
            joint_target, move, gripper = self._joint_target, self._move, self._gripper_target
        last = self._last_goal
        box = False
        if mode == "track" and target is not None:
            candidate = self.ik.step(last, target)
        elif mode == "move" and move is not None:
            step = self.config.move_speed_rad_s * self.config.tick_s
            candidate = last + np.clip(self.ik.step(last, move.pose) - last, -step, step)
        elif mode == "joints" and joint_target is not None:
            candidate, box = joint_target, True
        else:
            candidate = hold_q if hold_q is not None else last
        goal = self._send_goals(candidate, gripper, box=box)
        if mode == "move" and move is not None:
            self._check_arrival(move, state, goal, last, previous)

    def _send_goals(self, candidate_q: np.ndarray, closure: float, box: bool = False) -> np.ndarray:
        """The one way goals reach the bus: clip ``candidate_q`` to the joint limits and to one
        tick's step from the previous goal (never further outside the limits than the previous
        goal), the jaw's closure to one tick's change; with ``box`` (joint teleop), keep the
        previous goal instead of one whose TCP would leave the box. One SYNC_WRITE; returns the
        joint goal."""
        assert self._bus is not None and self.calibration is not None
        last, step = self._last_goal, self.max_step_rad
        lower = np.maximum(np.minimum(self.q_low, last), last - step)
        upper = np.minimum(np.maximum(self.q_high, last), last + step)
        goal = np.clip(np.asarray(candidate_q, dtype=np.float64), lower, upper)
        if box and not self._box_allows(goal, last):
            goal = last
        dg = self.config.gripper_speed_per_s * self.config.tick_s
        grip = float(np.clip(closure, self._last_gripper_goal - dg, self._last_gripper_goal + dg))
        ticks = np.append(
            self.calibration.rad_to_ticks(goal), self.calibration.gripper_closure_to_ticks(grip)
        )
        t0 = time.monotonic()
        self._retry_late_write(self._bus.sync_write_goal_positions, None, ticks)
        with self._lock:
            self._write_s.append(time.monotonic() - t0)
        self._last_goal, self._last_gripper_goal = goal, grip
        return goal

    def _retry_late_write(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, repeated once on pyserial's write timeout, which it raises when a
        write took longer than the timeout in wall time even if the bytes went out (a thread
        descheduled on a loaded host). Goal writes and read requests are safe to repeat; a
        second timeout in a row is an error (the adapter takes no data)."""
        try:
            return call(*args)
        except _WriteTimeout:
            with self._lock:
                self.late_writes += 1
            return call(*args)

    def _box_allows(self, goal: np.ndarray, last: np.ndarray) -> bool:
        """Whether the TCP at ``goal`` is inside the joint-teleop box, or no further outside it
        than at ``last`` (counted when not)."""
        assert self.ik is not None

        def outside_m(q: np.ndarray) -> float:
            p = self.ik.fk(q)[:3]
            return float(np.linalg.norm(p - np.clip(p, self._box_low, self._box_high)))

        d = outside_m(goal)
        if d <= 1e-9 or d <= outside_m(last):
            return True
        with self._lock:
            self.joint_goals_refused += 1
        return False

    def _check_arrival(
        self,
        move: _Move,
        state: RobotState,
        goal: np.ndarray,
        previous_goal: np.ndarray,
        previous: RobotState | None,
    ) -> None:
        """Mark ``move`` arrived: TCP close, goals settled, joints on them, the jaw's goal
        reached and the jaw there or stopped (on an object)."""
        cfg = self.config
        distance = float(np.linalg.norm(state.tcp_pose[:3] - move.pose[:3]))
        settled = float(np.abs(goal - previous_goal).max()) < 0.1 * cfg.move_tolerance_rad
        on_goal = float(np.abs(state.joint_pos - goal).max()) <= cfg.move_tolerance_rad
        jaw_goal = abs(self._last_gripper_goal - move.gripper) < 1e-9
        jaw_there = abs(state.gripper_pos - move.gripper) <= cfg.gripper_tolerance
        jaw_stopped = previous is not None and abs(state.gripper_pos - previous.gripper_pos) < 2e-3
        arrived = distance <= cfg.move_tolerance_m and settled and on_goal and jaw_goal
        with self._lock:
            move.distance_m = distance
            move.arrived = move.arrived or (arrived and (jaw_there or jaw_stopped))

    def _fail(self, e: BaseException) -> None:
        """Enter the error state: hold the last good positions (one SYNC_WRITE through the
        funnel), then report the error; nothing is sent from then on until :meth:`clear_error`."""
        message = (
            f"{self._describe(e)}; holding the last good positions (torque on); clear_error "
            "resumes once every servo answers"
        )
        with self._lock:
            state = self._state
        if state is not None and self._bus is not None:
            try:
                self._send_goals(state.joint_pos, self._last_gripper_goal)
            except Exception as e2:  # noqa: BLE001 - e.g. the port is gone: nothing more to send
                log.error("SO-101: the hold after the error could not be sent: %s", e2)
        with self._lock:
            self._error = self.last_error = message
            self.bus_errors += 1
        log.error("SO-101: %s", message)
