"""The twin's MJCF: an FR3-kinematics arm from primitive geoms, a parallel-jaw gripper, a table,
lights and cameras, plus whatever the task contributes (an :class:`MjcfFragment`).

Built as a string from the public DH table in :mod:`robot_rl.core.kinematics` (so the ``tcp``
site equals :func:`robot_rl.core.kinematics.fk_tcp` exactly); no mesh or XML is copied from any
other project. Masses are the published FR3 link masses, inertias follow from the primitive
geoms.

Frames and names (stable; tasks and tests rely on them):

- robot base at the world origin; the table top is the plane ``z = 0`` (``TABLE_TOP_Z_M``);
  the table spans ``TABLE_X_RANGE_M`` x ``TABLE_Y_RANGE_M``; the floor is at ``FLOOR_Z_M``.
- bodies ``link0`` .. ``link7``, ``hand``, ``left_finger``, ``right_finger``; joints ``joint1`` ..
  ``joint7``, ``finger_joint1``, ``finger_joint2``; torque motors ``torque1`` .. ``torque7``;
  gripper actuator ``gripper`` (position servo on the finger-opening tendon, bounded force).
- site ``tcp`` (between the fingertips, z along the fingers), site ``ft`` (wrist F/T sensor at
  the hand origin; sensors ``ft_force`` and ``ft_torque``).
- geoms ``left_pad``, ``right_pad`` (finger pads), ``table``, ``floor``.
- cameras ``front`` (fixed) and ``wrist`` (on the hand, looking along the fingers).

Collision groups (contype / conaffinity): arm links ``2 / 0`` (they touch the table and objects,
not each other or the hand), hand and fingers ``1 / 1``, table and objects ``1 / 3``. A task's
object geoms should use ``class="object"`` (or the same bits) to collide with everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from robot_rl.core import kinematics as kin
from sim.gripper import FINGER_MAX_M, GripperMjcf, parallel_mjcf

TABLE_TOP_Z_M = 0.0
TABLE_X_RANGE_M = (-0.2, 1.0)
TABLE_Y_RANGE_M = (-0.6, 0.6)
FLOOR_Z_M = -0.75

HAND_MASS_KG = 0.73
FINGER_MASS_KG = 0.1
FINGER_ARMATURE = 0.5
"""Finger reflected inertia, kg: makes finger contacts and limits stiff against the grip force
(MuJoCo's soft constraints scale with the effective mass)."""
LINK_MASSES_KG = (4.97, 0.646, 3.228, 3.587, 1.226, 1.666, 0.735)
LINK_RADII_M = (0.06, 0.06, 0.055, 0.055, 0.05, 0.045, 0.04)
JOINT_ARMATURE = (0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05)
JOINT_DAMPING = (1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5)

FRONT_CAMERA_POS_M = (1.0, 0.0, 0.42)
FRONT_CAMERA_TARGET_M = (0.48, 0.0, 0.06)
WRIST_CAMERA_POS_M = (0.065, 0.0, 0.03)  # in the hand frame
WRIST_CAMERA_TARGET_M = (0.0, 0.0, 0.14)  # in the hand frame, just beyond the fingertips


@dataclass(frozen=True)
class MjcfFragment:
    """What a task adds to the scene before compilation (dm_control style).

    Each field is raw MJCF inserted verbatim inside the named top-level element. Object geoms
    should use ``class="object"`` so that they collide with the table, the hand and the arm.

    Attributes:
        assets: Inside ``<asset>`` (materials, textures, meshes).
        worldbody: Inside ``<worldbody>`` (object bodies with ``<freejoint/>``, fixtures).
        contact: Inside ``<contact>`` (pairs, excludes).
        equality: Inside ``<equality>``.
        sensor: Inside ``<sensor>``.
    """

    assets: str = ""
    worldbody: str = ""
    contact: str = ""
    equality: str = ""
    sensor: str = ""


def _v(x: Sequence[float] | np.ndarray) -> str:
    return " ".join(f"{float(c):.9g}" for c in x)


def lookat_xyaxes(pos: Sequence[float], target: Sequence[float], up=(0.0, 0.0, 1.0)) -> str:
    """MJCF ``xyaxes`` for a camera at ``pos`` looking at ``target`` (camera looks along -z)."""
    z = np.asarray(pos, dtype=np.float64) - np.asarray(target, dtype=np.float64)
    z /= np.linalg.norm(z)
    x = np.cross(np.asarray(up, dtype=np.float64), z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    return _v(np.concatenate([x, y]))


def _link_body_frame(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Position and quaternion of joint frame ``i`` (0-based) in its parent, from the DH row."""
    a, d, alpha = kin.FR3_DH[i]
    pos = np.array([a, -np.sin(alpha) * d, np.cos(alpha) * d])
    quat = np.array([np.cos(alpha / 2), np.sin(alpha / 2), 0.0, 0.0])
    return pos, quat


def _arm_xml() -> str:
    """Nested bodies link1..link7 + hand + fingers (returned as one string)."""
    # Segment from each joint frame to the next one (in the joint frame), for the link capsule.
    child_pos = [_link_body_frame(i + 1)[0] for i in range(6)] + [
        np.array([0.0, 0.0, kin.FLANGE_D_M])
    ]
    child_pos[0] = np.array([0.0, 0.0, -0.19])  # link1: the column below joint 2
    opens, closes = [], []
    for i in range(7):
        pos, quat = _link_body_frame(i)
        lo, hi = kin.FR3_JOINT_LOW_RAD[i], kin.FR3_JOINT_HIGH_RAD[i]
        r = LINK_RADII_M[i]
        seg = child_pos[i]
        length = float(np.linalg.norm(seg))
        body = [
            f'<body name="link{i + 1}" pos="{_v(pos)}" quat="{_v(quat)}">',
            f'<joint name="joint{i + 1}" axis="0 0 1" range="{lo} {hi}" '
            f'armature="{JOINT_ARMATURE[i]}" damping="{JOINT_DAMPING[i]}"/>',
            f'<geom class="link" type="cylinder" size="{r} {r}" mass="0.01"/>',
        ]
        if length > 0.01:
            body.append(
                f'<geom class="link" type="capsule" fromto="0 0 0 {_v(seg)}" size="{r * 0.85}" '
                f'mass="{LINK_MASSES_KG[i]}"/>'
            )
        else:
            body.append(f'<geom class="link" type="sphere" size="{r}" mass="{LINK_MASSES_KG[i]}"/>')
        opens.append("\n".join(body))
        closes.append("</body>")
    hy = kin.HAND_YAW_RAD
    hand = hand_xml((0.0, 0.0, kin.FLANGE_D_M), (np.cos(hy / 2), 0, 0, np.sin(hy / 2)))
    return "\n".join(opens) + hand + "\n".join(closes)


def hand_xml(pos_m: Sequence[float], quat: Sequence[float]) -> str:
    """The parallel-jaw hand (body ``hand``: wrist F/T site ``ft``, site ``tcp``
    :data:`robot_rl.core.kinematics.TCP_OFFSET_M` along its z axis, camera ``wrist``, two
    fingers) at ``pos_m`` / ``quat`` (w, x, y, z) in its parent body (the flange)."""
    return f"""
<body name="hand" pos="{_v(pos_m)}" quat="{_v(quat)}">
  <site name="ft" size="0.005" rgba="1 0 0 0"/>
  <geom class="hand" type="cylinder" size="0.035 0.006" pos="0 0 0.006" mass="0.1"/>
  <geom class="hand" type="box" size="0.022 0.09 0.024" pos="0 0 0.034"
        mass="{HAND_MASS_KG - 0.1}"/>
  <site name="tcp" pos="0 0 {kin.TCP_OFFSET_M}" size="0.004" rgba="0 1 0 0"/>
  <camera name="wrist" pos="{_v(WRIST_CAMERA_POS_M)}" fovy="75"
          xyaxes="{lookat_xyaxes(WRIST_CAMERA_POS_M, WRIST_CAMERA_TARGET_M, (1, 0, 0))}"/>
  {_finger_xml("left", 1.0)}
  {_finger_xml("right", -1.0)}
</body>"""


def _finger_xml(side: str, sign: float) -> str:
    """A finger sliding along ``sign * y`` of the hand; pad inner face at y = sign * opening."""
    j = 1 if side == "left" else 2
    return f"""
  <body name="{side}_finger" pos="0 0 0.0584">
    <joint name="finger_joint{j}" type="slide" axis="0 {sign} 0" range="0 {FINGER_MAX_M}"
           damping="2" armature="{FINGER_ARMATURE}" solreflimit="0.004 1"/>
    <geom class="hand" type="box" size="0.01 0.007 0.022" pos="0 {sign * 0.012} 0.022"
          mass="{FINGER_MASS_KG * 0.7}"/>
    <geom name="{side}_pad" class="pad" type="box" size="0.0095 0.005 0.016"
          pos="0 {sign * 0.005} 0.038" mass="{FINGER_MASS_KG * 0.3}"/>
  </body>"""


def fr3_arm_xml() -> str:
    """The FR3-class arm with the hand: base body ``link0`` at the world origin."""
    return f"""<body name="link0">
      <geom class="link" type="cylinder" size="0.07 0.07" pos="0 0 0.07" mass="2.9"/>
      {_arm_xml()}
    </body>"""


def fr3_motors_xml() -> str:
    """One torque motor per FR3 joint (``torque1`` .. ``torque7``), ctrlrange its torque limit."""
    return "\n".join(
        f'<motor name="torque{i + 1}" joint="joint{i + 1}" ctrlrange="{-t} {t}"/>'
        for i, t in enumerate(kin.FR3_TORQUE_LIMIT_NM)
    )


def build_mjcf(
    fragments: Sequence[MjcfFragment] = (),
    sim_hz: float = 500.0,
    offscreen_width: int = 128,
    offscreen_height: int = 128,
    arm_xml: str | None = None,
    motors_xml: str | None = None,
    gripper: GripperMjcf | None = None,
    front_camera: tuple[Sequence[float], Sequence[float]] | None = None,
    noslip_iterations: int = 0,
) -> str:
    """The complete scene MJCF.

    Args:
        fragments: Task contributions, inserted in order.
        sim_hz: Physics rate; the timestep is ``1 / sim_hz``.
        offscreen_width: Offscreen buffer width (>= the widest rendered image), pixels.
        offscreen_height: Offscreen buffer height, pixels.
        arm_xml: The arm's base body (at the world origin) with its links and the hand
            (:func:`hand_xml`); None: the FR3 (:func:`fr3_arm_xml`).
        motors_xml: One torque ``<motor>`` per arm joint; None: the FR3's.
        gripper: The gripper's scene-level MJCF (:mod:`sim.gripper`); None: the parallel hand's.
        front_camera: ``(position, look-at point)`` of camera ``front``, metres; None:
            :data:`FRONT_CAMERA_POS_M` looking at :data:`FRONT_CAMERA_TARGET_M`.
        noslip_iterations: MuJoCo's noslip solver passes (0: off): removes the slow creep of
            soft contacts where a grip must hold by friction alone.
    """
    cat = lambda field: "\n".join(getattr(f, field) for f in fragments)  # noqa: E731
    tx = 0.5 * (TABLE_X_RANGE_M[0] + TABLE_X_RANGE_M[1])
    hx = 0.5 * (TABLE_X_RANGE_M[1] - TABLE_X_RANGE_M[0])
    hy = 0.5 * (TABLE_Y_RANGE_M[1] - TABLE_Y_RANGE_M[0])
    motors = fr3_motors_xml() if motors_xml is None else motors_xml
    arm = fr3_arm_xml() if arm_xml is None else arm_xml
    grip = parallel_mjcf() if gripper is None else gripper
    cam_pos, cam_target = front_camera or (FRONT_CAMERA_POS_M, FRONT_CAMERA_TARGET_M)
    return f"""
<mujoco model="fr3_twin">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{1.0 / sim_hz:.9g}" integrator="implicitfast" cone="elliptic"
          impratio="5" noslip_iterations="{int(noslip_iterations)}"/>
  <visual>
    <global offwidth="{offscreen_width}" offheight="{offscreen_height}"/>
    <quality shadowsize="0" offsamples="0"/>
    <headlight ambient="0.35 0.35 0.35" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <default>
    <default class="link">
      <geom contype="2" conaffinity="0" rgba="0.92 0.92 0.95 1" group="1"/>
    </default>
    <default class="hand">
      <geom contype="1" conaffinity="1" rgba="0.25 0.25 0.28 1" group="1"/>
    </default>
    <default class="pad">
      <geom contype="1" conaffinity="1" condim="4" friction="1.2 0.02 0.0001"
            rgba="0.1 0.1 0.1 1" group="1"/>
    </default>
    <default class="object">
      <geom contype="1" conaffinity="3" condim="4" friction="1.0 0.01 0.0001" group="2"/>
    </default>
  </default>
  <asset>
    {cat("assets")}
  </asset>
  <worldbody>
    <light name="scene_light" pos="0.5 0.3 1.5" dir="-0.2 -0.2 -1" directional="true"
           castshadow="false" diffuse="0.6 0.6 0.6"/>
    <geom name="floor" type="plane" size="3 3 0.1" pos="0 0 {FLOOR_Z_M}"
          rgba="0.35 0.37 0.4 1" contype="1" conaffinity="3"/>
    <geom name="table" type="box" size="{hx} {hy} 0.025" pos="{tx} 0 {TABLE_TOP_Z_M - 0.025}"
          rgba="0.62 0.52 0.42 1" contype="1" conaffinity="3" condim="3"/>
    <camera name="front" pos="{_v(cam_pos)}" fovy="50"
            xyaxes="{lookat_xyaxes(cam_pos, cam_target)}"/>
    {arm}
    {cat("worldbody")}
  </worldbody>
  <tendon>
    {grip.tendon}
  </tendon>
  <equality>
    {grip.equality}
    {cat("equality")}
  </equality>
  <contact>
    {grip.contact}
    {cat("contact")}
  </contact>
  <actuator>
    {motors}
    {grip.actuator}
  </actuator>
  <sensor>
    <force name="ft_force" site="ft"/>
    <torque name="ft_torque" site="ft"/>
    {cat("sensor")}
  </sensor>
</mujoco>
"""
