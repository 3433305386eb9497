"""A generic serial arm (joints, limits, masses, primitive geoms, flange, TCP) and its writers.

One :class:`ArmChain` describes an arm; :func:`to_mjcf_body`, :func:`to_mjcf_model` and
:func:`to_urdf` write it as MJCF or URDF from the same numbers, and :func:`fk_mats` computes its
forward kinematics in numpy. No meshes: every link is one primitive geom.

Frames (the URDF convention; the MJCF bodies use the same frames):

- the base link frame is the arm's mounting frame (the world origin in the standalone MJCF);
- joint ``i``'s :class:`Origin` places its frame in the frame of the link before it (the base
  link for the first joint); the joint turns its child link about ``axis`` (a unit vector in
  that frame), and the child link frame is the joint frame turned by ``q_i``;
- ``flange`` is fixed to the last arm link (``ArmChain.flange``, in that link's frame); ``tcp``
  is fixed to the flange (``ArmChain.tcp``, in the flange frame) with z along the tool's
  approach direction;
- an optional gripper jaw joint (``ArmChain.gripper``) hangs off the last arm link: both files
  have it, but it is not one of the arm's (IK) joints.

Names: MJCF bodies and URDF links carry the link names, joints the joint names. MJCF has a body
``flange`` holding a site ``tcp``; URDF has links ``flange`` and ``tcp`` on fixed joints
``flange_joint`` and ``tcp_joint``. Angles are radians (a model that includes
:func:`to_mjcf_body` needs ``<compiler angle="radian"/>``). Arm geoms use ``contype=2
conaffinity=0`` as the twin's links do: they touch objects and tables, not each other.

Inertia: each link's mass sits in its one geom: a capsule from ``geom_from_m`` to ``geom_to_m``
(a sphere when the two nearly coincide), and the base is a cylinder. MuJoCo derives the MJCF
inertia from the geom; the URDF ``<inertial>`` uses the same formula (:mod:`sim.arms.geometry`),
so both files have the same mass properties.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from robot_rl.core import frames
from sim.arms.geometry import (
    MIN_SEGMENT_M,
    axis_angle_mat,
    capsule_inertia,
    cylinder_inertia,
    mat_to_rpy,
    rpy_to_mat,
    z_to_axis_angle,
)

Vec3 = tuple[float, float, float]

ARM_RGBA = "0.86 0.86 0.9 1"
BASE_RGBA = "0.3 0.3 0.33 1"
_RESERVED_LINKS = ("flange", "tcp")
_RESERVED_JOINTS = ("flange_joint", "tcp_joint")


def _vec(x: Sequence[float], n: int, what: str) -> tuple[float, ...]:
    v = tuple(float(c) for c in x)
    if len(v) != n or not all(math.isfinite(c) for c in v):
        raise ValueError(f"{what} must be {n} finite numbers, got {x!r}")
    return v


# ---------------------------------------------------------------------------------------------
# Description.


@dataclass(frozen=True)
class Origin:
    """Pose of a child frame in its parent frame (a URDF ``<origin>``).

    Attributes:
        xyz_m: Position of the child frame's origin in the parent frame, metres.
        rpy_rad: Orientation as URDF roll-pitch-yaw (``Rz(yaw) Ry(pitch) Rx(roll)``), rad;
            used when ``quat_wxyz`` is None.
        quat_wxyz: Orientation as a unit quaternion ``(w, x, y, z)``; give this or a non-zero
            ``rpy_rad``, not both.
    """

    xyz_m: Vec3 = (0.0, 0.0, 0.0)
    rpy_rad: Vec3 = (0.0, 0.0, 0.0)
    quat_wxyz: tuple[float, float, float, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "xyz_m", _vec(self.xyz_m, 3, "Origin.xyz_m"))
        object.__setattr__(self, "rpy_rad", _vec(self.rpy_rad, 3, "Origin.rpy_rad"))
        if self.quat_wxyz is not None:
            if any(self.rpy_rad):
                raise ValueError("Origin: give rpy_rad or quat_wxyz, not both")
            q = frames.quat_normalize(np.array(_vec(self.quat_wxyz, 4, "Origin.quat_wxyz")))
            object.__setattr__(self, "quat_wxyz", tuple(float(c) for c in q))

    def rotation(self) -> np.ndarray:
        """(3, 3) ``R_parent_child``."""
        if self.quat_wxyz is not None:
            return frames.quat_to_mat(np.array(self.quat_wxyz))
        return rpy_to_mat(self.rpy_rad)

    def matrix(self) -> np.ndarray:
        """(4, 4) ``T_parent_child``."""
        T = np.eye(4)
        T[:3, :3] = self.rotation()
        T[:3, 3] = self.xyz_m
        return T

    def quat(self) -> np.ndarray:
        """(4,) ``(w, x, y, z)`` of ``R_parent_child``, ``w >= 0``."""
        if self.quat_wxyz is not None:
            return np.array(self.quat_wxyz)
        return frames.quat_from_euler_xyz(np.array(self.rpy_rad))

    def rpy(self) -> np.ndarray:
        """(3,) URDF roll-pitch-yaw of ``R_parent_child``, rad."""
        if self.quat_wxyz is not None:
            return mat_to_rpy(self.rotation())
        return np.array(self.rpy_rad)


@dataclass(frozen=True)
class JointSpec:
    """One revolute joint and the link it moves.

    Attributes:
        name: Joint name (MJCF joint, URDF joint, actuator name in the standalone MJCF).
        link_name: Name of the child link (MJCF body, URDF link).
        origin: Joint frame in the parent link's frame.
        lower_rad: Lower position limit, rad.
        upper_rad: Upper position limit, rad; must exceed ``lower_rad``.
        velocity_rad_s: Velocity limit, rad/s (URDF ``<limit velocity>``; MJCF has no field).
        effort_nm: Torque limit, N m (URDF ``<limit effort>``; the standalone MJCF motor's
            ``ctrlrange``).
        mass_kg: Mass of the child link, kg (all of it in the link's geom).
        radius_m: Radius of the link's capsule (or sphere) geom, metres.
        axis: Rotation axis in the joint frame, a unit vector.
        geom_from_m: Start of the link's capsule in the link frame, metres.
        geom_to_m: End of the link's capsule in the link frame, metres; None: the next joint's
            origin (the flange for the last arm joint; the link origin for a gripper jaw).
        armature_kg_m2: Reflected rotor inertia (MJCF ``armature``), kg m^2.
        damping_nm_s_per_rad: Viscous damping (MJCF ``damping``, URDF ``<dynamics damping>``),
            N m s / rad.
    """

    name: str
    link_name: str
    origin: Origin
    lower_rad: float
    upper_rad: float
    velocity_rad_s: float
    effort_nm: float
    mass_kg: float
    radius_m: float
    axis: Vec3 = (0.0, 0.0, 1.0)
    geom_from_m: Vec3 = (0.0, 0.0, 0.0)
    geom_to_m: Vec3 | None = None
    armature_kg_m2: float = 0.0
    damping_nm_s_per_rad: float = 0.0

    def __post_init__(self) -> None:
        who = f"joint {self.name!r}"
        if not self.name or not self.link_name:
            raise ValueError(f"{who}: name and link_name must be non-empty")
        if not self.lower_rad < self.upper_rad:
            raise ValueError(
                f"{who}: lower limit {self.lower_rad} rad is not below upper limit "
                f"{self.upper_rad} rad; give lower_rad < upper_rad (swap them if inverted)"
            )
        for field_name in ("velocity_rad_s", "effort_nm", "mass_kg", "radius_m"):
            if not getattr(self, field_name) > 0:
                raise ValueError(
                    f"{who}: {field_name} must be > 0, got {getattr(self, field_name)}"
                )
        for field_name in ("armature_kg_m2", "damping_nm_s_per_rad"):
            if not getattr(self, field_name) >= 0:
                raise ValueError(
                    f"{who}: {field_name} must be >= 0, got {getattr(self, field_name)}"
                )
        axis = _vec(self.axis, 3, f"{who} axis")
        if abs(math.hypot(*axis) - 1.0) > 1e-9:
            raise ValueError(f"{who}: axis must be a unit vector, got {axis}")
        object.__setattr__(self, "axis", axis)
        object.__setattr__(self, "geom_from_m", _vec(self.geom_from_m, 3, f"{who} geom_from_m"))
        if self.geom_to_m is not None:
            object.__setattr__(self, "geom_to_m", _vec(self.geom_to_m, 3, f"{who} geom_to_m"))


@dataclass(frozen=True)
class ArmChain:
    """A serial arm on a fixed base: its joints, flange, TCP, optional gripper jaw, home pose.

    Attributes:
        name: Model name (``<mujoco model>``, ``<robot name>``, file stem).
        base_link: Name of the base link (the fixed body at the origin).
        joints: The arm joints from base to flange (the IK joints), in order.
        flange: Flange frame in the last arm link's frame (where a gripper mounts).
        tcp: Tool centre point in the flange frame; z along the tool's approach direction.
        home_rad: Home configuration of the arm joints, rad; within the limits.
        base_mass_kg: Mass of the base link, kg.
        base_radius_m: Radius of the base cylinder, metres.
        base_height_m: Height of the base cylinder (from the mounting plane z = 0 up), metres.
        gripper: Gripper jaw joint, child of the last arm link (origin in that link's frame);
            not an arm joint. None: no jaw in the model.
        gripper_home_rad: Jaw position in the home keyframe, rad.
        provenance: Where the numbers come from; written as a comment into both files.
    """

    name: str
    base_link: str
    joints: tuple[JointSpec, ...]
    flange: Origin
    tcp: Origin
    home_rad: tuple[float, ...]
    base_mass_kg: float
    base_radius_m: float
    base_height_m: float
    gripper: JointSpec | None = None
    gripper_home_rad: float = 0.0
    provenance: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "joints", tuple(self.joints))
        if not self.joints:
            raise ValueError(f"arm {self.name!r}: needs at least one joint")
        specs = self.all_joints
        joint_names = [j.name for j in specs]
        link_names = [self.base_link] + [j.link_name for j in specs]
        for kind, names, reserved in (
            ("joint", joint_names, _RESERVED_JOINTS),
            ("link", link_names, _RESERVED_LINKS),
        ):
            dup = sorted({n for n in names if names.count(n) > 1 or n in reserved})
            if dup:
                raise ValueError(
                    f"arm {self.name!r}: {kind} names {dup} repeat or are reserved {reserved}"
                )
        home = _vec(self.home_rad, len(self.joints), f"arm {self.name!r} home_rad")
        object.__setattr__(self, "home_rad", home)
        for j, q in zip(self.joints, home, strict=True):
            if not j.lower_rad <= q <= j.upper_rad:
                raise ValueError(
                    f"arm {self.name!r}: home {q} rad of {j.name!r} is outside "
                    f"[{j.lower_rad}, {j.upper_rad}]"
                )
        if self.gripper is not None and not (
            self.gripper.lower_rad <= self.gripper_home_rad <= self.gripper.upper_rad
        ):
            raise ValueError(f"arm {self.name!r}: gripper_home_rad is outside the jaw's limits")
        for field_name in ("base_mass_kg", "base_radius_m", "base_height_m"):
            if not getattr(self, field_name) > 0:
                raise ValueError(f"arm {self.name!r}: {field_name} must be > 0")
        if "--" in self.provenance:
            raise ValueError("provenance must not contain '--' (it goes into XML comments)")

    @property
    def all_joints(self) -> tuple[JointSpec, ...]:
        """The arm joints, then the gripper jaw (if any): the model's joint (qpos) order."""
        return self.joints + ((self.gripper,) if self.gripper is not None else ())

    @property
    def arm_joint_names(self) -> tuple[str, ...]:
        """Names of the arm (IK) joints, base to flange."""
        return tuple(j.name for j in self.joints)

    @property
    def lower_rad(self) -> np.ndarray:
        """(n,) lower limits of the arm joints, rad."""
        return np.array([j.lower_rad for j in self.joints])

    @property
    def upper_rad(self) -> np.ndarray:
        """(n,) upper limits of the arm joints, rad."""
        return np.array([j.upper_rad for j in self.joints])


# ---------------------------------------------------------------------------------------------
# Forward kinematics.


def fk_mats(chain: ArmChain, q_rad: Sequence[float] | np.ndarray) -> dict[str, np.ndarray]:
    """(4, 4) ``T_base_<frame>`` of every arm link, ``flange`` and ``tcp`` at arm joints ``q_rad``.

    Args:
        chain: The arm.
        q_rad: (n,) arm joint positions, rad (the gripper jaw is not needed).

    Returns:
        Link name (and ``"flange"``, ``"tcp"``) -> pose in the base link frame.
    """
    q = np.asarray(q_rad, dtype=np.float64)
    if q.shape != (len(chain.joints),):
        raise ValueError(f"q_rad must have shape ({len(chain.joints)},), got {q.shape}")
    out: dict[str, np.ndarray] = {}
    T = np.eye(4)
    for j, qi in zip(chain.joints, q, strict=True):
        T_joint = np.eye(4)
        T_joint[:3, :3] = axis_angle_mat(j.axis, float(qi))
        T = T @ j.origin.matrix() @ T_joint
        out[j.link_name] = T
    out["flange"] = T @ chain.flange.matrix()
    out["tcp"] = out["flange"] @ chain.tcp.matrix()
    return out


def fk_tcp_mat(chain: ArmChain, q_rad: Sequence[float] | np.ndarray) -> np.ndarray:
    """(4, 4) ``T_base_tcp`` at arm joint positions ``q_rad`` (n,), rad."""
    return fk_mats(chain, q_rad)["tcp"]


def link_segment(chain: ArmChain, spec: JointSpec) -> tuple[np.ndarray, np.ndarray]:
    """Ends (3,) and (3,) of ``spec``'s link geom in its link frame, metres."""
    start = np.array(spec.geom_from_m)
    if spec.geom_to_m is not None:
        return start, np.array(spec.geom_to_m)
    if spec is chain.gripper:
        return start, np.zeros(3)
    i = chain.joints.index(spec)
    nxt = chain.joints[i + 1].origin if i + 1 < len(chain.joints) else chain.flange
    return start, np.array(nxt.xyz_m)


# ---------------------------------------------------------------------------------------------
# Writers.


def _n(x: float) -> str:
    """Shortest round-trip decimal of ``x`` (so both files carry the exact float)."""
    x = float(x)
    if abs(x) < 1e-15:
        return "0"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def _v(x: Sequence[float] | np.ndarray) -> str:
    return " ".join(_n(c) for c in x)


def _pose_attrs(origin: Origin) -> str:
    attrs = f'pos="{_v(origin.xyz_m)}"'
    q = origin.quat()
    if not np.allclose(q, [1.0, 0.0, 0.0, 0.0], rtol=0.0, atol=1e-15):
        attrs += f' quat="{_v(q)}"'
    return attrs


def _mjcf_link_geom(chain: ArmChain, spec: JointSpec) -> str:
    p0, p1 = link_segment(chain, spec)
    common = (
        f'name="{spec.link_name}_geom" size="{_n(spec.radius_m)}" mass="{_n(spec.mass_kg)}" '
        f'contype="2" conaffinity="0" rgba="{ARM_RGBA}"'
    )
    if np.linalg.norm(p1 - p0) < MIN_SEGMENT_M:
        return f'<geom type="sphere" pos="{_v(p0)}" {common}/>'
    return f'<geom type="capsule" fromto="{_v(p0)} {_v(p1)}" {common}/>'


def _mjcf_joint_body(chain: ArmChain, spec: JointSpec, indent: str) -> str:
    return "\n".join(
        [
            f'{indent}<body name="{spec.link_name}" {_pose_attrs(spec.origin)}>',
            f'{indent}  <joint name="{spec.name}" type="hinge" axis="{_v(spec.axis)}" '
            f'range="{_n(spec.lower_rad)} {_n(spec.upper_rad)}" '
            f'armature="{_n(spec.armature_kg_m2)}" damping="{_n(spec.damping_nm_s_per_rad)}"/>',
            f"{indent}  {_mjcf_link_geom(chain, spec)}",
        ]
    )


def to_mjcf_body(chain: ArmChain, tool_xml: str | None = None) -> str:
    """MJCF of the arm: the base body (at its parent's origin) with the nested link bodies.

    Each link body has a hinge ``<joint>`` (``range``, ``armature``, ``damping``) and one
    capsule geom with the link mass; the last arm link holds a body ``flange`` with a site
    ``tcp`` and, if the chain has one, the gripper jaw body. Radians: the including model needs
    ``<compiler angle="radian"/>``.

    Args:
        chain: The arm.
        tool_xml: MJCF put inside the ``flange`` body instead of the ``tcp`` site (a gripper
            that carries its own ``tcp`` site, e.g. the twin's hand); None: the chain's site.
    """
    h = chain.base_height_m
    lines = [
        f'<body name="{chain.base_link}">',
        f'  <geom name="{chain.base_link}_geom" type="cylinder" pos="0 0 {_n(h / 2)}" '
        f'size="{_n(chain.base_radius_m)} {_n(h / 2)}" mass="{_n(chain.base_mass_kg)}" '
        f'contype="2" conaffinity="0" rgba="{BASE_RGBA}"/>',
    ]
    depth = 1
    for spec in chain.joints:
        lines.append(_mjcf_joint_body(chain, spec, "  " * depth))
        depth += 1
    ind = "  " * depth
    lines += [
        f'{ind}<body name="flange" {_pose_attrs(chain.flange)}>',
        f'{ind}  <site name="tcp" {_pose_attrs(chain.tcp)} size="0.005" rgba="0 1 0 0.5"/>'
        if tool_xml is None
        else tool_xml,
        f"{ind}</body>",
    ]
    if chain.gripper is not None:
        lines += [_mjcf_joint_body(chain, chain.gripper, ind), f"{ind}</body>"]
    for d in range(depth - 1, -1, -1):
        lines.append("  " * d + "</body>")
    return "\n".join(lines)


def _comment(chain: ArmChain, writer: str) -> str:
    text = f"{chain.name}: written by sim.arms.chain.{writer} (regenerate with "
    text += "`python -m sim.arms.export sim/arms/models`; do not edit by hand)."
    if chain.provenance:
        text += f" {chain.provenance}"
    return f"<!-- {text} -->"


def to_mjcf_model(chain: ArmChain) -> str:
    """A standalone MJCF: the arm on a fixed base at the world origin, torque motors, home key.

    One ``<motor>`` per joint (the gripper jaw too), named like its joint, with ``ctrlrange``
    = +- the joint's effort limit (N m, gear 1). Keyframe ``home`` holds the home pose. The floor
    plane at z = 0 is visual only (it collides with nothing).
    """
    motors = "\n".join(
        f'    <motor name="{j.name}" joint="{j.name}" '
        f'ctrlrange="{_n(-j.effort_nm)} {_n(j.effort_nm)}"/>'
        for j in chain.all_joints
    )
    home = list(chain.home_rad) + ([chain.gripper_home_rad] if chain.gripper else [])
    body = "\n".join("    " + line for line in to_mjcf_body(chain).splitlines())
    return f"""<mujoco model="{chain.name}">
  {_comment(chain, "to_mjcf_model")}
  <compiler angle="radian" autolimits="true"/>
  <option integrator="implicitfast"/>
  <worldbody>
    <light name="top" pos="0 0 2" dir="0 0 -1" directional="true"/>
    <geom name="floor" type="plane" size="1 1 0.01" contype="0" conaffinity="0"
          rgba="0.5 0.52 0.55 1"/>
{body}
  </worldbody>
  <actuator>
{motors}
  </actuator>
  <keyframe>
    <key name="home" qpos="{_v(home)}"/>
  </keyframe>
</mujoco>
"""


def _urdf_inertial(mass_kg: float, com: np.ndarray, inertia: np.ndarray) -> str:
    I = inertia  # noqa: E741
    return (
        f'    <inertial>\n      <origin xyz="{_v(com)}" rpy="0 0 0"/>\n'
        f'      <mass value="{_n(mass_kg)}"/>\n'
        f'      <inertia ixx="{_n(I[0, 0])}" ixy="{_n(I[0, 1])}" ixz="{_n(I[0, 2])}" '
        f'iyy="{_n(I[1, 1])}" iyz="{_n(I[1, 2])}" izz="{_n(I[2, 2])}"/>\n    </inertial>'
    )


def _urdf_shape(origin_xyz: np.ndarray, rpy: np.ndarray, geometry: str) -> str:
    return "\n".join(
        f'    <{tag}>\n      <origin xyz="{_v(origin_xyz)}" rpy="{_v(rpy)}"/>\n'
        f"      <geometry>{geometry}</geometry>\n    </{tag}>"
        for tag in ("visual", "collision")
    )


def _urdf_link(chain: ArmChain, spec: JointSpec) -> str:
    p0, p1 = link_segment(chain, spec)
    com, inertia = capsule_inertia(spec.mass_kg, spec.radius_m, p0, p1)
    seg = p1 - p0
    length = float(np.linalg.norm(seg))
    if length < MIN_SEGMENT_M:
        shape = _urdf_shape(p0, np.zeros(3), f'<sphere radius="{_n(spec.radius_m)}"/>')
    else:
        # URDF has no capsule: a cylinder of the same radius between the two joints, its z
        # axis along the segment.
        u = seg / length
        R = axis_angle_mat(*z_to_axis_angle(u))
        shape = _urdf_shape(
            com, mat_to_rpy(R), f'<cylinder radius="{_n(spec.radius_m)}" length="{_n(length)}"/>'
        )
    return (
        f'  <link name="{spec.link_name}">\n'
        f"{_urdf_inertial(spec.mass_kg, com, inertia)}\n{shape}\n  </link>"
    )


def _urdf_joint(spec: JointSpec, parent: str) -> str:
    return (
        f'  <joint name="{spec.name}" type="revolute">\n'
        f'    <parent link="{parent}"/>\n    <child link="{spec.link_name}"/>\n'
        f'    <origin xyz="{_v(spec.origin.xyz_m)}" rpy="{_v(spec.origin.rpy())}"/>\n'
        f'    <axis xyz="{_v(spec.axis)}"/>\n'
        f'    <limit lower="{_n(spec.lower_rad)}" upper="{_n(spec.upper_rad)}" '
        f'velocity="{_n(spec.velocity_rad_s)}" effort="{_n(spec.effort_nm)}"/>\n'
        f'    <dynamics damping="{_n(spec.damping_nm_s_per_rad)}"/>\n  </joint>'
    )


def _urdf_fixed(name: str, parent: str, child: str, origin: Origin) -> str:
    return (
        f'  <joint name="{name}" type="fixed">\n'
        f'    <parent link="{parent}"/>\n    <child link="{child}"/>\n'
        f'    <origin xyz="{_v(origin.xyz_m)}" rpy="{_v(origin.rpy())}"/>\n  </joint>\n'
        f'  <link name="{child}"/>'
    )


def to_urdf(chain: ArmChain) -> str:
    """URDF of the arm: links with inertials and cylinder geoms, revolute joints, fixed frames.

    Joints carry ``<limit lower upper velocity effort>`` and ``<dynamics damping>``; links
    ``flange`` and ``tcp`` hang on fixed joints ``flange_joint`` and ``tcp_joint``. A
    ``<mujoco><compiler fusestatic="false"/></mujoco>`` element (ignored by other URDF
    parsers) keeps MuJoCo from merging those frames away when it loads the file.
    """
    h = chain.base_height_m
    base_shape = _urdf_shape(
        np.array([0.0, 0.0, h / 2]),
        np.zeros(3),
        f'<cylinder radius="{_n(chain.base_radius_m)}" length="{_n(h)}"/>',
    )
    base_inertial = _urdf_inertial(
        chain.base_mass_kg,
        np.array([0.0, 0.0, h / 2]),
        cylinder_inertia(chain.base_mass_kg, chain.base_radius_m, h),
    )
    parts = [
        '<?xml version="1.0"?>',
        _comment(chain, "to_urdf"),
        f'<robot name="{chain.name}">',
        '  <mujoco>\n    <compiler fusestatic="false" discardvisual="true"/>\n  </mujoco>',
        f'  <link name="{chain.base_link}">\n{base_inertial}\n{base_shape}\n  </link>',
    ]
    parent = chain.base_link
    for spec in chain.joints:
        parts += [_urdf_joint(spec, parent), _urdf_link(chain, spec)]
        parent = spec.link_name
    parts.append(_urdf_fixed("flange_joint", parent, "flange", chain.flange))
    parts.append(_urdf_fixed("tcp_joint", "flange", "tcp", chain.tcp))
    if chain.gripper is not None:
        parts += [_urdf_joint(chain.gripper, parent), _urdf_link(chain, chain.gripper)]
    parts.append("</robot>\n")
    return "\n".join(parts)
