"""A client for a bus of Feetech STS servos on a serial port (the SO-101's six STS3215).

:class:`FeetechBus` sends the packets of :mod:`drivers.feetech.protocol` over a serial device
and waits for the status packets, one request at a time (half duplex: the servos only speak when
asked). Every method raises instead of returning a guess:

- no answer within ``timeout_s`` after ``retries`` repeats: :class:`FeetechTimeoutError`, naming
  the servo id and the control-table address;
- an answer that breaks the protocol (header, length, checksum, wrong servo, wrong size), after
  the same repeats: :class:`FeetechProtocolError`, naming the servo.

A failed call returns nothing, so no caller can write a command computed from a malformed reply.
After a failure the bus stays usable: a failed try is followed by reading and dropping bytes
until the line has been quiet for ``timeout_s`` (the rest of a broken answer, the other servos'
answers to a failed SYNC_READ), and every request first drops whatever is left in the input
buffer. The protocol has no sequence numbers: an answer later than ``timeout_s`` plus that quiet
time would be taken for the answer to the next request of the same servo and size, so
``timeout_s`` must stay well above the bus's worst latency (real servos answer within a
millisecond at 1 Mbaud; a failed try costs about two ``timeout_s``).

Reads and writes with an answer (READ, WRITE, PING) are safe to repeat, so they are retried;
SYNC_WRITE is broadcast and has no answer (never retried: a lost one shows in the next read).
WRITE answers need the servo's ``Response_Status_Level`` (address 8) at 1, the factory default.

Why pyserial and not Feetech's ``feetech-servo-sdk`` (``scservo_sdk``): both were installed and
tried against :class:`drivers.feetech.sim_bus.SimServoBus` on a pty, and both talk to it.
``feetech-servo-sdk`` 1.0.0 (Nov 2022, the only release on PyPI, published by a third party) is
not kept: its packet timeout ignores the caller (LeRobot monkeypatches ``setPacketTimeout`` for a
bug fixed only in Feetech's unpublished repository), it busy-polls a ``timeout=0`` port on the
wall clock, reports failures as integer result codes, and its group sync read cannot say which
servo did not answer. The protocol is a few dozen lines (:mod:`drivers.feetech.protocol`), and
pyserial (which the SDK uses underneath anyway) is kept, stable, and blocks in ``select`` on a
real device or a pty alike.

Threads: every method may be called from any thread; one lock serialises requests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from drivers.feetech.protocol import (
    STS3215,
    TICKS_PER_TURN,
    FeetechProtocolError,
    FeetechTimeoutError,
    Register,
    StatusError,
    StatusPacket,
    decode_status,
    parse_head,
    ping_packet,
    read_packet,
    sync_read_packet,
    sync_write_packet,
    write_packet,
)

log = logging.getLogger(__name__)

SO101_SERVO_IDS = (1, 2, 3, 4, 5, 6)
"""shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll, gripper."""


WRITE_TIMEOUT_S = 0.5
"""pyserial's write timeout, seconds: a port that cannot send a packet in this long is wedged."""


MAX_STALE_ANSWERS = 2
"""Well-formed status packets that are not the awaited answer (late answers to earlier
requests) dropped while waiting for it."""


@dataclass(frozen=True)
class FeetechBusConfig:
    """How to reach the servos.

    Attributes:
        port: Serial device, e.g. ``/dev/ttyACM0`` (the SO-101's USB board) or a pty.
        baudrate: Bits per second; the STS3215's factory setting is 1,000,000.
        ids: The servos on the bus, in the order of every array this client returns.
        timeout_s: Longest wait for a status packet (and for its rest once it started), s. At
            1 Mbaud an answer takes well under a millisecond; the default leaves room for USB
            latency and a loaded host.
        retries: Repeats of a request whose answer timed out or was corrupt (0: one try).
    """

    port: str
    baudrate: int = 1_000_000
    ids: tuple[int, ...] = SO101_SERVO_IDS
    timeout_s: float = 0.05
    retries: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))
        if not self.port:
            raise ValueError("port is empty; give the serial device, e.g. /dev/ttyACM0")
        if self.baudrate <= 0:
            raise ValueError(f"baudrate {self.baudrate} must be positive (STS3215: 1000000)")
        if not self.ids or len(set(self.ids)) != len(self.ids):
            raise ValueError(f"ids {self.ids} must be a non-empty list of distinct servo ids")
        if any(not 0 <= i <= 252 for i in self.ids):
            raise ValueError(f"ids {self.ids}: servo ids are 0..252")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s {self.timeout_s} must be > 0 (e.g. 0.05)")
        if self.retries < 0:
            raise ValueError(f"retries {self.retries} must be >= 0")


