"""The 1 kHz FCI torque loop, run in its own process (:func:`run`) by the Franka backend.

Why a process: the FCI expects a torque command every millisecond and aborts the motion after
20 lost cycles (``communication_constraints_violation``). In a process that also runs ROS 2
executor threads, the GIL delays a Python control thread by that much; a process of its own
has its own GIL. (franky and libfranka's C++ examples get the same isolation from C++ threads.)

Protocol with the parent (:class:`drivers.franka.backend.FrankaBackend`):

- state: the parent's shared ``multiprocessing.RawArray`` (``STATE_SIZE`` doubles, ``IDX_*``)
  is overwritten every cycle: stamp (``time.monotonic()``), q, dq, external wrench
  ``O_F_ext_hat_K``, the robot's ``control_command_success_rate`` (the share of our last 100
  commands that arrived in their cycle), the loop's own timing since connect (``lost_cycles``:
  robot cycles that passed between two of our reads beyond the one expected, i.e. commands
  we never sent; ``max_work_ms``: the longest time from a state's arrival to our command, and
  ``max_work_cpu_ms`` the CPU time the loop spent in that cycle; ``slow_cycles``: cycles whose
  work took over ``SLOW_CYCLE_S``, ``preempted_cycles`` those of them that spent less than half
  of it on the CPU), and a sequence number that makes it a seqlock
  (:func:`read_shared`);
- commands (parent -> loop, over a ``Pipe``): ``("pose", (7,))`` Cartesian goal,
  ``("joints", (7,))`` joint goal, ``("hold",)``, ``("fault", nm)``, ``("stall", s)``,
  ``("recover",)``, ``("stop",)``; polled once per cycle without blocking. EOF (the parent
  died) stops the loop;
- events (loop -> parent): ``("connected", (dpos_m, drot_rad), realtime)`` (``realtime``: None
  when the loop got the SCHED_FIFO priority asked for, else why not), ``("failed", message)``,
  ``("reflex", message)``, ``("recovered",)``, ``("recovery_failed", message)``,
  ``("network", message)``.

The control law is :mod:`drivers.franka.control`; on a reflex the loop holds the robot in its
own (idle) controller, recovers when told to (or at once with ``auto_recover``) and restarts
torque control holding the measured pose.
"""

from __future__ import annotations

import gc
import time
from multiprocessing.connection import Connection

import numpy as np

from drivers.franka import control
from robot_rl.core import frames, realtime

IDX_STAMP = 0
IDX_Q = slice(1, 8)
IDX_DQ = slice(8, 15)
IDX_WRENCH = slice(15, 21)
IDX_SEQ = 21
IDX_SUCCESS_RATE = 22
IDX_LOST_CYCLES = 23
IDX_MAX_WORK_MS = 24
IDX_SLOW_CYCLES = 25
IDX_MAX_WORK_CPU_MS = 26
IDX_PREEMPTED_CYCLES = 27
STATE_SIZE = 28

SLOW_CYCLE_S = 0.0009
"""A cycle whose work (state in -> command out) takes longer than this leaves the command
too little of the 1 ms to reach the robot in time: counted in ``slow_cycles``."""


class _Stop(Exception):
    """The parent asked the loop to stop (or went away)."""


