"""Child process of ``test_arm_contract.py``: an SO-101's servo bus, simulated, on a pty.

    python tests/drivers/arm_contract_helpers.py so101-bus CALIBRATION_PATH

Writes a calibration for the simulated arm to ``CALIBRATION_PATH``, starts a
:class:`drivers.feetech.sim_bus.SimServoBus` (six STS3215 at the SO-101's home, the default
kinematic servo model: each servo moves to its goal at its speed limit, so the arm follows what
the node commands), prints ``port <pty path>`` on one line, then serves until SIGTERM.

The simulated bus is the only fake of the SO-101 graph (CI has no servos); it runs in its own
process so that the node, which opens the pty with pyserial as it would ``/dev/ttyACM0``, and
the bus never share a GIL, as with a real arm.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import numpy as np

from drivers.feetech import calibration as cal
from drivers.feetech.servo_model import KinematicServoConfig, KinematicServoModel
from drivers.feetech.sim_bus import SimServoBus
from robot_rl.core.arm import builtin_arm

SO101 = builtin_arm("so101")

ZERO_TICKS = 2048
"""Every arm joint's calibrated zero (mid-turn)."""
GRIPPER_TICKS = (2048, 3048)
"""The simulated jaw's range: open at 2048, closed at 3048."""


def so101_calibration() -> cal.ArmCalibration:
    """Zero at tick 2048 for every joint; the range is the description's limits widened by
    0.09 rad (the backend then applies the description's); the jaw on servo 6."""
    joints = {}
    for i, name in enumerate(SO101.joint_names):
        lo = SO101.joint_low_rad[i] - 0.09
        hi = SO101.joint_high_rad[i] + 0.09
        ticks = (
            ZERO_TICKS + int(np.ceil(lo / cal.RAD_PER_TICK)),
            ZERO_TICKS + int(np.floor(hi / cal.RAD_PER_TICK)),
        )
        joints[name] = cal.JointCalibration(i + 1, ZERO_TICKS, 1, *ticks)
    lo, hi = GRIPPER_TICKS
    return cal.ArmCalibration(joints, ("gripper", cal.JointCalibration(6, lo, 1, lo, hi)))


def home_ticks() -> tuple[float, ...]:
    """The six servo positions of the SO-101 at its description's home, jaw open."""
    arm = ZERO_TICKS + np.round(np.asarray(SO101.home_q_rad) / cal.RAD_PER_TICK)
    return (*(float(t) for t in arm), float(GRIPPER_TICKS[0]))


def serve_so101_bus(calibration_path: str) -> None:
    """Write the calibration, start the bus, print its port, serve until SIGTERM / SIGINT."""
    cal.save(so101_calibration(), Path(calibration_path))
    model = KinematicServoModel(6, KinematicServoConfig(initial_ticks=home_ticks()))
    bus = SimServoBus((1, 2, 3, 4, 5, 6), model=model).start()

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"port {bus.port}", flush=True)
    try:
        while True:
            signal.pause()
    finally:
        bus.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "so101-bus":
        sys.exit("usage: arm_contract_helpers.py so101-bus CALIBRATION_PATH")
    serve_so101_bus(sys.argv[2])
