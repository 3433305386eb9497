"""ArmBridge core without ROS: validation, safety, watchdog, e-stop, backend errors.

Two backends: :class:`RecordingBackend`, a test double where only the bridge logic is under
test (it records what reaches it and lets the test move the "measured" pose), and the real
twin (MuJoCo physics) through ``sim.ros_node.TwinArmBackend``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.arm_bridge.backend import ArmBackend
from drivers.arm_bridge.core import ArmBridge, BridgeConfig
from robot_rl.core import frames
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig, SafetyLayer
from robot_rl.core.types import RobotState, UnsafeCommandError

SAFETY = SafetyConfig(
    workspace_low_m=(0.3, -0.28, 0.015),
    workspace_high_m=(0.7, 0.28, 0.35),
    max_step_m=0.05,
    max_step_rad=0.3,
    orientation_max_rad=0.8,
    watchdog_timeout_s=0.5,
)
START = frames.pose(np.array([0.5, 0.0, 0.2]), np.array(DOWN_QUAT))
DT = 0.1


class RecordingBackend:
    """Test double for the bridge logic only: records calls; the measured pose follows the last
    commanded target (ideal tracking) unless the test sets it."""

    def __init__(self, pose: np.ndarray = START) -> None:
        self.pose = np.array(pose, dtype=np.float64)
        self.commands: list[tuple[np.ndarray, float, np.ndarray]] = []  # (target, grip, measured)
        self.holds = 0
        self.moves: list[np.ndarray] = []
        self._error: str | None = None
        self.clear_ok = True
        self.connected = False

    def connect(self) -> None:
        self.connected = True

    def disconnect(self) -> None:
        self.connected = False

    def read_state(self) -> RobotState:
        return RobotState(
            0.0, self.pose.copy(), np.zeros(6), np.zeros(6), 0.0, np.zeros(7), np.zeros(7)
        )

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        self.commands.append((np.array(target_pose), gripper, self.pose.copy()))
        self.pose = np.array(target_pose, dtype=np.float64)

    def hold(self) -> None:
        self.holds += 1

    def start_move(self, pose: np.ndarray, gripper: float) -> None:  # arrives at once
        self.moves.append(np.array(pose))
        self.pose = np.array(pose, dtype=np.float64)

    def move_done(self) -> bool:
        return True

    def clear_error(self) -> bool:
        if self.clear_ok:
            self._error = None
        return self.clear_ok

    @property
    def error(self) -> str | None:
        return self._error


def _bridge(backend=None, **cfg) -> tuple[ArmBridge, RecordingBackend]:
    backend = backend or RecordingBackend()
    return ArmBridge(backend, BridgeConfig(safety=SAFETY, **cfg)), backend


def _assert_safe(target: np.ndarray, measured: np.ndarray, tol: float = 1e-9) -> None:
    layer = SafetyLayer(SAFETY)
    assert layer.in_workspace(target[:3], atol=tol), target
    assert np.linalg.norm(target[:3] - measured[:3]) <= SAFETY.max_step_m + tol
    q = frames.quat_normalize(target[3:7])
    assert np.linalg.norm(frames.quat_error(q, measured[3:7])) <= SAFETY.max_step_rad + 1e-6
    cone = np.linalg.norm(frames.quat_error(q, np.asarray(DOWN_QUAT)))
    assert cone <= SAFETY.orientation_max_rad + 1e-6


def test_recording_backend_is_an_arm_backend():
    assert isinstance(RecordingBackend(), ArmBackend)


# -- adversarial commands ----------------------------------------------------------------------

finite = st.floats(-5.0, 5.0, allow_nan=False)
weird = st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0])
pose_values = st.lists(st.one_of(finite, weird), min_size=7, max_size=7)
bad_shapes = st.lists(finite, min_size=0, max_size=10).filter(lambda v: len(v) != 7)
unit_quat = st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(
    lambda q: np.linalg.norm(q) > 0.1
)
near_pose = st.tuples(st.lists(st.floats(-0.5, 0.5), min_size=3, max_size=3), unit_quat).map(
    lambda t: np.concatenate([START[:3] + np.array(t[0]), np.array(t[1]) / np.linalg.norm(t[1])])
)
command = st.one_of(
    near_pose.map(lambda p: ("target", p)),
    pose_values.map(lambda v: ("target", np.array(v))),
    bad_shapes.map(lambda v: ("target", np.array(v))),
    st.one_of(finite, weird).map(lambda g: ("gripper", g)),
    st.just(("tick", None)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(command, min_size=1, max_size=40))
def test_nothing_unsafe_ever_reaches_the_backend(cmds):
    bridge, backend = _bridge()
    t = 0.0
    for kind, value in cmds:
        if kind == "target":
            bridge.submit_target(value, t)
        elif kind == "gripper":
            bridge.submit_gripper(value, t)
        else:
            t += DT
            bridge.tick(t)
    bridge.tick(t + DT)
    for target, grip, measured in backend.commands:
        assert np.all(np.isfinite(target)) and np.isfinite(grip) and 0.0 <= grip <= 1.0
        _assert_safe(target, measured)


def test_malformed_target_is_rejected_counted_and_holds():
    bridge, backend = _bridge()
    for bad in (
        np.full(7, np.nan),
        np.array([0.5, 0, 0.2, np.inf, 0, 0, 0]),
        np.zeros(6),
        np.array([0.5, 0, 0.2, 0, 2.0, 0, 0]),  # non-unit quaternion
        np.array([0.5, 0, 0.2, 0, 0, 0, 0]),  # zero quaternion
    ):
        assert not bridge.submit_target(bad, 0.0)
    assert bridge.rejected == 5 and backend.holds == 5
    assert "unit quaternion" in bridge.last_error
    assert not bridge.tick(DT) and backend.commands == []


def test_malformed_command_drops_the_pending_one():
    bridge, backend = _bridge()
    assert bridge.submit_target(START + [0.01, 0, 0, 0, 0, 0, 0], 0.0)
    assert not bridge.submit_target(np.full(7, np.nan), 0.0)
    assert not bridge.tick(DT)
    assert backend.commands == []


def test_flood_between_ticks_executes_only_the_newest_clipped():
    bridge, backend = _bridge()
    far = START + [1.0, 0, 0, 0, 0, 0, 0]
    for _ in range(1000):
        bridge.submit_target(far, 0.0)
    assert bridge.tick(DT)
    assert len(backend.commands) == 1
    target, _, measured = backend.commands[0]
    _assert_safe(target, measured)
    assert bridge.status()["clipped"] == {"box": 1, "step": 1, "rotation": 0}


def test_a_flood_ticked_every_state_period_executes_one_target_per_min_interval():
    """Ticked at every 10 ms state period with a target always queued, the bridge executes one
    every 80 ms (0.8 of a 100 ms control period), so the per-step limit bounds the speed at
    max_step_m per 80 ms however fast targets come."""
    bridge, backend = _bridge(min_target_interval_s=0.08)
    far = START + [1.0, 0, 0, 0, 0, 0, 0]
    executed = []
    for k in range(101):  # 1 s of state periods
        bridge.submit_target(far, k * 0.01)
        if bridge.tick(k * 0.01):
            executed.append(k)
    assert executed == list(range(0, 101, 8)), executed
    assert np.all(np.diff(executed) >= 8)
    assert bridge.status()["deferred_ticks"] == 101 - len(executed)
    steps = np.linalg.norm(np.diff([c[0][:3] for c in backend.commands], axis=0), axis=1)
    assert np.all(steps <= SAFETY.max_step_m + 1e-9)


def test_one_late_target_does_not_delay_every_target_after_it():
    """A policy's targets leave 40 ms into each 100 ms control period; target 3 leaves 70 ms
    late (an overrun: 0.41 s, in the next period), target 4 right after it (0.44 s). With the
    minimum interval (80 ms) target 4 waits 50 ms, target 5 30 ms, target 6 10 ms, and the rest
    go out at once again. Fixed per-period windows (one target per [kT, (k+1)T)) would have
    let target 3 use up the window of target 4, and every later target would have waited for
    the next boundary: 60 ms for the rest of the episode."""
    bridge, _ = _bridge(min_target_interval_s=0.08)
    sent = [k * 0.1 + 0.04 for k in range(10)]
    sent[3] = 0.41
    delays = []
    for t_sent in sent:
        t = t_sent
        bridge.submit_target(START, t_sent)
        while not bridge.tick(t):  # the twin ticks at its 10 ms state events
            t = round(t + 0.01, 6)
        delays.append(round(t - t_sent, 6))
    assert delays == pytest.approx([0, 0, 0, 0, 0.05, 0.03, 0.01, 0, 0, 0], abs=1e-6), delays


def test_stale_command_rejected_when_stamps_checked():
    bridge, backend = _bridge(max_command_age_s=0.5)
    assert not bridge.submit_target(START, now_s=10.0, stamp_s=9.0)
    assert "stale" in bridge.last_error
    assert bridge.submit_target(START, now_s=10.0, stamp_s=9.8)


def test_gripper_nan_rejected_and_clipped_otherwise():
    bridge, backend = _bridge()
    assert not bridge.submit_gripper(float("nan"), 0.0)
    assert bridge.submit_gripper(3.0, 0.0)
    assert bridge.tick(DT)
    target, grip, measured = backend.commands[-1]
    assert grip == 1.0
    np.testing.assert_allclose(target[:3], measured[:3])  # gripper-only: the arm stays


# -- watchdog ----------------------------------------------------------------------------------


def test_watchdog_holds_once_after_timeout_and_resumes_on_command():
    bridge, backend = _bridge()
    bridge.submit_target(START + [0.01, 0, 0, 0, 0, 0, 0], 0.0)
    bridge.tick(0.0)
    holds0 = backend.holds
    t = 0.0
    while t < SAFETY.watchdog_timeout_s - 1e-9:
        t += DT
        bridge.tick(t)
        assert bridge.state == "moving" and backend.holds == holds0
    t += DT  # first tick after the timeout
    bridge.tick(t)
    assert bridge.state == "holding" and bridge.watchdog_holds == 1
    assert backend.holds == holds0 + 1
    for _ in range(5):
        t += DT
        bridge.tick(t)
    assert bridge.watchdog_holds == 1, "a silent stream holds once, not every tick"
    n = len(backend.commands)
    assert bridge.submit_target(START, t)
    bridge.tick(t + DT)
    assert len(backend.commands) == n + 1 and bridge.state == "moving"


def test_no_watchdog_before_the_first_command():
    bridge, backend = _bridge()
    for i in range(20):
        bridge.tick(i * DT)
    assert bridge.watchdog_holds == 0 and bridge.state == "idle"


# -- e-stop, errors, reset ---------------------------------------------------------------------


def test_estop_refuses_until_clear_error():
    bridge, backend = _bridge()
    bridge.submit_target(START + [0.02, 0, 0, 0, 0, 0, 0], 0.0)
    bridge.estop(0.0)
    assert backend.holds == 1 and bridge.state == "estop"
    assert not bridge.tick(DT), "the command queued before the e-stop must not run"
    assert not bridge.submit_target(START, DT) and not bridge.submit_gripper(1.0, DT)
    for i in range(10):
        assert not bridge.tick((i + 2) * DT)
    assert backend.commands == [] and bridge.watchdog_holds == 0
    with pytest.raises(RuntimeError, match="e-stop"):
        bridge.reset(START, 0.0, 1.0)
    assert bridge.status()["state"] == "estop" and bridge.rejected == 2
    assert bridge.clear_error(2.0) and bridge.state == "idle"
    assert bridge.submit_target(START, 2.0) and bridge.tick(2.1)
    assert len(backend.commands) == 1


def test_backend_error_blocks_commands_until_recovered():
    backend = RecordingBackend()
    bridge, _ = _bridge(backend)
    backend._error = "cartesian_reflex"
    bridge.submit_target(START, 0.0)
    assert not bridge.tick(DT) and bridge.state == "error"
    assert bridge.status()["last_error"] == "cartesian_reflex"
    backend.clear_ok = False
    assert not bridge.clear_error(DT) and bridge.state == "error"
    backend.clear_ok = True
    assert bridge.clear_error(2 * DT) and bridge.recoveries == 1
    assert backend.commands == []


def test_auto_recover_at_tick():
    backend = RecordingBackend()
    bridge, _ = _bridge(backend, auto_recover=True)
    backend._error = "joint_reflex"
    bridge.submit_target(START, 0.0)
    bridge.tick(DT)
    assert bridge.recoveries == 1 and backend.error is None
    assert backend.commands == [], "the command pending during the error is dropped"


def test_an_estop_while_a_clear_is_in_flight_stands():
    """The ROS node runs the backend's recovery (seconds on a real arm) without its lock, between
    begin_clear_error and finish_clear_error; an e-stop pressed meanwhile must win."""
    backend = RecordingBackend()
    bridge, _ = _bridge(backend)
    backend._error = "cartesian_reflex"
    bridge.estop(0.0)
    job = bridge.begin_clear_error(DT)
    assert backend.clear_error()  # the slow part, without the node's lock
    bridge.estop(1.5 * DT)  # a person presses e-stop meanwhile
    assert not bridge.finish_clear_error(job, True)
    assert bridge.state == "estop" and bridge.status()["last_error"] == "e-stop"
    bridge.submit_target(START, 2 * DT)
    assert not bridge.tick(2 * DT) and backend.commands == []
    assert bridge.clear_error(3 * DT) and bridge.state == "idle"  # a later clear works


def test_auto_recovery_outside_the_tick():
    """tick(recover=False) only holds on a backend error; recovery_due tells the caller to run
    the recovery as a ClearJob (the node, without its lock); commands flow again after it."""
    backend = RecordingBackend()
    bridge, _ = _bridge(backend, auto_recover=True)
    backend._error = "joint_reflex"
    bridge.submit_target(START, 0.0)
    assert not bridge.tick(DT, recover=False) and bridge.state == "error"
    assert bridge.recovery_due and backend.error == "joint_reflex"  # not recovered by tick
    job = bridge.begin_clear_error(DT, clear_estop=False)
    assert not bridge.recovery_due  # one recovery at a time
    assert not bridge.tick(1.5 * DT, recover=False)  # nothing moves while it runs
    assert bridge.finish_clear_error(job, backend.clear_error())
    assert bridge.recoveries == 1 and bridge.state == "holding" and not bridge.recovery_due
    assert backend.commands == [], "the command pending during the error is dropped"
    bridge.submit_target(START, 2 * DT)
    assert bridge.tick(2 * DT, recover=False) and len(backend.commands) == 1
    bridge.estop(3 * DT)
    backend._error = "joint_reflex"
    assert not bridge.recovery_due  # an e-stop is cleared only by a person's clear_error


def test_reset_moves_and_rejects_poses_outside_the_box():
    bridge, backend = _bridge()
    pose = frames.pose(np.array([0.45, 0.1, 0.15]), np.array(DOWN_QUAT))
    bridge.reset(pose, 0.0, 0.0)
    np.testing.assert_allclose(backend.moves[-1], pose)
    with pytest.raises(UnsafeCommandError, match="outside"):
        bridge.reset(frames.pose(np.array([1.5, 0, 0.2]), np.array(DOWN_QUAT)), 0.0, 0.0)
    with pytest.raises(UnsafeCommandError):
        bridge.reset(np.full(7, np.nan), 0.0, 0.0)


def test_status_matches_contract_schema():
    bridge, _ = _bridge()
    s = bridge.status()
    assert set(s) >= {
        "stamp_s",
        "state",
        "watchdog_holds",
        "clipped",
        "rejected",
        "last_error",
        "recoveries",
        "last_command_s",
        "last_watchdog_hold_s",
        "executed_pose",
        "executed_s",
        "deferred_ticks",
        "backend",
    }
    assert set(s["clipped"]) == {"box", "step", "rotation"}
    assert s["backend"] == {}  # a backend without telemetry()


# -- the real twin behind the bridge -----------------------------------------------------------


@pytest.fixture(scope="module")
def twin():
    pytest.importorskip("mujoco")
    from sim.backend import make_sim_backend
    from sim.config import SimConfig
    from sim.ros_node import TwinArmBackend

    b = make_sim_backend("pick_cube", SimConfig(cameras=()), EnvConfig(), safety=SAFETY)
    arm = TwinArmBackend(b.robot)
    arm.connect()
    yield b, arm
    b.close()


def test_twin_flood_never_leaves_box_or_exceeds_step(twin):
    """Adversarial flood through the bridge into MuJoCo: the measured TCP stays in the box and
    moves at most the per-step limit per control period (plus controller overshoot)."""
    b, arm = twin
    b.task.reset(np.random.default_rng(0))
    bridge = ArmBridge(arm, BridgeConfig(safety=SAFETY))
    bridge.reset(START, 0.0, b.clock.now_s())
    rng = np.random.default_rng(1)
    layer = SafetyLayer(SAFETY)
    prev = arm.read_state().tcp_pose
    for _ in range(40):
        now = b.clock.now_s()
        for _ in range(20):
            r = rng.random()
            if r < 0.2:
                bridge.submit_target(np.full(7, np.nan), now)
            elif r < 0.3:
                bridge.submit_gripper(float(rng.uniform(-5, 5)), now)
            else:
                p = rng.uniform(-2, 2, 3) + START[:3]
                q = frames.quat_normalize(rng.normal(size=4))
                bridge.submit_target(frames.pose(p, q), now)
        bridge.tick(now)
        b.clock.tick()
        pose = arm.read_state().tcp_pose
        assert layer.in_workspace(pose[:3], atol=0.01), pose
        assert np.linalg.norm(pose[:3] - prev[:3]) <= SAFETY.max_step_m + 0.005
        prev = pose
    s = bridge.status()
    assert s["rejected"] > 0 and s["clipped"]["step"] > 0 and s["clipped"]["box"] > 0


def test_twin_watchdog_holds_in_sim_time(twin):
    b, arm = twin
    b.task.reset(np.random.default_rng(0))
    bridge = ArmBridge(arm, BridgeConfig(safety=SAFETY))
    bridge.reset(START, 0.0, b.clock.now_s())
    goal = START + [0.15, 0, 0, 0, 0, 0, 0]
    for _ in range(3):
        cur = arm.read_state().tcp_pose
        bridge.submit_target(
            frames.pose(cur[:3] + 0.04 * (goal[:3] - cur[:3]) / 0.15, START[3:]), b.clock.now_s()
        )
        bridge.tick(b.clock.now_s())
        b.clock.tick()
    last_cmd = bridge.last_command_s
    while bridge.watchdog_holds == 0:
        bridge.tick(b.clock.now_s())
        b.clock.tick()
        assert b.clock.now_s() < last_cmd + 2.0
    held_at = bridge.status()["stamp_s"]
    assert bridge.status()["last_watchdog_hold_s"] == held_at
    assert held_at - last_cmd <= SAFETY.watchdog_timeout_s + b.clock.period_s + 1e-9
    for _ in range(3):
        b.clock.tick()
    p0 = arm.read_state().tcp_pose
    for _ in range(5):
        bridge.tick(b.clock.now_s())
        b.clock.tick()
    assert np.linalg.norm(arm.read_state().tcp_pose[:3] - p0[:3]) < 2e-3
