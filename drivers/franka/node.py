"""The arm bridge node (``drivers.arm_bridge.node``) with the Franka FR3 backend.

    python -m drivers.franka.node --robot-ip 172.16.0.2 --ns arm
    python -m drivers.franka.node --robot-ip 127.0.0.1 --ns arm      # franka-sim
    python -m drivers.franka.node --ns arm --ros-args -p robot_ip:=172.16.0.2

Safety limits come from the read-only ROS 2 parameters of :mod:`drivers.arm_bridge.params`
(``launch/franka_realsense.yaml`` passes them; defaults: :class:`SafetyConfig`). An invalid value
exits with code 2 before the arm is connected.

Topics, services and the status JSON are the contract's (``drivers/CONTRACT.md``). Reflexes
are recovered by the bridge: the backend reports the error (``auto_recover=False``), the
bridge's next tick calls ``clear_error()`` (libfranka's automaticErrorRecovery), counts it in
``status.recoveries`` and keeps the message in ``status.last_error``; the arm then holds where
the recovery left it until the next target. The 1 kHz torque loop runs in a child process
(:mod:`drivers.franka.loop`), so the executor threads here cannot starve it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import rclpy

from drivers.arm_bridge.core import BridgeConfig
from drivers.arm_bridge.node import ArmBridgeNode, exit_bad_parameter, spin_bridge
from drivers.arm_bridge.params import BridgeParamError
from drivers.franka.backend import FrankaBackend, FrankaConfig
from drivers.franka.gripper import GripperConfig
from robot_rl.core.safety import SafetyConfig


def build_backend(robot_ip: str, gripper: bool) -> FrankaBackend:
    """The Franka backend as the node runs it (recovery is left to the bridge)."""
    return FrankaBackend(
        FrankaConfig(
            robot_ip=robot_ip,
            auto_recover=False,
            gripper=GripperConfig() if gripper else None,
        )
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point: connect (configure), activate, spin until Ctrl-C / SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--robot-ip", default="127.0.0.1", help="FCI address of the FR3")
    parser.add_argument("--ns", default="arm", help="ROS namespace of the arm")
    parser.add_argument("--no-gripper", action="store_true", help="the arm has no Franka Hand")
    args, ros_args = parser.parse_known_args(argv)
    rclpy.init(args=ros_args)
    backend = build_backend(args.robot_ip, gripper=not args.no_gripper)
    try:
        node = ArmBridgeNode(backend, BridgeConfig(SafetyConfig(), auto_recover=True), args.ns)
    except BridgeParamError as e:
        exit_bad_parameter("arm_bridge", e)  # before configure: the arm was never connected
    # A launch file may give the address as ROS parameter ``robot_ip`` (it wins over the flag).
    robot_ip = str(node.declare_parameter("robot_ip", args.robot_ip).value)
    backend.config = replace(backend.config, robot_ip=robot_ip)
    code = spin_bridge(node, f"cannot connect to the FR3 at {robot_ip}")
    sys.exit(code)


if __name__ == "__main__":
    main()
