"""How the generic ROS 2 backend reaches a vendor driver: :class:`Ros2ArmConfig`.

Topic defaults are a UR's under ros2_control (Universal_Robots_ROS2_Driver): ``/joint_states``
(joint_state_broadcaster), ``/scaled_joint_trajectory_controller/joint_trajectory``,
``/forward_position_controller/commands``, ``/tcp_pose_broadcaster/pose``; the Cartesian target
topic defaults to the FZI cartesian_controllers' ``/cartesian_compliance_controller/target_frame``.
Every name is absolute or relative to the backend's own node (in the root namespace).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from robot_rl.core.arm import ArmDescription

MODES = ("joint", "cartesian")
"""``joint``: IK on our side, joint commands to a ros2_control joint controller; ``cartesian``:
the TCP target to the driver's Cartesian controller."""
JOINT_INTERFACES = ("trajectory", "position")
"""``trajectory``: ``joint_trajectory_controller`` (``JointTrajectory``, one point);
``position``: a forward position controller (``Float64MultiArray`` in the arm's joint order)."""

_TOPIC = re.compile(r"^/?[A-Za-z_~][A-Za-z0-9_/]*$")


@dataclass(frozen=True)
class Ros2ArmConfig:
    """The generic ROS 2 backend's setup (units in names; checked in ``__post_init__``).

    Attributes:
        arm: The arm: joint names as the driver publishes them, limits, speeds, tool frame.
        mode: One of :data:`MODES`.
        kinematics: URDF or MJCF of the arm for IK and FK (None: ``arm.kinematics``). Needed in
            ``joint`` mode, and in ``cartesian`` mode unless ``tcp_pose_topic`` is set.
        joint_states_topic: ``sensor_msgs/JointState`` of the arm (other joints may be in it).
        tcp_pose_topic: ``PoseStamped`` of the TCP in ``arm.base_frame`` published by the driver
            (None: FK of the joint states).
        wrench_topic: ``WrenchStamped`` at the TCP in ``arm.base_frame`` (None: zero wrench).
        joint_interface: One of :data:`JOINT_INTERFACES` (``joint`` mode).
        trajectory_topic: The joint_trajectory_controller's ``joint_trajectory`` topic.
        position_topic: The forward position controller's ``commands`` topic.
        target_pose_topic: ``cartesian`` mode: the Cartesian controller's target topic.
        gripper_command_topic: ``std_msgs/Float64`` gripper command in driver units (None: no
            gripper command).
        gripper_state_topic: ``sensor_msgs/JointState`` with the gripper joint (None: the
            closure reads the last command).
        gripper_joint: Name of the gripper joint in that message (None: its first joint).
        gripper_offset: Driver value at closure 0 (open): ``driver = offset + scale * closure``.
        gripper_scale: Driver units per unit of closure (negative: the driver value falls as it
            closes, e.g. an opening width in metres).
        bridge_hz: Backend tick: one IK step (``joint``) and one command stream message, Hz.
        trajectory_horizon_ticks: ``time_from_start`` of the trajectory point, in ticks (a small
            multiple of the tick: the controller interpolates to the point over it).
        max_state_age_s: Joint states (and the TCP pose topic) older than this are an error.
        max_tracking_error_rad: ``joint`` mode: a joint this far from our last command means the
            arm was moved or stopped by something else (freedrive, a protective stop, the twin's
            scene reset): the commands restart from the measured joints and hold there (counted
            in ``status.backend.rebases``).
        speed_scale: Fraction of ``arm.joint_vel_max_rad_s`` a tick may use while tracking.
        move_speed_scale: ``start_move`` in ``joint`` mode: fraction of the joint speeds.
        move_speed_m_s: ``start_move``: speed of the target along the straight line to the
            goal, m/s (both modes).
        move_speed_rad_s: ... and its rotation speed, rad/s.
        move_tolerance_m: A move is done when the TCP is this close to the goal, m ...
        move_tolerance_rad: ... and this close in rotation, rad.
        move_timeout_s: ``move_done`` raises after this long, s.
        gripper_tolerance: The gripper has arrived when its closure is this close to the goal;
            it also counts as arrived after ``gripper_timeout_s`` (closed on an object).
        gripper_timeout_s: See ``gripper_tolerance``, s.
        connect_timeout_s: ``connect`` waits this long for the first complete joint state, s.
        node_name: Name of the backend's own rclpy node.
    """

    arm: ArmDescription
    mode: str = "joint"
    kinematics: str | None = None
    joint_states_topic: str = "/joint_states"
    tcp_pose_topic: str | None = None
    wrench_topic: str | None = None
    joint_interface: str = "trajectory"
    trajectory_topic: str = "/scaled_joint_trajectory_controller/joint_trajectory"
    position_topic: str = "/forward_position_controller/commands"
    target_pose_topic: str = "/cartesian_compliance_controller/target_frame"
    gripper_command_topic: str | None = None
    gripper_state_topic: str | None = None
    gripper_joint: str | None = None
    gripper_offset: float = 0.0
    gripper_scale: float = 1.0
    bridge_hz: float = 100.0
    trajectory_horizon_ticks: float = 3.0
    max_state_age_s: float = 0.1
    max_tracking_error_rad: float = 0.3
    speed_scale: float = 1.0
    move_speed_scale: float = 0.25
    move_speed_m_s: float = 0.15
    move_speed_rad_s: float = 0.6
    move_tolerance_m: float = 0.005
    move_tolerance_rad: float = 0.03
    move_timeout_s: float = 20.0
    gripper_tolerance: float = 0.05
    gripper_timeout_s: float = 2.0
    connect_timeout_s: float = 10.0
    node_name: str = "ros2_arm_backend"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}: choose one of {MODES}")
        if self.joint_interface not in JOINT_INTERFACES:
            raise ValueError(
                f"joint_interface {self.joint_interface!r}: choose one of {JOINT_INTERFACES}"
            )
        for name in (
            "joint_states_topic",
            "tcp_pose_topic",
            "wrench_topic",
            "trajectory_topic",
            "position_topic",
            "target_pose_topic",
            "gripper_command_topic",
            "gripper_state_topic",
        ):
            topic = getattr(self, name)
            if topic is not None and not _TOPIC.match(topic):
                raise ValueError(
                    f"{name} {topic!r} is not a ROS 2 topic name; use letters, digits, _ and /, "
                    "e.g. '/joint_states'"
                )
        if not 0 < self.bridge_hz <= 1000:
            raise ValueError(f"bridge_hz {self.bridge_hz} must be in (0, 1000]; 100 is usual")
        if not 1.0 <= self.trajectory_horizon_ticks <= 50.0:
            raise ValueError(
                f"trajectory_horizon_ticks {self.trajectory_horizon_ticks} must be in [1, 50] "
                "(a small multiple of the tick, e.g. 3)"
            )
        if not self.max_state_age_s >= 2.0 / self.bridge_hz:
            raise ValueError(
                f"max_state_age_s {self.max_state_age_s} must be at least two ticks "
                f"({2.0 / self.bridge_hz:g} s at bridge_hz {self.bridge_hz})"
            )
        for name in ("speed_scale", "move_speed_scale"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} {getattr(self, name)} must be in (0, 1]")
        for name in (
            "max_tracking_error_rad",
            "move_speed_m_s",
            "move_speed_rad_s",
            "move_tolerance_m",
            "move_tolerance_rad",
            "move_timeout_s",
            "gripper_tolerance",
            "gripper_timeout_s",
            "connect_timeout_s",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value}")
        if not (math.isfinite(self.gripper_offset) and math.isfinite(self.gripper_scale)):
            raise ValueError("gripper_offset and gripper_scale must be finite")
        if self.gripper_scale == 0:
            raise ValueError(
                "gripper_scale is 0: closure 0..1 would map to one driver value; give the "
                "driver's closed minus open value (e.g. 0.8 for a Robotiq 2F-85 knuckle in rad)"
            )
        needs_kin = self.mode == "joint" or self.tcp_pose_topic is None
        if needs_kin and self.kinematics_path is None:
            why = "joint mode solves IK" if self.mode == "joint" else "without tcp_pose_topic"
            raise ValueError(
                f"arm {self.arm.name!r}: {why}, which needs the arm's kinematics: set kinematics "
                "(--kinematics PATH, a URDF or MJCF with the arm's joints and tool frame)"
            )
        path = self.kinematics_path
        if path is not None and not Path(path).is_file():
            raise ValueError(f"kinematics file {path} does not exist; give the arm's URDF or MJCF")

    @property
    def kinematics_path(self) -> str | None:
        """The kinematics file in force (``kinematics``, else the arm's), or None."""
        return self.kinematics or self.arm.kinematics

    @property
    def tick_s(self) -> float:
        """The backend tick, s."""
        return 1.0 / self.bridge_hz

    def closure_to_driver(self, closure: float) -> float:
        """Gripper closure in [0, 1] (clipped) -> the driver's command value."""
        return self.gripper_offset + self.gripper_scale * min(max(float(closure), 0.0), 1.0)

    def driver_to_closure(self, value: float) -> float:
        """The driver's gripper position -> closure in [0, 1] (clipped)."""
        return min(max((float(value) - self.gripper_offset) / self.gripper_scale, 0.0), 1.0)
