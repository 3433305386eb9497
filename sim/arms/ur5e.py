"""A 6-DoF arm with UR5e kinematics, from Universal Robots' published standard DH parameters.

Sources (public facts, restated here):

- DH table and link masses: Universal Robots, "DH parameters for calculations of kinematics and
  dynamics" (universal-robots.com support article), UR5e row: d1 = 0.1625, a2 = -0.425,
  a3 = -0.3922, d4 = 0.1333, d5 = 0.0997, d6 = 0.0996 m; alpha = pi/2, 0, 0, pi/2, -pi/2, 0;
  masses 3.761, 8.058, 2.846, 1.37, 1.3, 0.365 kg (also in Universal_Robots_ROS2_Description
  ``config/ur5e/physical_parameters.yaml``, whose base mass of 4.0 kg we use too).
- Joint names, limits, velocities and efforts: Universal_Robots_ROS2_Description
  ``config/ur5e/joint_limits.yaml``: +-360 deg (elbow +-180 deg, "half its actual limit" to keep
  planners connected), 180 deg/s on every joint, 150 / 150 / 150 / 28 / 28 / 28 N m.

Frames: the base link frame is the DH base frame (the UR controller's "base" coordinates; z up
along the shoulder pan axis; at q = 0 the arm stretches along -x). ROS's ``base_link`` is this
frame turned by pi about z. The flange is DH frame 6 (ROS ``tool0``: z out of the tool flange);
the ``tcp`` is :data:`TCP_OFFSET_M` further along that z axis, room for a parallel gripper.

Standard DH (Denavit-Hartenberg): ``T_{i-1,i} = RotZ(q_i) TransZ(d_i) TransX(a_i) RotX(alpha_i)``.
As a chain, joint ``i + 1``'s origin in link ``i`` is the fixed part ``TransZ(d_i) TransX(a_i)
RotX(alpha_i)`` of row ``i``: position ``(a_i, 0, d_i)``, roll ``alpha_i``.
Joint armature and damping are simulation values, not published ones.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.arm import builtin_arm
from sim.arms.chain import ArmChain, JointSpec, Origin

UR5E = builtin_arm("ur5e")

UR5E_DH: tuple[tuple[float, float, float], ...] = (
    (0.1625, 0.0, np.pi / 2),
    (0.0, -0.425, 0.0),
    (0.0, -0.3922, 0.0),
    (0.1333, 0.0, np.pi / 2),
    (0.0997, 0.0, -np.pi / 2),
    (0.0996, 0.0, 0.0),
)
"""(d_m, a_m, alpha_rad) per joint, standard DH."""

UR5E_JOINT_NAMES = UR5E.joint_names
"""The ROS 2 driver's joint names (from the built-in description, ``robot_rl/arms/ur5e.yaml``,
as are the limits, speeds and home below)."""
UR5E_LINK_NAMES = (
    "shoulder_link",
    "upper_arm_link",
    "forearm_link",
    "wrist_1_link",
    "wrist_2_link",
    "wrist_3_link",
)
UR5E_JOINT_LIMIT_RAD = UR5E.joint_high_rad
"""Symmetric position limits +-, rad (the elbow at +-pi, as the UR ROS description has it)."""
UR5E_VELOCITY_LIMIT_RAD_S = UR5E.joint_vel_max_rad_s
UR5E_EFFORT_LIMIT_NM = (150.0, 150.0, 150.0, 28.0, 28.0, 28.0)
UR5E_LINK_MASSES_KG = (3.761, 8.058, 2.846, 1.37, 1.3, 0.365)
UR5E_BASE_MASS_KG = 4.0
UR5E_LINK_RADII_M = (0.06, 0.054, 0.045, 0.04, 0.04, 0.035)
"""Radii of the primitive link capsules, metres (rough outer sizes, not published)."""
UR5E_ARMATURE_KG_M2 = (0.1, 0.1, 0.1, 0.05, 0.05, 0.05)
UR5E_DAMPING_NM_S_PER_RAD = (1.0, 1.0, 1.0, 0.5, 0.5, 0.5)

TCP_OFFSET_M = 0.15
"""TCP beyond the flange along the flange z axis, metres."""
UR5E_HOME_RAD = UR5E.home_q_rad
"""Home (180, -90, 105, -105, -90, -90 deg): upper arm vertical, the tool pointing straight
down, tcp at about (0.479, 0.133, 0.236) m: in front of the base (+x; pan = pi because at pan = 0
the DH arm reaches along -x), offset sideways by d4. Wrist 3 at -90 deg gives the tcp the FR3
home's orientation (x along base +x, z down: quaternion (0, 1, 0, 0))."""


