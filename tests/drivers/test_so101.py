"""The SO-101 backend, its calibration workflow and the leader arm as teleop, against simulated
STS3215 servos on a pty.

The bus client (:class:`drivers.feetech.bus.FeetechBus`) is the real one, opening a real tty
with pyserial; only the servos are simulated (:class:`drivers.feetech.sim_bus.SimServoBus`: the
only fake, at the byte boundary, because CI has no servo hardware). The servo models below plug
into it: a recorder of every goal that reached the (simulated) servos, a first-order lag, a hand
that moves a limp arm, a scripted leader. The expected TCP poses come from MuJoCo's own forward
kinematics of the SO-101 file, not from the IK library the backend uses. Waits are on
conditions with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import mujoco
import numpy as np
import pytest

from drivers.arm_bridge.core import ArmBridge, BridgeConfig
from drivers.feetech import calibration as cal
from drivers.feetech.protocol import STS3215, TICKS_PER_TURN
from drivers.feetech.servo_model import KinematicServoConfig, KinematicServoModel, ServoModel
from drivers.feetech.sim_bus import SimServoBus
from drivers.so101.backend import So101Backend
from drivers.so101.config import SO101_KINEMATICS, SO101_SAFETY, So101Config, So101Error
from drivers.teleop import so101_leader as leader_mod
from drivers.teleop.mapping import TeleopMapConfig
from robot_rl.app.arm_calibrate import ArmCalibrateConfig, run_arm_calibrate
from robot_rl.core import frames
from robot_rl.core.arm import SO101

IDS = (1, 2, 3, 4, 5, 6)
TIMEOUT_S = 0.5
"""The client's answer timeout here: far above a pty round trip (about 2 ms), tolerant of a
loaded CI host (2 cores shared with other jobs)."""
FAULT_TIMEOUT_S = 0.2
"""The answer timeout of the tests that make a servo fall silent (each silent try costs two)."""
RPT = cal.RAD_PER_TICK
HOME_Q = np.asarray(SO101.home_q_rad)
GRIPPER_TICKS = (2048, 3048)
"""The simulated jaw's range: open at 2048, closed at 3048."""


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0, what: str = "") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(0.005)  # poll interval


def calibration(limits_rad: dict[str, tuple[float, float]] | None = None) -> cal.ArmCalibration:
    """Zero at tick 2048 for every joint; the range is the description's limits widened by 5 deg
    (the funnel must then apply the description's), except the joints in ``limits_rad``."""
    joints = {}
    for i, name in enumerate(SO101.joint_names):
        lo, hi = (limits_rad or {}).get(
            name, (SO101.joint_low_rad[i] - 0.09, SO101.joint_high_rad[i] + 0.09)
        )
        ticks = (2048 + int(np.ceil(lo / RPT)), 2048 + int(np.floor(hi / RPT)))
        joints[name] = cal.JointCalibration(i + 1, 2048, 1, *ticks)
    lo, hi = GRIPPER_TICKS
    return cal.ArmCalibration(joints, ("gripper", cal.JointCalibration(6, lo, 1, lo, hi)))


def arm_ticks(q_rad: np.ndarray, closure: float = 0.0) -> tuple[float, ...]:
    """Six servo positions for joint angles ``q_rad`` (zero at 2048) and a jaw closure."""
    jaw = GRIPPER_TICKS[0] + closure * (GRIPPER_TICKS[1] - GRIPPER_TICKS[0])
    return (*(2048 + np.round(np.asarray(q_rad) / RPT)), round(jaw))


class ReferenceFK:
    """MuJoCo's own forward kinematics of the SO-101 file (independent of the IK library)."""

    def __init__(self) -> None:
        self.model = mujoco.MjModel.from_xml_path(str(SO101_KINEMATICS))
        self.data = mujoco.MjData(self.model)
        self.adr = [self.model.joint(n).qposadr[0] for n in SO101.joint_names]

    def __call__(self, q_rad: np.ndarray) -> np.ndarray:
        self.data.qpos[:] = 0.0
        self.data.qpos[self.adr] = q_rad
        mujoco.mj_kinematics(self.model, self.data)
        site = self.data.site("tcp")
        return frames.pose(site.xpos.copy(), frames.mat_to_quat(site.xmat.reshape(3, 3)))


# -- servo models (plugged into the simulated bus) --------------------------------------------


