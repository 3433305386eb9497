"""The Feetech STS stack: packet codec, the serial client against simulated servos on a pty,
and calibration files.

The client (:class:`drivers.feetech.bus.FeetechBus`) is the real one, opening a real tty with
pyserial; only the servos are simulated (:class:`drivers.feetech.sim_bus.SimServoBus`), because
CI has no servo hardware (the simulated buses and ``wait_for`` are ``so101_helpers.py``'s).
Waits are on conditions with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from so101_helpers import IDS, sim_buses, wait_for

from drivers.feetech import calibration as cal
from drivers.feetech.protocol import (
    STS3215,
    FeetechProtocolError,
    FeetechTimeoutError,
    Instruction,
    StatusError,
    decode_instruction,
    decode_sign_magnitude,
    decode_status,
    decode_sync_write,
    encode_sign_magnitude,
    ping_packet,
    read_packet,
    status_packet,
    sync_read_packet,
    sync_write_packet,
    write_packet,
)
from drivers.feetech.servo_model import KinematicServoConfig, KinematicServoModel
from drivers.feetech.sim_bus import SimServoBus

TIMEOUT_S = 0.2
"""The client's answer timeout here: far above a pty round trip, tolerant of a loaded CI host."""


# -- codec -------------------------------------------------------------------------------------


def test_ping_packet_matches_the_hand_computed_bytes() -> None:
    # PING servo 1: id 0x01, length 0x02 (instruction + checksum), instruction 0x01.
    # checksum = ~(0x01 + 0x02 + 0x01) & 0xFF = ~0x04 & 0xFF = 0xFB.
    assert ping_packet(1) == bytes([0xFF, 0xFF, 0x01, 0x02, 0x01, 0xFB])


def test_read_and_write_packets_match_the_hand_computed_bytes() -> None:
    # READ 2 bytes at 56 (present position) of servo 1: 01 04 02 38 02, sum 0x41 -> 0xBE.
    assert read_packet(1, 56, 2) == bytes.fromhex("ffff 0104 0238 02be")
    # WRITE goal 2048 (0x0800, little-endian 00 08) at 42 of servo 3: 03 05 03 2a 00 08,
    # sum 0x3d -> 0xc2.
    data = STS3215.GOAL_POSITION.encode(2048)
    assert data == b"\x00\x08"
    assert write_packet(3, 42, data) == bytes.fromhex("ffff 0305 032a 0008 c2")


def test_status_packet_round_trip_and_error_flags() -> None:
    raw = status_packet(3, StatusError.OVERLOAD | StatusError.VOLTAGE, b"\x34\x12")
    status = decode_status(raw, expected_id=3, expected_params=2)
    assert (status.servo_id, status.params) == (3, b"\x34\x12")
    assert status.errors == StatusError.OVERLOAD | StatusError.VOLTAGE
    assert STS3215.PRESENT_POSITION.decode(status.params) == 0x1234


@given(
    servo_id=st.integers(0, 0xFD),
    error=st.integers(0, 0xFF),
    params=st.binary(max_size=20),
)
def test_status_packets_round_trip(servo_id: int, error: int, params: bytes) -> None:
    status = decode_status(status_packet(servo_id, error, params))
    assert (status.servo_id, status.error, status.params) == (servo_id, error, params)


def test_decoding_names_what_is_wrong_and_the_servo() -> None:
    good = status_packet(3, 0, b"\x00\x08")
    bad_sum = good[:-1] + bytes([good[-1] ^ 0xFF])
    with pytest.raises(FeetechProtocolError, match=r"checksum 0x.. != 0x.. .*servo 3") as e:
        decode_status(bad_sum)
    assert e.value.servo_id == 3
    with pytest.raises(FeetechProtocolError, match="header fe ff != ff ff"):
        decode_status(b"\xfe" + good[1:])
    with pytest.raises(FeetechProtocolError, match="servo 3 is 7 bytes, its length byte says 8"):
        decode_status(good[:-1])
    with pytest.raises(FeetechProtocolError, match="from servo 3, expected servo 4"):
        decode_status(good, expected_id=4)
    with pytest.raises(FeetechProtocolError, match="servo 3 carries 2 data bytes, expected 1"):
        decode_status(good, expected_params=1)


