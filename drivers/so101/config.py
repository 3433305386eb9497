"""How the SO-101 backend reaches and drives the arm: :class:`So101Config`, the SO-101's default
safety limits (:data:`SO101_SAFETY`) and where its kinematics file is.

The kinematics are the committed MJCF ``sim/arms/models/so101.xml`` (generated from the public
SO-ARM100 URDF by :mod:`sim.arms.so101`; site ``tcp``), read as a file: ``drivers`` never imports
``sim``. A setup may name another file (``arm.kinematics``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drivers.feetech.calibration import ArmCalibration
from robot_rl.core.arm import ArmDescription, builtin_arm
from robot_rl.core.safety import SafetyConfig

SO101 = builtin_arm("so101")

SO101_KINEMATICS = Path(__file__).resolve().parents[2] / "sim" / "arms" / "models" / "so101.xml"
"""The SO-101's kinematics file in this repository (MJCF with the ``tcp`` site)."""

SO101_HOME_QUAT = (0.0, math.sqrt(0.5), math.sqrt(0.5), 0.0)
"""TCP orientation (w, x, y, z) at the SO-101's home (``robot_rl/arms/so101.yaml``): jaws
pointing down, the jaw closing fore-aft (``sim/arms/so101.py``)."""

SO101_SAFETY = SafetyConfig(
    workspace_low_m=(0.08, -0.22, 0.02),
    workspace_high_m=(0.36, 0.22, 0.30),
    orientation_center_quat=SO101_HOME_QUAT,
    orientation_max_rad=math.pi / 2,
    max_step_m=0.03,
    max_step_rad=0.3,
    watchdog_timeout_s=0.5,
)
"""The SO-101 bridge's default limits (the node's read-only ROS parameters override them): a
tabletop box in front of the base (home tcp (0.185, 0, 0.108) m; the arm reaches about 0.4 m),
2 cm above the base's bottom plane; a 90 deg cone around the home orientation, wide because five
joints cannot hold the tool's yaw (it turns with the pan joint); 3 cm per step. The FR3-sized
:class:`SafetyConfig` defaults would hold the SO-101 outside its box."""


class So101Error(RuntimeError):
    """The SO-101 cannot do what was asked: a servo missing or silent, a calibration that does
    not fit, a move that did not arrive. The message names the servo or joint and the fix."""