class RecordingModel:
    """Wraps a servo model; keeps every (goal ticks, torque flags) the simulated bus decoded."""

    def __init__(self, inner: ServoModel) -> None:
        self.inner = inner
        self.writes: list[tuple[np.ndarray, np.ndarray]] = []
        self._lock = threading.Lock()

    def read_positions(self) -> np.ndarray:
        return self.inner.read_positions()

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        with self._lock:
            self.writes.append((np.array(ticks), np.array(torque_enabled)))
        self.inner.write_goals(ticks, torque_enabled)

    def goals(self) -> np.ndarray:
        """(W, 6) every goal written, in order."""
        with self._lock:
            return np.array([w[0] for w in self.writes])


class LagServoModel:
    """Servos that follow their goal with a first-order lag (time constant ``tau_s``), at most
    ``speed_ticks_s``; limp (standing still) without torque."""

    def __init__(self, start: tuple[float, ...], tau_s: float = 0.04, speed_ticks_s=3000.0):
        self.x = np.asarray(start, dtype=float)
        self.goal = self.x.copy()
        self.torque = np.zeros(len(start), dtype=bool)
        self.tau_s, self.speed = tau_s, speed_ticks_s
        self.t = time.monotonic()
        self._lock = threading.Lock()

    def _advance(self) -> None:
        now = time.monotonic()
        dt, self.t = now - self.t, now
        move = (self.goal - self.x) * (1.0 - np.exp(-dt / self.tau_s))
        move = np.clip(move, -self.speed * dt, self.speed * dt)
        self.x = np.where(self.torque, self.x + move, self.x)

    def read_positions(self) -> np.ndarray:
        with self._lock:
            self._advance()
            return np.clip(np.round(self.x), 0, TICKS_PER_TURN - 1).astype(np.int64)

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        with self._lock:
            self._advance()
            self.goal = np.asarray(ticks, dtype=float)
            self.torque = np.asarray(torque_enabled, dtype=bool)


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


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def open_sim() -> Iterator[Callable[..., SimServoBus]]:
    """Factory: a started :class:`SimServoBus` with a model (closed at teardown)."""
    started: list[SimServoBus] = []

    def start(model: ServoModel, ids: tuple[int, ...] = IDS) -> SimServoBus:
        sim = SimServoBus(ids, model=model).start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.close()


@pytest.fixture
def follower(tmp_path: Path, open_sim) -> Iterator[Callable[..., tuple]]:
    """Factory ``make(limits_rad=None, lag=False)`` -> (connected backend, sim, recorder): an
    SO-101 at home on a simulated bus, its calibration in a file. Disconnected at teardown."""
    made: list[So101Backend] = []

    def make(limits_rad=None, lag: bool = False, **config) -> tuple:
        path = tmp_path / f"so101_{len(made)}.json"
        cal.save(calibration(limits_rad), path)
        start = arm_ticks(HOME_Q)
        inner = (
            LagServoModel(start)
            if lag
            else KinematicServoModel(6, KinematicServoConfig(initial_ticks=start))
        )
        recorder = RecordingModel(inner)
        sim = open_sim(recorder)
        config = {"bus_timeout_s": TIMEOUT_S, "bus_retries": 1, **config}
        cfg = So101Config(sim.port, path, **config)
        backend = So101Backend(cfg)
        made.append(backend)
        backend.connect()
        return backend, sim, recorder

    yield make
    for b in made:
        b.disconnect()


def ticks_later(backend: So101Backend, n: int) -> Callable[[], bool]:
    """A condition: ``n`` more backend ticks have run."""
    start = backend.ticks
    return lambda: backend.ticks >= start + n


# -- backend ------------------------------------------------------------------------------------


def test_connect_holds_and_read_state_gives_five_joints_and_the_tcp_pose_of_fk(follower):
    backend, sim, recorder = follower()
    state = backend.read_state()
    assert state.joint_pos.shape == state.joint_vel.shape == (5,)
    np.testing.assert_allclose(state.joint_pos, HOME_Q, atol=RPT)
    fk = ReferenceFK()(state.joint_pos)
    np.testing.assert_allclose(state.tcp_pose[:3], fk[:3], atol=1e-9)
    assert abs(abs(float(np.dot(state.tcp_pose[3:], fk[3:]))) - 1.0) < 1e-9
    np.testing.assert_allclose(state.tcp_pose[:3], [0.185, 0.0, 0.108], atol=2e-3)
    assert state.gripper_pos == 0.0 and not np.any(state.tcp_wrench)
    # The goals were the present positions before torque went on, then torque is on for all six.
    first_goal, first_torque = recorder.writes[0]
    np.testing.assert_array_equal(first_goal, arm_ticks(HOME_Q))
    assert not first_torque.any()
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x01" for i in IDS)
    # A later tick reads again: a newer stamp, the same pose at rest.
    wait_for(lambda: backend.read_state().stamp_s > state.stamp_s, what="a newer state")
    np.testing.assert_allclose(backend.read_state().tcp_pose, state.tcp_pose, atol=1e-9)
    telemetry = backend.telemetry()
    assert telemetry["bus_errors"] == 0 and telemetry["sync_write_ms"]["max"] > 0


