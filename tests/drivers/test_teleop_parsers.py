"""Teleop parsers from recorded raw items: exact twists, gripper and buttons; bad input rejected.

No SpaceMouse, gamepad or terminal exists on CI machines: the recorded report bytes, evdev
events and key names under tests/drivers/data are the device boundary.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from drivers.teleop.base import DeviceTeleop
from drivers.teleop.events import Await
from drivers.teleop.gamepad import BTN_SOUTH, BTN_TR, GamepadParser, check_event
from drivers.teleop.keyboard import KeyboardParser, split_keys
from drivers.teleop.mapping import (
    DeviceReading,
    TeleopMapConfig,
    TeleopMapper,
    apply_deadzone,
    joy_from_state,
    state_from_joy,
)
from drivers.teleop.recording import (
    Recorder,
    RecordingFormatError,
    ReplaySource,
    load_recording,
    replay_teleop,
)
from drivers.teleop.spacemouse import MalformedReportError, SpaceMouseParser, parse_report
from robot_rl.core.protocols import Teleop

DATA = Path(__file__).parent / "data"
NO_MOTION_INTERVENE = TeleopMapConfig(intervene_on_motion=False)


def dz(x: float, d: float = 0.1) -> float:
    """The documented deadzone formula for one value."""
    return 0.0 if abs(x) < d else float(np.sign(x) * (abs(x) - d) / (1 - d))


class FakeClock:
    """Monotonic clock for replay tests (the replay is real code; only time is injected)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def replay_at(path: Path, times: list[float], config: TeleopMapConfig = NO_MOTION_INTERVENE):
    clock = FakeClock()
    teleop = replay_teleop(path, config, now_fn=clock)
    assert isinstance(teleop, Teleop)
    teleop.connect()
    out = []
    for t in times:
        clock.t = 100.0 + t
        out.append(teleop.read())
    teleop.disconnect()
    return out


# -- SpaceMouse reports ---------------------------------------------------------------------


def test_parse_translation_rotation_and_combined_reports():
    r = parse_report(b"\x01" + struct.pack("<3h", 100, -200, 350))
    assert (r.report_id, r.translation, r.rotation, r.buttons) == (1, (100, -200, 350), None, None)
    r = parse_report(bytes.fromhex("020000e2ff0000"))  # captured SpaceNavigator rotation report
    assert r.rotation == (0, -30, 0) and r.translation is None
    r = parse_report(b"\x01" + struct.pack("<6h", 1, 2, 3, -4, -5, -6))
    assert r.translation == (1, 2, 3) and r.rotation == (-4, -5, -6)
    assert parse_report(list(bytes.fromhex("030300"))).buttons == frozenset({0, 1})
    assert parse_report(bytes.fromhex("0300100080")).buttons == frozenset({12, 31})
    ignored = parse_report(bytes.fromhex("1764"))  # battery report of wireless models
    assert ignored.translation is ignored.rotation is ignored.buttons is None


@pytest.mark.parametrize(
    "raw, match",
    [
        (b"", "empty"),
        (bytes.fromhex("0100000000"), "expected 7"),
        (bytes.fromhex("01" + "00" * 9), "expected 7"),
        (bytes.fromhex("020000"), "expected 7"),
        (bytes.fromhex("03"), "expected >= 2"),
        ([1, 2, 300], "bytes or ints"),
    ],
)
def test_malformed_reports_are_rejected(raw, match):
    with pytest.raises(MalformedReportError, match=match):
        parse_report(raw)
    with pytest.raises(MalformedReportError):
        SpaceMouseParser().feed(raw, 0.0)


def test_spacemouse_pro_recording_replays_exact_states():
    s = replay_at(DATA / "spacemouse_pro.jsonl", [0.05, 0.15, 0.22, 0.28, 0.35, 0.42, 0.5])
    np.testing.assert_array_equal(s[0].twist, np.zeros(6))
    assert s[0].buttons == frozenset() and s[0].gripper is None
    # tx=175, tz=-350 (down in device frame -> up); ry=-30 counts is inside the deadzone
    np.testing.assert_allclose(s[1].twist, [dz(0.5), 0, 1, 0, 0, 0], atol=1e-12)
    assert s[1].buttons == frozenset()
    assert s[2].buttons == {"intervene"}  # button 1 (index 12) held
    assert s[3].buttons == {"success"}  # button 2 tapped and released between reads
    np.testing.assert_array_equal(s[4].twist, np.zeros(6))
    assert s[4].buttons == frozenset() and s[4].gripper is None
    assert s[5].gripper == 1.0  # left / menu button held -> close
    assert s[6].gripper is None
    assert all(b.stamp_s == pytest.approx(100.0 + t) for b, t in zip(s, [0.05, 0.15], strict=False))