class ControlLoop:
    """Owns the ``pylibfranka.Robot`` in the control process (see the module docstring)."""

    def __init__(self, config, conn: Connection, shared) -> None:  # config: FrankaConfig
        import pylibfranka as franka

        self.franka = franka
        self.config = config
        self.conn = conn
        self.shared = shared
        self.robot = None
        self.model = None
        self.goal_pose: np.ndarray | None = None
        self.goal_q: np.ndarray | None = None
        self.reset_reference = True
        self.fault_nm = 0.0
        self.stall_s = 0.0
        self.recover_requested = False
        self.stopping = False
        self.seq = 0
        self.lost_cycles = 0
        self.max_work_s = 0.0
        self.max_work_cpu_s = 0.0
        self.slow_cycles = 0
        self.preempted_cycles = 0
        self.realtime: str | None = "not started"
        """None once this process runs at the SCHED_FIFO priority asked for, else why not."""

    # -- setup ------------------------------------------------------------------------------

    def connect(self) -> None:
        franka, cfg = self.franka, self.config
        self.realtime = set_realtime_priority(cfg.realtime_priority)
        self.robot = franka.Robot(cfg.robot_ip, franka.RealtimeConfig.kIgnore)
        state = self.robot.read_once()
        self.publish(state)
        check = control.ee_frame_error(np.array(state.q), np.array(state.O_T_EE))
        try:
            self.model = self.robot.load_model()
        except franka.FrankaException:
            self.model = None  # Coriolis compensation is a refinement, not required
        if "Reflex" in str(state.robot_mode):
            self.robot.automatic_error_recovery()
        # Everything imported and built so far lives as long as the process: frozen, out of
        # the garbage collector's sight. A full collection over it takes ~6 ms in this process
        # (up to ~40 ms on a busy machine): cycles with no command, 20 in a row abort the
        # motion. The steady loop allocates almost no tracked objects (no collection in 2
        # minutes, measured), but a recovery's exceptions may start one; frozen, it scans only
        # the objects made since, in well under a millisecond.
        gc.collect()
        gc.freeze()
        self.conn.send(("connected", check, self.realtime))

    # -- commands from the parent -------------------------------------------------------------

    def poll_commands(self) -> None:
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                self.handle(msg)
        except (EOFError, OSError) as exc:
            raise _Stop from exc

    def handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "pose":
            if self.goal_q is not None:
                self.reset_reference = True  # leaving a joint move: restart from measured
            self.goal_q, self.goal_pose = None, np.asarray(msg[1], dtype=np.float64)
        elif kind == "joints":
            self.goal_q, self.goal_pose = np.asarray(msg[1], dtype=np.float64), None
            self.reset_reference = True
        elif kind == "hold":
            self.goal_q, self.goal_pose = None, None
            self.reset_reference = True
        elif kind == "fault":
            self.fault_nm = float(msg[1])
        elif kind == "stall":
            self.stall_s = float(msg[1])
        elif kind == "recover":
            self.recover_requested = True
        elif kind == "stop":
            self.stopping = True

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        franka = self.franka
        while not self.stopping:
            try:
                self.session()
            except franka.ControlException as exc:
                self.conn.send(("reflex", str(exc)))
                self.wait_for_recovery(str(exc))
            except franka.NetworkException as exc:
                self.conn.send(("network", str(exc)))
                return

    def session(self) -> None:
        """One torque-control session, until stop (returns) or an abort (raises)."""
        franka, cfg = self.franka, self.config
        ctrl = self.robot.start_torque_control()
        limiter = control.TorqueRateLimiter(cfg.impedance)
        self.reset_reference = True
        cart = joint = None
        perf, cpu = time.perf_counter, time.thread_time
        while True:
            state, period = ctrl.readOnce()
            t_in, c_in = perf(), cpu()
            dt = period.to_sec() or 1e-3
            if dt > 0.0015:  # the robot counted cycles between two reads: commands never sent
                self.lost_cycles += round(dt * 1000.0) - 1
            q, dq = np.array(state.q), np.array(state.dq)
            self.publish(state, q, dq)
            self.poll_commands()
            tcp = control.tcp_jacobian(q)  # once per cycle: the law reuses it
            if cart is None or self.reset_reference:
                cart = control.ReferenceTracker(frames.mat_to_pose(tcp[0]), cfg.reference)
                joint = control.JointReferenceTracker(q, cfg.reference)
                self.reset_reference = False
            if self.goal_q is not None:
                ref_q = joint.step(self.goal_q, dt)
                tau = control.joint_impedance_torque(q, dq, ref_q, joint.dq, cfg.impedance)
                cart.reset(frames.mat_to_pose(tcp[0]))
            else:
                if self.goal_pose is None:  # hold: stop the reference where it is
                    self.goal_pose = cart.pose.copy()
                ref = cart.step(self.goal_pose, dt)
                tau = control.cartesian_impedance_torque(q, dq, ref, cart.twist, cfg.impedance, tcp)
                joint.q, joint.dq = q, np.zeros(7)  # fresh: the tracker owns its arrays
            if self.model is not None:
                tau = tau + np.asarray(self.model.coriolis(state))
            tau = limiter(tau, dt, np.asarray(state.tau_J_d))
            if self.fault_nm:
                tau = tau.copy()
                tau[0] += self.fault_nm  # injected fault: deliberately not rate-limited
                self.fault_nm = 0.0
            if self.stall_s:
                time.sleep(self.stall_s)  # injected fault: one slow cycle
                self.stall_s = 0.0
            out = franka.Torques(tau.tolist())
            out.motion_finished = self.stopping
            ctrl.writeOnce(out)
            work = perf() - t_in
            if work > self.max_work_s:
                self.max_work_s = work
                self.max_work_cpu_s = cpu() - c_in
            if work > SLOW_CYCLE_S:
                self.slow_cycles += 1
                if cpu() - c_in < 0.5 * work:  # mostly not running: preempted, not computing
                    self.preempted_cycles += 1
            if self.stopping:
                return

    def wait_for_recovery(self, message: str) -> None:
        """After an abort: keep the state fresh until recovery is requested (or automatic)."""
        self.recover_requested = self.config.auto_recover
        while not self.stopping:
            if self.recover_requested:
                self.recover_requested = False
                try:
                    self.robot.automatic_error_recovery()
                except self.franka.FrankaException as exc:
                    self.conn.send(("recovery_failed", f"{message}; recovery failed: {exc}"))
                else:
                    self.goal_q, self.goal_pose = None, None  # hold where recovery left the arm
                    self.conn.send(("recovered",))
                    return
            self.publish(self.robot.read_once())
            self.poll_commands()
            time.sleep(0.01)

    def publish(self, state, q: np.ndarray | None = None, dq: np.ndarray | None = None) -> None:
        """Write one state into the shared array (a seqlock: never waits for the parent)."""
        buf = self.shared
        self.seq += 1
        buf[IDX_SEQ] = 2 * self.seq - 1  # odd: being written
        buf[IDX_STAMP] = time.monotonic()
        buf[IDX_Q] = state.q if q is None else q
        buf[IDX_DQ] = state.dq if dq is None else dq
        buf[IDX_WRENCH] = state.O_F_ext_hat_K
        buf[IDX_SUCCESS_RATE] = state.control_command_success_rate
        buf[IDX_LOST_CYCLES] = self.lost_cycles
        buf[IDX_MAX_WORK_MS] = self.max_work_s * 1000.0
        buf[IDX_SLOW_CYCLES] = self.slow_cycles
        buf[IDX_MAX_WORK_CPU_MS] = self.max_work_cpu_s * 1000.0
        buf[IDX_PREEMPTED_CYCLES] = self.preempted_cycles
        buf[IDX_SEQ] = 2 * self.seq  # even: consistent