def test_a_cartesian_target_2cm_away_is_reached_within_a_few_mm(follower):
    backend, _, _ = follower(lag=True)  # servos with a first-order lag
    start = backend.read_state().tcp_pose
    for offset in ([0.02, 0.0, 0.0], [0.0, -0.02, 0.0], [0.0, 0.0, 0.02]):
        target = start.copy()
        target[:3] += offset
        backend.command(target, 0.0)

        def error_m(target=target) -> float:
            return float(np.linalg.norm(backend.read_state().tcp_pose[:3] - target[:3]))

        wait_for(lambda: error_m() < 0.003, timeout_s=5.0, what=f"TCP within 3 mm of {offset}")
        start = backend.read_state().tcp_pose


def test_goals_stay_within_the_limits_and_one_tick_of_joint_speed_whatever_is_asked(follower):
    pan_limit = 0.3
    backend, _, recorder = follower(limits_rad={"shoulder_pan": (-pan_limit, pan_limit)})
    home = backend.read_state().tcp_pose

    def pose(xyz) -> np.ndarray:
        return np.concatenate([xyz, home[3:]])

    # 1. A target a metre away (out of reach): the arm goes at most one step per tick.
    backend.command(pose([1.2, 0.0, 0.6]), 1.0)
    wait_for(ticks_later(backend, 25), what="25 ticks towards a far target")
    # 2. A target behind the pan limit (needs ~0.5 rad of pan; +pan turns to -y): pan stops at
    # its calibrated limit.
    backend.command(pose([0.2, -0.11, 0.12]), 0.0)
    wait_for(ticks_later(backend, 60), what="60 ticks towards a target behind a limit")
    assert backend.read_state().joint_pos[0] == pytest.approx(pan_limit, abs=3 * RPT)
    # 3. Targets that flip between two far poses faster than the ticks.
    flips = [pose([0.1, -0.3, 0.0]), pose([0.35, 0.3, 0.4])]
    deadline = time.monotonic() + 0.3
    i = 0
    while time.monotonic() < deadline:
        backend.command(flips[i % 2], float(i % 2))
        i += 1
        time.sleep(0.001)  # a publisher flooding at ~1 kHz
    # 4. A malformed target never reaches the bus.
    with pytest.raises(ValueError, match="finite"):
        backend.command(pose([np.nan, 0.0, 0.1]), 0.0)
    # 5. A move to a far pose, ended by a hold.
    backend.start_move(pose([0.3, -0.2, 0.25]), 1.0)
    wait_for(ticks_later(backend, 10), what="10 ticks of a move")
    backend.hold()
    with pytest.raises(So101Error, match="ended by hold"):
        backend.move_done()
    # 6. Joint teleop far outside every limit.
    backend.follow_joints(np.array([3.0, -3.0, 3.0, -3.0, 3.0]), 0.5)
    wait_for(ticks_later(backend, 25), what="25 ticks of joint teleop")

    goals = recorder.goals()
    assert len(goals) > 100
    arm = goals[:, :5].astype(float)
    step_ticks = backend.max_step_rad / RPT  # 4.7 rad/s * 20 ms = 61.3 ticks
    assert np.abs(np.diff(arm, axis=0)).max(axis=0) == pytest.approx(step_ticks, abs=1.0)
    assert np.all(np.abs(np.diff(arm, axis=0)) <= step_ticks + 1.0)
    low = 2048 + backend.q_low / RPT
    high = 2048 + backend.q_high / RPT
    assert np.all(arm >= low - 1.0) and np.all(arm <= high + 1.0)
    assert arm[:, 0].max() >= high[0] - 1.0  # pan went to its limit ...
    assert high[0] == pytest.approx(2048 + pan_limit / RPT, abs=1.0)  # ... the calibrated one
    # The description's limits where the calibration is wider (every joint but pan).
    np.testing.assert_allclose(backend.q_high[1:], SO101.joint_high_rad[1:])
    jaw = goals[:, 5].astype(float)
    jaw_step = backend.config.gripper_speed_per_s * backend.config.tick_s * 1000  # ticks
    assert np.all(np.abs(np.diff(jaw)) <= jaw_step + 1.0)
    assert jaw.min() >= GRIPPER_TICKS[0] and jaw.max() <= GRIPPER_TICKS[1]


