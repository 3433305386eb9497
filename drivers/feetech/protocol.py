"""Feetech SCS/STS serial bus protocol: packets, checksums, the STS3215 registers we use.

Pure bytes in, bytes out (no I/O): :mod:`drivers.feetech.bus` sends these packets over a serial
port, :mod:`drivers.feetech.sim_bus` answers them.

Packets (half duplex, one master, servos answer only when addressed)::

    instruction: 0xFF 0xFF id length instruction params... checksum
    status:      0xFF 0xFF id length error       params... checksum

``length`` counts the bytes after itself (instruction or error byte, params, checksum), so it is
``len(params) + 2``. ``checksum = ~(id + length + instruction_or_error + sum(params)) & 0xFF``.
Broadcast id 0xFE: nobody answers, except SYNC_READ, where each listed servo answers with its own
status packet, in the listed order. Multi-byte registers are little-endian on STS servos (the
SDK's "end" 0; SCS servos are big-endian and not supported here).

Sources (checked against each other; no code copied):

- Feetech's Python SDK (``scservo_sdk``: ``scservo_def.py`` for the instruction codes and the
  broadcast id, ``protocol_packet_handler.py`` for packet layout, checksum and SYNC_READ /
  SYNC_WRITE framing, ``sms_sts.py`` for the STS register addresses), as mirrored in the public
  FTServo_Python repositories;
- LeRobot's ``src/lerobot/motors/feetech/tables.py`` (``STS_SMS_SERIES_CONTROL_TABLE``, sizes
  and the sign-magnitude bits of ``Homing_Offset`` (bit 11) and the velocities (bit 15)), which
  cites Feetech's STS/SMS memory table (doc.feetech.cn, FT-SMS-STS-emanual);
- Feetech's SCServo Arduino/C++ libraries (``ReadLoad``: the load's direction is bit 10, its
  magnitude 0..1000 in 0.1 % of the stall torque; ``ReadSpeed``: bit 15).

Signed registers are sign-magnitude, not two's complement: bit ``sign_bit`` set means negative,
the bits below it hold the magnitude.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

HEADER = b"\xff\xff"
BROADCAST_ID = 0xFE
"""Instruction to every servo (no status packet, except for SYNC_READ)."""
MAX_SERVO_ID = 0xFD
"""Largest id a status packet may carry (0xFE is broadcast, 0xFF would read as a header)."""
MAX_PACKET_LENGTH = 250
"""Largest ``length`` byte we send or accept (the SDK's ``TXPACKET_MAX_LEN``)."""
TICKS_PER_TURN = 4096
"""STS3215: 12-bit absolute magnetic encoder, 0..4095 over one turn."""
STS3215_MODEL_NUMBER = 777
"""Value of the model-number register (address 3) of an STS3215 (LeRobot's MODEL_NUMBER_TABLE)."""


class FeetechError(Exception):
    """Base class of the Feetech bus errors.

    Attributes:
        servo_id: The servo concerned, when known.
        address: The control-table address of the request, when there was one.
    """

    def __init__(self, message: str, servo_id: int | None = None, address: int | None = None):
        super().__init__(message)
        self.servo_id = servo_id
        self.address = address


class FeetechProtocolError(FeetechError):
    """A packet that breaks the protocol: bad header, length, checksum or servo id."""


class FeetechTimeoutError(FeetechError):
    """A servo did not answer in time."""


class Instruction(enum.IntEnum):
    """Instruction codes (``scservo_def.py``)."""

    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83


class StatusError(enum.IntFlag):
    """Bits of a status packet's error byte (``protocol_packet_handler.py``: ``ERRBIT_*``)."""

    VOLTAGE = 0x01
    ANGLE_SENSOR = 0x02
    OVERHEAT = 0x04
    OVERCURRENT = 0x08
    OVERLOAD = 0x20


@dataclass(frozen=True)
class Register:
    """One entry of a servo's control table.

    Attributes:
        name: Our name of the register.
        address: First byte in the control table.
        size: Bytes (1 or 2), little-endian.
        sign_bit: Bit that holds the sign of a sign-magnitude value; ``None``: unsigned.
        writable: False for read-only (present-state) registers.
    """

    name: str
    address: int
    size: int
    sign_bit: int | None = None
    writable: bool = True

    def encode(self, value: int) -> bytes:
        """``value`` as the register's bytes (sign-magnitude where the register is signed).

        Raises:
            ValueError: The value does not fit.
        """
        raw = encode_sign_magnitude(value, self.sign_bit) if self.sign_bit is not None else value
        if not 0 <= raw < 1 << (8 * self.size):
            raise ValueError(f"{value} does not fit register {self.name} ({self.size} bytes)")
        return int(raw).to_bytes(self.size, "little")

    def decode(self, data: bytes) -> int:
        """The register's value from its ``size`` bytes.

        Raises:
            ValueError: Wrong number of bytes.
        """
        if len(data) != self.size:
            raise ValueError(f"register {self.name} has {self.size} bytes, got {len(data)}")
        raw = int.from_bytes(data, "little")
        return decode_sign_magnitude(raw, self.sign_bit) if self.sign_bit is not None else raw


class STS3215:
    """The STS3215 control-table entries we use (addresses in decimal).

    EEPROM (kept across power cycles; written only with ``LOCK`` = 0): ``MODEL_NUMBER`` 3,
    ``ID`` 5, ``MIN_ANGLE_LIMIT`` 9, ``MAX_ANGLE_LIMIT`` 11, ``P/D/I_COEFFICIENT`` 21/22/23,
    ``HOMING_OFFSET`` 31. SRAM: ``TORQUE_ENABLE`` 40, ``GOAL_POSITION`` 42, ``GOAL_SPEED`` 46,
    ``LOCK`` 55, ``PRESENT_POSITION`` 56, ``PRESENT_SPEED`` 58, ``PRESENT_LOAD`` 60,
    ``PRESENT_VOLTAGE`` 62 (0.1 V), ``PRESENT_TEMPERATURE`` 63 (deg C), ``MOVING`` 66,
    ``PRESENT_CURRENT`` 69. Every address agrees between ``sms_sts.py`` and LeRobot's table.
    """

    MODEL_NUMBER = Register("model_number", 3, 2, writable=False)
    ID = Register("id", 5, 1)
    MIN_ANGLE_LIMIT = Register("min_angle_limit", 9, 2)
    MAX_ANGLE_LIMIT = Register("max_angle_limit", 11, 2)
    P_COEFFICIENT = Register("p_coefficient", 21, 1)
    D_COEFFICIENT = Register("d_coefficient", 22, 1)
    I_COEFFICIENT = Register("i_coefficient", 23, 1)
    HOMING_OFFSET = Register("homing_offset", 31, 2, sign_bit=11)
    TORQUE_ENABLE = Register("torque_enable", 40, 1)
    GOAL_POSITION = Register("goal_position", 42, 2)
    GOAL_SPEED = Register("goal_speed", 46, 2, sign_bit=15)
    LOCK = Register("lock", 55, 1)
    PRESENT_POSITION = Register("present_position", 56, 2, writable=False)
    PRESENT_SPEED = Register("present_speed", 58, 2, sign_bit=15, writable=False)
    PRESENT_LOAD = Register("present_load", 60, 2, sign_bit=10, writable=False)
    PRESENT_VOLTAGE = Register("present_voltage", 62, 1, writable=False)
    PRESENT_TEMPERATURE = Register("present_temperature", 63, 1, writable=False)
    MOVING = Register("moving", 66, 1, writable=False)
    PRESENT_CURRENT = Register("present_current", 69, 2, writable=False)


def encode_sign_magnitude(value: int, sign_bit: int) -> int:
    """``value`` in sign-magnitude form: ``|value|`` below ``sign_bit``, the sign at it.

    Raises:
        ValueError: ``|value|`` needs ``sign_bit`` bits or more.
    """
    magnitude = abs(int(value))
    if magnitude >= 1 << sign_bit:
        raise ValueError(f"|{value}| does not fit in {sign_bit} bits (sign at bit {sign_bit})")
    return magnitude | (1 << sign_bit) if value < 0 else magnitude


def decode_sign_magnitude(raw: int, sign_bit: int) -> int:
    """The signed value of sign-magnitude ``raw`` (bits above ``sign_bit`` are ignored)."""
    magnitude = raw & ((1 << sign_bit) - 1)
    return -magnitude if raw & (1 << sign_bit) else magnitude


def checksum(body: bytes) -> int:
    """``~sum(body) & 0xFF``; ``body`` is id, length, instruction/error and params."""
    return ~sum(body) & 0xFF


def _check_id(servo_id: int, allow_broadcast: bool = False) -> None:
    if not 0 <= servo_id <= MAX_SERVO_ID and not (allow_broadcast and servo_id == BROADCAST_ID):
        raise ValueError(f"servo id {servo_id} is outside 0..{MAX_SERVO_ID}")


def _packet(servo_id: int, code: int, params: bytes) -> bytes:
    length = len(params) + 2
    if length > MAX_PACKET_LENGTH:
        raise ValueError(f"packet of {len(params)} parameter bytes is too long")
    body = bytes((servo_id, length, code)) + params
    return HEADER + body + bytes((checksum(body),))


def instruction_packet(servo_id: int, instruction: Instruction, params: bytes = b"") -> bytes:
    """An instruction packet with its header and checksum.

    Raises:
        ValueError: An id outside 0..253 (or 254, broadcast), or too many params.
    """
    _check_id(servo_id, allow_broadcast=True)
    return _packet(servo_id, int(instruction), bytes(params))


def status_packet(servo_id: int, error: int = 0, params: bytes = b"") -> bytes:
    """A status packet (what a servo answers), with its header and checksum."""
    _check_id(servo_id)
    return _packet(servo_id, error, bytes(params))


def ping_packet(servo_id: int) -> bytes:
    """PING ``servo_id``; the servo answers an empty status packet."""
    return instruction_packet(servo_id, Instruction.PING)


def read_packet(servo_id: int, address: int, size: int) -> bytes:
    """READ ``size`` bytes from ``address``; the status packet carries them."""
    _check_range(address, size)
    return instruction_packet(servo_id, Instruction.READ, bytes((address, size)))


def write_packet(servo_id: int, address: int, data: bytes) -> bytes:
    """WRITE ``data`` at ``address``; the servo answers an empty status packet."""
    _check_range(address, len(data))
    return instruction_packet(servo_id, Instruction.WRITE, bytes((address,)) + bytes(data))


def sync_read_packet(address: int, size: int, servo_ids: Iterable[int]) -> bytes:
    """SYNC_READ ``size`` bytes at ``address`` from each of ``servo_ids`` (broadcast).

    Each listed servo answers a status packet with its ``size`` bytes, in the listed order.
    """
    ids = bytes(servo_ids)
    for servo_id in ids:
        _check_id(servo_id)
    _check_range(address, size)
    return instruction_packet(BROADCAST_ID, Instruction.SYNC_READ, bytes((address, size)) + ids)


def sync_write_packet(address: int, size: int, data_by_id: Mapping[int, bytes]) -> bytes:
    """SYNC_WRITE ``size`` bytes at ``address`` of each servo (broadcast, no answer).

    Params are ``address, size`` then ``id, data...`` per servo.

    Raises:
        ValueError: A servo's data is not ``size`` bytes.
    """
    _check_range(address, size)
    params = bytearray((address, size))
    for servo_id, data in data_by_id.items():
        _check_id(servo_id)
        if len(data) != size:
            raise ValueError(f"sync write of {size} bytes got {len(data)} for servo {servo_id}")
        params.append(servo_id)
        params += data
    return instruction_packet(BROADCAST_ID, Instruction.SYNC_WRITE, bytes(params))


def _check_range(address: int, size: int) -> None:
    if not 0 <= address <= 0xFF or not 1 <= size <= 0xFF or address + size > 0x100:
        raise ValueError(f"register range {address}+{size} is outside the control table")


@dataclass(frozen=True)
class StatusPacket:
    """A decoded, validated status packet.

    Attributes:
        servo_id: The answering servo.
        error: Its error byte (:class:`StatusError` bits; 0: none).
        params: The data bytes (empty for PING and WRITE).
    """

    servo_id: int
    error: int
    params: bytes

    @property
    def errors(self) -> StatusError:
        """The error byte as flags."""
        return StatusError(self.error)


@dataclass(frozen=True)
class InstructionPacket:
    """A decoded, validated instruction packet (what the simulated servos read).

    Attributes:
        servo_id: The addressed servo, or :data:`BROADCAST_ID`.
        instruction: The instruction code (an :class:`Instruction` value, or an unknown int).
        params: The parameter bytes.
    """

    servo_id: int
    instruction: int
    params: bytes


def parse_head(head: bytes, what: str) -> tuple[int, int]:
    """Check the first four bytes of a packet; return its id and ``length`` byte.

    Args:
        head: ``0xFF 0xFF id length``.
        what: ``"status packet"`` or ``"instruction packet"``, for the error message.

    Raises:
        FeetechProtocolError: Not a header, or an impossible length.
    """
    if len(head) != 4:
        raise FeetechProtocolError(f"{what} head is {len(head)} bytes, not 4: {head.hex(' ')}")
    if head[:2] != HEADER:
        raise FeetechProtocolError(f"{what} header {head[:2].hex(' ')} != ff ff")
    servo_id, length = head[2], head[3]
    if length < 2 or length > MAX_PACKET_LENGTH:
        raise FeetechProtocolError(
            f"length byte {length} out of 2..{MAX_PACKET_LENGTH} in the {what} of servo {servo_id}",
            servo_id,
        )
    return servo_id, length


def _split(packet: bytes, what: str) -> tuple[int, int, bytes]:
    servo_id, length = parse_head(bytes(packet[:4]), what)
    if len(packet) != 4 + length:
        raise FeetechProtocolError(
            f"{what} of servo {servo_id} is {len(packet)} bytes, its length byte says {4 + length}",
            servo_id,
        )
    body = bytes(packet[2:-1])
    want = checksum(body)
    if packet[-1] != want:
        raise FeetechProtocolError(
            f"checksum 0x{packet[-1]:02x} != 0x{want:02x} in the {what} of servo {servo_id}",
            servo_id,
        )
    return servo_id, body[2], body[3:]


def decode_status(
    packet: bytes, expected_id: int | None = None, expected_params: int | None = None
) -> StatusPacket:
    """Validate and decode one whole status packet.

    Args:
        packet: Header to checksum.
        expected_id: The servo that should have answered (None: any).
        expected_params: The number of data bytes it should carry (None: any).

    Raises:
        FeetechProtocolError: Bad header, length, checksum, id or data size; the message says
            which and names the servo, e.g. ``checksum 0x12 != 0x34 in the status packet of
            servo 3`` (received != computed).
    """
    servo_id, error, params = _split(packet, "status packet")
    if expected_id is not None and servo_id != expected_id:
        raise FeetechProtocolError(
            f"status packet from servo {servo_id}, expected servo {expected_id}", expected_id
        )
    if expected_params is not None and len(params) != expected_params:
        raise FeetechProtocolError(
            f"status packet of servo {servo_id} carries {len(params)} data bytes, "
            f"expected {expected_params}",
            servo_id,
        )
    return StatusPacket(servo_id, error, params)


def decode_instruction(packet: bytes) -> InstructionPacket:
    """Validate and decode one whole instruction packet.

    Raises:
        FeetechProtocolError: Bad header, length or checksum.
    """
    servo_id, code, params = _split(packet, "instruction packet")
    return InstructionPacket(servo_id, code, params)


def decode_sync_write(params: bytes) -> tuple[int, int, dict[int, bytes]]:
    """Split SYNC_WRITE params into ``(address, size, {id: data})``.

    Raises:
        FeetechProtocolError: The params are not ``address, size`` then whole ``id, data`` runs.
    """
    if len(params) < 2 or params[1] == 0 or (len(params) - 2) % (params[1] + 1):
        raise FeetechProtocolError(f"malformed SYNC_WRITE params {params.hex(' ')}")
    address, size = params[0], params[1]
    step = size + 1
    runs = (params[i : i + step] for i in range(2, len(params), step))
    return address, size, {run[0]: bytes(run[1:]) for run in runs}