@dataclass(frozen=True)
class So101Config:
    """How to reach and drive an SO-101 (six STS3215 on one serial bus).

    Attributes:
        port: Serial device of the arm's bus board, e.g. ``/dev/ttyACM0``.
        calibration: The arm's calibration file (``robot-rl arm calibrate``).
        arm: The arm description (joint names, limits, speeds, home, tool frame).
        kinematics: URDF or MJCF of the arm; None: ``arm.kinematics``, else
            :data:`SO101_KINEMATICS`.
        bridge_hz: The backend's tick: one sync read, one IK step, one sync write, Hz.
        speed_scale: Fraction of ``arm.joint_vel_max_rad_s`` a tick may use, in (0, 1]: every
            goal is within ``speed_scale * joint_vel_max_rad_s / bridge_hz`` of the previous one.
        move_speed_rad_s: Joint speed bound of a :meth:`start_move` (resets), rad/s.
        move_tolerance_m: A move has arrived when the TCP is this close to the goal, metres ...
        move_tolerance_rad: ... every joint this close to its goal, rad ...
        gripper_tolerance: ... and the jaw within this closure of its goal (or stopped on an
            object).
        move_timeout_s: A move not arrived this long after its start raises, s.
        gripper_speed_per_s: Largest change of the jaw's closure goal per second (1/s).
        limit_margin_rad: ``connect`` refuses a joint that reads further than this outside its
            calibrated range (a wrong calibration file, or an arm moved past it), rad.
        torque_off_on_disconnect: Switch the servos' torque off at ``disconnect``. Default
            False: the SO-101 has no brakes, so torque off drops the arm onto whatever is below
            it; the servos keep holding their last goal until a person supports the arm and
            powers it off.
        baudrate: Bus speed, bits/s (STS3215 factory setting: 1 Mbaud).
        bus_timeout_s: Longest wait for a servo's answer, s.
        bus_retries: Repeats of a failed request before it is an error.

    The servo ids come from the calibration file (SO-101: 1..5 the arm joints in chain order,
    6 the jaw), so that one file describes the arm.
    """

    port: str
    calibration: str | Path
    arm: ArmDescription = SO101
    kinematics: str | Path | None = None
    bridge_hz: float = 50.0
    speed_scale: float = 1.0
    move_speed_rad_s: float = 1.0
    move_tolerance_m: float = 0.005
    move_tolerance_rad: float = 0.05
    gripper_tolerance: float = 0.05
    move_timeout_s: float = 10.0
    gripper_speed_per_s: float = 2.0
    limit_margin_rad: float = 0.1
    torque_off_on_disconnect: bool = False
    baudrate: int = 1_000_000
    bus_timeout_s: float = 0.05
    bus_retries: int = 2

    def __post_init__(self) -> None:
        if not self.port:
            raise ValueError("port is empty; give the arm's serial device, e.g. /dev/ttyACM0")
        if not str(self.calibration):
            raise ValueError("calibration is empty; give the file from robot-rl arm calibrate")
        if not 1.0 <= self.bridge_hz <= 500.0:
            raise ValueError(f"bridge_hz {self.bridge_hz} must be in [1, 500] (default 50)")
        if not 0 < self.speed_scale <= 1:
            raise ValueError(f"speed_scale {self.speed_scale} must be in (0, 1]")
        for name in (
            "move_speed_rad_s",
            "move_tolerance_m",
            "move_tolerance_rad",
            "gripper_tolerance",
            "move_timeout_s",
            "gripper_speed_per_s",
            "bus_timeout_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.limit_margin_rad < 0 or self.bus_retries < 0:
            raise ValueError("limit_margin_rad and bus_retries must be >= 0")

    @property
    def kinematics_path(self) -> Path:
        """The kinematics file in force (see ``kinematics``)."""
        return Path(self.kinematics or self.arm.kinematics or SO101_KINEMATICS)

    @property
    def tick_s(self) -> float:
        """One backend tick, s."""
        return 1.0 / self.bridge_hz


def calibrated_arm(arm: ArmDescription, calibration: ArmCalibration) -> ArmDescription:
    """``arm`` with its joint limits narrowed to the calibrated ranges (the servos' recorded
    travel, which the description's limits may exceed on a given arm) and its home clipped into
    them: what the IK and the goal funnel use.

    Raises:
        So101Error: A joint's calibrated range misses the description's limits.
    """
    joints = calibration.joints.values()
    ends = np.stack(
        [
            calibration.ticks_to_rad(np.array([j.min_ticks for j in joints])),
            calibration.ticks_to_rad(np.array([j.max_ticks for j in joints])),
        ]
    )
    cal_low, cal_high = ends.min(axis=0), ends.max(axis=0)
    low = np.maximum(np.asarray(arm.joint_low_rad), cal_low)
    high = np.minimum(np.asarray(arm.joint_high_rad), cal_high)
    if np.any(low >= high):
        i = int(np.flatnonzero(low >= high)[0])
        raise So101Error(
            f"joint {arm.joint_names[i]!r}: its calibrated range [{cal_low[i]:.3f}, "
            f"{cal_high[i]:.3f}] rad misses the description's limits [{arm.joint_low_rad[i]:.3f}, "
            f"{arm.joint_high_rad[i]:.3f}]; recalibrate it"
        )
    home = np.clip(np.asarray(arm.home_q_rad), low, high)
    return arm.with_overrides(
        joint_low_rad=tuple(low), joint_high_rad=tuple(high), home_q_rad=tuple(home)
    )
