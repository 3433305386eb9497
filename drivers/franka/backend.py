"""Franka FR3 arm backend: a libfranka client (pylibfranka) behind the bridge's ArmBackend.

The FCI torque loop runs at the robot's 1 kHz in a control process of its own
(:mod:`drivers.franka.loop`, its own GIL, so ROS executor threads here cannot starve it): it
moves a reference towards the latest goal with bounded speed and acceleration and streams a
Cartesian impedance torque law around it (:mod:`drivers.franka.control`). The methods here send
goals over a pipe and read the latest state from shared memory; they never block the loop.

Errors: a reflex or other control exception aborts the motion. With ``auto_recover`` (default)
the loop calls libfranka's ``automaticErrorRecovery`` at once, holds the measured pose and
restarts torque control; otherwise :attr:`FrankaBackend.error` stays set until
:meth:`FrankaBackend.clear_error` (the arm bridge does that at its next tick and reports it).
Aborts and recoveries are counted (:attr:`FrankaBackend.reflexes`,
:attr:`FrankaBackend.recoveries`), the message is kept in :attr:`FrankaBackend.last_error`.

State: the TCP pose and twist come from the measured joints through robot_rl's own kinematics
(``fk_tcp``), never from the robot's ``O_T_EE``; at connect the two are compared
(:func:`drivers.franka.control.ee_frame_error`) and a mismatch is an error that names the fix.
Stamps are ``time.monotonic()`` when the state arrived (same clock in both processes).

Threads: every method may be called from any thread. Goals go over the pipe under a lock of
their own; state reads are lock-free (a seqlock on shared memory); error counters are guarded
by ``_lock``. So :meth:`FrankaBackend.hold` or :meth:`FrankaBackend.read_state` may run while
another thread waits in :meth:`FrankaBackend.move_to` (hold then ends that move: the wait
raises when its time runs out). The bridge uses :meth:`FrankaBackend.start_move` and polls
:meth:`FrankaBackend.move_done` instead, so it never waits inside the backend.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from drivers.franka import control, loop
from drivers.franka.gripper import FrankaGripper, GripperConfig
from robot_rl.core import frames, realtime
from robot_rl.core import kinematics as kin
from robot_rl.core.types import RobotState

log = logging.getLogger(__name__)

LOST_CYCLES_REFLEX = "communication_constraints_violation"
"""The reflex of 20 cycles in a row without a command from us (libfranka's name)."""

REFLEX_MESSAGES_KEPT = 1000
"""How many abort messages :attr:`FrankaBackend.reflex_messages` keeps (the first ones)."""


def reflex_names(message: str) -> list[str]:
    """The reflexes a libfranka abort message names (its last ``[...]`` list of quoted
    names, e.g. ``... aborted by reflex! ["communication_constraints_violation"]``); [] when
    it names none."""
    match = re.search(r"\[([^\[\]]*)\]\s*$", message)
    return re.findall(r'"([^"]+)"', match.group(1)) if match else []


@dataclass(frozen=True)
class FrankaConfig:
    """How to reach and drive the FR3.

    Attributes:
        robot_ip: FCI address of the robot (franka-sim: 127.0.0.1). The port is libfranka's 1337.
        impedance: Gains and torque limits of the control law.
        reference: Speed/acceleration limits of the reference towards a goal.
        auto_recover: On a reflex, call automaticErrorRecovery and continue (hold) at once.
        ee_frame_tolerance_m: Largest allowed distance between ``fk_tcp(q)`` and the robot's
            ``O_T_EE`` at connect, metres (``None``: do not check).
        ee_frame_tolerance_rad: Same for the orientation, rad.
        move_tolerance_m: ``move_to`` ends when the TCP is this close to the goal, metres.
        move_tolerance_rad: ... and this close in orientation, rad.
        move_timeout_s: ``move_to`` / ``move_done`` give up this long after the move started, s.
        move_resumes: A blocking move (``move_to``, ``move_done``, ``move_to_joints``) that
            the robot aborts for lost cycles (``communication_constraints_violation``: 20
            cycles with no command, the network's or the machine's doing, not the motion's)
            goes on towards the same goal once ``auto_recover`` has recovered, up to this many
            times per move (each logged); 0: raise at once. An abort whose message names any
            other reflex, alone or beside it, always raises.
        connect_timeout_s: Wait this long for the control loop's first state, s.
        gripper: Gripper settings, or ``None`` for an arm without a Franka Hand.
        realtime_priority: SCHED_FIFO priority (1-99) of the 1 kHz control process, as
            libfranka's ``RealtimeConfig.kEnforce`` gives its control thread; ``None``: normal
            scheduling. The FCI drops a command that misses its 1 ms cycle and stops the
            motion after 20 in a row (``communication_constraints_violation``); at normal
            priority any busy process on the machine can cause that. Refused by the OS (no
            ``rtprio`` limit, no CAP_SYS_NICE), the loop runs at normal priority and
            :meth:`FrankaBackend.connect` logs a warning that says how to allow it.
    """

    robot_ip: str = "127.0.0.1"
    impedance: control.ImpedanceConfig = field(default_factory=control.ImpedanceConfig)
    reference: control.ReferenceLimits = field(default_factory=control.ReferenceLimits)
    auto_recover: bool = True
    ee_frame_tolerance_m: float | None = 0.002
    ee_frame_tolerance_rad: float = 0.01
    move_tolerance_m: float = 0.005
    move_tolerance_rad: float = 0.03
    move_timeout_s: float = 20.0
    move_resumes: int = 3
    connect_timeout_s: float = 10.0
    gripper: GripperConfig | None = field(default_factory=GripperConfig)
    realtime_priority: int | None = 80

    def __post_init__(self) -> None:
        if self.realtime_priority is not None:
            realtime.check_priority(
                self.realtime_priority, "realtime_priority", "or None: normal scheduling"
            )
        if not self.robot_ip:
            raise ValueError("robot_ip is empty; give the FCI address of the robot")
        if self.move_tolerance_m <= 0 or self.move_tolerance_rad <= 0:
            raise ValueError("move tolerances must be positive")
        if self.move_resumes < 0:
            raise ValueError(f"move_resumes must be >= 0 (0: never resume): {self.move_resumes}")


class FrankaError(RuntimeError):
    """The robot cannot do what was asked (reflex, lost connection, move not reached)."""


@dataclass
class _Move:
    """A move started by :meth:`FrankaBackend.start_move`."""

    goal: np.ndarray
    deadline_s: float
    reflexes: int
    """The reflex count the move has accounted for (at its start, then at each resume)."""
    gripper: float = 0.0
    resumes: int = 0


class FrankaBackend:
    """ArmBackend for a Franka FR3 over libfranka (see the module docstring)."""

    def __init__(self, config: FrankaConfig | None = None) -> None:
        self.config = config or FrankaConfig()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()  # one writer at a time on the command pipe
        self._move: _Move | None = None
        self._proc = None
        self._conn = None
        self._shared = None
        self._events: threading.Thread | None = None
        self._gripper: FrankaGripper | None = None
        # Guarded by _lock (written by the event thread):
        self._error: str | None = None
        self._last_error: str | None = None
        self._recoveries = 0
        self._reflexes = 0
        self._reflex_messages: list[str] = []
        self._alive = False
        self._changed = threading.Condition(self._lock)
        self.ee_frame_check: tuple[float, float] | None = None
        """(metres, radians) between ``fk_tcp(q)`` and the robot's ``O_T_EE`` at connect."""
        self.realtime_refused: str | None = None
        """After connect: None if the control loop runs under SCHED_FIFO, else why not."""

    # -- ArmBackend -----------------------------------------------------------------------

    def connect(self) -> None:
        """Start the control process, connect to the FCI, check the EE frame, start torque
        control (holding the current pose) and the gripper."""
        if self._proc is not None:
            return
        cfg = self.config
        ctx = mp.get_context("spawn")  # a fresh interpreter: no threads or ROS state copied
        self._shared = ctx.RawArray("d", loop.STATE_SIZE)
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(
            target=loop.run, args=(cfg, child_conn, self._shared), name="franka-1khz", daemon=True
        )
        self._proc.start()
        child_conn.close()
        if not self._conn.poll(cfg.connect_timeout_s):
            self.disconnect()
            raise FrankaError(
                f"the FCI control process did not answer in {cfg.connect_timeout_s} s"
            )
        kind, payload, *realtime = self._recv_or_none() or ("failed", "control process died")
        if kind != "connected":
            self.disconnect()
            raise FrankaError(
                f"cannot connect to the FCI at {cfg.robot_ip}:1337 ({payload}); is the robot "
                "(or franka-sim) running, FCI activated and the brakes open?"
            )
        self.ee_frame_check = tuple(payload)
        self.realtime_refused = realtime[0] if realtime else "unknown"
        if self.realtime_refused is not None and cfg.realtime_priority is not None:
            log.warning(
                "the Franka control loop runs at normal priority (%s): under CPU load it may miss"
                " the FCI's 1 ms cycles (communication_constraints_violation). To allow it: %s;"
                " or set FrankaConfig.realtime_priority=None to not ask.",
                self.realtime_refused,
                realtime.HOW_TO_ALLOW,
            )
        self._check_ee_frame()
        with self._lock:
            self._alive = True
        self._events = threading.Thread(target=self._read_events, name="franka-events", daemon=True)
        self._events.start()
        if cfg.gripper is not None:
            self._gripper = FrankaGripper(cfg.robot_ip, cfg.gripper)
            self._gripper.connect()

    def disconnect(self) -> None:
        """Stop torque control (the robot then holds with its own controller) and disconnect."""
        if self._gripper is not None:
            self._gripper.disconnect()
            self._gripper = None
        if self._proc is not None:
            self._send("stop")
            self._proc.join(timeout=5.0)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(timeout=5.0)
            self._proc = None
        if self._conn is not None:
            self._conn.close()
        if self._events is not None:
            self._events.join(timeout=5.0)
            self._events = None
        self._conn = None
        with self._lock:
            self._alive = False

    def read_state(self) -> RobotState:
        """The latest state of the control loop (TCP pose and twist from our kinematics)."""
        if self._shared is None or self._proc is None:
            raise FrankaError("no robot state yet; call connect() first")
        buf = loop.read_shared(self._shared)
        q, dq = buf[loop.IDX_Q], buf[loop.IDX_DQ]
        T_tcp, J = control.tcp_jacobian(q)
        return RobotState(
            stamp_s=float(buf[loop.IDX_STAMP]),
            tcp_pose=frames.mat_to_pose(T_tcp),
            tcp_vel=J @ dq,
            tcp_wrench=buf[loop.IDX_WRENCH].copy(),
            gripper_pos=self._gripper.closure if self._gripper is not None else 0.0,
            joint_pos=q.copy(),
            joint_vel=dq.copy(),
        )

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        """Track ``target_pose`` (7,) (already safe) and set the gripper closure target."""
        self._send("pose", _check_pose(target_pose))
        if self._gripper is not None:
            self._gripper.set_target(gripper)

    def hold(self) -> None:
        """Stop at the current measured pose (the reference restarts there at rest)."""
        self._send("hold")

    def start_move(self, pose: np.ndarray, gripper: float) -> None:
        """Start moving the TCP to ``pose`` (7,) smoothly (at the reference's speed limits) and
        the gripper to ``gripper``; returns at once (poll :meth:`move_done`)."""
        goal = _check_pose(pose)
        with self._lock:
            self._move = _Move(
                goal, time.monotonic() + self.config.move_timeout_s, self._reflexes, gripper
            )
        self.command(goal, gripper)

    def move_done(self) -> bool:
        """True once the TCP is within the move tolerances of the goal of :meth:`start_move`
        and the gripper has executed its target.

        Raises:
            FrankaError: No move was started, a reflex aborted it, or it did not arrive within
                ``move_timeout_s``.
        """
        with self._lock:
            move = self._move
        if move is None:
            raise FrankaError("move_done() without a move; call start_move() first")
        state = self.read_state()
        if _pose_reached(state, move.goal, self.config) and (
            self._gripper is None or self._gripper.idle
        ):
            return True
        self._check_aborts(move, "move_to", lambda: self.command(move.goal, move.gripper))
        if time.monotonic() > move.deadline_s:
            where = "the gripper is still moving"
            if not _pose_reached(state, move.goal, self.config):
                where = f"now at {np.round(state.tcp_pose, 4)}"
            raise FrankaError(
                f"move_to did not reach {np.round(move.goal, 4)} within "
                f"{self.config.move_timeout_s} s ({where})"
            )
        return False

    def move_to(self, pose: np.ndarray, gripper: float) -> None:
        """Move the TCP to ``pose`` (7,) smoothly and block until there (or raise
        :class:`FrankaError`): :meth:`start_move`, then :meth:`move_done` every 5 ms."""
        self.start_move(pose, gripper)
        while not self.move_done():
            time.sleep(0.005)

    def move_to_joints(self, q_rad: np.ndarray) -> None:
        """Move to joint positions ``q_rad`` (7,) with a joint impedance; block until there."""
        goal = np.asarray(q_rad, dtype=np.float64)
        if goal.shape != (7,) or not np.all(np.isfinite(goal)):
            raise ValueError(f"q_rad must be 7 finite joint positions, got {q_rad!r}")
        if np.any(goal < control.JOINT_LOW) or np.any(goal > control.JOINT_HIGH):
            raise ValueError(f"q_rad {goal} is outside the FR3 joint limits")
        self._send("joints", goal)
        tol = self.config.move_tolerance_rad
        self._wait(
            lambda s: float(np.abs(s.joint_pos - goal).max()) < tol,
            "move_to_joints",
            goal,
            resend=lambda: self._send("joints", goal),
        )
        self.hold()

    def clear_error(self) -> bool:
        """Recover from a reflex (automaticErrorRecovery); True if the arm can move again.

        After a lost connection the control process has ended: reconnect from scratch.
        """
        with self._lock:
            if self._alive and self._error is None:
                return True
            alive = self._alive
        if not alive:
            self.disconnect()
            try:
                self.connect()
            except FrankaError as exc:
                with self._lock:
                    self._error = str(exc)
                return False
            return True
        self._send("recover")
        with self._changed:
            self._changed.wait_for(lambda: self._error is None or not self._alive, 5.0)
            return self._error is None

    @property
    def error(self) -> str | None:
        """Why the arm cannot move right now (reflex not yet recovered, network), or None."""
        with self._lock:
            return self._error

    # -- extras for the bridge status and tests ---------------------------------------------

    @property
    def last_error(self) -> str | None:
        """The most recent error, kept after a successful recovery (for the status topic)."""
        with self._lock:
            return self._last_error

    @property
    def recoveries(self) -> int:
        """Successful error recoveries since connect."""
        with self._lock:
            return self._recoveries

    def telemetry(self) -> dict:
        """Figures for the bridge status (``status["backend"]``): the robot's
        ``command_success_rate``, the control loop's own timing since connect
        (``lost_cycles``: robot cycles with no command from us, counted from the robot's clock;
        ``max_work_ms``: the longest state-in to command-out; ``slow_cycles``: cycles whose
        work left too little of the 1 ms, see :data:`drivers.franka.loop.SLOW_CYCLE_S`;
        ``preempted_cycles``: slow cycles that spent less than half their time on the CPU): lost
        cycles with no slow work point at the network or the machine (the loop was not
        scheduled), whether the control loop runs under SCHED_FIFO (``realtime``;
        ``realtime_refused`` says why not), reflexes and recoveries so far."""
        # Not connected: all zero, as command_success_rate reports it.
        buf = np.zeros(loop.STATE_SIZE) if self._shared is None else loop.read_shared(self._shared)
        return {
            "command_success_rate": round(float(buf[loop.IDX_SUCCESS_RATE]), 3),
            "lost_cycles": int(buf[loop.IDX_LOST_CYCLES]),
            "max_work_ms": round(float(buf[loop.IDX_MAX_WORK_MS]), 3),
            "slow_cycles": int(buf[loop.IDX_SLOW_CYCLES]),
            "preempted_cycles": int(buf[loop.IDX_PREEMPTED_CYCLES]),
            "max_work_cpu_ms": round(float(buf[loop.IDX_MAX_WORK_CPU_MS]), 3),
            "realtime": self.realtime_refused is None,
            "realtime_refused": self.realtime_refused,
            "reflexes": self.reflexes,
            "recoveries": self.recoveries,
        }

    @property
    def command_success_rate(self) -> float:
        """The robot's ``control_command_success_rate``: the share of our last 100 torque
        commands that arrived within their 1 ms cycle (0 while no torque control runs)."""
        if self._shared is None:
            return 0.0
        return float(loop.read_shared(self._shared)[loop.IDX_SUCCESS_RATE])

    @property
    def reflex_messages(self) -> list[str]:
        """The robot's message for each abort since connect, in order (the first
        ``REFLEX_MESSAGES_KEPT``): which reflex, e.g. ``communication_constraints_violation``."""
        with self._lock:
            return list(self._reflex_messages)

    @property
    def control_pid(self) -> int | None:
        """The control process's pid (None when not connected): for CPU accounting and for
        checking its scheduling policy."""
        return None if self._proc is None else self._proc.pid

    @property
    def reflexes(self) -> int:
        """Motions aborted by the robot (reflex / control exception) since connect."""
        with self._lock:
            return self._reflexes

    def inject_torque_step(self, step_nm: float) -> None:
        """Fault injection for tests: add ``step_nm`` to joint 1's torque for one cycle.

        A step above ``1000 N m/s * 1 ms = 1 N m`` breaks the FCI torque-rate limit, so the
        robot (and franka-sim with motion limits enforced) aborts the motion with
        ``controller_torque_discontinuity``: the recovery path runs exactly as for a real reflex.
        """
        self._send("fault", float(step_nm))

    def inject_stall(self, seconds: float) -> None:
        """Fault injection for tests: one control cycle takes ``seconds`` longer before its
        command is sent (a slow cycle of our own). Under 19 ms the robot sees lost cycles,
        not the 20 in a row that abort the motion; ``telemetry()`` counts them."""
        self._send("stall", float(seconds))

    # -- internals ------------------------------------------------------------------------

    def _send(self, *msg: object) -> None:
        conn = self._conn
        if conn is None:
            raise FrankaError("not connected; call connect() first")
        try:
            with self._send_lock:  # Connection.send is not atomic across threads
                conn.send(msg)
        except (BrokenPipeError, OSError) as exc:
            with self._lock:
                self._error = f"control process gone: {exc}"
                self._alive = False

    def _recv_or_none(self) -> tuple | None:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return None

    def _read_events(self) -> None:
        """Event thread: apply the control process's events to the backend's status."""
        while True:
            event = self._recv_or_none()
            with self._changed:
                if event is None:  # the process ended (stop or crash)
                    self._alive = False
                    self._changed.notify_all()
                    return
                kind = event[0]
                if kind == "reflex":
                    self._reflexes += 1
                    if len(self._reflex_messages) < REFLEX_MESSAGES_KEPT:
                        self._reflex_messages.append(event[1])
                    self._error = self._last_error = event[1]
                    log.warning("Franka motion aborted: %s", event[1])
                elif kind == "recovered":
                    self._recoveries += 1
                    self._error = None
                elif kind in ("recovery_failed", "network"):
                    self._error = self._last_error = f"{kind}: {event[1]}"
                    log.error("Franka %s: %s", kind, event[1])
                self._changed.notify_all()

    def _check_ee_frame(self) -> None:
        cfg = self.config
        dpos, drot = self.ee_frame_check
        if cfg.ee_frame_tolerance_m is None:
            return
        if dpos > cfg.ee_frame_tolerance_m or drot > cfg.ee_frame_tolerance_rad:
            self.disconnect()
            raise FrankaError(
                f"the robot's O_T_EE differs from robot_rl's fk_tcp(q) by {dpos * 1000:.1f} mm "
                f"and {np.degrees(drot):.2f} deg. Configure the Franka Hand as end effector in "
                "Desk (TCP 0.1034 m beyond the flange, -45 deg yaw), or fix "
                "robot_rl.core.kinematics, or set ee_frame_tolerance_m=None to skip the check."
            )

    def _check_aborts(self, move: _Move, what: str, resend) -> None:
        """Raise :class:`FrankaError` if an abort ends ``move``. Aborts for lost cycles alone
        (see ``FrankaConfig.move_resumes``) do not: while the automatic recovery runs this
        returns (the caller waits on, within the move's deadline), once it is done ``resend``
        sends the goal again."""
        cfg = self.config
        with self._lock:
            reflexes, error, last = self._reflexes, self._error, self._last_error
            since = self._reflex_messages[move.reflexes :]
        new = reflexes - move.reflexes
        if new == 0:
            if error is not None:  # e.g. a failed recovery or a lost connection
                raise FrankaError(f"{what} aborted by the robot: {last}")
            return
        resumable = (
            cfg.auto_recover
            and move.resumes + new <= cfg.move_resumes
            and len(since) == new
            and all(reflex_names(m) == [LOST_CYCLES_REFLEX] for m in since)
        )
        if not resumable or (error is not None and error != since[-1]):
            raise FrankaError(f"{what} aborted by the robot: {last}")
        if error is not None:
            return  # the reflex's error: the automatic recovery is still running
        move.resumes += new
        move.reflexes = reflexes
        log.warning(
            "%s: the robot stopped for lost cycles (%s) and recovered; going on to the goal "
            "(resume %d of at most %d)",
            what,
            LOST_CYCLES_REFLEX,
            move.resumes,
            cfg.move_resumes,
        )
        resend()

    def _wait(self, reached, what: str, goal: np.ndarray, resend) -> None:
        """Block until ``reached(state)``; raise on timeout or on a reflex during the move
        (after a lost-cycles abort, see ``move_resumes``, call ``resend`` and go on)."""
        deadline = time.monotonic() + self.config.move_timeout_s
        move = _Move(goal, deadline, self.reflexes)
        while True:
            state = self.read_state()
            if reached(state):
                return
            self._check_aborts(move, what, resend)
            if time.monotonic() > deadline:
                raise FrankaError(
                    f"{what} did not reach {np.round(goal, 4)} within "
                    f"{self.config.move_timeout_s} s (now at {np.round(state.tcp_pose, 4)})"
                )
            time.sleep(0.005)


def _check_pose(pose: np.ndarray) -> np.ndarray:
    goal = np.asarray(pose, dtype=np.float64)
    if goal.shape != (7,) or not np.all(np.isfinite(goal)):
        raise ValueError(f"pose must be 7 finite numbers [x, y, z, qw, qx, qy, qz], got {pose!r}")
    norm = float(np.linalg.norm(goal[3:]))
    if norm < 0.5:
        raise ValueError(f"pose quaternion {goal[3:]} is not a rotation (norm {norm:.3f})")
    return np.concatenate([goal[:3], goal[3:] / norm])


def _pose_reached(state: RobotState, goal: np.ndarray, cfg: FrankaConfig) -> bool:
    dpos = float(np.linalg.norm(state.tcp_pose[:3] - goal[:3]))
    drot = float(np.linalg.norm(frames.quat_error(goal[3:7], state.tcp_pose[3:7])))
    return dpos < cfg.move_tolerance_m and drot < cfg.move_tolerance_rad


HOME_Q_RAD = np.asarray(kin.FR3_HOME_RAD)
"""Joint posture of the FR3 "ready" pose, rad."""
