"""Helpers of the SO-101 tests (``test_so101_backend.py``, ``test_so101_leader.py``):
simulated STS3215 servos on a pty, a calibration, servo positions for joint angles, a reference
forward kinematics, and the ``open_sim`` / ``follower`` fixtures (imported by those modules:
``from so101_helpers import follower, open_sim``). ``wait_for`` and ``sim_buses`` also serve
the Feetech stack's tests (``test_feetech.py``).

The bus client (:class:`drivers.feetech.bus.FeetechBus`) is the real one, opening a real tty
with pyserial; only the servos are simulated (:class:`drivers.feetech.sim_bus.SimServoBus`: the
only fake, at the byte boundary, because CI has no servo hardware). The servo models plug into
it: here a recorder of every goal that reached the (simulated) servos and a first-order lag; a
hand that moves a limp arm and a scripted leader are in ``test_so101_leader.py``. The expected
TCP poses come from MuJoCo's own forward kinematics of the SO-101 file, not from the IK library
the backend uses. Waits are on conditions with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import mujoco
import numpy as np
import pytest

from drivers.feetech import calibration as cal
from drivers.feetech.protocol import TICKS_PER_TURN
from drivers.feetech.servo_model import KinematicServoConfig, KinematicServoModel, ServoModel
from drivers.feetech.sim_bus import SimServoBus
from drivers.so101.backend import So101Backend
from drivers.so101.config import SO101_KINEMATICS, So101Config
from robot_rl.core import frames
from robot_rl.core.arm import builtin_arm

SO101 = builtin_arm("so101")

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


# -- fixtures -----------------------------------------------------------------------------------


@contextmanager
def sim_buses() -> Iterator[Callable[..., SimServoBus]]:
    """Factory ``start(model=None, ids=IDS, **sim_bus_options)`` -> a started
    :class:`SimServoBus` (``model`` None: the bus's default servos); all closed on exit."""
    started: list[SimServoBus] = []

    def start(
        model: ServoModel | None = None, ids: tuple[int, ...] = IDS, **options
    ) -> SimServoBus:
        sim = SimServoBus(ids, model=model, **options).start()
        started.append(sim)
        return sim

    try:
        yield start
    finally:
        for sim in started:
            sim.close()


@pytest.fixture
def open_sim() -> Iterator[Callable[..., SimServoBus]]:
    """Factory: a started :class:`SimServoBus` with a model (closed at teardown)."""
    with sim_buses() as start:
        yield start


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