class FeetechBus:
    """A serial bus of Feetech STS servos.

    Args:
        port: Serial device (see :class:`FeetechBusConfig`).
        baudrate: Bits per second.
        ids: The servos on the bus.
        timeout_s: Longest wait for an answer, s.
        retries: Repeats of a failed request.

    Raises:
        ImportError: pyserial is not installed.
        serial.SerialException: The device cannot be opened (missing, busy, no permission).
    """

    def __init__(
        self,
        port: str,
        baudrate: int = 1_000_000,
        ids: Sequence[int] = SO101_SERVO_IDS,
        timeout_s: float = 0.05,
        retries: int = 2,
    ) -> None:
        self.config = FeetechBusConfig(port, baudrate, tuple(ids), timeout_s, retries)
        try:
            import serial
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("FeetechBus needs pyserial: pip install 'pyserial>=3.5'") from e
        # A write of a few dozen bytes leaves in well under a millisecond; pyserial's write
        # timeout counts wall time, so a thread descheduled on a loaded machine would "time
        # out" a write that went out. Only a wedged port takes this long.
        self._serial = serial.Serial(
            port, baudrate, timeout=timeout_s, write_timeout=WRITE_TIMEOUT_S, exclusive=True
        )
        self._lock = threading.Lock()
        self.status_errors: dict[int, StatusError] = {}
        """The error flags of each servo's latest status packet (empty flags: healthy)."""

    @classmethod
    def from_config(cls, config: FeetechBusConfig) -> FeetechBus:
        """Open the bus that ``config`` describes."""
        return cls(config.port, config.baudrate, config.ids, config.timeout_s, config.retries)

    def close(self) -> None:
        """Close the serial port (idempotent)."""
        self._serial.close()

    def __enter__(self) -> FeetechBus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- single-servo requests ------------------------------------------------------------------

    def ping(self, servo_id: int) -> StatusError:
        """PING one servo; return its error flags (empty: healthy).

        Raises:
            FeetechTimeoutError: It did not answer.
            FeetechProtocolError: Its answer was corrupt.
        """
        status = self._request(ping_packet(servo_id), servo_id, "PING", None, 0)
        return status.errors

    def read(self, servo_id: int, address: int, size: int) -> bytes:
        """READ ``size`` bytes of one servo's control table from ``address``.

        Raises:
            FeetechTimeoutError: It did not answer.
            FeetechProtocolError: Its answer was corrupt or not ``size`` bytes.
        """
        packet = read_packet(servo_id, address, size)
        return self._request(packet, servo_id, "READ", address, size).params

    def write(self, servo_id: int, address: int, data: bytes) -> None:
        """WRITE ``data`` into one servo's control table at ``address``; wait for its answer.

        Raises:
            FeetechTimeoutError: It did not answer.
            FeetechProtocolError: Its answer was corrupt.
        """
        self._request(write_packet(servo_id, address, bytes(data)), servo_id, "WRITE", address, 0)

    def read_register(self, servo_id: int, register: Register) -> int:
        """One register of one servo, decoded (sign-magnitude where signed)."""
        return register.decode(self.read(servo_id, register.address, register.size))

    def write_register(self, servo_id: int, register: Register, value: int) -> None:
        """Write one register of one servo (encoded; sign-magnitude where signed).

        Raises:
            ValueError: The register is read-only or the value does not fit.
        """
        if not register.writable:
            raise ValueError(f"register {register.name} ({register.address}) is read-only")
        self.write(servo_id, register.address, register.encode(value))

    def set_torque(self, ids: Sequence[int] | None, enabled: bool) -> None:
        """Enable or disable the torque of ``ids`` (None: all), one acknowledged WRITE each.

        Not a SYNC_WRITE: switching torque matters for safety, so each servo must confirm.
        """
        for servo_id in self._ids(ids):
            self.write_register(servo_id, STS3215.TORQUE_ENABLE, int(bool(enabled)))

    # -- group requests -------------------------------------------------------------------------

    def sync_read(self, register: Register, ids: Sequence[int] | None = None) -> np.ndarray:
        """One register of several servos in one SYNC_READ.

        Returns:
            (len(ids),) int64 values, in the order of ``ids`` (None: the bus's ids).

        Raises:
            FeetechTimeoutError: A servo did not answer (the first missing one is named).
            FeetechProtocolError: An answer was corrupt, from a servo not asked, or twice.
        """
        ids = self._ids(ids)
        packet = sync_read_packet(register.address, register.size, ids)
        with self._lock:
            error: Exception | None = None
            for _ in range(self.config.retries + 1):
                try:
                    statuses = self._sync_read_once(packet, ids, register)
                except (FeetechTimeoutError, FeetechProtocolError) as e:
                    error = e
                    self._drain()
                    continue
                return np.array([register.decode(statuses[i].params) for i in ids], dtype=np.int64)
        raise self._final(error)

    def sync_read_positions(self, ids: Sequence[int] | None = None) -> np.ndarray:
        """Present positions of ``ids`` (None: all), (N,) int64 ticks in 0..4095."""
        return self.sync_read(STS3215.PRESENT_POSITION, ids)

    def sync_write(self, register: Register, ids: Sequence[int], values: Sequence[int]) -> None:
        """Write one register of several servos in one SYNC_WRITE (broadcast, no answer).

        Raises:
            ValueError: ``values`` does not match ``ids``, or a value does not fit.
        """
        ids = self._ids(ids)
        values = np.asarray(values)
        if values.shape != (len(ids),):
            raise ValueError(f"values have shape {values.shape}, expected ({len(ids)},) for {ids}")
        if not register.writable:
            raise ValueError(f"register {register.name} ({register.address}) is read-only")
        data = {i: register.encode(int(v)) for i, v in zip(ids, values, strict=True)}
        packet = sync_write_packet(register.address, register.size, data)
        with self._lock:
            self._send(packet)

    def sync_write_goal_positions(self, ids: Sequence[int] | None, ticks: Sequence[int]) -> None:
        """Goal positions of ``ids`` (None: all) in one SYNC_WRITE.

        Args:
            ids: Servo ids.
            ticks: (len(ids),) whole ticks in 0..4095.

        Raises:
            ValueError: Wrong shape, a fraction, or a tick outside 0..4095.
        """
        ticks = np.asarray(ticks)
        ids = self._ids(ids)
        if ticks.shape != (len(ids),):
            raise ValueError(f"ticks has shape {ticks.shape}, expected ({len(ids)},) for {ids}")
        if not np.all(np.isfinite(ticks)) or np.any(ticks != np.round(ticks)):
            raise ValueError(f"goal ticks must be whole numbers: {ticks}")
        if np.any((ticks < 0) | (ticks >= TICKS_PER_TURN)):
            raise ValueError(f"goal ticks must be in 0..{TICKS_PER_TURN - 1}: {ticks}")
        self.sync_write(STS3215.GOAL_POSITION, ids, ticks.astype(np.int64))

    # -- internals ------------------------------------------------------------------------------

    def _ids(self, ids: Sequence[int] | None) -> tuple[int, ...]:
        return self.config.ids if ids is None else tuple(int(i) for i in ids)

    def _send(self, packet: bytes) -> None:
        self._serial.reset_input_buffer()
        self._serial.write(packet)
        self._serial.flush()

    def _drain(self) -> None:
        """After a failed request: read and drop until the line has been quiet for
        ``timeout_s`` (the rest of a broken answer, answers of the other servos of a failed
        SYNC_READ), so the next request reads only its own answer."""
        while self._serial.read(256):
            pass

    def _request(
        self, packet: bytes, servo_id: int, op: str, address: int | None, size: int
    ) -> StatusPacket:
        """Send ``packet``, return the validated answer of ``servo_id``; retry on failure."""
        with self._lock:
            error: Exception | None = None
            for _ in range(self.config.retries + 1):
                self._send(packet)
                try:
                    status = self._answer(servo_id, op, address, size)
                except (FeetechTimeoutError, FeetechProtocolError) as e:
                    error = e
                    self._drain()
                    continue
                self._note(status)
                return status
        raise self._final(error)

    def _answer(self, servo_id: int, op: str, address: int | None, size: int) -> StatusPacket:
        """The answer of ``servo_id`` carrying ``size`` data bytes.

        A whole, well-formed status packet that is not that answer (another servo's, or another
        size: a late answer to an earlier request that timed out, which reached the port after
        the input was flushed for this one) is dropped and the next packet read, up to
        :data:`MAX_STALE_ANSWERS` of them; if nothing else arrives, the dropped packet's
        mismatch is the error (a servo that really answers wrongly is still reported so).
        A bad checksum or header is an error at once. A late answer of the same servo and size
        cannot be told from the awaited one (the protocol has no sequence numbers); the input
        flush before each request removes it whenever it arrived before the request.
        """
        stale: FeetechProtocolError | None = None
        for _ in range(MAX_STALE_ANSWERS + 1):
            raw = self._receive(servo_id, op, address)
            if raw is None:
                raise stale if stale is not None else self._timeout(servo_id, op, address)
            decode_status(raw)  # checksum, header: a broken packet is an error, not stale
            try:
                return decode_status(raw, servo_id, size)
            except FeetechProtocolError as e:
                stale = e
        assert stale is not None
        raise stale

    def _sync_read_once(
        self, packet: bytes, ids: tuple[int, ...], register: Register
    ) -> dict[int, StatusPacket]:
        self._send(packet)
        got: dict[int, StatusPacket] = {}
        while len(got) < len(ids):
            missing = [i for i in ids if i not in got]
            raw = self._receive(missing[0], "SYNC_READ", register.address)
            if raw is None:
                raise self._timeout(missing[0], "SYNC_READ", register.address, got)
            status = decode_status(raw, None, register.size)
            if status.servo_id not in missing:
                why = "a second" if status.servo_id in ids else "an unasked"
                raise FeetechProtocolError(
                    f"SYNC_READ of address {register.address}: {why} status packet from "
                    f"servo {status.servo_id}",
                    status.servo_id,
                    register.address,
                )
            got[status.servo_id] = status
        for status in got.values():
            self._note(status)
        return got

    def _receive(self, servo_id: int, op: str, address: int | None) -> bytes | None:
        """One whole status packet's bytes, or None when nothing at all arrived in time.

        Raises:
            FeetechProtocolError: A bad head, or a packet cut off.
        """
        head = self._serial.read(4)
        if not head:
            return None
        if len(head) < 4:
            raise FeetechProtocolError(
                f"answer to {op} of servo {servo_id} cut off after {len(head)} bytes: "
                f"{head.hex(' ')}",
                servo_id,
                address,
            )
        try:
            sender, length = parse_head(head, "status packet")
        except FeetechProtocolError as e:
            raise FeetechProtocolError(
                f"answer to {op} of servo {servo_id}: {e}", servo_id, address
            ) from e
        rest = self._serial.read(length)
        if len(rest) < length:
            raise FeetechProtocolError(
                f"status packet of servo {sender} cut off: {4 + len(rest)} of {4 + length} bytes",
                sender,
                address,
            )
        return head + rest

    def _timeout(
        self,
        servo_id: int,
        op: str,
        address: int | None,
        answered: dict[int, StatusPacket] | None = None,
    ) -> FeetechTimeoutError:
        where = f" of address {address}" if address is not None else ""
        others = f" ({sorted(answered)} did)" if answered else ""
        return FeetechTimeoutError(
            f"servo {servo_id} did not answer {op}{where} within {self.config.timeout_s} s{others}",
            servo_id,
            address,
        )

    def _final(self, error: Exception | None) -> Exception:
        """The last attempt's error, with the number of tries appended."""
        assert error is not None
        tries = self.config.retries + 1
        final = type(error)(
            f"{error} ({tries} {'try' if tries == 1 else 'tries'} on {self.config.port})",
            getattr(error, "servo_id", None),
            getattr(error, "address", None),
        )
        final.__cause__ = error
        return final

    def _note(self, status: StatusPacket) -> None:
        flags = status.errors
        if flags != self.status_errors.get(status.servo_id, StatusError(0)) and flags:
            log.warning("servo %d reports %s", status.servo_id, flags)
        self.status_errors[status.servo_id] = flags