def test_sync_packets_round_trip() -> None:
    packet = decode_instruction(sync_read_packet(56, 2, [1, 2, 6]))
    assert (packet.servo_id, packet.instruction) == (0xFE, Instruction.SYNC_READ)
    assert packet.params == bytes([56, 2, 1, 2, 6])
    data = {1: b"\x00\x01", 4: b"\xff\x0f"}
    packet = decode_instruction(sync_write_packet(42, 2, data))
    assert packet.instruction == Instruction.SYNC_WRITE
    assert decode_sync_write(packet.params) == (42, 2, data)
    with pytest.raises(ValueError, match="got 1 for servo 4"):
        sync_write_packet(42, 2, {4: b"\x01"})


@pytest.mark.parametrize("sign_bit", [10, 11, 15])
@given(value=st.integers(-1023, 1023))
def test_sign_magnitude_round_trip(sign_bit: int, value: int) -> None:
    raw = encode_sign_magnitude(value, sign_bit)
    assert 0 <= raw < 1 << (sign_bit + 1)
    assert decode_sign_magnitude(raw, sign_bit) == value


def test_sign_magnitude_is_not_twos_complement() -> None:
    assert encode_sign_magnitude(-5, 15) == 0x8005
    assert STS3215.GOAL_SPEED.encode(-5) == b"\x05\x80"
    assert STS3215.PRESENT_LOAD.decode(b"\x64\x04") == -100  # bit 10: direction
    assert STS3215.PRESENT_SPEED.decode(b"\x64\x80") == -100
    with pytest.raises(ValueError, match="does not fit"):
        encode_sign_magnitude(1024, 10)


# -- the client against simulated servos on a pty ----------------------------------------------


@pytest.fixture
def open_sim() -> Iterator[Callable[..., SimServoBus]]:
    """Factory: a started :class:`SimServoBus`, kinematic servos of ``config`` if given
    (closed at teardown)."""
    with sim_buses() as start_bus:

        def start(config: KinematicServoConfig | None = None, **kwargs) -> SimServoBus:
            model = KinematicServoModel(len(IDS), config) if config is not None else None
            return start_bus(model, **kwargs)

        yield start


@pytest.fixture
def open_bus() -> Iterator[Callable[..., object]]:
    """Factory: a :class:`FeetechBus` on a port (closed at teardown)."""
    pytest.importorskip("serial", reason="FeetechBus needs pyserial (pip install pyserial)")
    from drivers.feetech.bus import FeetechBus

    opened: list[FeetechBus] = []

    def open_(port: str, **kwargs) -> FeetechBus:
        kwargs.setdefault("timeout_s", TIMEOUT_S)
        bus = FeetechBus(port, ids=IDS, **kwargs)
        opened.append(bus)
        return bus

    yield open_
    for bus in opened:
        bus.close()


def settled(bus, ids=IDS) -> bool:
    """No servo of ``ids`` is travelling (the MOVING register)."""
    return not bus.sync_read(STS3215.MOVING, ids).any()


def test_ping_torque_goals_converge_within_deadband(open_sim, open_bus) -> None:
    deadband = 3
    sim = open_sim(KinematicServoConfig(deadband_ticks=deadband))
    bus = open_bus(sim.port)
    for servo_id in IDS:
        assert bus.ping(servo_id) == StatusError(0)
    start = bus.sync_read_positions()
    assert start.shape == (6,) and start.dtype == np.int64

    goals = np.array([1000, 1500, 2000, 2500, 3000, 3500])
    bus.sync_write_goal_positions(IDS, goals)  # torque off: nobody moves
    bus.set_torque(IDS, True)
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x01" for i in IDS)
    assert settled(bus) and np.array_equal(bus.sync_read_positions(), start)

    bus.sync_write_goal_positions(IDS, goals)
    wait_for(lambda: np.all(np.abs(bus.sync_read_positions() - goals) <= deadband), what="goals")
    assert np.array_equal(bus.sync_read(STS3215.GOAL_POSITION), goals)
    assert bus.read_register(4, STS3215.MODEL_NUMBER) == 777

    # A goal inside the deadband does not move a servo at rest.
    bus.sync_write_goal_positions([2], [1500 + deadband])
    assert settled(bus, [2]) and bus.sync_read_positions([2])[0] == 1500


