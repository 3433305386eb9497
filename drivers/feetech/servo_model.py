"""Servo models for :class:`drivers.feetech.sim_bus.SimServoBus`: where simulated servos are.

Part of the simulated servo bus, which stands in for servo hardware that CI does not have.
:class:`ServoModel` is what the simulated bus needs from a model: positions out, goals in. The
default, :class:`KinematicServoModel`, is a few lines of kinematics; the MuJoCo twin can plug in
a model that reads positions from physics instead.

Units are the servo's: ticks (4096 per turn), ticks/s, and load in 0.1 % of the stall torque
(``PRESENT_LOAD``'s unit, -1000..1000, positive when pushing towards more ticks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from drivers.feetech.protocol import TICKS_PER_TURN


@runtime_checkable
class ServoModel(Protocol):
    """Where a set of servos are, given their goals. Index ``i`` is the bus's ``ids[i]``.

    A model may also have ``read_speeds() -> (N,)`` ticks/s and ``read_loads() -> (N,)`` load
    (0.1 % of stall torque); the simulated bus reports 0 for what a model does not have.
    Called from the simulated bus's thread.
    """

    def read_positions(self) -> np.ndarray:
        """(N,) present positions, ticks in 0..4095."""
        ...

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        """Track (N,) goal ``ticks`` where (N,) bool ``torque_enabled``; go limp elsewhere."""
        ...


@dataclass(frozen=True)
class KinematicServoConfig:
    """The simple servo model's parameters (the same for every servo, except the obstacles).

    Attributes:
        speed_limit_ticks_per_s: Top speed, ticks/s (an STS3215 at 12 V: about 3000).
        deadband_ticks: A servo at rest does not move for a goal this close, ticks.
        backlash_ticks: Play between the motor and the measured output, ticks: the output
            lags the motor by half of it in the direction of motion, so approaching a goal from
            below and from above lands this far apart.
        stall_load: Largest load the servo can push with, 0.1 % of stall torque (0..1000).
        load_per_tick: Load per tick of the motor's distance to its goal while it is blocked.
        blocked_above_ticks: Per servo, an obstacle: the output cannot pass above this many
            ticks (None: free). Empty: no obstacles.
        initial_ticks: Per servo, the position at start. Empty: 2048 (mid-turn) each.
    """

    speed_limit_ticks_per_s: float = 3000.0
    deadband_ticks: float = 1.0
    backlash_ticks: float = 0.0
    stall_load: float = 500.0
    load_per_tick: float = 5.0
    blocked_above_ticks: tuple[float | None, ...] = ()
    initial_ticks: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocked_above_ticks", tuple(self.blocked_above_ticks))
        object.__setattr__(self, "initial_ticks", tuple(self.initial_ticks))
        if not self.speed_limit_ticks_per_s > 0:
            raise ValueError("speed_limit_ticks_per_s must be > 0 (e.g. 3000)")
        if self.deadband_ticks < 0 or self.backlash_ticks < 0:
            raise ValueError("deadband_ticks and backlash_ticks must be >= 0")
        if not 0 <= self.stall_load <= 1000 or self.load_per_tick < 0:
            raise ValueError("stall_load is in 0..1000 (0.1 % of stall torque); load_per_tick >= 0")


class KinematicServoModel:
    """Servos that move at a bounded speed towards their goal, with deadband, backlash and
    obstacles. Time is the ``clock`` (default ``time.monotonic``); the state is advanced to the
    clock's time whenever it is read or a goal changes, exactly (motion is piecewise linear).

    Per servo: the motor moves at ``speed_limit_ticks_per_s`` towards the goal and stops on it;
    it does not start for a goal within ``deadband_ticks``. The output (what the encoder
    reports) follows the motor through a play of ``backlash_ticks``. An output that reaches its
    obstacle stops there; the motor then pushes the play closed and the servo reports a load of
    ``load_per_tick`` per tick still to go, up to ``stall_load``. Without torque a servo stays
    where it is (no gravity here).

    Args:
        num_servos: N.
        config: The parameters.
        clock: Seconds, monotonic.
    """

    def __init__(
        self,
        num_servos: int,
        config: KinematicServoConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = cfg = config or KinematicServoConfig()
        n = num_servos
        for name in ("blocked_above_ticks", "initial_ticks"):
            if getattr(cfg, name) and len(getattr(cfg, name)) != n:
                raise ValueError(f"{name} has {len(getattr(cfg, name))} entries for {n} servos")
        start = np.asarray(cfg.initial_ticks or (TICKS_PER_TURN / 2,) * n, dtype=float)
        self._blocked = np.array(
            [np.inf if b is None else float(b) for b in (cfg.blocked_above_ticks or (None,) * n)]
        )
        if np.any(start > self._blocked):
            raise ValueError("a servo starts above its obstacle (initial_ticks > blocked_above)")
        self._clock = clock
        self._lock = threading.Lock()
        self._t = clock()
        self._motor = start.copy()
        self._output = start.copy()
        self._goal = start.copy()
        self._torque = np.zeros(n, dtype=bool)
        self._moving = np.zeros(n, dtype=bool)
        self._speed = np.zeros(n)
        self._load = np.zeros(n)

    def read_positions(self) -> np.ndarray:
        """(N,) output positions, whole ticks clipped to 0..4095."""
        with self._lock:
            self._advance()
            return np.clip(np.round(self._output), 0, TICKS_PER_TURN - 1).astype(np.int64)

    def read_speeds(self) -> np.ndarray:
        """(N,) output speeds over the last advance, ticks/s."""
        with self._lock:
            self._advance()
            return np.round(self._speed).astype(np.int64)

    def read_loads(self) -> np.ndarray:
        """(N,) loads, 0.1 % of stall torque (nonzero only while pushing on an obstacle)."""
        with self._lock:
            self._advance()
            return np.round(self._load).astype(np.int64)

    def read_moving(self) -> np.ndarray:
        """(N,) bool: the motor is travelling towards its goal."""
        with self._lock:
            self._advance()
            return self._moving.copy()

    def write_goals(self, ticks: np.ndarray, torque_enabled: np.ndarray) -> None:
        """New (N,) goals and (N,) torque flags, from now on."""
        ticks = np.asarray(ticks, dtype=float)
        torque = np.asarray(torque_enabled, dtype=bool)
        if ticks.shape != self._goal.shape or torque.shape != self._goal.shape:
            raise ValueError(f"expected ({self._goal.size},) goals and torque flags")
        with self._lock:
            self._advance()
            self._goal = ticks.copy()
            self._torque = torque.copy()
            self._moving &= torque
            self._advance()

    def _advance(self) -> None:
        now = self._clock()
        dt = max(now - self._t, 0.0)
        self._t = now
        cfg = self.config
        half_play = cfg.backlash_ticks / 2
        before = self._output.copy()
        error = self._goal - self._motor
        self._moving |= self._torque & (np.abs(error) > cfg.deadband_ticks)
        step = np.clip(error, -cfg.speed_limit_ticks_per_s * dt, cfg.speed_limit_ticks_per_s * dt)
        motor = np.where(self._moving, self._motor + step, self._motor)
        # The output follows the motor through the play, and stops at its obstacle; a blocked
        # motor can close the play and no more.
        output = np.clip(self._output, motor - half_play, motor + half_play)
        blocked = output > self._blocked
        output = np.minimum(output, self._blocked)
        motor = np.where(blocked, np.minimum(motor, self._blocked + half_play), motor)
        self._moving &= ~(np.abs(self._goal - motor) < 1e-9)
        pushing = self._torque & (motor >= self._blocked + half_play) & (self._goal > motor)
        self._load = np.where(
            pushing, np.minimum(cfg.load_per_tick * (self._goal - motor), cfg.stall_load), 0.0
        )
        self._speed = (output - before) / dt if dt > 0 else np.zeros_like(output)
        self._motor, self._output = motor, output
