"""The twin's arm behind a simulated Feetech servo bus (``--interface servo_bus`` of
``sim/ros2_control_node.py``): the SO-101 bridge (``drivers.so101.node``) drives the twin through
the same bytes it sends a real SO-101, on a pseudo-terminal.

- :class:`TwinServoModel`: the servos' positions from physics, their goals onto the twin's arm
  (through :class:`sim.ros2_control.ControlledArm`'s checks), by one calibration
  (:func:`twin_servo_calibration`, the file the SO-101 node loads);
- :class:`SharedServoState`: the snapshot between the twin's process and the bus's;
- :class:`ServoBusProcess`: ``drivers.feetech.sim_bus.SimServoBus`` in a process of its own;
- :func:`open_servo_bus` / :func:`close_servo_bus`: what the twin's node starts and stops.

The twin speaks the servos' protocol here (``drivers.feetech``), as its ROS 2 nodes speak the
arm contract: the one place besides them where ``sim`` imports ``drivers``.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from drivers.feetech import calibration as cal
from drivers.feetech.protocol import TICKS_PER_TURN
from sim.ros2_control import ControlledArm

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


def _serve_servo_bus(shared: SharedServoState, ids: tuple[int, ...], conn) -> None:
    """The bus process: serve until the twin says stop or goes away (the pipe closes). The
    shared state is the bus's ``ServoModel`` (positions out, goals in)."""
    from drivers.feetech.sim_bus import SimServoBus

    with SimServoBus(ids=ids, model=shared) as bus:
        conn.send(bus.port)
        try:
            conn.recv()
        except (EOFError, OSError):
            pass


def twin_servo_calibration(world) -> cal.ArmCalibration:
    """The calibration of the twin's servos (:class:`sim.ros2_control.TwinServoModel`): ids
    1..N the arm joints (zero at :data:`TICK_ZERO`, direction +1, limits the joints'), id
    N + 1 the jaw (its open end the zero, closing towards :data:`TICK_ZERO`). The twin's bus
    converts with it and the SO-101 node reads its file: one conversion on both sides."""
    arm = world.arm
    joints = {
        name: cal.JointCalibration(
            servo_id=i + 1,
            offset_ticks=TICK_ZERO,
            direction=1,
            min_ticks=int(np.ceil(TICK_ZERO + lo / cal.RAD_PER_TICK)),
            max_ticks=int(np.floor(TICK_ZERO + hi / cal.RAD_PER_TICK)),
        )
        for i, (name, lo, hi) in enumerate(
            zip(arm.joint_names, arm.joint_low_rad, arm.joint_high_rad, strict=True)
        )
    }
    open_ticks = int(round(TICK_ZERO + world.twin_arm.jaw.open_rad / cal.RAD_PER_TICK))
    jaw = cal.JointCalibration(len(joints) + 1, open_ticks, -1, TICK_ZERO, open_ticks)
    return cal.ArmCalibration(joints, gripper=(cal.SO101_GRIPPER, jaw))


def open_servo_bus(
    ctl: ControlledArm, port: str, calibration_out: str
) -> tuple[TwinServoModel, ServoBusProcess]:
    """Start the simulated servo bus over the twin's arm in its own process, link ``port`` to
    its pty and write the matching calibration file (``calibration_out``, default
    ``<port>.json``). Returns the model the node syncs and the bus's process."""
    model = TwinServoModel(ctl, twin_servo_calibration(ctl.world))
    bus = ServoBusProcess(model.shared, ids=tuple(range(1, model.num_servos + 1)))
    link = Path(port)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(bus.port)
    cal.save(model.calibration, calibration_out or f"{port}.json")
    return model, bus


def close_servo_bus(bus: ServoBusProcess, port: str) -> None:
    """Stop the bus and remove the link to its pty."""
    bus.close()
    link = Path(port)
    if link.is_symlink():
        link.unlink()