def test_sync_read_answers_every_id_in_the_order_asked(open_sim, open_bus) -> None:
    initial = (100.0, 200.0, 300.0, 400.0, 500.0, 600.0)
    sim = open_sim(KinematicServoConfig(initial_ticks=initial))
    bus = open_bus(sim.port)
    assert bus.sync_read_positions().tolist() == [100, 200, 300, 400, 500, 600]
    assert bus.sync_read_positions([6, 1, 3]).tolist() == [600, 100, 300]
    assert bus.sync_read(STS3215.PRESENT_VOLTAGE).tolist() == [120] * 6


def test_a_wrong_checksum_raises_a_protocol_error_naming_the_servo(open_sim, open_bus) -> None:
    sim = open_sim()
    bus = open_bus(sim.port, retries=1)
    sim.corrupt_next_reply(3)  # one corrupt answer: the retry gets a good one
    assert bus.read_register(3, STS3215.PRESENT_POSITION) == 2048

    sim.corrupt_next_reply(3, count=2)  # every try corrupt
    with pytest.raises(FeetechProtocolError, match=r"checksum .* of servo 3 .*2 tries") as e:
        bus.read_register(3, STS3215.PRESENT_POSITION)
    assert e.value.servo_id == 3

    sim.corrupt_next_reply(4, count=2)
    with pytest.raises(FeetechProtocolError, match="servo 4"):
        bus.sync_read_positions()
    # Nothing was written on the strength of a bad answer, and the bus goes on working.
    assert "WRITE" not in sim.instructions_served and "SYNC_WRITE" not in sim.instructions_served
    assert bus.sync_read_positions().tolist() == [2048] * 6


def test_a_silent_servo_times_out_by_id_and_the_others_stay_usable(open_sim, open_bus) -> None:
    sim = open_sim()
    bus = open_bus(sim.port, retries=1)
    sim.stop_answering(3)
    with pytest.raises(FeetechTimeoutError, match=r"servo 3 did not answer PING") as e:
        bus.ping(3)
    assert e.value.servo_id == 3
    with pytest.raises(FeetechTimeoutError, match="servo 3 did not answer READ of address 56"):
        bus.read_register(3, STS3215.PRESENT_POSITION)
    with pytest.raises(FeetechTimeoutError, match=r"servo 3 .*SYNC_READ of address 56") as e:
        bus.sync_read_positions()
    assert (e.value.servo_id, e.value.address) == (3, 56)

    others = [1, 2, 4, 5, 6]
    assert [bus.ping(i) for i in others] == [StatusError(0)] * 5
    assert bus.sync_read_positions(others).tolist() == [2048] * 5
    sim.resume_answering(3)
    assert bus.sync_read_positions().tolist() == [2048] * 6


def test_a_slow_answer_times_out_and_a_late_one_is_not_taken_for_the_next(
    open_sim, open_bus
) -> None:
    sim = open_sim(delay_s=TIMEOUT_S / 4)
    bus = open_bus(sim.port, retries=0)
    assert bus.ping(2) == StatusError(0)  # slow but in time

    sim.delay_s = 2 * TIMEOUT_S
    sent = sim.replies_sent
    with pytest.raises(FeetechTimeoutError, match="servo 2 did not answer READ of address 62"):
        bus.read_register(2, STS3215.PRESENT_VOLTAGE)
    wait_for(lambda: sim.replies_sent > sent, what="the late answer")
    sim.delay_s = 0.0
    # The next request drops the late answer (1 byte: voltage) and gets its own (2 bytes):
    # flushed before it is sent if the pty has delivered it by then, else read and dropped as
    # a stale answer (the kernel hands bytes from master to slave on its own schedule).
    assert bus.read_register(2, STS3215.PRESENT_POSITION) == 2048


