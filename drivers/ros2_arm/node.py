"""The arm bridge node (``drivers.arm_bridge.node``) with the generic ROS 2 backend.

    python -m drivers.ros2_arm.node --mode joint --arm ur5e --ns arm
    python -m drivers.ros2_arm.node --mode joint --arm ur5e --joint-interface position
    python -m drivers.ros2_arm.node --mode joint --setup my_arm.yaml   # the setup's arm:
    python -m drivers.ros2_arm.node --mode cartesian --arm ur5e --tcp-pose-topic \
        /tcp_pose_broadcaster/pose --ros-args -p workspace_high_m:=[0.7,0.28,0.35]

The contract side (``/<ns>/target_pose``, ``robot_state``, ``joint_states`` with the arm's joint
names, ``status`` with ``status.arm`` ...) is the bridge's (``drivers/CONTRACT.md``); safety
limits are the bridge's read-only ROS 2 parameters (defaults :class:`SafetyConfig`; an invalid
value exits with code 2 before the driver is contacted). The driver side is the backend's
(:mod:`drivers.ros2_arm.backend`): topic defaults are a UR's under ros2_control
(``/joint_states``, ``/scaled_joint_trajectory_controller/joint_trajectory``,
``/forward_position_controller/commands``, the Cartesian target
``/cartesian_compliance_controller/target_frame``), each a flag.

Backend errors (stale joint states, a joint outside its limits, the arm far from our command)
are recovered by the bridge's tick (``auto_recover``: ``clear_error`` succeeds once fresh data is
back) and counted in ``status.recoveries``. Kinematics: ``--kinematics PATH`` (URDF or MJCF),
else the arm description's, else for a built-in kind the repository's model
``sim/arms/models/<kind>.xml`` (a file, not an import). Exit code 1: the driver did not answer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import rclpy

from drivers.arm_bridge.core import BridgeConfig
from drivers.arm_bridge.node import ArmBridgeNode, exit_bad_parameter, spin_bridge
from drivers.arm_bridge.params import BridgeParamError
from drivers.ros2_arm.backend import Ros2ArmBackend
from drivers.ros2_arm.config import JOINT_INTERFACES, MODES, Ros2ArmConfig
from drivers.setup import load_setup
from robot_rl.core.arm import ArmDescription, builtin_arm
from robot_rl.core.safety import SafetyConfig

REPO_MODELS = Path(__file__).resolve().parents[2] / "sim" / "arms" / "models"
"""The repository's arm model files (built-in kinds' kinematics)."""


def default_kinematics(arm: ArmDescription) -> str | None:
    """The arm's own kinematics file, else the repository's model of a built-in kind."""
    if arm.kinematics:
        return arm.kinematics
    path = REPO_MODELS / f"{arm.name}.xml"
    return str(path) if path.is_file() else None


_TEXT_FLAGS = (
    "joint_states_topic",
    "tcp_pose_topic",
    "wrench_topic",
    "trajectory_topic",
    "position_topic",
    "target_pose_topic",
    "gripper_command_topic",
    "gripper_state_topic",
    "gripper_joint",
)
"""Ros2ArmConfig fields given as text flags (``--joint-states-topic`` ...)."""
_NUMBER_FLAGS = (
    "gripper_offset",
    "gripper_scale",
    "bridge_hz",
    "trajectory_horizon_ticks",
    "max_state_age_s",
    "max_tracking_error_rad",
    "connect_timeout_s",
)
"""Ros2ArmConfig fields given as number flags."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    d = Ros2ArmConfig.__dataclass_fields__
    p.add_argument("--mode", choices=MODES, required=True, help="joint (IK here) or cartesian")
    p.add_argument("--arm", default="ur5e", help="built-in arm kind (robot_rl.core.arm)")
    p.add_argument(
        "--setup",
        default=None,
        help="a setup YAML whose arm: describes the arm (overrides --arm; your own arm)",
    )
    p.add_argument("--kinematics", default=None, help="URDF or MJCF of the arm (IK, FK)")
    p.add_argument("--ns", default="arm", help="ROS namespace of the contract side")
    p.add_argument("--joint-interface", choices=JOINT_INTERFACES, default="trajectory")
    for flag in _TEXT_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), default=d[flag].default)
    for flag in _NUMBER_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), type=float, default=d[flag].default)
    return p


def config_from_args(args: argparse.Namespace) -> Ros2ArmConfig:
    """The backend's config from the parsed flags (ValueError says what to change)."""
    arm = load_setup(args.setup).arm if args.setup else builtin_arm(args.arm)
    kinematics = args.kinematics or default_kinematics(arm)
    backend_kind = "ros2_joint" if args.mode == "joint" else "ros2_cartesian"
    return Ros2ArmConfig(
        arm=arm.with_overrides(backend=backend_kind),
        mode=args.mode,
        kinematics=kinematics,
        joint_interface=args.joint_interface,
        **{k: getattr(args, k) for k in _TEXT_FLAGS + _NUMBER_FLAGS},
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point: connect (configure), activate, spin until Ctrl-C / SIGTERM."""
    args, ros_args = build_parser().parse_known_args(argv)
    try:
        config = config_from_args(args)
        backend = Ros2ArmBackend(config)
    except ValueError as e:  # a bad flag or kinematics file: say which, exit 2
        print(f"ros2_arm: {e}", file=sys.stderr)
        raise SystemExit(2) from e
    rclpy.init(args=ros_args)
    try:
        node = ArmBridgeNode(
            backend, BridgeConfig(SafetyConfig(), auto_recover=True), args.ns, arm=config.arm
        )
    except BridgeParamError as e:
        exit_bad_parameter("arm_bridge", e)  # before configure: the driver was never contacted
    code = spin_bridge(
        node,
        f"cannot reach the {config.arm.name} driver",
        ready=f"arm bridge ready: {config.arm.name}, {config.mode} mode, ns=/{args.ns}",
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
