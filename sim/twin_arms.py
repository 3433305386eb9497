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

from dataclasses import dataclass, replace

import numpy as np

from robot_rl.core import kinematics as kin
from robot_rl.core.arm import ArmDescription, builtin_arm
from sim import model as mdl
from sim.arms import so101, ur5e
from sim.arms.chain import ArmChain, to_mjcf_body
from sim.arms.export import MODELS_DIR
from sim.gripper import GripperMjcf, JawSpec, jaw_mjcf
from sim.joint_servo import JointServoConfig
from sim.layout import FR3_LAYOUT, TaskLayout

FR3 = builtin_arm("fr3")
SO101 = builtin_arm("so101")
UR5E = builtin_arm("ur5e")

CONTROLS = ("impedance", "joint")
VENDOR_INTERFACES = ("joint", "cartesian", "servo_bus")
"""How an arm's vendor driver is reached, and the interfaces the ros2_control twin plays
(``sim.ros2_control.INTERFACES``): ``joint``, joint trajectory / position controllers (a UR's
driver); ``cartesian``, a compliant Cartesian controller (a Franka under ros2_control);
``servo_bus``, the servos' own serial bus (an SO-101's Feetech bus:
``sim.twin_servo_bus.TwinServoModel``)."""


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
        jaw: The jaw gripper's geometry (:class:`sim.gripper.JawSpec`); None: the parallel
            hand.
        gripper_mjcf: The gripper's scene-level MJCF; None: the parallel hand's.
        layout: Where the tasks lie for this arm (:mod:`sim.layout`).
        front_camera: ``(position, look-at point)`` of camera ``front``; None: the FR3 scene's.
        vendor_interface: One of :data:`VENDOR_INTERFACES`: how a robot of this kind is
            commanded through its vendor's driver, which the ros2_control twin plays
            (``robot-rl rehearse --driver ros2_control`` puts the arm's bridge in front of it).
        noslip_iterations: MuJoCo's noslip solver passes of the scene (0: off), for a gripper
            whose grip holds by friction alone (:data:`SO101_NOSLIP_ITERATIONS`).
    """

    arm: ArmDescription
    body_xml: str
    motors_xml: str
    control: str = "impedance"
    servo: JointServoConfig | None = None
    bridge_hz: float = 100.0
    kinematics: str | None = None
    jaw: JawSpec | None = None
    gripper_mjcf: GripperMjcf | None = None
    layout: TaskLayout = FR3_LAYOUT
    front_camera: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    vendor_interface: str = "cartesian"
    noslip_iterations: int = 0

    def __post_init__(self) -> None:
        if self.control not in CONTROLS:
            raise ValueError(f"control {self.control!r} is not one of {CONTROLS}")
        if self.vendor_interface not in VENDOR_INTERFACES:
            raise ValueError(
                f"vendor_interface {self.vendor_interface!r} is not one of {VENDOR_INTERFACES}"
            )
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
        vendor_interface="joint",
    )


SO101_SERVO = JointServoConfig(
    kp_nm_per_rad=150.0,
    kd_nms_per_rad=1.0,
    vel_max_rad_s=SO101.joint_vel_max_rad_s,
    deadband_rad=0.003,
    backlash_rad=0.01,
    gravity_compensation=False,
)
"""A hobby servo (STS3215): soft (its 2.9 N m stall torque reached 1.1 deg from the goal), no
gravity compensation (the arm sags under its own weight, 1-2 mm at the tool), a deadband of
about 2 encoder ticks and 0.6 deg of gear play."""

SO101_LAYOUT = TaskLayout(name="so101", centre_xy_m=(0.18, 0.0), scale=0.4, object_scale=0.625)
"""The tasks at 0.4 of the FR3's distances around (0.18, 0) m, where the SO-101 reaches with the
jaws pointing down (x 0.12 .. 0.25 m below 10 cm): a 2.5 cm cube, a 2 cm lift."""

SO101_HAND_TCP_M = 0.09
"""The SO-101 hand frame's origin lies this far behind the tcp along the approach axis, metres
(near the wrist-roll output)."""
SO101_JAW = JawSpec(open_rad=0.8, squeeze_rad=-0.15, face_lever_m=(-0.0405, 0.071), torque_nm=1.0)
"""The moving jaw: hinge 4 cm behind the tcp plane's fixed pad and 7.5 cm above the tcp (the
source's jaw axis), 6.3 cm open at 0.8 rad; 1 N m (about 12 N at the pad: a third of the
servo's stall torque, the gripper servo's usual current limit)."""


SO101_NOSLIP_ITERATIONS = 5
"""The SO-101 scene runs MuJoCo's noslip solver: its hinged jaw closes on the cube at an angle
(a wedge that opens towards the jaw tips), and with soft contacts alone the held cube crept out
of it: 12 mm sideways and 6 mm down over 4 s of holding still, then it fell, in every expert
episode that held it for about 6 s (a real jaw's rubber pads hold). With 5 noslip passes it held
for the whole 10 s measured, at the same height, for about 20% more CPU per physics step (0.49-0.52
-> 0.58-0.64 CPU s per 200 control steps here). The parallel hands grip squarely and do
without."""


def _so101_hand(jaw: JawSpec) -> str:
    """The SO-101's hand in the ``gripper`` link: body ``hand`` in the tcp's orientation with the
    fixed jaw (pad ``left_pad``, inner face at y = -1.25 cm) and the moving jaw (joint ``jaw``,
    pad ``right_pad``), site ``tcp`` between them, the wrist camera on the fixed jaw's side."""
    L = SO101_HAND_TCP_M
    tcp = so101.TCP_IN_GRIPPER
    R = tcp.rotation()
    pos = np.asarray(tcp.xyz_m) - L * R[:, 2]
    dy, dz = jaw.face_lever_m
    pad_z = L - 0.004  # pad centres, a little above the tcp (the pads reach 1.2 cm past it)
    # The hinge where the moving pad's face, at q = 0, lies on the fixed pad's (y = -1.25 cm).
    hinge = (0.0, -0.0125 - dy, pad_z - dz)
    cam_pos, cam_target = (0.03, -0.03, 0.02), (0.0, 0.0, L + 0.03)
    return f"""
<body name="hand" pos="{mdl._v(pos)}" quat="{mdl._v(tcp.quat())}">
  <site name="ft" size="0.004" rgba="1 0 0 0"/>
  <geom class="hand" type="box" size="0.016 0.022 0.02" pos="0 -0.005 0.02" mass="0.02"/>
  <geom class="hand" type="box" size="0.009 0.003 0.02" pos="0 -0.0155 0.05" mass="0.005"/>
  <geom name="left_pad" class="pad" type="box" size="0.009 0.003 0.016"
        pos="0 -0.0155 {pad_z}" mass="0.003"/>
  <site name="tcp" pos="0 0 {L}" size="0.004" rgba="0 1 0 0"/>
  <camera name="wrist" pos="{mdl._v(cam_pos)}" fovy="80"
          xyaxes="{mdl.lookat_xyaxes(cam_pos, cam_target, (1, 0, 0))}"/>
  <body name="moving_jaw" pos="{mdl._v(hinge)}">
    <joint name="jaw" type="hinge" axis="-1 0 0" range="0 {jaw.open_rad + 0.1}"
           armature="0.002" damping="0.05"/>
    <geom class="hand" type="capsule" size="0.004" mass="0.01"
          fromto="0 0 0 0 {dy + 0.006:.6g} {dz - 0.016:.6g}"/>
    <geom name="right_pad" class="pad" type="box" size="0.009 0.003 0.016"
          pos="0 {dy + 0.003:.6g} {dz:.6g}" mass="0.003"/>
  </body>
</body>"""


def so101_twin() -> TwinArm:
    """The SO-101-class arm: five joint servos with a hobby servo's softness, deadband and play,
    no gravity compensation; its jaw gripper; the tasks at half size (:data:`SO101_LAYOUT`)."""
    chain = so101.so101_chain()
    last = chain.joints[-1]
    # The wrist-roll link's capsule stops at the hand: the hand carries the fixed jaw.
    short = replace(last, geom_to_m=(0.0, 0.0, -0.01), radius_m=0.012)
    chain = replace(chain, joints=chain.joints[:-1] + (short,), gripper=None)
    lay = SO101_LAYOUT
    camera = (
        tuple(float(c) for c in lay.point(mdl.FRONT_CAMERA_POS_M)),
        tuple(float(c) for c in lay.point(mdl.FRONT_CAMERA_TARGET_M)),
    )
    return TwinArm(
        SO101,
        to_mjcf_body(chain, tool_xml=_so101_hand(SO101_JAW)),
        _motors(chain),
        control="joint",
        servo=SO101_SERVO,
        bridge_hz=50.0,
        kinematics=str(MODELS_DIR / "so101.xml"),
        jaw=SO101_JAW,
        gripper_mjcf=jaw_mjcf(SO101_JAW),
        layout=lay,
        front_camera=camera,
        vendor_interface="servo_bus",
        noslip_iterations=SO101_NOSLIP_ITERATIONS,
    )


TWIN_ARMS = {"fr3": fr3_twin, "ur5e": ur5e_twin, "so101": so101_twin}
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