def test_a_stale_answer_read_with_the_awaited_one_is_dropped() -> None:
    """On a real line a late answer can reach the port after the input was flushed for the
    next request. Raw bytes on a pty (the byte boundary): the stale packet (1 data byte) comes
    right before the awaited one (2 bytes) and is dropped; alone, it is the error."""
    import os
    import threading
    import tty

    from drivers.feetech.bus import FeetechBus

    master, slave = os.openpty()
    tty.setraw(slave)

    def answer(*packets: bytes) -> threading.Thread:
        def serve() -> None:
            os.read(master, 64)  # the request
            for packet in packets:
                os.write(master, packet)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        return thread

    stale, good = status_packet(2, 0, b"\x78"), status_packet(2, 0, b"\x00\x08")
    with FeetechBus(os.ttyname(slave), ids=(2,), timeout_s=0.3, retries=0) as bus:
        served = answer(stale, good)
        assert bus.read_register(2, STS3215.PRESENT_POSITION) == 2048
        served.join()
        served = answer(stale)
        with pytest.raises(FeetechProtocolError, match="carries 1 data bytes, expected 2"):
            bus.read_register(2, STS3215.PRESENT_POSITION)
        served.join()
    os.close(master)
    os.close(slave)


def test_bad_goals_are_refused_before_anything_is_sent(open_sim, open_bus) -> None:
    sim = open_sim()
    bus = open_bus(sim.port)
    for ticks in ([0, 4096], [-1, 0], [0.5, 1], [0, 1, 2]):
        with pytest.raises(ValueError):
            bus.sync_write_goal_positions([1, 2], ticks)
    with pytest.raises(ValueError, match="read-only"):
        bus.write_register(1, STS3215.PRESENT_POSITION, 0)
    assert "SYNC_WRITE" not in sim.instructions_served and "WRITE" not in sim.instructions_served


def test_backlash_shows_when_a_goal_is_approached_from_both_sides(open_sim, open_bus) -> None:
    backlash = 40
    config = KinematicServoConfig(
        backlash_ticks=backlash, deadband_ticks=0, speed_limit_ticks_per_s=20000.0
    )
    sim = open_sim(config)
    bus = open_bus(sim.port)
    bus.set_torque(IDS, True)

    def land(*goals: int) -> int:
        for goal in goals:
            bus.sync_write_goal_positions([1], [goal])
            wait_for(lambda: settled(bus, [1]), what=f"servo 1 at rest near {goal}")
        return int(bus.sync_read_positions([1])[0])

    from_below = land(1500, 2500)
    from_above = land(3500, 2500)
    assert from_above - from_below == pytest.approx(backlash, abs=2)
    assert from_below == pytest.approx(2500 - backlash / 2, abs=1)


def test_a_blocked_joint_reports_load_and_does_not_pass_the_obstacle(open_sim, open_bus) -> None:
    obstacle, stall_load = 2300, 400
    config = KinematicServoConfig(
        blocked_above_ticks=(None, obstacle, None, None, None, None),
        stall_load=stall_load,
        load_per_tick=5.0,
    )
    sim = open_sim(config)
    bus = open_bus(sim.port)
    bus.set_torque(IDS, True)
    bus.sync_write_goal_positions(IDS, [2600] * 6)
    wait_for(lambda: bus.sync_read(STS3215.PRESENT_LOAD, [2])[0] > 0, what="load on servo 2")
    wait_for(lambda: settled(bus, [1, 3, 4, 5, 6]), what="the free servos")
    positions = bus.sync_read_positions()
    assert positions[1] == obstacle
    assert np.all(positions[[0, 2, 3, 4, 5]] == 2600)
    # Pushing 300 ticks short at 5 per tick asks for 1500: capped at the stall load.
    assert bus.read_register(2, STS3215.PRESENT_LOAD) == stall_load
    assert bus.sync_read(STS3215.PRESENT_LOAD, [1, 3])[0] == 0
    assert bus.read_register(2, STS3215.MOVING) == 1  # still trying

    bus.sync_write_goal_positions([2], [2000])  # back off: free again
    wait_for(lambda: settled(bus, [2]), what="servo 2 backing off")
    assert bus.sync_read_positions([2])[0] == 2000
    assert bus.read_register(2, STS3215.PRESENT_LOAD) == 0


