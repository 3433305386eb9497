"""The FR3-class arm of the twin as an :class:`~sim.arms.chain.ArmChain`.

Numbers come from :mod:`robot_rl.core.kinematics` (modified DH table ``FR3_DH``, ``FLANGE_D_M``,
``HAND_YAW_RAD``, ``TCP_OFFSET_M``, joint and torque limits, home), so the chain's ``tcp`` equals
:func:`robot_rl.core.kinematics.fk_tcp`. Velocity limits are Franka's published FR3 values
(franka_description ``robots/fr3/joint_limits.yaml``: 2.62 rad/s on joints 1-4, 5.26 / 4.18 /
5.26 rad/s on joints 5-7). Link masses, capsule radii, armature and damping are the twin's
(:mod:`sim.model`; restated here, not imported, so the twin may later build from this module).

Modified DH (Craig): ``T_{i-1,i} = RotX(alpha_i) TransX(a_i) RotZ(q_i) TransZ(d_i)``, so joint
``i``'s origin in link ``i - 1`` is ``RotX(alpha_i) TransX(a_i) TransZ(d_i)``: position
``(a_i, -sin(alpha_i) d_i, cos(alpha_i) d_i)``, roll ``alpha_i``. The flange is ``FLANGE_D_M``
along joint 7's z axis (no yaw); the ``tcp`` is the hand yaw about that axis, then
``TCP_OFFSET_M`` along it (between the fingertips of the twin's hand).
"""

from __future__ import annotations

import numpy as np

from robot_rl.core import kinematics as kin
from robot_rl.core.arm import builtin_arm
from sim.arms.chain import ArmChain, JointSpec, Origin

FR3 = builtin_arm("fr3")

FR3_JOINT_NAMES = FR3.joint_names
FR3_LINK_NAMES = tuple(f"link{i + 1}" for i in range(7))
FR3_VELOCITY_LIMIT_RAD_S = FR3.joint_vel_max_rad_s
FR3_LINK_MASSES_KG = (4.97, 0.646, 3.228, 3.587, 1.226, 1.666, 0.735)
FR3_BASE_MASS_KG = 2.9
FR3_LINK_RADII_M = (0.06, 0.06, 0.055, 0.055, 0.05, 0.045, 0.04)
FR3_ARMATURE_KG_M2 = (0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05)
FR3_DAMPING_NM_S_PER_RAD = (1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5)
FR3_HOME_RAD = kin.FR3_HOME_RAD
"""Home: the twin's (tcp at about (0.307, 0, 0.487) m, pointing down)."""
LINK1_COLUMN_M = (0.0, 0.0, -0.19)
"""End of link 1's capsule in its frame (the column below joint 2, as the twin draws it)."""


def _joint_origin(a_m: float, d_m: float, alpha_rad: float) -> Origin:
    return Origin(
        xyz_m=(a_m, -np.sin(alpha_rad) * d_m, np.cos(alpha_rad) * d_m),
        rpy_rad=(alpha_rad, 0.0, 0.0),
    )


def fr3_chain() -> ArmChain:
    """The FR3 as an :class:`~sim.arms.chain.ArmChain` (no gripper jaw; the hand is the tcp)."""
    joints = tuple(
        JointSpec(
            name=FR3_JOINT_NAMES[i],
            link_name=FR3_LINK_NAMES[i],
            origin=_joint_origin(a, d, alpha),
            lower_rad=kin.FR3_JOINT_LOW_RAD[i],
            upper_rad=kin.FR3_JOINT_HIGH_RAD[i],
            velocity_rad_s=FR3_VELOCITY_LIMIT_RAD_S[i],
            effort_nm=kin.FR3_TORQUE_LIMIT_NM[i],
            mass_kg=FR3_LINK_MASSES_KG[i],
            radius_m=FR3_LINK_RADII_M[i] * 0.85,
            geom_to_m=LINK1_COLUMN_M if i == 0 else None,
            armature_kg_m2=FR3_ARMATURE_KG_M2[i],
            damping_nm_s_per_rad=FR3_DAMPING_NM_S_PER_RAD[i],
        )
        for i, (a, d, alpha) in enumerate(kin.FR3_DH)
    )
    return ArmChain(
        name="fr3",
        base_link="link0",
        joints=joints,
        flange=Origin(xyz_m=(0.0, 0.0, kin.FLANGE_D_M)),
        tcp=Origin(xyz_m=(0.0, 0.0, kin.TCP_OFFSET_M), rpy_rad=(0.0, 0.0, kin.HAND_YAW_RAD)),
        home_rad=FR3_HOME_RAD,
        base_mass_kg=FR3_BASE_MASS_KG,
        base_radius_m=0.07,
        base_height_m=0.14,
        provenance=(
            "FR3 modified DH table, limits and home from robot_rl.core.kinematics; velocity "
            "limits from franka_description robots/fr3/joint_limits.yaml."
        ),
    )
