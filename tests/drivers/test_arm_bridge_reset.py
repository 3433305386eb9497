"""ArmBridge core without ROS: a reset that takes time, and what may interrupt it.

The backend here is a test double (:class:`SlowBackend`): only the bridge's bookkeeping is under
test, and the test decides when the arm "arrives". The same interplay with a real arm (the
Franka protocol simulator behind the ROS node) is tested in ``test_franka_reset.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from drivers.arm_bridge.backend import ArmBackend
from drivers.arm_bridge.core import ArmBridge, BridgeConfig
from robot_rl.core import frames
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
from robot_rl.core.types import RobotState

SAFETY = SafetyConfig(
    workspace_low_m=(0.3, -0.28, 0.015),
    workspace_high_m=(0.7, 0.28, 0.35),
    max_step_m=0.05,
    max_step_rad=0.3,
    orientation_max_rad=0.8,
    watchdog_timeout_s=0.5,
)
START = frames.pose(np.array([0.5, 0.0, 0.2]), np.array(DOWN_QUAT))
FAR = frames.pose(np.array([0.4, 0.2, 0.1]), np.array(DOWN_QUAT))


class SlowBackend:
    """Test double: a move starts at ``start_move`` and arrives only when the test calls
    :meth:`arrive` (or fails when it sets :attr:`move_failure`); records holds and commands."""

    def __init__(self) -> None:
        self.pose = START.copy()
        self.goal: np.ndarray | None = None
        self.arrived = False
        self.move_failure: str | None = None
        self.error: str | None = None
        self.holds = 0
        self.commands: list[np.ndarray] = []

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read_state(self) -> RobotState:
        return RobotState(
            0.0, self.pose.copy(), np.zeros(6), np.zeros(6), 0.0, np.zeros(7), np.zeros(7)
        )

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        self.commands.append(np.array(target_pose))

    def hold(self) -> None:
        self.holds += 1
        self.goal = None

    def start_move(self, pose: np.ndarray, gripper: float) -> None:
        self.goal, self.arrived = np.array(pose), False

    def move_done(self) -> bool:
        if self.move_failure is not None:
            raise RuntimeError(self.move_failure)
        return self.arrived

    def arrive(self) -> None:
        assert self.goal is not None, "no move under way (held?)"
        self.pose, self.arrived = self.goal.copy(), True

    def clear_error(self) -> bool:
        self.error = None
        return True


def _bridge(**cfg) -> tuple[ArmBridge, SlowBackend]:
    backend = SlowBackend()
    return ArmBridge(backend, BridgeConfig(safety=SAFETY, **cfg)), backend


def test_slow_backend_is_an_arm_backend():
    assert isinstance(SlowBackend(), ArmBackend)


def test_reset_reports_resetting_until_the_arm_arrives():
    bridge, backend = _bridge()
    job = bridge.begin_reset(FAR, 1.0, 0.0)
    np.testing.assert_allclose(backend.goal, FAR)
    assert bridge.state == "resetting" and bridge.resetting
    assert not bridge.poll_reset(job, 0.1) and not bridge.poll_reset(job, 0.2)
    backend.arrive()
    assert bridge.poll_reset(job, 0.3)
    assert bridge.state == "idle" and not bridge.resetting and backend.holds == 0


def test_estop_during_reset_holds_and_fails_the_reset():
    bridge, backend = _bridge()
    job = bridge.begin_reset(FAR, 0.0, 0.0)
    assert not bridge.poll_reset(job, 0.1)
    bridge.estop(0.2)
    assert backend.holds == 1 and backend.goal is None, "the move must stop at once"
    assert bridge.state == "estop"
    with pytest.raises(RuntimeError, match="interrupted by e-stop"):
        bridge.poll_reset(job, 0.3)
    with pytest.raises(RuntimeError, match="e-stop is active"):
        bridge.begin_reset(FAR, 0.0, 0.4)
    assert bridge.state == "estop", "the e-stop stays until clear_error"
    assert bridge.clear_error(0.5) and bridge.state == "idle"
    job = bridge.begin_reset(FAR, 0.0, 0.6)
    backend.arrive()
    assert bridge.poll_reset(job, 0.7) and bridge.state == "idle"


@pytest.mark.parametrize("how", ["hold", "clear_error"])
def test_hold_or_clear_error_during_reset_ends_it(how: str):
    bridge, backend = _bridge()
    job = bridge.begin_reset(FAR, 0.0, 0.0)
    getattr(bridge, how)(0.1)
    assert backend.holds == 1 and not bridge.resetting
    with pytest.raises(RuntimeError, match=f"interrupted by {how}"):
        bridge.poll_reset(job, 0.2)
    # clear_error ends with nothing to report; a hold leaves the reason in the status.
    expected = None if how == "clear_error" else "reset interrupted by hold"
    assert bridge.status()["last_error"] == expected and bridge.state in ("holding", "idle")


def test_commands_and_watchdog_wait_for_the_reset():
    bridge, backend = _bridge()
    bridge.submit_target(START, 0.0)
    assert bridge.tick(0.1)
    job = bridge.begin_reset(FAR, 0.0, 0.2)
    assert not bridge.submit_target(START, 0.3), "a command during a reset is refused"
    assert not bridge.submit_gripper(1.0, 0.3)
    assert "reset under way" in bridge.status()["last_error"]
    assert not bridge.reject_malformed("garbage", 0.3)
    assert backend.holds == 0 and bridge.resetting, "garbage on the topics must not stop it"
    for i in range(20):  # far beyond the watchdog timeout: no watchdog hold, no command
        assert not bridge.tick(0.4 + i * 0.1)
    assert bridge.watchdog_holds == 0 and backend.holds == 0 and len(backend.commands) == 1
    backend.arrive()
    assert bridge.poll_reset(job, 2.5) and bridge.rejected == 3
    assert bridge.submit_target(FAR, 2.6) and bridge.tick(2.7)


def test_second_reset_during_one_is_refused():
    bridge, backend = _bridge()
    job = bridge.begin_reset(FAR, 0.0, 0.0)
    with pytest.raises(RuntimeError, match="already under way"):
        bridge.begin_reset(START, 0.0, 0.1)
    backend.arrive()
    assert bridge.poll_reset(job, 0.2)


def test_backend_failure_ends_the_reset_and_holds():
    bridge, backend = _bridge()
    job = bridge.begin_reset(FAR, 0.0, 0.0)
    backend.move_failure = "move_to did not reach the goal within 20 s"
    with pytest.raises(RuntimeError, match="within 20 s"):
        bridge.poll_reset(job, 0.1)
    assert backend.holds == 1 and bridge.state == "holding" and not bridge.resetting
    assert bridge.status()["last_error"] == f"reset failed: {backend.move_failure}"


def test_backend_error_at_tick_interrupts_the_reset():
    bridge, backend = _bridge(auto_recover=True)
    job = bridge.begin_reset(FAR, 0.0, 0.0)
    backend.error = "cartesian_reflex"
    bridge.tick(0.1)
    assert bridge.recoveries == 1 and not bridge.resetting
    with pytest.raises(RuntimeError, match="interrupted by backend error: cartesian_reflex"):
        bridge.poll_reset(job, 0.2)


def test_blocking_reset_with_an_instant_backend():
    """``reset`` (begin + poll in one call) as the twin uses it."""
    bridge, backend = _bridge()

    def instant(pose: np.ndarray, gripper: float) -> None:
        backend.goal = np.array(pose)
        backend.arrive()

    backend.start_move = instant  # type: ignore[method-assign]
    bridge.reset(FAR, 0.0, 0.0)
    assert bridge.state == "idle"
    np.testing.assert_allclose(backend.pose, FAR)