class _TeleportModel:
    """A plugged-in model: servos are where they were told to be (stands for physics)."""

    def __init__(self, n: int) -> None:
        self.ticks = np.full(n, 1024)
        self.torque = np.zeros(n, dtype=bool)

    def read_positions(self) -> np.ndarray:
        return self.ticks.copy()

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        self.torque = np.asarray(torque_enabled, dtype=bool)
        self.ticks = np.where(self.torque, ticks, self.ticks)


def test_the_servo_model_is_pluggable(open_bus) -> None:
    model = _TeleportModel(len(IDS))
    with SimServoBus(IDS, model=model) as sim:
        bus = open_bus(sim.port)
        assert bus.sync_read_positions().tolist() == [1024] * 6
        bus.set_torque([1, 2], True)
        bus.sync_write_goal_positions(IDS, [10, 20, 30, 40, 50, 60])
        assert model.torque.tolist() == [True, True, False, False, False, False]
        assert bus.sync_read_positions().tolist() == [10, 20, 1024, 1024, 1024, 1024]
        assert bus.sync_read(STS3215.PRESENT_LOAD).tolist() == [0] * 6  # the model has none


# -- calibration -------------------------------------------------------------------------------


def _recording() -> np.ndarray:
    """(T, 6) ticks of a person moving every joint (and the gripper) through its range."""
    t = np.linspace(0.0, 1.0, 200)[:, None]
    low = np.array([1000, 800, 900, 1200, 100, 2000])
    high = np.array([3000, 3000, 3100, 2900, 4000, 2800])
    sweep = 0.5 - 0.5 * np.cos(2 * np.pi * t)  # 0 -> 1 -> 0
    return np.round(low + (high - low) * sweep).astype(np.int64)


def test_calibration_from_a_recording_and_its_conversions() -> None:
    calib = cal.calibrate_from_recording(_recording(), directions=(1, -1, 1, 1, 1))
    pan = calib.joints["shoulder_pan"]
    assert (pan.min_ticks, pan.max_ticks, pan.offset_ticks) == (1000, 3000, 2000)
    assert calib.joint_ids == (1, 2, 3, 4, 5)
    # Zero is the middle of each range; 512 ticks is an eighth of a turn; direction flips the
    # sign.
    zero = np.array([j.offset_ticks for j in calib.joints.values()])
    assert np.allclose(calib.ticks_to_rad(zero), 0.0)
    q = calib.ticks_to_rad(zero + np.array([512, 512, 0, 0, -512]))
    assert np.allclose(q, [math.pi / 4, -math.pi / 4, 0, 0, -math.pi / 4])
    assert np.array_equal(calib.rad_to_ticks(q), zero + np.array([512, 512, 0, 0, -512]))
    # Beyond a limit: clipped to it.
    assert calib.rad_to_ticks(np.full(5, 10.0))[0] == 3000
    assert calib.rad_to_ticks(np.full(5, 10.0))[1] == 800  # direction -1: the low end
    # Gripper: direction +1 closes towards more ticks; open end 2000, closed 2800.
    assert calib.gripper_ticks_to_closure(2000) == 0.0
    assert calib.gripper_ticks_to_closure(2400) == pytest.approx(0.5)
    assert calib.gripper_ticks_to_closure(3500) == 1.0
    assert calib.gripper_closure_to_ticks(0.25) == 2200


