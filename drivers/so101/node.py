"""The arm bridge node (``drivers.arm_bridge.node``) with the SO-101 backend.

    python -m drivers.so101.node --port /dev/ttyACM0 --calibration so101.json --ns arm
    python -m drivers.so101.node --port /dev/ttyACM0 --calibration so101.json --ns arm \
        --ros-args -p max_step_m:=0.02

The contract side carries the SO-101's five joints (``robot_rl/arms/so101.yaml``): names on
``joint_states``, ``joint_pos[5]`` in ``robot_state``, ``status.arm``. Safety limits are the
read-only ROS 2 parameters of :mod:`drivers.arm_bridge.params`, defaulting to the SO-101's box
(:data:`drivers.so101.config.SO101_SAFETY`; the FR3-sized defaults would not contain it); the
``reset_pose`` parameter defaults to the TCP pose at the description's home. An invalid value
exits with code 2 before the bus is opened; a failed connect (missing servo or calibration,
named in the log) exits with code 1.

Bus errors (a silent or garbled servo) are not recovered automatically by default
(``auto_recover`` off): the backend holds, ``status.last_error`` names the servo, and the
``clear_error`` service (e.g. from ``robot-rl record``) resumes once it answers. A loose cable
that comes and goes should stop the arm until a person has looked, not resume under a running
policy (the actor waits for the clear up to its ``sensor_fault_timeout_s``). ``--auto-recover``
resumes at the bridge's next tick once every servo answers: for the twin's simulated bus
(``robot-rl rehearse``), whose missed answer is its process not scheduled in time on a loaded
machine, not a cable.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import rclpy

from drivers.arm_bridge.core import BridgeConfig
from drivers.arm_bridge.node import (
    RESET_POSE_PARAM,
    ArmBridgeNode,
    exit_bad_parameter,
    spin_bridge,
)
from drivers.arm_bridge.params import BridgeParamError
from drivers.so101.backend import So101Backend
from drivers.so101.config import SO101_SAFETY, So101Config


def build_backend(
    port: str, calibration: str, bridge_hz: float = 50.0, torque_off: bool = False
) -> So101Backend:
    """The SO-101 backend as the node runs it."""
    return So101Backend(
        So101Config(
            port=port,
            calibration=calibration,
            bridge_hz=bridge_hz,
            torque_off_on_disconnect=torque_off,
        )
    )


def wait_for_files(paths: list[str], timeout_s: float, poll_s: float = 0.05) -> list[str]:
    """Wait until every path exists (a serial device plugged in after the node started, a
    twin's simulated bus still starting), up to ``timeout_s``; returns the missing ones."""
    end = time.monotonic() + timeout_s
    while True:
        missing = [p for p in paths if not Path(p).exists()]
        if not missing or time.monotonic() >= end:
            return missing
        time.sleep(poll_s)  # poll interval of the wait


def main(argv: list[str] | None = None) -> None:
    """Entry point: connect (configure), activate, spin until Ctrl-C / SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", default="/dev/ttyACM0", help="serial device of the arm's bus")
    parser.add_argument("--calibration", required=True, help="file from robot-rl arm calibrate")
    parser.add_argument("--ns", default="arm", help="ROS namespace of the arm")
    parser.add_argument("--bridge-hz", type=float, default=50.0, help="backend tick rate (Hz)")
    parser.add_argument(
        "--auto-recover",
        action="store_true",
        help="clear a bus error at the next tick once every servo answers (the twin's simulated "
        "bus; on a real arm a person should look first: off)",
    )
    parser.add_argument(
        "--torque-off-on-exit",
        action="store_true",
        help="switch the servos off at exit (the arm then falls: support it first)",
    )
    parser.add_argument(
        "--wait-for-port-s",
        type=float,
        default=0.0,
        help="wait this long for the port and the calibration file to appear before "
        "connecting (0: they must exist at start)",
    )
    args, ros_args = parser.parse_known_args(argv)
    missing = wait_for_files([args.port, args.calibration], args.wait_for_port_s)
    if missing and args.wait_for_port_s > 0:
        print(
            f"so101 node: {missing} did not appear within {args.wait_for_port_s:g} s",
            file=sys.stderr,
        )
        sys.exit(1)
    backend = build_backend(args.port, args.calibration, args.bridge_hz, args.torque_off_on_exit)
    rclpy.init(args=ros_args)
    try:
        bridge = BridgeConfig(SO101_SAFETY, auto_recover=args.auto_recover)
        node = ArmBridgeNode(backend, bridge, args.ns, arm=backend.config.arm)
    except BridgeParamError as e:
        exit_bad_parameter("arm_bridge", e)  # before configure: the bus was never opened
    node.declare_parameter(RESET_POSE_PARAM, [float(v) for v in backend.home_pose()])
    code = spin_bridge(node, f"cannot connect to the SO-101 on {args.port}")
    sys.exit(code)


if __name__ == "__main__":
    main()
