"""A second SO-101 as the teleop device: a leader arm (torque off) that a person moves by hand,
read with one SYNC_READ per reading at the control rate.

Two ways to use it:

(a) joint space, :class:`LeaderFollowerMap` + :class:`JointMirror`: the leader's joint angles
    (its own calibration) become the follower's joint targets (sign / offset per joint, clipped
    to the follower's limits), handed to :meth:`drivers.so101.backend.So101Backend.follow_joints`
    in the same process. A helper, not a topic: the ROS 2 contract has no joint command, and
    adding one would open a second way into every bridge that bypasses the Cartesian safety
    core; in-process the follower's single goal funnel (calibrated limits, per-tick joint step,
    the workspace box) applies to the leader's targets, and both arms hang on the same PC's USB
    with one 50 Hz loop between them (no DDS hop). It is the puppet mode (LeRobot's
    ``teleoperate``) for checking calibrations and for play; the RL loop gets the leader as (b).

(b) Cartesian delta, a :class:`drivers.teleop.base.DeviceTeleop` (``so101_leader_teleop``;
    ``python -m drivers.teleop.node --device so101_leader --leader-port ... --leader-calibration
    ...``): forward kinematics of the leader's joints on the SO-101 kinematics file, and the
    displacement of its TCP over the last control period (``1 / control_hz``: the delta since
    the previous reading when read at the env's rate) as the teleop twist, normalised by the
    env's per-step limits (``action_scale_m``, ``action_scale_rad``, as
    :class:`robot_rl.core.config.EnvConfig`), so that the follower's TCP moves as the leader's.
    The mapper clips it to [-1, 1] (a leader moved faster than the per-step limit is followed at
    the limit). A leader mounted turned with respect to the follower maps through
    :class:`~drivers.teleop.mapping.TeleopMapConfig` ``axis_order`` / ``axis_signs``.

Intervention: leader motion above ``intervene_threshold`` (a fraction of the per-step limit,
also the mapper's deadzone) holds ``intervene``; the intervention wrapper's hold window keeps a
pause within a correction from ending it. Chosen over a keyboard key because both hands are on
the leader (one on the jaw's handle), and because the twist is relative: the follower moves by
the leader's displacement from wherever it is, so taking over needs no alignment of the two arms
(an absolute joint mapping would jump to the leader's pose, which is why LeRobot's leader-arm
interventions toggle with a key). Success / failure labels still come from a keyboard or a
reward model.

Gripper: the leader's jaw closure (its calibration) with hysteresis (closed above
``close_above``, open below ``open_below``); it is requested (gripper axis +1 close / -1 open)
while the leader moves and on the reading where the jaw changed state, never while the leader
rests: a standing request would read as a takeover
(:func:`robot_rl.core.teleop_action.is_taking_over`).

A reading older than ``stale_after_s`` (a leader that stopped answering) reads as no motion.
Recording raw leader readings to an event file is not supported (``--record``).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from drivers.feetech import calibration as cal
from drivers.feetech.bus import FeetechBus
from drivers.feetech.protocol import TICKS_PER_TURN, FeetechError
from drivers.ik import DiffIK, DiffIKConfig
from drivers.so101.config import SO101_KINEMATICS
from robot_rl.core import frames
from robot_rl.core.arm import ArmDescription, builtin_arm

from .base import DeviceTeleop
from .mapping import DeviceReading, TeleopMapConfig, TeleopMapper

SO101 = builtin_arm("so101")

log = logging.getLogger(__name__)

KIND = "so101_leader"
"""The device kind (``teleop`` node ``--device``)."""


@dataclass(frozen=True)
class LeaderConfig:
    """The leader arm and how its motion becomes a teleop reading.

    Attributes:
        port: Serial device of the leader's bus board, e.g. ``/dev/ttyACM1``.
        calibration: The leader's calibration file (``robot-rl arm calibrate``).
        arm: Its description (joint names; the leader has the follower's kinematics).
        kinematics: Its URDF / MJCF; None: ``arm.kinematics``, else the repository's SO-101.
        control_hz: The env's control rate: the twist is the TCP displacement over one period.
        action_scale_m: The env's translation per step for an action of 1, metres.
        action_scale_rad: The env's rotation per step for an action of 1, rad.
        intervene_threshold: Leader motion above this fraction of the per-step limit (any axis)
            is a takeover.
        close_above: Jaw closure above which the leader's gripper reads closed ...
        open_below: ... and below which it reads open again (hysteresis).
        stale_after_s: A newest reading older than this reads as no motion, s.
        baudrate: Bus speed, bits/s.
        bus_timeout_s: Longest wait for a servo's answer, s.
        bus_retries: Repeats of a failed request.
    """

    port: str
    calibration: str | Path
    arm: ArmDescription = SO101
    kinematics: str | Path | None = None
    control_hz: float = 10.0
    action_scale_m: float = 0.02
    action_scale_rad: float = 0.1
    intervene_threshold: float = 0.1
    close_above: float = 0.6
    open_below: float = 0.4
    stale_after_s: float = 0.1
    baudrate: int = 1_000_000
    bus_timeout_s: float = 0.05
    bus_retries: int = 1

    def __post_init__(self) -> None:
        for name in ("control_hz", "action_scale_m", "action_scale_rad", "stale_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.intervene_threshold < 1:
            raise ValueError(f"intervene_threshold {self.intervene_threshold} must be in [0, 1)")
        if not 0 <= self.open_below < self.close_above <= 1:
            raise ValueError(
                f"need 0 <= open_below ({self.open_below}) < close_above ({self.close_above}) <= 1"
            )

    @property
    def kinematics_path(self) -> Path:
        return Path(self.kinematics or self.arm.kinematics or SO101_KINEMATICS)


@dataclass(frozen=True)
class LeaderReading:
    """One reading of the leader: ``stamp_s`` (monotonic), joint angles ``q_rad`` (N,) and jaw
    ``closure`` in [0, 1], through the leader's calibration."""

    stamp_s: float
    q_rad: np.ndarray
    closure: float


def load_leader_calibration(config: LeaderConfig) -> cal.ArmCalibration:
    """The leader's calibration file, checked against its joints and jaw."""
    return cal.load(config.calibration, config.arm.joint_names, cal.SO101_GRIPPER)


class LeaderArm:
    """The leader's bus: torque off, one SYNC_READ per reading.

    Args:
        config: Port and calibration.

    Raises:
        CalibrationError: The calibration file is missing or does not fit the arm.
    """

    def __init__(self, config: LeaderConfig) -> None:
        self.config = config
        self.calibration = load_leader_calibration(config)
        assert self.calibration.gripper is not None
        self.ids = (*self.calibration.joint_ids, self.calibration.gripper[1].servo_id)
        self._bus: FeetechBus | None = None

    def open(self) -> None:
        """Open the bus, ping every servo and switch their torque off (the person moves it).

        Raises:
            RuntimeError: The port cannot be opened or a servo does not answer (named).
        """
        cfg = self.config
        try:
            bus = FeetechBus(cfg.port, cfg.baudrate, self.ids, cfg.bus_timeout_s, cfg.bus_retries)
        except OSError as e:
            raise RuntimeError(f"cannot open the leader arm's port {cfg.port}: {e}") from e
        try:
            for servo_id in self.ids:
                bus.ping(servo_id)
            bus.set_torque(None, False)
        except FeetechError as e:
            bus.close()
            raise RuntimeError(f"leader arm on {cfg.port}: {e}; check its cable and power") from e
        self._bus = bus

    def close(self) -> None:
        if self._bus is not None:
            self._bus.close()
            self._bus = None

    def read_ticks(self) -> np.ndarray:
        """(6,) present positions, ticks: the arm joints in chain order, then the jaw.

        Raises:
            FeetechError: A servo did not answer or answered garbage.
        """
        if self._bus is None:
            raise RuntimeError("the leader arm is not open; call open() first")
        return self._bus.sync_read_positions()

    def read(self) -> LeaderReading:
        """One reading in joint angles and jaw closure."""
        ticks = self.read_ticks()
        stamp = time.monotonic()
        return LeaderReading(
            stamp,
            self.calibration.ticks_to_rad(ticks[:-1]),
            self.calibration.gripper_ticks_to_closure(ticks[-1]),
        )


# -- (a) joint space ---------------------------------------------------------------------------


@dataclass(frozen=True)
class JointMap:
    """Leader joint -> follower joint: ``q_follower = sign * q_leader + offset_rad``.

    Two SO-101s calibrated alike (zero at the middle of each range, same directions) need the
    identity (the default).
    """

    signs: tuple[float, ...] = (1.0,) * 5
    offsets_rad: tuple[float, ...] = (0.0,) * 5

    def __post_init__(self) -> None:
        if any(s not in (1.0, -1.0) for s in self.signs):
            raise ValueError(f"signs {self.signs} must be +1 or -1 each")
        if len(self.signs) != len(self.offsets_rad):
            raise ValueError("signs and offsets_rad need one value per joint each")


class LeaderFollowerMap:
    """Leader joint angles and jaw -> the follower's joint targets and gripper closure.

    Args:
        follower: The follower's description (its limits clip the targets).
        joint_map: Per-joint sign and offset.
    """

    def __init__(self, follower: ArmDescription = SO101, joint_map: JointMap | None = None):
        self.follower = follower
        self.joint_map = joint_map or JointMap(
            (1.0,) * follower.num_joints, (0.0,) * follower.num_joints
        )
        if len(self.joint_map.signs) != follower.num_joints:
            raise ValueError(
                f"joint_map has {len(self.joint_map.signs)} joints, the follower "
                f"{follower.num_joints}"
            )
        self._low = np.asarray(follower.joint_low_rad)
        self._high = np.asarray(follower.joint_high_rad)

    def follower_targets(self, q_leader: np.ndarray, closure: float) -> tuple[np.ndarray, float]:
        """(N,) follower joint targets within its limits, and the closure in [0, 1]."""
        q = np.asarray(q_leader, dtype=np.float64)
        if q.shape != self._low.shape or not np.all(np.isfinite(q)):
            raise ValueError(f"leader joints must be {self._low.size} finite angles, got {q}")
        m = self.joint_map
        target = np.asarray(m.signs) * q + np.asarray(m.offsets_rad)
        return np.clip(target, self._low, self._high), float(np.clip(closure, 0.0, 1.0))


class JointFollower(Protocol):
    """What joint mirroring drives (:class:`drivers.so101.backend.So101Backend`)."""

    def follow_joints(self, q_rad: np.ndarray, gripper: float) -> None: ...


class JointMirror:
    """One leader reading -> the follower's joint targets, per :meth:`step` (call it at the
    control rate; the follower's tick bounds each goal).

    Args:
        leader: The open leader arm.
        follower: The connected follower.
        mapping: Joint and jaw mapping.
    """

    def __init__(
        self,
        leader: LeaderArm,
        follower: JointFollower,
        mapping: LeaderFollowerMap | None = None,
    ) -> None:
        self.leader, self.follower = leader, follower
        self.mapping = mapping or LeaderFollowerMap()

    def step(self) -> tuple[np.ndarray, float]:
        """Read the leader once and hand the targets to the follower; returns them.

        Raises:
            FeetechError: The leader did not answer (the follower keeps its last targets).
        """
        reading = self.leader.read()
        q, closure = self.mapping.follower_targets(reading.q_rad, reading.closure)
        self.follower.follow_joints(q, closure)
        return q, closure


# -- (b) Cartesian delta -----------------------------------------------------------------------


class LeaderSource:
    """:class:`drivers.teleop.base.RawSource` of the leader: each poll is one SYNC_READ, the
    raw item the six ticks. A failed read delivers nothing (counted in :attr:`read_errors`)."""

    def __init__(self, leader: LeaderArm, now_fn: Callable[[], float] = time.monotonic) -> None:
        self.leader = leader
        self._now = now_fn
        self.read_errors = 0

    @property
    def kind(self) -> str:
        return KIND

    @property
    def info(self) -> Mapping[str, Any]:
        return {"port": self.leader.config.port, "ids": list(self.leader.ids)}

    def open(self) -> None:
        self.leader.open()

    def close(self) -> None:
        self.leader.close()

    def poll(self) -> list[tuple[float, tuple[int, ...]]]:
        """One reading, stamped halfway through the SYNC_READ (the servos answer within it)."""
        before = self._now()
        try:
            ticks = self.leader.read_ticks()
        except FeetechError as e:
            self.read_errors += 1
            if self.read_errors == 1 or self.read_errors % 100 == 0:
                log.warning("leader arm: %s (%d failed reads)", e, self.read_errors)
            return []
        return [(0.5 * (before + self._now()), tuple(int(t) for t in ticks))]


@dataclass
class _Sample:
    t_s: float
    ticks: np.ndarray
    pose: np.ndarray
    closure: float


class LeaderParser:
    """:class:`drivers.teleop.base.Parser`: leader ticks -> TCP displacement per control
    period, normalised by the per-step limits; jaw -> gripper requests (module docstring).

    Args:
        calibration: The leader's calibration.
        fk: (N,) joint angles -> (7,) TCP pose (e.g. :meth:`drivers.ik.DiffIK.fk`).
        config: Rates, scales, thresholds.
    """

    def __init__(
        self,
        calibration: cal.ArmCalibration,
        fk: Callable[[np.ndarray], np.ndarray],
        config: LeaderConfig,
    ) -> None:
        self.calibration, self.fk, self.config = calibration, fk, config
        self.window_s = 1.0 / config.control_hz
        self._samples: collections.deque[_Sample] = collections.deque()
        self._closed: bool | None = None
        self._jaw_changed = False

    def configure(self, info: Mapping[str, Any]) -> None:
        """Nothing to take from the source (the calibration came with the constructor)."""

    def feed(self, raw: Any, t_s: float) -> None:
        """One reading: six ticks (arm joints, then the jaw) at ``t_s``.

        Raises:
            ValueError: Not six whole ticks in 0..4095.
        """
        ticks = np.asarray(raw)
        n = len(self.calibration.joints) + 1
        if (
            ticks.shape != (n,)
            or not np.issubdtype(ticks.dtype, np.integer)
            or np.any((ticks < 0) | (ticks >= TICKS_PER_TURN))
        ):
            raise ValueError(f"leader reading must be {n} ticks in 0..4095, got {raw!r}")
        q = self.calibration.ticks_to_rad(ticks[:-1])
        closure = self.calibration.gripper_ticks_to_closure(ticks[-1])
        self._samples.append(_Sample(float(t_s), ticks[:-1].copy(), self.fk(q), closure))
        while len(self._samples) > 2 and self._samples[1].t_s <= t_s - 2 * self.window_s:
            self._samples.popleft()
        closed = self._closed
        if closed is None:
            self._closed = closure >= 0.5 * (self.config.close_above + self.config.open_below)
        elif not closed and closure > self.config.close_above:
            self._closed, self._jaw_changed = True, True
        elif closed and closure < self.config.open_below:
            self._closed, self._jaw_changed = False, True

    def axes(self, now_s: float) -> np.ndarray:
        """(6,) the TCP displacement over the last control period in units of the per-step
        limits (not clipped); zero without two fresh readings."""
        out = np.zeros(6)
        if not self._samples or now_s - self._samples[-1].t_s > self.config.stale_after_s:
            return out
        new = self._samples[-1]
        ref = self._samples[0]
        for s in self._samples:  # the newest reading at least one period before the newest
            if s.t_s <= new.t_s - self.window_s + 1e-9:
                ref = s
        dt = new.t_s - ref.t_s
        if dt < 0.5 * self.window_s or np.array_equal(new.ticks, ref.ticks):
            return out  # too short a history, or no encoder moved: exactly no motion
        per_period = self.window_s / dt
        out[:3] = (new.pose[:3] - ref.pose[:3]) * per_period / self.config.action_scale_m
        rotvec = frames.quat_error(new.pose[3:7], ref.pose[3:7])
        out[3:] = rotvec * per_period / self.config.action_scale_rad
        return out

    def reading(self, now_s: float) -> DeviceReading:
        axes = self.axes(now_s)
        moving = bool(np.max(np.abs(axes)) > self.config.intervene_threshold)
        gripper_axis = 0.0
        if self._closed is not None and (moving or self._jaw_changed):
            gripper_axis = 1.0 if self._closed else -1.0
        self._jaw_changed = False
        held = frozenset({"intervene"}) if moving else frozenset()
        return DeviceReading(axes=axes, gripper_axis=gripper_axis, held=held)


def leader_fk(config: LeaderConfig) -> Callable[[np.ndarray], np.ndarray]:
    """Forward kinematics of the leader (its kinematics file, ``DiffIK.fk``)."""
    ik = DiffIK(config.kinematics_path, config.arm, DiffIKConfig.for_arm(config.arm, 1.0))
    return ik.fk


def so101_leader_teleop(
    config: LeaderConfig,
    map_config: TeleopMapConfig | None = None,
    now_fn: Callable[[], float] = time.monotonic,
) -> DeviceTeleop:
    """The leader as a :class:`robot_rl.core.protocols.Teleop` (Cartesian delta, (b)); not yet
    connected. The mapper's deadzone defaults to ``intervene_threshold``.

    Raises:
        CalibrationError: The leader's calibration file is missing or does not fit.
    """
    leader = LeaderArm(config)
    parser = LeaderParser(leader.calibration, leader_fk(config), config)
    mapper = TeleopMapper(map_config or TeleopMapConfig(deadzone=config.intervene_threshold))
    return DeviceTeleop(LeaderSource(leader, now_fn), parser, mapper, now_fn=now_fn)


__all__ = [
    "KIND",
    "JointMap",
    "JointMirror",
    "LeaderArm",
    "LeaderConfig",
    "LeaderFollowerMap",
    "LeaderParser",
    "LeaderReading",
    "LeaderSource",
    "so101_leader_teleop",
]