def test_a_silent_servo_makes_the_backend_hold_name_it_and_send_nothing_until_clear_error(
    follower,
):
    backend, sim, recorder = follower(bus_timeout_s=FAULT_TIMEOUT_S)
    target = backend.read_state().tcp_pose.copy()
    target[2] += 0.03
    backend.command(target, 0.0)  # moving when the servo falls silent
    wait_for(ticks_later(backend, 3))
    sim.stop_answering(3)
    wait_for(lambda: backend.error is not None, timeout_s=5.0, what="the backend's error")
    assert "servo 3 (elbow_flex)" in backend.error and "holding" in backend.error
    last_good = backend.read_state()
    # The hold: goals = the last good positions (once the simulated servos decoded it).
    hold = np.asarray(arm_ticks(last_good.joint_pos)[:5])
    wait_for(
        lambda: np.abs(recorder.goals()[-1][:5] - hold).max() <= 1.0,
        what="the hold at the last good positions",
    )
    sent = dict(sim.instructions_served)
    writes = len(recorder.writes)
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x01" for i in IDS)
    wait_for(ticks_later(backend, 15), what="15 ticks in error")
    assert sim.instructions_served == sent and len(recorder.writes) == writes
    assert backend.read_state().stamp_s == last_good.stamp_s  # the state ages, never refreshed
    backend.command(target, 1.0)  # the bridge would refuse it; the backend sends nothing
    wait_for(ticks_later(backend, 5))
    assert sim.instructions_served == sent
    # Still silent: clear_error fails and names it again.
    assert backend.clear_error() is False
    assert "servo 3 (elbow_flex)" in backend.error
    # Answering again: clear_error resumes, and the arm moves on command.
    sim.resume_answering(3)
    assert backend.clear_error() is True and backend.error is None
    assert backend.recoveries == 1
    target = backend.read_state().tcp_pose.copy()
    target[0] += 0.01
    backend.command(target, 0.0)
    wait_for(
        lambda: np.linalg.norm(backend.read_state().tcp_pose[:3] - target[:3]) < 0.003,
        what="the arm moving again after clear_error",
    )


def test_a_corrupt_reply_is_a_clear_error_naming_the_servo(follower):
    backend, sim, _ = follower(bus_timeout_s=FAULT_TIMEOUT_S)
    sim.corrupt_next_reply(4, count=2)  # both tries of one request (bus_retries=1)
    wait_for(lambda: backend.error is not None, what="the backend's error")
    assert "servo 4 (wrist_flex)" in backend.error
    assert "FeetechProtocolError" in backend.error and "checksum" in backend.error
    assert backend.clear_error() is True and backend.error is None


def test_connect_names_a_missing_servo_a_missing_calibration_and_a_joint_out_of_range(
    tmp_path, open_sim
):
    path = tmp_path / "so101.json"
    with pytest.raises(So101Error, match="no calibration file .*robot-rl arm calibrate"):
        So101Backend(So101Config("/dev/null", path)).connect()
    cal.save(calibration(), path)
    start = arm_ticks(HOME_Q)
    sim = open_sim(KinematicServoModel(5), ids=(1, 2, 3, 4, 6))
    backend = So101Backend(
        So101Config(sim.port, path, bus_timeout_s=FAULT_TIMEOUT_S, bus_retries=0)
    )
    with pytest.raises(So101Error, match=r"servo 5 \(wrist_roll\) did not answer"):
        backend.connect()
    bent = list(start)
    bent[2] = 2048 + 2.2 / RPT  # elbow_flex beyond its 1.69 rad limit
    sim = open_sim(KinematicServoModel(6, KinematicServoConfig(initial_ticks=tuple(bent))))
    backend = So101Backend(So101Config(sim.port, path, bus_timeout_s=TIMEOUT_S))
    with pytest.raises(So101Error, match="'elbow_flex' .* outside its range"):
        backend.connect()
    assert all(sim.register(i, STS3215.TORQUE_ENABLE.address, 1) == b"\x00" for i in IDS)


def test_the_bridge_resets_through_start_move_and_move_done(follower):
    backend, _, _ = follower()
    bridge = ArmBridge(backend, BridgeConfig(SO101_SAFETY))
    home = backend.home_pose()
    goal = home.copy()
    goal[:3] += [0.04, 0.05, 0.06]
    job = bridge.begin_reset(goal, 1.0, time.monotonic())
    wait_for(lambda: bridge.poll_reset(job, time.monotonic()), timeout_s=8.0, what="the reset")
    state = backend.read_state()
    assert np.linalg.norm(state.tcp_pose[:3] - goal[:3]) <= backend.config.move_tolerance_m
    assert state.gripper_pos == pytest.approx(1.0, abs=backend.config.gripper_tolerance)


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
