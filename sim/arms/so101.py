"""A 5-DoF + gripper low-cost arm with SO-101 (LeRobot / TheRobotStudio SO-ARM101) kinematics.

Source of the kinematic facts (restated, nothing copied): TheRobotStudio/SO-ARM100 on GitHub,
``Simulation/SO101/so101_new_calib.urdf`` (generated with onshape-to-robot from the Onshape CAD;
"new calibration": each joint's zero is the middle of its range). From it: the joint origins
(below, metres and URDF roll-pitch-yaw), the joint limits and the link masses. The source writes
right angles as 1.5708 / 3.14159 and carries ~1e-16 CAD noise; we take exact multiples of pi / 2
and zeros. The tcp is that file's ``gripperframe`` point between the jaws, re-oriented so that z
is the approach direction (see :data:`TCP_IN_GRIPPER`).

Actuators: Feetech STS3215 servos (12 V, 1:345 gear): ~30 kg cm = 2.9 N m stall torque and
45 rpm = 4.7 rad/s no-load speed (manufacturer figures as tested by Robonine and reported in
SO-ARM100 issue #134); we give every joint 2.9 N m and 4.7 rad/s. Armature 0.028 kg m^2 and
damping 0.60 N m s / rad are the ``sts3215`` class of the same repository's
``Simulation/SO101/joints_properties.xml`` (after Open Duck Mini).

Frames: our base link frame has z up along the pan axis, its origin where that axis meets the
base's bottom plane, and +x forward (where the arm reaches at pan = 0, like the other arms). It is
the source's ``base`` frame turned +90 deg about z and shifted so that the pan axis passes
through the origin (:data:`SOURCE_BASE_IN_BASE`); in the source, the arm reaches along -y. The
gripper jaw (joint ``gripper``) is a child of the last arm link ``gripper``; it is not an IK joint.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.arm import builtin_arm
from sim.arms.chain import ArmChain, JointSpec, Origin
from sim.arms.geometry import mat_to_rpy

SO101 = builtin_arm("so101")

PI = np.pi
HALF_PI = np.pi / 2

SO101_JOINT_NAMES = SO101.joint_names
"""From the built-in description ``robot_rl/arms/so101.yaml``, as are the limits, speed and
home below."""
SO101_LINK_NAMES = ("shoulder", "upper_arm", "lower_arm", "wrist", "gripper")
SOURCE_SHOULDER_PAN_ORIGIN = Origin(
    xyz_m=(0.0207909, -0.0230745, 0.0948817), rpy_rad=(PI, 0.0, HALF_PI)
)
"""The pan joint frame in the source's ``base`` link frame."""
SOURCE_BASE_IN_BASE = Origin(xyz_m=(-0.0230745, -0.0207909, 0.0), rpy_rad=(0.0, 0.0, HALF_PI))
"""The source's ``base`` link frame in ours: turned +90 deg about z, the pan axis at x = y = 0."""


def _in_base(origin: Origin) -> Origin:
    T = SOURCE_BASE_IN_BASE.matrix() @ origin.matrix()
    xyz = tuple(float(c) if abs(c) > 1e-12 else 0.0 for c in T[:3, 3])
    return Origin(xyz_m=xyz, rpy_rad=tuple(float(c) for c in mat_to_rpy(T[:3, :3])))


SO101_JOINT_ORIGINS = (
    _in_base(SOURCE_SHOULDER_PAN_ORIGIN),
    Origin(xyz_m=(-0.0303992, -0.0182778, -0.0542), rpy_rad=(-HALF_PI, -HALF_PI, 0.0)),
    Origin(xyz_m=(-0.11257, -0.028, 0.0), rpy_rad=(0.0, 0.0, HALF_PI)),
    Origin(xyz_m=(-0.1349, 0.0052, 0.0), rpy_rad=(0.0, 0.0, -HALF_PI)),
    Origin(xyz_m=(0.0, -0.0611, 0.0181), rpy_rad=(HALF_PI, 0.0, PI)),
)
"""Joint frames in their parent link (base, shoulder, upper_arm, lower_arm, wrist), from the
source URDF (the first one moved into our base frame: (0, 0, 0.0948817) m, rpy (pi, 0, pi));
every joint turns about its frame's z axis."""
SO101_JOINT_LIMIT_RAD = tuple(zip(SO101.joint_low_rad, SO101.joint_high_rad, strict=True))
SO101_LINK_MASSES_KG = (0.100, 0.103, 0.104, 0.079, 0.087)
SO101_BASE_MASS_KG = 0.147
SO101_LINK_RADII_M = (0.022, 0.018, 0.018, 0.016, 0.014)
"""Radii of the primitive link capsules, metres (rough outer sizes, not from the source)."""
SO101_SEGMENT_ENDS_M = (
    (0.0, 0.0, -0.0542),
    None,
    None,
    (0.0, -0.0611, 0.0181),
    (-0.025, 0.0, -0.085),
)
"""Capsule ends in each link frame, metres (None: the next joint's origin). The shoulder's
capsule runs down the pan axis to the shoulder-lift height; the gripper's follows the fixed jaw
to its tip."""