def test_spacemouse_wireless_combined_report_and_buttons():
    s = replay_at(DATA / "spacemouse_wireless.jsonl", [0.05, 0.12, 0.25])
    np.testing.assert_allclose(s[0].twist, [0, dz(0.5), 0, 1, 0, dz(0.2)], atol=1e-12)
    assert s[1].gripper == 0.0  # right button -> open
    np.testing.assert_array_equal(s[2].twist, np.zeros(6))
    assert s[2].gripper is None


def test_motion_counts_as_intervention_by_default():
    s = replay_at(DATA / "spacemouse_pro.jsonl", [0.05, 0.15], TeleopMapConfig())
    assert s[0].buttons == frozenset() and s[1].buttons == {"intervene"}


# -- mapping --------------------------------------------------------------------------------


def test_deadzone_scaling_and_axis_remap():
    x = np.array([0.05, -0.09, 0.1, 0.55, -1.0, 2.0])
    np.testing.assert_allclose(apply_deadzone(x, 0.1), [0, 0, 0, 0.5, -1, 1], atol=1e-12)
    m = TeleopMapper(
        TeleopMapConfig(
            deadzone=0.0,
            translation_scale=2.0,
            rotation_scale=0.5,
            axis_order=(1, 0, 2, 3, 4, 5),
            axis_signs=(1, -1, 1, 1, 1, -1),
        )
    )
    t = m.twist(np.array([0.1, 0.3, 0.7, 0.4, 0.0, 0.2]))
    np.testing.assert_allclose(t, [0.6, -0.2, 1.0, 0.2, 0.0, -0.1], atol=1e-12)
    with pytest.raises(ValueError, match="NaN"):
        m.twist(np.array([np.nan, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="shape"):
        m.twist(np.zeros(5))
    with pytest.raises(ValueError, match="deadzone"):
        TeleopMapConfig(deadzone=1.0)
    with pytest.raises(ValueError, match="permutation"):
        TeleopMapConfig(axis_order=(0, 0, 1, 2, 3, 4))


def test_joy_round_trip_and_rejection():
    m = TeleopMapper()
    reading = DeviceReading(
        axes=np.array([0.5, 0, 0, 0, 0, -1.0]), held=frozenset({"success", "gripper_open"})
    )
    state = m.map(reading, 3.5)
    axes, buttons = joy_from_state(state)
    assert buttons == [1, 1, 0, 0, 0] and axes[6] == -1.0 and len(axes) == 7
    back = state_from_joy(axes, buttons, 3.5)
    np.testing.assert_allclose(back.twist, state.twist)
    assert back.gripper == 0.0 and back.buttons == {"intervene", "success"}
    with pytest.raises(ValueError, match="7 axes"):
        state_from_joy(axes[:6], buttons, 0.0)
    with pytest.raises(ValueError, match="finite"):
        state_from_joy([float("nan")] * 7, buttons, 0.0)


# -- gamepad --------------------------------------------------------------------------------


def test_gamepad_recording_with_device_ranges():
    s = replay_at(DATA / "gamepad_xbox.jsonl", [0.05, 0.15, 0.25, 0.35, 0.45])
    wz = -(2.0 * (16384 + 32768) / 65535 - 1.0)  # right stick x half right -> negative yaw
    np.testing.assert_allclose(s[0].twist, [1, 0, 0, 0, 0, dz(wz)], atol=1e-12)
    assert s[0].gripper is None and s[0].buttons == frozenset()
    assert s[1].gripper == 1.0 and s[1].buttons == {"intervene"}  # RT full (8-bit), RB held
    assert s[2].buttons == {"intervene", "success"}  # A tapped within the period
    np.testing.assert_array_equal(s[3].twist, np.zeros(6))  # centred stick in deadzone
    assert s[3].gripper == 0.0 and s[3].buttons == frozenset()  # LT full -> open
    assert s[4].gripper is None


def test_gamepad_events_validated():
    p = GamepadParser()
    for bad, match in [
        ((1, 2), "type, code, value"),
        (("a", 1, 2), "integers"),
        ((1, BTN_SOUTH, 5), "0 \\(up\\)"),
        ((1.0, 3, 2), "integers"),
    ]:
        with pytest.raises(ValueError, match=match):
            p.feed(bad, 0.0)
    assert check_event([1, BTN_TR, 2]) == (1, BTN_TR, 2)
    with pytest.raises(ValueError, match="abs range"):
        p.configure({"abs_ranges": {"0": [5, 5]}})


# -- keyboard -------------------------------------------------------------------------------


def test_split_keys():
    assert split_keys("wA \x1b[A\x1b[D\t\x7fq") == [
        "w",
        "a",
        "space",
        "up",
        "left",
        "tab",
        "backspace",
        "q",
    ]


def test_keyboard_recording_hold_toggle_taps():
    times = [0.1, 0.55, 1.12, 1.2, 1.35, 1.45, 1.55, 1.65]
    s = replay_at(DATA / "keyboard.jsonl", times)
    np.testing.assert_array_equal(s[0].twist, [1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(s[1].twist, [1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(s[2].twist, [0, 1, 0, 0, 0, 0])  # w released > hold_s ago
    np.testing.assert_array_equal(s[3].twist, np.zeros(6))
    assert s[4].buttons == {"intervene"}  # space toggles on
    assert s[5].buttons == {"intervene", "success"}
    assert s[6].gripper == 1.0 and s[6].buttons == {"intervene"}
    assert s[7].buttons == frozenset() and s[7].gripper is None  # toggled off
    with pytest.raises(ValueError, match="key name"):
        KeyboardParser().feed("", 0.0)


# -- recording ------------------------------------------------------------------------------


def test_record_while_replaying_reproduces_the_file(tmp_path):
    src = DATA / "gamepad_xbox.jsonl"
    clock = FakeClock()
    out = tmp_path / "rec.jsonl"
    original = load_recording(src)
    teleop = DeviceTeleop(
        ReplaySource(original, now_fn=clock),
        GamepadParser(),
        record_path=out,
        now_fn=clock,
    )
    teleop.connect()
    for t in np.arange(0.0, 0.5, 0.02):
        clock.t = 100.0 + float(t)
        teleop.read()
    teleop.disconnect()
    rec = load_recording(out)
    assert rec.device == "gamepad" and rec.info == original.info
    assert [r for _, r in rec.events] == [r for _, r in original.events]
    # stamps are relative to the recorder's start (connect), which was at the replay start
    np.testing.assert_allclose([t for t, _ in rec.events], [t for t, _ in original.events])


def _keyboard_file(path: Path, items: list[dict]) -> Path:
    header = {"format": "robot_rl.teleop_events", "version": 1, "device": "keyboard"}
    path.write_text("\n".join(json.dumps(x) for x in [header, *items]) + "\n")
    return path


def test_replay_holds_at_an_await_until_an_episode_starts(tmp_path):
    path = _keyboard_file(
        tmp_path / "k.jsonl",
        [
            {"t_s": 0.0, "await": "episode"},
            {"t_s": 0.1, "raw": "w"},
            {"t_s": 3.0, "raw": "y"},
            {"t_s": 4.0, "await": "episode"},
            {"t_s": 4.5, "raw": "a"},
            {"t_s": 6.0, "await": "episode"},
            {"t_s": 6.1, "raw": "d"},
        ],
    )
    assert load_recording(path).awaits == 3
    clock = FakeClock(100.0)
    src = ReplaySource(path, now_fn=clock)
    src.open()
    clock.t = 110.0  # long past the first press: nothing plays before an episode starts
    assert src.poll() == [] and src.holding
    src.episode_started(0, 108.0)  # 8 s late: file time 0.0 is the episode's start
    assert src.poll() == [(108.1, "w")] and not src.holding
    clock.t = 111.0
    assert src.poll() == [(111.0, "y")] and not src.holding
    src.episode_started(1, 111.5)  # the next one starts before file time 4.0 (at 112.0) ...
    src.episode_started(1, 111.6)  # (a repeated announcement releases nothing more)
    clock.t = 112.2
    assert src.poll() == [] and not src.holding  # ... so the file keeps its own time
    clock.t = 112.5
    assert src.poll() == [(112.5, "a")] and not src.holding
    clock.t = 115.0
    assert src.poll() == [] and src.holding  # the repeat did not count as episode 2
    src.episode_started(2, 116.0)
    clock.t = 116.2
    assert src.poll() == [(116.1, "d")] and src.finished and src.awaited == 3


def test_a_recording_marks_episode_starts_and_replays_by_them(tmp_path):
    clock = FakeClock(100.0)
    out = tmp_path / "rec.jsonl"
    live = _keyboard_file(tmp_path / "live.jsonl", [{"t_s": 0.5, "raw": "w"}])
    teleop = DeviceTeleop(
        ReplaySource(live, now_fn=clock), KeyboardParser(), record_path=out, now_fn=clock
    )
    teleop.connect()
    clock.t = 100.2
    teleop.episode_started(0, clock.t)  # the recorder's announcement
    clock.t = 100.6
    teleop.read()
    teleop.disconnect()
    rec = load_recording(out)
    assert rec.events == ((0.2, Await("episode")), (0.5, "w"))
    # Replayed, the press comes 0.3 s after the episode start, whenever that is.
    clock.t = 200.0
    src = ReplaySource(rec, now_fn=clock)
    src.open()
    clock.t = 205.0
    assert src.poll() == []
    src.episode_started(7, 204.0)
    assert src.poll() == [(204.3, "w")]


def test_an_unknown_await_names_the_line(tmp_path):
    path = _keyboard_file(tmp_path / "k.jsonl", [{"t_s": 0.0, "await": "reset"}])
    with pytest.raises(RecordingFormatError, match=r":2: .*await 'reset' is not one of"):
        load_recording(path)


def test_recorder_round_trip_spacemouse_bytes(tmp_path):
    path = tmp_path / "sm.jsonl"
    r = Recorder(path, "spacemouse", {"model": "x"}, t0_s=10.0)
    reports = [bytes.fromhex("01" + "00" * 12), bytes.fromhex("030100")]
    r.write(10.5, reports[0])
    r.write(10.25, reports[1])  # out-of-order clock: clamped to stay non-decreasing
    r.close()
    rec = load_recording(path)
    assert rec.events == ((0.5, reports[0]), (0.5, reports[1]))


@pytest.mark.parametrize(
    "lines, match",
    [
        ([], "empty file"),
        (["{not json"], "header is not JSON"),
        ([{"format": "other"}], "header must have format"),
        ([{"format": "robot_rl.teleop_events", "version": 1, "device": "joystick"}], "device"),
        ([{"t_s": 0.0, "raw": "zz"}], ":2: expected"),
        ([{"t_s": 0.5, "raw": "030100"}, {"t_s": 0.1, "raw": "030000"}], ":3: t_s 0.1"),
        ([{"raw": "030100"}], ":2: expected"),
    ],
)
def test_bad_recordings_name_the_line(tmp_path, lines, match):
    header = {"format": "robot_rl.teleop_events", "version": 1, "device": "spacemouse"}
    if lines and isinstance(lines[0], dict) and "raw" in lines[0]:
        lines = [header, *lines]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    with pytest.raises(RecordingFormatError, match=match):
        load_recording(path)


def test_malformed_report_in_a_recording_is_rejected_at_read(tmp_path):
    path = tmp_path / "short.jsonl"
    header = {"format": "robot_rl.teleop_events", "version": 1, "device": "spacemouse"}
    path.write_text(json.dumps(header) + "\n" + json.dumps({"t_s": 0.0, "raw": "0100"}) + "\n")
    clock = FakeClock()
    teleop = replay_teleop(path, now_fn=clock)
    teleop.connect()
    with pytest.raises(MalformedReportError, match="expected 7"):
        teleop.read()


def test_terminal_source_reads_keys_from_a_pty():
    """A pseudo-terminal is a real terminal: cbreak mode, non-blocking reads, restore."""
    import os
    import pty
    import termios
    import time

    from drivers.teleop.keyboard import TerminalKeySource

    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        src = TerminalKeySource(fd=slave)
        src.open()
        assert src.poll() == []  # nothing typed: returns at once
        os.write(master, b"w\x1b[Ay")
        keys: list[str] = []
        deadline = time.monotonic() + 10.0
        while len(keys) < 3 and time.monotonic() < deadline:
            keys += [k for _, k in src.poll()]
        assert keys == ["w", "up", "y"]
        src.close()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)
    with pytest.raises(RuntimeError, match="terminal"):
        r, w = os.pipe()
        try:
            TerminalKeySource(fd=r).open()
        finally:
            os.close(r)
            os.close(w)


def test_missing_devices_give_clear_errors():
    """No SpaceMouse or gamepad is attached here: opening says what to check."""
    from drivers.teleop.gamepad import gamepad_teleop
    from drivers.teleop.spacemouse import spacemouse_teleop

    pytest.importorskip("hid")
    with pytest.raises(RuntimeError, match="no SpaceMouse found"):
        spacemouse_teleop().connect()
    pytest.importorskip("evdev")
    with pytest.raises(RuntimeError, match="no gamepad found"):
        gamepad_teleop().connect()
    with pytest.raises(RuntimeError, match="not connected"):
        spacemouse_teleop().read()
