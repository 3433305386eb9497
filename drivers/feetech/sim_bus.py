"""A simulated bus of STS3215 servos behind a pseudo-terminal, for tests without hardware.

The only fake of the Feetech stack: CI has no servos and no USB, so this stands in at the lowest
boundary, the bytes on the wire. :class:`SimServoBus` opens a pty pair and gives the client the
slave's path (``/dev/pts/N``); the real :class:`drivers.feetech.bus.FeetechBus` opens it with
pyserial as it would ``/dev/ttyACM0``. A thread reads the master side byte by byte, frames
instruction packets and answers as the servos would (PING, READ, WRITE, SYNC_READ, SYNC_WRITE;
status packets with checksums). Packets with a bad checksum are dropped, as a servo drops them.

Each servo has a 256-byte control table initialised as an STS3215 (model 777, angle limits
0..4095, P/D/I 32/32/0, 12.0 V, 30 deg C). Reads of the present-state registers (56..70) come
from the pluggable :class:`drivers.feetech.servo_model.ServoModel` (default: the kinematic
:class:`~drivers.feetech.servo_model.KinematicServoModel`); writes to ``TORQUE_ENABLE`` and
``GOAL_POSITION`` go to it (goals clamped to the angle-limit registers, as the servo does).
While a servo's torque is off its goal register follows its present position, so switching
torque on holds it where it is (the simulation's choice). Stored, not simulated:
``HOMING_OFFSET``, ``GOAL_SPEED``, the PID gains, ``LOCK`` (EEPROM writes are never refused),
REG_WRITE/ACTION (ignored).

Fault injection, for the client's error paths: :meth:`SimServoBus.stop_answering` (the servo
goes silent), :meth:`SimServoBus.corrupt_next_reply` (a wrong checksum),
:attr:`SimServoBus.delay_s` (a wait before every answer).
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import tty
from collections.abc import Sequence

import numpy as np

from drivers.feetech.protocol import (
    BROADCAST_ID,
    HEADER,
    STS3215,
    STS3215_MODEL_NUMBER,
    TICKS_PER_TURN,
    FeetechProtocolError,
    Instruction,
    InstructionPacket,
    decode_instruction,
    decode_sync_write,
    status_packet,
)
from drivers.feetech.servo_model import KinematicServoModel, ServoModel

log = logging.getLogger(__name__)

_READ_ONLY = range(STS3215.PRESENT_POSITION.address, 71)
"""Present-state addresses (56..70): writes to them are ignored."""
_MODEL_INPUTS = {STS3215.TORQUE_ENABLE.address, *range(42, 44), *range(9, 13)}
"""Addresses whose change the model must hear about (torque, goal, angle limits)."""


def _initial_table(servo_id: int) -> bytearray:
    table = bytearray(256)

    def put(register, value: int) -> None:
        table[register.address : register.address + register.size] = register.encode(value)

    put(STS3215.MODEL_NUMBER, STS3215_MODEL_NUMBER)
    put(STS3215.ID, servo_id)
    table[8] = 1  # Response_Status_Level: answer every instruction
    put(STS3215.MIN_ANGLE_LIMIT, 0)
    put(STS3215.MAX_ANGLE_LIMIT, TICKS_PER_TURN - 1)
    put(STS3215.P_COEFFICIENT, 32)
    put(STS3215.D_COEFFICIENT, 32)
    put(STS3215.I_COEFFICIENT, 0)
    put(STS3215.PRESENT_VOLTAGE, 120)
    put(STS3215.PRESENT_TEMPERATURE, 30)
    return table


class SimServoBus:
    """Simulated STS3215 servos answering on a pty (see the module docstring).

    Args:
        ids: The servos on the bus; index ``i`` of the model is ``ids[i]``.
        model: Where the servos are; default: a :class:`KinematicServoModel` for ``len(ids)``.
        delay_s: Wait before every answer, s (fault injection; settable later).

    Use as a context manager, or :meth:`start` and :meth:`close`; :attr:`port` is the path to
    give the client.
    """

    def __init__(
        self,
        ids: Sequence[int] = (1, 2, 3, 4, 5, 6),
        model: ServoModel | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.ids = tuple(int(i) for i in ids)
        if len(set(self.ids)) != len(self.ids):
            raise ValueError(f"servo ids {self.ids} are not distinct")
        self.model: ServoModel = model if model is not None else KinematicServoModel(len(ids))
        self.delay_s = delay_s
        self._index = {servo_id: i for i, servo_id in enumerate(self.ids)}
        self._tables = {servo_id: _initial_table(servo_id) for servo_id in self.ids}
        self._faults = threading.Lock()
        self._silent: set[int] = set()
        self._corrupt: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._master = self._slave = -1
        self.port = ""
        self.dropped_packets = 0
        """Instruction packets dropped for a bad checksum."""
        self.instructions_served: dict[str, int] = {}
        """How many instructions of each kind (``"READ"``, ``"SYNC_WRITE"``, ...) arrived."""
        self.replies_sent = 0
        """Status packets written (after any delay), corrupt ones included."""

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> SimServoBus:
        """Open the pty pair and start answering; returns self."""
        if self._thread is not None:
            return self
        self._master, self._slave = os.openpty()
        # Raw both ways: no echo, no line editing, no CR/LF mapping (the client sets raw too).
        tty.setraw(self._slave)
        self.port = os.ttyname(self._slave)
        self._thread = threading.Thread(target=self._serve, name="sim-servo-bus", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and close the pty (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        for fd in (self._master, self._slave):
            if fd >= 0:
                os.close(fd)
        self._master = self._slave = -1

    def __enter__(self) -> SimServoBus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- fault injection ------------------------------------------------------------------------

    def stop_answering(self, servo_id: int) -> None:
        """``servo_id`` goes silent (it still obeys writes, as a servo whose TX line broke)."""
        with self._faults:
            self._silent.add(servo_id)

    def resume_answering(self, servo_id: int) -> None:
        """``servo_id`` answers again."""
        with self._faults:
            self._silent.discard(servo_id)

    def corrupt_next_reply(self, servo_id: int, count: int = 1) -> None:
        """The next ``count`` answers of ``servo_id`` carry a wrong checksum."""
        with self._faults:
            self._corrupt[servo_id] = self._corrupt.get(servo_id, 0) + count

    def register(self, servo_id: int, address: int, size: int) -> bytes:
        """A servo's control-table bytes as the simulation holds them (for tests)."""
        return bytes(self._tables[servo_id][address : address + size])

    # -- the servos -----------------------------------------------------------------------------

    def _serve(self) -> None:
        buffer = bytearray()
        while not self._stop.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self._master, 256)
            except OSError:  # the pty is closing
                return
            for byte in chunk:  # frame the stream byte by byte
                buffer.append(byte)
                packet = self._frame(buffer)
                if packet is not None:
                    self._handle(packet)

    def _frame(self, buffer: bytearray) -> bytes | None:
        """Cut one whole packet off the front of ``buffer``; drop bytes that cannot start one."""
        while buffer and (buffer[: len(HEADER)] != HEADER[: len(buffer)]):
            del buffer[0]
        if len(buffer) >= 3 and buffer[2] == 0xFF:  # 0xFF 0xFF 0xFF: the header starts later
            del buffer[0]
        if len(buffer) < 4:
            return None
        if buffer[3] < 2:
            del buffer[0]
            return None
        end = 4 + buffer[3]
        if len(buffer) < end:
            return None
        packet = bytes(buffer[:end])
        del buffer[:end]
        return packet

    def _handle(self, raw: bytes) -> None:
        try:
            packet = decode_instruction(raw)
        except FeetechProtocolError as e:
            self.dropped_packets += 1
            log.debug("sim servo bus dropped a packet: %s", e)
            return
        try:
            name = Instruction(packet.instruction).name
        except ValueError:
            name = f"0x{packet.instruction:02x}"
        self.instructions_served[name] = self.instructions_served.get(name, 0) + 1
        targets = self.ids if packet.servo_id == BROADCAST_ID else (packet.servo_id,)
        targets = tuple(i for i in targets if i in self._tables)
        broadcast = packet.servo_id == BROADCAST_ID
        if packet.instruction == Instruction.PING:
            for servo_id in targets:
                self._answer(servo_id)
        elif packet.instruction == Instruction.READ and len(packet.params) == 2 and not broadcast:
            for servo_id in targets:
                self._answer(servo_id, self._read(servo_id, *packet.params))
        elif packet.instruction == Instruction.WRITE and len(packet.params) >= 2:
            self._write({i: (packet.params[0], packet.params[1:]) for i in targets})
            if not broadcast:
                for servo_id in targets:
                    self._answer(servo_id)
        elif packet.instruction == Instruction.SYNC_WRITE and broadcast:
            self._sync_write(packet)
        elif packet.instruction == Instruction.SYNC_READ and len(packet.params) >= 2 and broadcast:
            address, size = packet.params[0], packet.params[1]
            for servo_id in packet.params[2:]:
                if servo_id in self._tables:
                    self._answer(servo_id, self._read(servo_id, address, size))

    def _sync_write(self, packet: InstructionPacket) -> None:
        try:
            address, _, data_by_id = decode_sync_write(packet.params)
        except FeetechProtocolError:
            self.dropped_packets += 1
            return
        self._write({i: (address, d) for i, d in data_by_id.items() if i in self._tables})

    def _read(self, servo_id: int, address: int, size: int) -> bytes:
        self._refresh()
        return bytes(self._tables[servo_id][address : address + size])

    def _write(self, writes: dict[int, tuple[int, bytes]]) -> None:
        """Apply ``{id: (address, data)}`` at once, then tell the model if it concerns it."""
        if not writes:
            return
        self._refresh()
        touches_model = False
        for servo_id, (address, data) in writes.items():
            table = self._tables[servo_id]
            for offset, byte in enumerate(data):
                if address + offset < 256 and address + offset not in _READ_ONLY:
                    table[address + offset] = byte
                    touches_model |= address + offset in _MODEL_INPUTS
        if touches_model:
            self._push_goals()

    def _get(self, servo_id: int, register) -> int:
        table = self._tables[servo_id]
        return register.decode(bytes(table[register.address : register.address + register.size]))

    def _put(self, servo_id: int, register, value: int) -> None:
        table = self._tables[servo_id]
        table[register.address : register.address + register.size] = register.encode(value)

    def _push_goals(self) -> None:
        goals, torque = [], []
        for servo_id in self.ids:
            low = self._get(servo_id, STS3215.MIN_ANGLE_LIMIT)
            high = self._get(servo_id, STS3215.MAX_ANGLE_LIMIT)
            goal = self._get(servo_id, STS3215.GOAL_POSITION)
            goals.append(min(max(goal, low), high) if low < high else goal)
            torque.append(self._get(servo_id, STS3215.TORQUE_ENABLE) == 1)
        self.model.write_goals(np.array(goals), np.array(torque))

    def _refresh(self) -> None:
        """Present-state registers from the model; goals of limp servos follow them."""
        n = len(self.ids)
        positions = np.asarray(self.model.read_positions())
        speeds = _optional(self.model, "read_speeds", n)
        loads = _optional(self.model, "read_loads", n)
        moving = _optional(self.model, "read_moving", n)
        for i, servo_id in enumerate(self.ids):
            position = int(positions[i])
            self._put(servo_id, STS3215.PRESENT_POSITION, position)
            self._put(servo_id, STS3215.PRESENT_SPEED, int(np.clip(speeds[i], -32767, 32767)))
            self._put(servo_id, STS3215.PRESENT_LOAD, int(np.clip(loads[i], -1000, 1000)))
            self._put(servo_id, STS3215.MOVING, int(bool(moving[i])))
            if self._get(servo_id, STS3215.TORQUE_ENABLE) != 1:
                self._put(servo_id, STS3215.GOAL_POSITION, position)

    def _answer(self, servo_id: int, params: bytes = b"") -> None:
        with self._faults:
            if servo_id in self._silent:
                return
            corrupt = self._corrupt.get(servo_id, 0) > 0
            if corrupt:
                self._corrupt[servo_id] -= 1
        packet = bytearray(status_packet(servo_id, 0, params))
        if corrupt:
            packet[-1] ^= 0x5A
        if self.delay_s > 0:
            time.sleep(self.delay_s)  # the injected answer delay, not a wait on a condition
        os.write(self._master, bytes(packet))
        self.replies_sent += 1


def _optional(model: object, method: str, n: int) -> np.ndarray:
    reader = getattr(model, method, None)
    return np.asarray(reader()) if reader is not None else np.zeros(n, dtype=np.int64)
