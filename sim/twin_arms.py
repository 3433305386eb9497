"""The arm kinds the twin can build: each is an arm chain (:mod:`sim.arms`) with the twin's
parallel-jaw hand on its flange, one torque motor per joint, and the way the real arm is driven.

Control (``TwinArm.control``):

- ``impedance``: the arm takes Cartesian TCP targets and a Cartesian impedance controller turns
  them into joint torques (:mod:`sim.controller`): a Franka under libfranka's torque control, or
  any arm with a compliant Cartesian controller (the generic backend's ``ros2_cartesian`` mode).
- ``joint``: the arm holds joint position goals with its own servos (:mod:`sim.joint_servo`): a
  UR under ros2_control's position interface, an SO-101's Feetech servos. A Cartesian target
  becomes joint goals through differential IK at the bridge rate (as the generic backend's
  ``ros2_joint`` mode does on a real arm).

Every kind shares the scene (table, cameras, task objects) and the names tasks rely on
(:mod:`sim.model`: site ``tcp``, site ``ft``, body ``hand``, the finger pads, camera ``wrist``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.core import kinematics as kin
from robot_rl.core.arm import FR3, UR5E, ArmDescription
from sim import model as mdl
from sim.arms import ur5e
from sim.arms.chain import ArmChain, to_mjcf_body
from sim.arms.export import MODELS_DIR
from sim.joint_servo import JointServoConfig

CONTROLS = ("impedance", "joint")


@dataclass(frozen=True)
class TwinArm:
    """One arm kind of the twin.

    Attributes:
        arm: Its description (joint names, limits, home, ...).
        body_xml: The base body at the world origin with the links and the hand.
        motors_xml: One torque ``<motor>`` per arm joint.
        control: One of :data:`CONTROLS` (see the module docstring).
        servo: The joint servos' gains (``control == "joint"``).
        bridge_hz: ``joint`` control: the rate of the differential-IK tick that turns the
            Cartesian target into joint goals (a bridge's control loop), Hz.
        kinematics: The arm's standalone kinematics file (its ``tcp`` site where the twin's
            hand has its ``tcp``): what the IK of a ``joint`` arm solves on, as on a robot.
    """

    arm: ArmDescription
    body_xml: str
    motors_xml: str
    control: str = "impedance"
    servo: JointServoConfig | None = None
    bridge_hz: float = 100.0
    kinematics: str | None = None

    def __post_init__(self) -> None:
        if self.control not in CONTROLS:
            raise ValueError(f"control {self.control!r} is not one of {CONTROLS}")
        if self.control == "joint" and self.servo is None:
            raise ValueError(f"{self.arm.name}: joint control needs a servo config")


def _motors(chain: ArmChain) -> str:
    return "\n".join(
        f'<motor name="torque_{j.name}" joint="{j.name}" ctrlrange="{-j.effort_nm} {j.effort_nm}"/>'
        for j in chain.joints
    )


def _hand_on_flange(tcp_offset_m: float) -> str:
    """A coupling from the flange, then the hand, so that the hand's ``tcp`` lies
    ``tcp_offset_m`` along the flange z axis (the chain's own tool point)."""
    spacer = tcp_offset_m - kin.TCP_OFFSET_M
    if spacer < 0:
        raise ValueError(f"tcp_offset_m {tcp_offset_m} is shorter than the hand")
    coupling = (
        f'<geom class="hand" type="cylinder" size="0.035 {spacer / 2:.9g}" '
        f'pos="0 0 {spacer / 2:.9g}" mass="0.05"/>'
        if spacer > 1e-4
        else ""
    )
    return coupling + mdl.hand_xml((0.0, 0.0, spacer), (1.0, 0.0, 0.0, 0.0))


def fr3_twin() -> TwinArm:
    """The FR3-class arm (impedance control), exactly the twin it always was."""
    return TwinArm(FR3, mdl.fr3_arm_xml(), mdl.fr3_motors_xml(), control="impedance")


UR5E_SERVO = JointServoConfig(
    kp_nm_per_rad=(3000.0, 3000.0, 2000.0, 500.0, 500.0, 300.0),
    kd_nms_per_rad=(150.0, 150.0, 80.0, 15.0, 15.0, 8.0),
    vel_max_rad_s=UR5E.joint_vel_max_rad_s,
    gravity_compensation=True,
)
"""A UR's joint position control: stiff, gravity-compensated, at the joints' speed limits."""


def ur5e_twin(control: str = "joint") -> TwinArm:
    """The UR5e-class arm with the twin's hand at its 0.15 m tool point."""
    chain = ur5e.ur5e_chain()
    tool = np.asarray(chain.tcp.xyz_m)
    if not np.allclose(tool[:2], 0.0) or not np.allclose(chain.tcp.quat(), [1, 0, 0, 0]):
        raise ValueError("the UR5e tool point must lie on the flange z axis")
    body = to_mjcf_body(chain, tool_xml=_hand_on_flange(float(tool[2])))
    return TwinArm(
        UR5E,
        body,
        _motors(chain),
        control=control,
        servo=UR5E_SERVO,
        kinematics=str(MODELS_DIR / "ur5e.xml"),
    )


TWIN_ARMS = {"fr3": fr3_twin, "ur5e": ur5e_twin}
"""Arm kinds of the twin (``--arm`` of the twin's commands)."""


def twin_arm(kind: str) -> TwinArm:
    """The twin's arm of ``kind``.

    Raises:
        ValueError: Not a kind the twin can build (the message lists them).
    """
    try:
        return TWIN_ARMS[kind]()
    except KeyError:
        raise ValueError(
            f"the twin has no arm kind {kind!r}; choose from {sorted(TWIN_ARMS)}"
        ) from None