def read_shared(shared) -> np.ndarray:
    """A consistent copy (``STATE_SIZE``,) of the shared state (seqlock reader; the writer never
    waits for a reader, so a stalled parent cannot stall the 1 kHz loop)."""
    view = np.frombuffer(shared, dtype=np.float64)
    while True:
        seq = view[IDX_SEQ]
        buf = view.copy()
        if seq % 2 == 0 and view[IDX_SEQ] == seq == buf[IDX_SEQ]:
            return buf


def set_realtime_priority(priority: int | None) -> str | None:
    """Run this process under SCHED_FIFO at ``priority``: it then takes a core the moment the
    robot's state arrives, whatever else the machine runs (libfranka's
    ``RealtimeConfig.kEnforce`` does the same for its control thread). The loop blocks in
    ``readOnce`` between cycles, so it never holds a core for long.

    Returns None on success, else why not (no permission: the OS's message)."""
    if priority is None:
        return "not asked (FrankaConfig.realtime_priority is None)"
    try:
        realtime.run_threads_fifo(priority)
    except OSError as exc:
        return f"SCHED_FIFO {priority} refused: {exc} (rtprio limit {realtime.rtprio_limit()})"
    return None


def run(config, conn: Connection, shared) -> None:
    """Entry point of the control process."""
    loop = None
    try:
        loop = ControlLoop(config, conn, shared)
        loop.connect()
    except Exception as exc:  # noqa: BLE001 - report any connect failure to the parent
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    try:
        loop.run()
    except _Stop:
        pass
    finally:
        conn.close()