def test_calibration_round_trips_through_a_file(tmp_path: Path) -> None:
    calib = cal.calibrate_from_recording(_recording(), gripper=("gripper", 6, -1))
    path = tmp_path / "so101.json"
    cal.save(calib, path)
    assert json.loads(path.read_text())["schema_version"] == cal.SCHEMA_VERSION
    loaded = cal.load(path)
    assert loaded == calib
    assert loaded.joint_names == cal.SO101_ARM_JOINTS
    assert loaded.gripper is not None and loaded.gripper[1].offset_ticks == 2800  # open end


def _broken(data: dict, change: str) -> dict:
    joints, grip = data["joints"], data["gripper"]
    if change == "missing joint":
        del joints["elbow_flex"]
    elif change == "min >= max":
        joints["wrist_flex"]["min_ticks"] = joints["wrist_flex"]["max_ticks"]
    elif change == "direction":
        joints["shoulder_lift"]["direction"] = 2
    elif change == "zero outside limits":
        joints["shoulder_pan"]["offset_ticks"] = 4000
    elif change == "schema":
        data["schema_version"] = 99
    elif change == "missing gripper":
        data["gripper"] = None
    elif change == "fractional ticks":
        grip["max_ticks"] = 2800.5
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("missing joint", r"missing joint\(s\) \['elbow_flex'\]"),
        ("min >= max", "joint 'wrist_flex': min_ticks 2900 >= max_ticks 2900"),
        ("direction", "joint 'shoulder_lift': direction 2 is not"),
        ("zero outside limits", "joint 'shoulder_pan': offset_ticks 4000 is outside"),
        ("schema", "schema_version 99, this code reads 1"),
        ("missing gripper", "missing gripper 'gripper'"),
        ("fractional ticks", "max_ticks 2800.5 is not a whole number"),
    ],
)
def test_a_broken_calibration_file_is_refused(tmp_path: Path, change: str, message: str) -> None:
    path = tmp_path / "so101.json"
    data = cal.calibrate_from_recording(_recording()).to_json()
    path.write_text(json.dumps(_broken(data, change)))
    with pytest.raises(cal.CalibrationError, match=message):
        cal.load(path)


def test_unreadable_calibration_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(cal.CalibrationError, match="no calibration file"):
        cal.load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(cal.CalibrationError, match="is not JSON"):
        cal.load(tmp_path / "bad.json")


def test_a_recording_that_did_not_move_or_crossed_the_seam_is_refused() -> None:
    still = _recording()
    still[:, 2] = 2048
    with pytest.raises(cal.CalibrationError, match="'elbow_flex' moved only 0 ticks"):
        cal.calibrate_from_recording(still)
    seam = _recording()
    seam[100:, 4] = (seam[100:, 4] + 2500) % 4096
    with pytest.raises(cal.CalibrationError, match="'wrist_roll' crossed the encoder's"):
        cal.calibrate_from_recording(seam)


def test_calibration_recorded_over_the_bus(open_sim, open_bus) -> None:
    """The calibration workflow end to end: the joints are swept (here by the simulated servos
    themselves), the client records their positions, the calibration comes from the record."""
    sim = open_sim(KinematicServoConfig(speed_limit_ticks_per_s=20000.0))
    bus = open_bus(sim.port)
    bus.set_torque(IDS, True)
    low, high = [1000, 900, 1100, 1200, 300, 2000], [3000, 3100, 2900, 2800, 3800, 2800]
    record = [bus.sync_read_positions()]

    def recorded_until_settled() -> bool:
        record.append(bus.sync_read_positions())
        return settled(bus)

    for goals in (low, high, [2048] * 6):
        bus.sync_write_goal_positions(IDS, goals)
        wait_for(recorded_until_settled, what=f"the sweep to {goals}")
        record.append(bus.sync_read_positions())
    calib = cal.calibrate_from_recording(np.array(record))
    assert [j.min_ticks for j in calib.joints.values()] == low[:5]
    assert [j.max_ticks for j in calib.joints.values()] == high[:5]
    assert calib.gripper is not None and calib.gripper[1].offset_ticks == 2000
    assert np.allclose(calib.ticks_to_rad(np.array([2000, 2000, 2000, 2000, 2050])), 0.0)