def ur5e_chain() -> ArmChain:
    """The UR5e as an :class:`~sim.arms.chain.ArmChain` (no gripper jaw)."""
    joints = []
    prev = Origin()  # joint 1 sits at the base frame's origin
    for i, (d, a, alpha) in enumerate(UR5E_DH):
        lim = UR5E_JOINT_LIMIT_RAD[i]
        joints.append(
            JointSpec(
                name=UR5E_JOINT_NAMES[i],
                link_name=UR5E_LINK_NAMES[i],
                origin=prev,
                lower_rad=-lim,
                upper_rad=lim,
                velocity_rad_s=UR5E_VELOCITY_LIMIT_RAD_S[i],
                effort_nm=UR5E_EFFORT_LIMIT_NM[i],
                mass_kg=UR5E_LINK_MASSES_KG[i],
                radius_m=UR5E_LINK_RADII_M[i],
                # the shoulder capsule starts above the base cylinder
                geom_from_m=(0.0, 0.0, 0.07) if i == 0 else (0.0, 0.0, 0.0),
                armature_kg_m2=UR5E_ARMATURE_KG_M2[i],
                damping_nm_s_per_rad=UR5E_DAMPING_NM_S_PER_RAD[i],
            )
        )
        prev = Origin(xyz_m=(a, 0.0, d), rpy_rad=(alpha, 0.0, 0.0))
    return ArmChain(
        name="ur5e",
        base_link="base_link",
        joints=tuple(joints),
        flange=prev,  # DH frame 6
        tcp=Origin(xyz_m=(0.0, 0.0, TCP_OFFSET_M)),
        home_rad=UR5E_HOME_RAD,
        base_mass_kg=UR5E_BASE_MASS_KG,
        base_radius_m=0.075,
        base_height_m=0.06,
        provenance=(
            "UR5e standard DH parameters and link masses published by Universal Robots; "
            "limits from Universal_Robots_ROS2_Description config/ur5e/joint_limits.yaml."
        ),
    )


def dh_transform(d_m: float, a_m: float, alpha_rad: float, q_rad: float) -> np.ndarray:
    """(4, 4) standard DH ``RotZ(q) TransZ(d) TransX(a) RotX(alpha)``."""
    cq, sq = np.cos(q_rad), np.sin(q_rad)
    ca, sa = np.cos(alpha_rad), np.sin(alpha_rad)
    return np.array(
        [
            [cq, -sq * ca, sq * sa, a_m * cq],
            [sq, cq * ca, -cq * sa, a_m * sq],
            [0.0, sa, ca, d_m],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


def fk_dh(q_rad: np.ndarray) -> np.ndarray:
    """(4, 4) ``T_base_flange`` (DH frame 6) at joint positions ``q_rad`` (6,), rad."""
    q = np.asarray(q_rad, dtype=np.float64)
    if q.shape != (6,):
        raise ValueError(f"joint positions must have shape (6,), got {q.shape}")
    T = np.eye(4)
    for (d, a, alpha), qi in zip(UR5E_DH, q, strict=True):
        T = T @ dh_transform(d, a, alpha, float(qi))
    return T