JAW_ORIGIN = Origin(xyz_m=(0.0202, 0.0188, -0.0234), rpy_rad=(HALF_PI, 0.0, 0.0))
"""Jaw joint frame in the ``gripper`` link (turns about its z axis), from the source URDF."""
JAW_LIMIT_RAD = (-np.radians(10.0), np.radians(100.0))
JAW_MASS_KG = 0.012
JAW_SEGMENT_M = ((0.0, 0.0, 0.019), (0.0, -0.065, 0.019))
"""The moving jaw's capsule in its frame, metres (it reaches towards the tcp)."""

GRIPPERFRAME_XYZ_M = (-0.0079, -0.000218121, -0.0981274)
"""The source's ``gripperframe`` point (between the jaws) in the ``gripper`` link, metres."""
TCP_IN_GRIPPER = Origin(xyz_m=GRIPPERFRAME_XYZ_M, quat_wxyz=(0.0, np.sqrt(0.5), np.sqrt(0.5), 0.0))
"""tcp in the ``gripper`` link: z = -z_gripper (the approach direction, away from the wrist),
y = x_gripper (the direction in which the jaw closes), x = y_gripper. (The source's
``gripperframe`` has the same point with z along x_gripper.)"""

STS3215_EFFORT_NM = 2.9
STS3215_VELOCITY_RAD_S = SO101.joint_vel_max_rad_s[0]
STS3215_ARMATURE_KG_M2 = 0.028
STS3215_DAMPING_NM_S_PER_RAD = 0.60

SO101_HOME_RAD = SO101.home_q_rad
"""Home: the mid-range pose with the wrist flexed 90 deg: the jaws point straight down, tcp at
about (0.185, 0.000, 0.108) m, tcp x along base +y, y along base +x (the jaw closes fore-aft)."""
SO101_GRIPPER_HOME_RAD = 0.0
"""Jaw at the source's zero, rad: its range is -10 .. 100 deg, so zero is near one end of the
travel (presumably about closed; the source does not say)."""


def _servo_joint(
    name: str,
    link: str,
    origin: Origin,
    limits_rad: tuple[float, float],
    mass_kg: float,
    radius_m: float,
    geom_to_m: tuple[float, float, float] | None,
    geom_from_m: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> JointSpec:
    """A joint driven by an STS3215 servo (effort, velocity, armature, damping)."""
    return JointSpec(
        name=name,
        link_name=link,
        origin=origin,
        lower_rad=float(limits_rad[0]),
        upper_rad=float(limits_rad[1]),
        velocity_rad_s=STS3215_VELOCITY_RAD_S,
        effort_nm=STS3215_EFFORT_NM,
        mass_kg=mass_kg,
        radius_m=radius_m,
        geom_from_m=geom_from_m,
        geom_to_m=geom_to_m,
        armature_kg_m2=STS3215_ARMATURE_KG_M2,
        damping_nm_s_per_rad=STS3215_DAMPING_NM_S_PER_RAD,
    )


def so101_chain() -> ArmChain:
    """The SO-101 as an :class:`~sim.arms.chain.ArmChain`, with its jaw as the gripper joint.

    The flange is the ``gripper`` link frame itself (the wrist-roll output; the gripper is part
    of the arm), and the tcp is :data:`TCP_IN_GRIPPER`.
    """
    joints = tuple(
        _servo_joint(
            SO101_JOINT_NAMES[i],
            SO101_LINK_NAMES[i],
            SO101_JOINT_ORIGINS[i],
            SO101_JOINT_LIMIT_RAD[i],
            mass_kg=SO101_LINK_MASSES_KG[i],
            radius_m=SO101_LINK_RADII_M[i],
            geom_to_m=SO101_SEGMENT_ENDS_M[i],
        )
        for i in range(5)
    )
    jaw = _servo_joint(
        "gripper",
        "moving_jaw",
        JAW_ORIGIN,
        JAW_LIMIT_RAD,
        mass_kg=JAW_MASS_KG,
        radius_m=0.008,
        geom_from_m=JAW_SEGMENT_M[0],
        geom_to_m=JAW_SEGMENT_M[1],
    )
    return ArmChain(
        name="so101",
        base_link="base",
        joints=joints,
        flange=Origin(),
        tcp=TCP_IN_GRIPPER,
        home_rad=SO101_HOME_RAD,
        base_mass_kg=SO101_BASE_MASS_KG,
        base_radius_m=0.045,
        base_height_m=0.08,
        gripper=jaw,
        gripper_home_rad=SO101_GRIPPER_HOME_RAD,
        provenance=(
            "SO-101 joint origins, limits and masses from TheRobotStudio/SO-ARM100 "
            "Simulation/SO101/so101_new_calib.urdf; STS3215 servo figures from Feetech."
        ),
    )
