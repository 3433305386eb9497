"""The SO-101's limp-arm workflows against simulated STS3215 servos on a pty: its calibration
(``robot-rl arm calibrate``) and the leader arm as teleop (joint mirroring to a follower, the
TCP delta as the teleop twist).

The bus client is the real one; only the servos are simulated (``so101_helpers.py`` says why
and how). The servo models here plug into it: a hand that moves a limp arm, a scripted leader.
The follower backend itself is tested in ``test_so101_backend.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from so101_helpers import HOME_Q, RPT, TIMEOUT_S, ReferenceFK, arm_ticks, calibration, wait_for

# The open_sim and follower fixtures: imported ``as`` themselves (an explicit re-export), so
# that linters do not take them for unused imports that the tests' parameters shadow.
from so101_helpers import follower as follower
from so101_helpers import open_sim as open_sim

from drivers.feetech import calibration as cal
from drivers.so101.config import SO101_SAFETY
from drivers.teleop import so101_leader as leader_mod
from drivers.teleop.mapping import TeleopMapConfig
from robot_rl.app.arms.arm_calibrate import ArmCalibrateConfig, run_arm_calibrate
from robot_rl.core import frames
from robot_rl.core.arm import builtin_arm

SO101 = builtin_arm("so101")

# -- servo models (plugged into the simulated bus) --------------------------------------------


class ScriptedArm:
    """A limp arm a test (or a scripted person) moves: positions ramp linearly from where they
    are to ``ticks`` over ``duration_s``; goals are ignored, torque flags kept."""

    def __init__(self, start: tuple[float, ...]) -> None:
        self._from = self._to = np.asarray(start, dtype=float)
        self._t0, self._dur = 0.0, 0.0
        self.torque = np.zeros(len(start), dtype=bool)
        self._lock = threading.Lock()

    def _now_ticks(self, now: float) -> np.ndarray:
        if self._dur <= 0 or now >= self._t0 + self._dur:
            return self._to
        return self._from + (self._to - self._from) * (now - self._t0) / self._dur

    def move_to(self, ticks: tuple[float, ...], duration_s: float = 0.0) -> None:
        with self._lock:
            now = time.monotonic()
            self._from = self._now_ticks(now)
            self._to = np.asarray(ticks, dtype=float)
            self._t0, self._dur = now, duration_s

    def read_positions(self) -> np.ndarray:
        with self._lock:
            return np.round(self._now_ticks(time.monotonic())).astype(np.int64)

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        with self._lock:
            self.torque = np.asarray(torque_enabled, dtype=bool)


class SweepingHand:
    """A person moving every joint of a limp arm through ``low..high`` ticks and back (a
    trapezoid: it dwells at each end), with joint ``still`` (an index) not moved."""

    def __init__(self, low: np.ndarray, high: np.ndarray, period_s: float, still: int | None):
        self.low, self.high, self.period = low, high, period_s
        self.still = still
        self.t0 = time.monotonic()
        self.torque = np.zeros(len(low), dtype=bool)

    def read_positions(self) -> np.ndarray:
        phase = ((time.monotonic() - self.t0) / self.period) % 1.0
        ramp = np.clip(3.0 * (0.5 - abs(phase - 0.5)) * 2.0 - 0.5, 0.0, 1.0)  # 0..1, flat ends
        x = self.low + (self.high - self.low) * ramp
        if self.still is not None:
            x[self.still] = self.low[self.still]
        return np.round(x).astype(np.int64)

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        self.torque = np.asarray(torque_enabled, dtype=bool)


# -- calibration workflow -----------------------------------------------------------------------


def test_calibration_round_trip_through_arm_calibrate(tmp_path, open_sim):
    low = np.array([900, 1000, 1100, 1200, 300, 2000])
    high = np.array([3200, 3000, 2900, 3100, 3800, 2900])
    hand = SweepingHand(low, high, period_s=1.2, still=None)
    sim = open_sim(hand)
    out = tmp_path / "arm" / "so101.json"
    result = run_arm_calibrate(
        ArmCalibrateConfig(port=sim.port, out=out, seconds=1.5, timeout_s=TIMEOUT_S, progress=False)
    )
    assert not hand.torque.any()  # recorded limp
    assert result["samples"] >= 20 and result["out"] == str(out)
    loaded = cal.load(out)
    for i, name in enumerate(SO101.joint_names):
        j = loaded.joints[name]
        assert (j.servo_id, j.min_ticks, j.max_ticks) == (i + 1, low[i], high[i])
        assert j.offset_ticks == round((low[i] + high[i]) / 2)
        assert result["joints"][name]["min_ticks"] == low[i]
    assert loaded.gripper is not None
    grip = loaded.gripper[1]
    assert (grip.servo_id, grip.min_ticks, grip.max_ticks, grip.offset_ticks) == (
        6,
        2000,
        2900,
        2000,
    )
    # The middle of each recorded range reads as zero, the jaw's ends as open / closed.
    np.testing.assert_allclose(loaded.ticks_to_rad((low[:5] + high[:5]) / 2), 0.0, atol=RPT)
    assert loaded.gripper_ticks_to_closure(2900) == 1.0
    # An existing file is kept unless --overwrite; a joint that was not moved is named.
    with pytest.raises(ValueError, match="exists; pass --overwrite"):
        run_arm_calibrate(ArmCalibrateConfig(port=sim.port, out=out, seconds=0.1))
    hand.still = 2
    with pytest.raises(cal.CalibrationError, match="'elbow_flex' moved only 0 ticks"):
        run_arm_calibrate(
            ArmCalibrateConfig(
                port=sim.port,
                out=out,
                seconds=1.0,
                overwrite=True,
                timeout_s=TIMEOUT_S,
                progress=False,
            )
        )


# -- leader arm ---------------------------------------------------------------------------------


def test_leader_joints_map_to_follower_targets(tmp_path, open_sim, follower):
    mapping = leader_mod.LeaderFollowerMap(
        SO101, leader_mod.JointMap((1.0, -1.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.1, 0.0, 0.0))
    )
    q, closure = mapping.follower_targets(np.array([0.2, 0.3, -0.4, 1.0, 0.5]), 1.4)
    np.testing.assert_allclose(q, [0.2, -0.3, -0.3, 1.0, 0.5])
    assert closure == 1.0
    q, _ = mapping.follower_targets(np.array([3.0, 0.0, 0.0, 0.0, -3.0]), 0.0)
    np.testing.assert_allclose(q[[0, 4]], [SO101.joint_high_rad[0], SO101.joint_low_rad[4]])

    # Leader -> follower through the follower's funnel, in one process.
    backend, _, _ = follower(limits_rad={"shoulder_pan": (-0.3, 0.3)})
    leader_path = tmp_path / "leader.json"
    cal.save(calibration(), leader_path)
    leader_model = ScriptedArm(arm_ticks(HOME_Q))
    leader_sim = open_sim(leader_model)
    leader = leader_mod.LeaderArm(
        leader_mod.LeaderConfig(leader_sim.port, leader_path, bus_timeout_s=TIMEOUT_S)
    )
    leader.open()
    assert not leader_model.torque.any()  # the leader is limp
    mirror = leader_mod.JointMirror(leader, backend)

    def mirrored(q_leader: np.ndarray, closure: float) -> Callable[[], bool]:
        def done() -> bool:
            mirror.step()
            assert backend.error is None, backend.error
            s = backend.read_state()
            return bool(
                np.abs(s.joint_pos - q_leader).max() <= 3 * RPT
                and abs(s.gripper_pos - closure) <= 0.01
            )

        return done

    q1 = HOME_Q + np.array([0.2, -0.3, 0.4, -0.3, 0.5])
    leader_model.move_to(arm_ticks(q1, closure=0.7), duration_s=0.3)
    wait_for(mirrored(q1, 0.7), what="the follower at the leader's joints")
    # The leader's pan beyond the follower's calibrated limit: the follower stops at it.
    q2 = q1.copy()
    q2[0] = 0.6
    leader_model.move_to(arm_ticks(q2, closure=0.7), duration_s=0.1)
    wait_for(
        lambda: (
            mirror.step()[0][0] == pytest.approx(0.6, abs=RPT)
            and backend.read_state().joint_pos[0] == pytest.approx(0.3, abs=3 * RPT)
        ),
        what="the follower's pan at its limit",
    )
    # A leader pose whose TCP is below the box: the follower stops at the box, counted.
    q3 = HOME_Q + np.array([0.0, 1.2, 0.0, 0.0, 0.0])  # shoulder forward: the jaws hit the table
    assert ReferenceFK()(q3)[2] < SO101_SAFETY.workspace_low_m[2]
    leader_model.move_to(arm_ticks(q3), duration_s=0.2)
    wait_for(
        lambda: mirror.step() is not None and backend.joint_goals_refused > 10,
        what="joint goals refused at the box",
    )
    tcp = backend.read_state().tcp_pose[:3]
    assert np.all(tcp >= np.asarray(SO101_SAFETY.workspace_low_m) - 0.005)
    leader.close()


def test_leader_tcp_delta_is_the_teleop_twist_for_a_scripted_motion(tmp_path, open_sim):
    config_kw = dict(control_hz=10.0, action_scale_m=0.02, action_scale_rad=0.1)
    path = tmp_path / "leader.json"
    cal.save(calibration(), path)
    fk = ReferenceFK()

    # The parser alone, with scripted reading times: the displacement over one period.
    config = leader_mod.LeaderConfig("/dev/null", path, **config_kw)
    parser = leader_mod.LeaderParser(calibration(), leader_mod.leader_fk(config), config)
    t0_ticks = np.asarray(arm_ticks(HOME_Q))
    t1_ticks = np.asarray(arm_ticks(HOME_Q + np.array([0.05, -0.04, 0.03, 0.0, 0.1])))
    for k in range(11):  # 0.1 s at 100 Hz, linear in ticks
        ticks = np.round(t0_ticks + (t1_ticks - t0_ticks) * k / 10)
        parser.feed(tuple(int(t) for t in ticks), 0.01 * k)
    reading = parser.reading(0.1)
    p0, p1 = fk((t0_ticks[:5] - 2048) * RPT), fk((t1_ticks[:5] - 2048) * RPT)
    np.testing.assert_allclose(reading.axes[:3], (p1[:3] - p0[:3]) / 0.02, atol=1e-6)
    rotvec = frames.quat_error(p1[3:], p0[3:])
    np.testing.assert_allclose(reading.axes[3:], rotvec / 0.1, atol=1e-6)
    assert reading.held == {"intervene"} and reading.gripper_axis == -1.0  # moving, jaw open
    assert not np.any(parser.reading(0.3).axes)  # no reading for 0.2 s: stale, no motion
    with pytest.raises(ValueError, match="6 ticks"):
        parser.feed((1, 2, 3), 0.2)

    # End to end: the simulated leader on a pty -> DeviceTeleop -> TeleopState.
    model = ScriptedArm(arm_ticks(HOME_Q))
    sim = open_sim(model)
    config = leader_mod.LeaderConfig(sim.port, path, bus_timeout_s=TIMEOUT_S, **config_kw)
    teleop = leader_mod.so101_leader_teleop(config, TeleopMapConfig(deadzone=0.0))
    teleop.connect()
    try:
        for _ in range(8):
            state = teleop.read()
        assert not np.any(state.twist) and not state.buttons and state.gripper is None
        # Pan at 0.25 rad/s: the TCP moves at about 0.185 m * 0.25 = 46 mm/s, 4.6 mm per 0.1 s
        # period = 0.23 of the 2 cm per-step limit.
        q_end = HOME_Q + np.array([0.5, 0.0, 0.0, 0.0, 0.0])
        model.move_to(arm_ticks(q_end), duration_s=2.0)
        t0 = time.monotonic()
        states = []
        while time.monotonic() - t0 < 1.0:
            states.append((time.monotonic() - t0, teleop.read()))
            time.sleep(0.01)  # the teleop node's read rate
        # Expected: the TCP's displacement over 0.1 s of this motion, per 2 cm step (at the
        # middle of the readings); the median over the steady readings (timing jitter of a
        # loaded host: a reading is stamped halfway through its SYNC_READ).
        steady = [st for t, st in states if t >= 0.3]
        twist = np.median([st.twist for st in steady], axis=0)
        q_mid = np.array([0.5 / 2.0 * 0.65, 0.0, 0.0, 0.0, 0.0]) + HOME_Q
        dq = np.array([0.5 / 2.0 * 0.1, 0.0, 0.0, 0.0, 0.0])
        expected = (fk(q_mid + dq / 2)[:3] - fk(q_mid - dq / 2)[:3]) / 0.02
        assert np.linalg.norm(expected) == pytest.approx(0.23, abs=0.01)
        np.testing.assert_allclose(twist[:3], expected, atol=0.03)
        assert twist[5] == pytest.approx(-0.25, abs=0.03)  # +pan turns the tool about -z
        moving = steady[-1]
        assert "intervene" in moving.buttons and moving.gripper == 0.0  # jaw open, requested
        # The leader at rest, then its jaw closed: one gripper request, then none.
        wait_for(lambda: not np.any(teleop.read().twist), timeout_s=5.0, what="leader at rest")
        assert teleop.read().gripper is None
        model.move_to(arm_ticks(q_end, closure=1.0))
        wait_for(lambda: teleop.read().gripper == 1.0, what="the jaw's close request")
        after = teleop.read()
        assert after.gripper is None and not after.buttons
    finally:
        teleop.disconnect()
