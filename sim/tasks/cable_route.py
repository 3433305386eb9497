"""cable_route: lay a cable held by its end into a clip on the table (a deformable object,
routed through a tight slot; modelled on HIL-SERL's cable routing and clipping).

Scene: a cable (``N_LINKS`` capsules of ``LINK_M``, radius ``CABLE_RADIUS_M``: a chain of
bodies joined by ball joints with bending stiffness and damping, the discrete elastic rod that
MuJoCo's cable composite builds, written out so that the last link carries the tab) leaves a
fixed anchor block on the table at a random xy and yaw; its other end is a rigid tab that
starts in the closed gripper (like peg_insert's peg). A clip (a block whose slot has its floor
``SLOT_FLOOR_M`` above the table, between two rails with rounded tops ``CLIP_H_M`` high that
stand ``CLIP_GAP_M`` apart, 0.8 mm less than the cable is thick, and give outwards on springs:
a snap fit) stands at a random distance from the anchor, on
a bearing ``CLIP_TURN_RAD`` off the anchor's yaw (the cable's straight, resting line), its slot
along the line from the anchor. The TCP starts pointing down at a random height, on a bearing
from the anchor at least ``START_BEARING_MIN_RAD`` off the clip's, so the cable starts away
from the clip.

Why it is hard, like the real one: the cable's shape is not commanded, only its end; it sags,
bends at the anchor and drags on the table. It must be lifted over the clip with its line on
the slot (a cable dragged along the table meets the clip's side: the slot's floor is above the
table), the line at the clip is not the line from the anchor to the hand, and it must come down
to within a few millimetres of the slot's centre line and be drawn taut so that it pushes the
rails apart and snaps in (lowered without tension it rests on the rails). From cameras the 8 mm
cable and the slot are a few pixels wide.

Success: the cable runs through the slot: where its axis crosses each end of the channel it is
between the rails and down on the floor (axis at most ``SEATED_Z_M`` high). Failure: the tab
left the hand (more than ``DROP_DISTANCE_M`` from the TCP). The gripper stays closed (the
task's fixed gripper).

Reward (dense cost in [-1, 0); exactly 0 on success, ``FAILURE_REWARD`` on failure)::

    line  = 1 - tanh(|cable's lateral offset at the clip| / 1 cm)   # the line over the slot
    depth = clip((rail top - cable height at the clip) / (rail top - SEATED_Z_M), 0, 1)
    r = 0.5 line + 0.5 line * depth - 1

"the cable at the clip" is the point of the cable nearest the channel's centre line, measured
in the clip frame. Privileged truth is in ``privileged_spec`` (base frame, metres, float32).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import frames
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import TaskStatus
from sim import model as mdl
from sim.model import MjcfFragment
from sim.tasks.base import FAILURE_REWARD, SimTask
from sim.tasks.fixtures import STIFF_CONTACT

N_LINKS = 15
LINK_M = 0.02
"""Length of one cable link; the cable is ``N_LINKS * LINK_M`` (30 cm) from anchor to tab."""
CABLE_RADIUS_M = 0.004
LINK_MASS_KG = 0.002
BEND_STIFFNESS = 0.004
"""Ball-joint stiffness between two links, N m / rad (a bending stiffness of about 8e-5 N m^2,
a USB-cable-like cord)."""
BEND_DAMPING = 0.0004
LINK_ARMATURE = 2e-5
"""Rotor-like inertia on each ball joint: keeps the light links stable at the 2 ms step."""
TAB_HALF_M = (0.015, 0.010, 0.012)
"""Half sizes of the tab at the cable's end: along the cable, across (the fingers close on
its 20 mm), height, metres."""
TAB_CENTER_M = TAB_HALF_M[0] + 0.002
"""The tab's centre (where the fingers hold it) beyond the cable's end, along the cable, metres."""
TAB_MASS_KG = 0.01
GRASP_SQUEEZE_M = 0.0004
"""The jaws start this much narrower than the tab (a firm grip from the first step)."""
CLIP_GAP_M = 0.0072
"""Clear width of the slot between the rails at rest (the 8 mm cable spreads them 0.4 mm a
side), metres."""
CLIP_H_M = 0.035
"""Height of the rails' top over the table, metres."""
SLOT_FLOOR_M = 0.018
"""Height of the slot's floor over the table: a cable dragged along the table meets the
clip's side and cannot slide into the slot, it must be lifted over and pressed in, metres."""
RAIL_RADIUS_M = 0.005
RAIL_GIVE_M = 0.003
"""How far each rail can be pushed outwards on its spring, metres."""
RAIL_STIFFNESS = 3000.0
"""Each rail's spring, N/m: 0.4 mm of spread (the cable in) takes 1.2 N a side."""
RAIL_DAMPING = 5.0
RAIL_MASS_KG = 0.005
"""The rails' rounded tops (the lead-in), metres."""
CLIP_LEN_M = 0.024
"""Length of the channel along the cable, metres."""
SEATED_Z_M = SLOT_FLOOR_M + CABLE_RADIUS_M + 0.003
"""Success: the cable's axis at most this high where it crosses each end of the channel (on
the slot's floor, within 3 mm), metres."""
CHANNEL_TOL_M = 0.0005
"""How far beyond the rails' inner faces the cable's axis may be measured at an end of the
channel (the polyline through the links' points cuts corners by up to this much), metres."""
ANCHOR_XY_LOW_M = (0.50, -0.21)
ANCHOR_XY_HIGH_M = (0.54, -0.19)
ANCHOR_NOMINAL_XY_M = (0.52, -0.20)
ANCHOR_YAW_MAX_RAD = 0.15
"""The cable leaves the anchor along +y, turned by up to this much."""
CLIP_DISTANCE_M = (0.13, 0.17)
"""Distance of the clip's centre from the anchor, metres."""
CLIP_TURN_RAD = (0.25, 0.45)
"""The clip's bearing from the anchor differs from the anchor's yaw (the cable's straight,
resting line) by this much, to either side: a cable left to straighten lies 3-8 cm beside the
channel, and routing it bends it at the anchor."""
START_DISTANCE_M = (0.17, 0.22)
START_HEIGHT_M = (0.08, 0.13)
START_BEARING_MIN_RAD = 0.45
START_BEARING_MAX_RAD = 0.75
"""The start's bearing from the anchor differs from the clip's by this much (either side)."""
START_XY_LOW_M = (0.36, -0.16)
START_XY_HIGH_M = (0.66, 0.16)
"""The start is kept within this box (where the arm reaches pointing down)."""
CABLE_CONTACT = (
    'friction="0.5 0.01 0.0001" solref="0.008 1" solimp="0.95 0.995 0.001" solmix="1000"'
)
"""The cable's and the clip's contacts: stiffer than MuJoCo's default (with which the tension
of a taut cable pulled 2 g links through the clip's block) and still stable for the light
links at the 2 ms step (the tab's 4 ms time constant made them blow up)."""
DROP_DISTANCE_M = 0.03
MAX_EPISODE_STEPS = 150
ACTION_SCALE_M = 0.02
HOLD_QUAT = DOWN_QUAT

DESCRIPTION = (
    "Lay a 30 cm cable (8 mm thick, anchored to the table at one end) into a clip on the table: "
    "the cable's other end is a tab held in the closed gripper; the clip is a snap fit (its "
    "rails, 3.5 cm high on a slot floor 1.8 cm above the table, stand 7.2 mm apart and give on "
    "springs), 13-17 cm from the anchor and 0.25-0.45 rad off the cable's resting line; the "
    "cable starts off to one side. "
    "Success: the cable runs through the slot, down on its floor at both ends. Failure: the tab "
    "left the hand. Dense cost in [-1, 0): line over the slot + depth in it - 1, 0 on success, "
    "-100 on failure."
)
DEFAULT_SAFETY = SafetyConfig(
    workspace_low_m=(0.26, -0.24, 0.015),
    workspace_high_m=(0.74, 0.22, 0.22),
    orientation_center_quat=DOWN_QUAT,
    orientation_max_rad=0.8,
    max_step_m=0.04,
    max_step_rad=0.2,
    watchdog_timeout_s=0.5,
)
"""The box holds every anchor, clip and start; the TCP may come down to 1.5 cm (the tab's
bottom then just over the table)."""


def bearing(angle: float) -> np.ndarray:
    """(2,) unit vector: +y turned by ``angle`` towards +x."""
    return np.array([np.sin(angle), np.cos(angle)])


def arc_directions(start: np.ndarray, end: np.ndarray, n: int, length: float) -> np.ndarray:
    """(n, 3) unit directions of ``n`` equal links of total ``length`` from ``start`` to
    ``end`` (3,): chords of a circular arc bowed upwards in the vertical plane through the
    chord from ``start`` to ``end`` (a straight line if that chord is as long as the chain)."""
    chord = np.asarray(end, dtype=np.float64) - np.asarray(start, dtype=np.float64)
    c = float(np.linalg.norm(chord))
    u = chord / max(c, 1e-12)
    if c >= length - 1e-9:
        return np.tile(u, (n, 1))
    # Each link subtends phi of the circle: link = 2 R sin(phi / 2), chord = 2 R sin(n phi / 2),
    # so sin(n phi / 2) / sin(phi / 2) = n c / length, decreasing in phi on (0, 2 pi / n).
    target = n * c / length
    lo, hi = 1e-12, 2 * np.pi / n - 1e-12
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.sin(n * mid / 2) / np.sin(mid / 2) > target:
            lo = mid
        else:
            hi = mid
    phi = 0.5 * (lo + hi)
    side = np.cross(np.cross(u, [0.0, 0.0, 1.0]), u)  # up, perpendicular to the chord
    if np.linalg.norm(side) < 1e-9:
        side = np.array([1.0, 0.0, 0.0])
    side /= np.linalg.norm(side)
    # Link k's direction turns from +theta/2 to -theta/2 (theta = n phi) about the arc's normal.
    angles = n * phi / 2 - phi * (np.arange(n) + 0.5)
    return np.cos(angles)[:, None] * u + np.sin(angles)[:, None] * side


def frame_with_x(x: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """(3, 3) rotation whose x axis is ``x``, turned from ``prev`` (3, 3) by the smallest
    rotation (no twist along the cable)."""
    x0 = prev[:, 0]
    axis = np.cross(x0, x)
    s, c = float(np.linalg.norm(axis)), float(np.dot(x0, x))
    if s < 1e-12:
        return prev.copy()
    R = frames.quat_to_mat(frames.quat_from_rotvec(axis / s * np.arctan2(s, c)))
    return R @ prev


def clip_xml() -> str:
    """The clip in its frame (channel along y, centred on the origin): a block up to the slot's
    floor, then two rails (a box up to the rounded top, a horizontal capsule)."""
    hl = CLIP_LEN_M / 2
    rgba = f'rgba="0.15 0.35 0.75 1" {CABLE_CONTACT}'
    half_w = CLIP_GAP_M / 2 + 2 * RAIL_RADIUS_M
    out = [
        f'<geom name="clip_base" type="box" pos="0 0 {SLOT_FLOOR_M / 2}" '
        f'size="{half_w} {hl} {SLOT_FLOOR_M / 2}" {rgba}/>'
    ]
    for name, sign in (("px", 1.0), ("nx", -1.0)):
        x = sign * (CLIP_GAP_M / 2 + RAIL_RADIUS_M)
        zc = CLIP_H_M - RAIL_RADIUS_M
        # Each rail on a spring that lets it give outwards (a snap fit): the cable spreads it
        # when pressed in, and the rails close on it once it is in.
        out.append(
            f'<body name="clip_{name}"><joint name="clip_{name}_give" type="slide" '
            f'axis="{sign} 0 0" range="0 {RAIL_GIVE_M}" stiffness="{RAIL_STIFFNESS}" '
            f'damping="{RAIL_DAMPING}"/>'
            f'<geom name="clip_{name}_wall" type="box" pos="{x} 0 {(SLOT_FLOOR_M + zc) / 2}" '
            f'size="{RAIL_RADIUS_M} {hl} {(zc - SLOT_FLOOR_M) / 2}" mass="{RAIL_MASS_KG}" '
            f"{rgba}/>"
            f'<geom name="clip_{name}_top" type="capsule" fromto="{x} {-hl} {zc} {x} {hl} {zc}" '
            f'size="{RAIL_RADIUS_M}" mass="{RAIL_MASS_KG}" {rgba}/></body>'
        )
    return "\n      ".join(out)


def cable_xml() -> str:
    """The chain: link bodies ``cable_0 .. cable_{N-1}`` (each along its x, a ball joint at its
    start), then body ``cable_tab``; nested, starting at the anchor."""
    r, L = CABLE_RADIUS_M, LINK_M
    joint = (
        f'<joint type="ball" stiffness="{BEND_STIFFNESS}" damping="{BEND_DAMPING}" '
        f'armature="{LINK_ARMATURE}"/>'
    )
    geom = (
        f'<geom type="capsule" fromto="{r} 0 0 {L - r} 0 0" size="{r}" mass="{LINK_MASS_KG}" '
        f'contype="1" conaffinity="2" condim="3" {CABLE_CONTACT} '
        'rgba="0.1 0.1 0.1 1" group="2"/>'
    )
    tx, ty, tz = TAB_HALF_M
    swivel = f'<joint type="ball" damping="{BEND_DAMPING}" armature="{LINK_ARMATURE}"/>'
    tab = (
        f'<body name="cable_tab" pos="{L} 0 0">{swivel}'
        f'<geom name="cable_tab_geom" class="object" type="box" pos="{TAB_CENTER_M} 0 0" '
        f'size="{tx} {ty} {tz}" mass="{TAB_MASS_KG}" {STIFF_CONTACT} '
        'rgba="0.9 0.5 0.1 1"/></body>'
    )
    xml = tab
    for k in reversed(range(N_LINKS)):
        pos = "0 0 0" if k == 0 else f"{L} 0 0"
        xml = f'<body name="cable_{k}" pos="{pos}">{joint}{geom}{xml}</body>'
    return xml


class CableRouteTask(SimTask):
    """Lay a cable held by its end into a clip (see the module docstring)."""

    name = "cable_route"

    def __init__(self) -> None:
        super().__init__()
        self._clip_pose = frames.pose(
            np.array([ANCHOR_NOMINAL_XY_M[0], ANCHOR_NOMINAL_XY_M[1] + 0.15, 0.0]),
            np.array([1.0, 0.0, 0.0, 0.0]),
        )
        self._anchor_pose = frames.pose(
            np.array([*ANCHOR_NOMINAL_XY_M, CABLE_RADIUS_M]), self._yaw_quat(0.0)
        )

    @staticmethod
    def _yaw_quat(bearing_rad: float) -> np.ndarray:
        """Orientation whose x axis points along ``bearing(bearing_rad)`` (horizontal)."""
        # +x turned to +y is a yaw of +pi/2; a bearing towards +x turns it back.
        return frames.quat_from_rotvec(np.array([0.0, 0.0, np.pi / 2 - bearing_rad]))

    def mjcf_fragment(self) -> MjcfFragment:
        ax, ay = ANCHOR_NOMINAL_XY_M
        cx, cy, _ = self._clip_pose[:3]
        return MjcfFragment(
            worldbody=f"""
    <body name="clip" mocap="true" pos="{cx} {cy} {mdl.TABLE_TOP_Z_M}">
      {clip_xml()}
    </body>
    <body name="cable_anchor" mocap="true" pos="{ax} {ay} {mdl.TABLE_TOP_Z_M}">
      <geom name="anchor_block" type="box" pos="-0.015 0 0.012" size="0.015 0.015 0.012"
            rgba="0.3 0.3 0.3 1"/>
    </body>
    <body name="cable_root" pos="{ax} {ay} {CABLE_RADIUS_M}" quat="0.7071068 0 0 0.7071068">
      {cable_xml()}
    </body>""",
        )

    def on_bind(self) -> None:
        w = self.world
        m = w.model
        self._clip_mocap = int(m.body("clip").mocapid[0])
        self._anchor_mocap = int(m.body("cable_anchor").mocapid[0])
        self._links = [m.body(f"cable_{k}").id for k in range(N_LINKS)]
        self._tab = m.body("cable_tab").id
        self._tab_geoms = w.geom_ids_of_body("cable_tab")
        self._joints = [m.body(f"cable_{k}").jntadr[0] for k in range(N_LINKS)]
        self._joints.append(m.body("cable_tab").jntadr[0])
        self._qadr = [int(m.jnt_qposadr[j]) for j in self._joints]
        self._vadr = [int(m.jnt_dofadr[j]) for j in self._joints]
        self._root = m.body("cable_root").id
        self._start_tcp: np.ndarray | None = None

    def randomized_bodies(self) -> tuple[str, ...]:
        return ("cable_tab",)

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        return {
            "tcp_pose": ArraySpec((7,), "float32"),
            "tab_pos": ArraySpec((3,), "float32"),
            "anchor_pos": ArraySpec((3,), "float32"),
            "clip_pos": ArraySpec((3,), "float32"),
            "clip_quat": ArraySpec((4,), "float32", -1.0, 1.0),
            "cable_at_clip": ArraySpec((3,), "float32"),
            "line_offset_m": ArraySpec((1,), "float32"),
            "line_ok": ArraySpec((1,), "float32", 0.0, 1.0),
            "seat_depth_m": ArraySpec((1,), "float32"),
            "held": ArraySpec((1,), "float32", 0.0, 1.0),
        }

    # -- scene ------------------------------------------------------------------------------

    @property
    def clip_pose(self) -> np.ndarray:
        """(7,) the channel's centre on the table, its y axis along the channel."""
        return self._clip_pose.copy()

    @property
    def anchor_pos(self) -> np.ndarray:
        """(3,) where the cable leaves the anchor."""
        return self._anchor_pose[:3].copy()

    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        if self.randomize_objects:
            a_xy = rng.uniform(ANCHOR_XY_LOW_M, ANCHOR_XY_HIGH_M)
            a_yaw = float(rng.uniform(-ANCHOR_YAW_MAX_RAD, ANCHOR_YAW_MAX_RAD))
            c_dist = float(rng.uniform(*CLIP_DISTANCE_M))
            turn = float(rng.uniform(*CLIP_TURN_RAD))
            c_bear = a_yaw + (turn if rng.random() < 0.5 else -turn)
            side = 1.0 if rng.random() < 0.5 else -1.0
            off = float(rng.uniform(START_BEARING_MIN_RAD, START_BEARING_MAX_RAD))
            s_bear = c_bear + side * off
            s_dist = float(rng.uniform(*START_DISTANCE_M))
            s_h = float(rng.uniform(*START_HEIGHT_M))
        else:
            a_xy, a_yaw = np.array(ANCHOR_NOMINAL_XY_M), 0.0
            c_dist, c_bear = float(np.mean(CLIP_DISTANCE_M)), float(np.mean(CLIP_TURN_RAD))
            s_bear, s_dist = -0.6, float(np.mean(START_DISTANCE_M))
            s_h = float(np.mean(START_HEIGHT_M))
        d = self.world.data
        z0 = mdl.TABLE_TOP_Z_M
        self._anchor_pose = frames.pose(
            np.array([a_xy[0], a_xy[1], z0 + CABLE_RADIUS_M]), self._yaw_quat(a_yaw)
        )
        d.mocap_pos[self._anchor_mocap] = [a_xy[0], a_xy[1], z0]
        d.mocap_quat[self._anchor_mocap] = self._yaw_quat(a_yaw)
        c_xy = a_xy + c_dist * bearing(c_bear)
        # The clip's y axis (the channel) along the bearing: its x axis is the bearing turned
        # by -pi/2, i.e. a yaw of -bearing.
        q_clip = frames.quat_from_rotvec(np.array([0.0, 0.0, -c_bear]))
        self._clip_pose = frames.pose(np.array([c_xy[0], c_xy[1], z0]), q_clip)
        d.mocap_pos[self._clip_mocap] = self._clip_pose[:3]
        d.mocap_quat[self._clip_mocap] = q_clip
        s_xy = a_xy + s_dist * bearing(s_bear)
        s_xy = np.clip(s_xy, START_XY_LOW_M, START_XY_HIGH_M)
        start = np.array([s_xy[0], s_xy[1], z0 + s_h])
        self._start_tcp = frames.pose(start, np.array(HOLD_QUAT))
        return self._start_tcp.copy()

    def after_arm_reset(self) -> None:
        """Shape the cable from the anchor to the tab, and the tab between the closed jaws."""
        w = self.world
        m, d = w.model, w.data
        tcp = w.tcp_pose()
        R_tcp = frames.quat_to_mat(tcp[3:7])
        # The cable enters the tab from the tab's -x side; the tab's centre is at the TCP, its
        # x axis the one of the TCP frame that points away from the anchor (horizontal).
        away = tcp[:3] - self._anchor_pose[:3]
        x_tab = R_tcp[:, 0] if np.dot(R_tcp[:, 0], away) >= 0 else -R_tcp[:, 0]
        y_tab = np.cross([0.0, 0.0, 1.0], x_tab)
        y_tab /= np.linalg.norm(y_tab)
        R_tab = np.column_stack([x_tab, y_tab, np.cross(x_tab, y_tab)])
        attach = tcp[:3] - x_tab * TAB_CENTER_M
        # The root: at the anchor, x along its yaw.
        root_R = frames.quat_to_mat(self._anchor_pose[3:7])
        m.body_pos[self._root] = self._anchor_pose[:3]
        m.body_quat[self._root] = self._anchor_pose[3:7]
        # The first link leaves the anchor along its yaw (clear of the block behind it and of
        # the clip, which is off that line); the others bow up to the tab.
        first = root_R[:, 0]
        rest = arc_directions(
            self._anchor_pose[:3] + first * LINK_M, attach, N_LINKS - 1, (N_LINKS - 1) * LINK_M
        )
        dirs = np.vstack([first, rest])
        prev = root_R
        for k in range(N_LINKS):
            R = frame_with_x(dirs[k], prev)
            d.qpos[self._qadr[k] : self._qadr[k] + 4] = frames.mat_to_quat(prev.T @ R)
            prev = R
        d.qpos[self._qadr[-1] : self._qadr[-1] + 4] = frames.mat_to_quat(prev.T @ R_tab)
        for v in self._vadr:
            d.qvel[v : v + 3] = 0.0
        w.set_gripper_width(2 * TAB_HALF_M[1] - GRASP_SQUEEZE_M)
        w.set_gripper_target(1.0)
        w.forward()

    # -- reading ----------------------------------------------------------------------------

    def held(self) -> bool:
        """Both finger pads touch the tab."""
        return self.world.held_by_pads(self._tab_geoms)

    def cable_points(self) -> np.ndarray:
        """(2 N + 1, 3) points along the cable's axis: each link's start and middle, and the
        last link's end."""
        d = self.world.data
        pts = []
        for b in self._links:
            p, x = d.xpos[b], d.xmat[b].reshape(3, 3)[:, 0]
            pts += [p, p + x * LINK_M / 2]
        b = self._links[-1]
        pts.append(d.xpos[b] + d.xmat[b].reshape(3, 3)[:, 0] * LINK_M)
        return np.asarray(pts)

    def cable_in_clip_frame(self) -> np.ndarray:
        """:meth:`cable_points` in the clip frame (rows)."""
        R = frames.quat_to_mat(self._clip_pose[3:7])
        return (self.cable_points() - self._clip_pose[:3]) @ R

    @staticmethod
    def cable_at_clip(local: np.ndarray) -> np.ndarray:
        """(3,) in the clip frame: the point of the cable's polyline ``local``
        (:meth:`cable_in_clip_frame`) nearest the channel's centre line (the clip's z axis)."""
        best, best_d = local[0], np.inf
        for a, b in zip(local[:-1], local[1:], strict=True):
            ab = b[:2] - a[:2]
            t = float(np.clip(-np.dot(a[:2], ab) / max(np.dot(ab, ab), 1e-12), 0.0, 1.0))
            p = a + t * (b - a)
            dist = float(np.linalg.norm(p[:2]))
            if dist < best_d:
                best, best_d = p, dist
        return best

    @staticmethod
    def through_channel(local: np.ndarray) -> bool:
        """The cable (``local``: :meth:`cable_in_clip_frame`) runs through the channel: where
        its axis crosses each end of the channel
        (the planes ``y = +-CLIP_LEN_M / 2`` of the clip frame; of several crossings the one
        nearest the centre line), it is between the rails and down on the slot's floor (axis
        at most ``SEATED_Z_M`` high). A cable lying across a rail, or in the slot at one end
        only, does not count."""
        for end in (-CLIP_LEN_M / 2, CLIP_LEN_M / 2):
            best = np.inf
            for a, b in zip(local[:-1], local[1:], strict=True):
                if (a[1] - end) * (b[1] - end) > 0 or a[1] == b[1]:
                    continue
                t = (end - a[1]) / (b[1] - a[1])
                p = a + t * (b - a)
                if p[2] <= SEATED_Z_M:
                    best = min(best, abs(float(p[0])))
            if best > CLIP_GAP_M / 2 + CHANNEL_TOL_M:
                return False
        return True

    def evaluate(self) -> TaskStatus:
        w = self.world
        d = w.data
        tcp = w.tcp_pose()
        tab = d.xpos[self._tab] + d.xmat[self._tab].reshape(3, 3)[:, 0] * TAB_CENTER_M
        local = self.cable_in_clip_frame()
        at = self.cable_at_clip(local)
        lateral = float(at[0])
        along = float(at[1])
        in_channel = abs(lateral) <= CLIP_GAP_M / 2 + 0.001 and abs(along) <= CLIP_LEN_M / 2
        depth = float(CLIP_H_M - at[2])
        seated = in_channel and at[2] <= SEATED_Z_M and self.through_channel(local)
        held = self.held()
        dropped = float(np.linalg.norm(tab - tcp[:3])) > DROP_DISTANCE_M
        success = seated
        failure = dropped and not success
        line = 1.0 - float(np.tanh(abs(lateral) / 0.01))
        if success:
            reward = 0.0
        elif failure:
            reward = FAILURE_REWARD
        else:
            frac = float(np.clip(depth / (CLIP_H_M - SEATED_Z_M), 0.0, 1.0))
            reward = 0.5 * line + 0.5 * line * frac - 1.0
        f32 = np.float32
        R = frames.quat_to_mat(self._clip_pose[3:7])
        privileged = {
            "tcp_pose": tcp.astype(f32),
            "tab_pos": tab.astype(f32),
            "anchor_pos": self._anchor_pose[:3].astype(f32),
            "clip_pos": self._clip_pose[:3].astype(f32),
            "clip_quat": self._clip_pose[3:7].astype(f32),
            "cable_at_clip": (self._clip_pose[:3] + R @ at).astype(f32),
            "line_offset_m": np.array([lateral], dtype=f32),
            "line_ok": np.array([float(abs(lateral) <= CLIP_GAP_M / 2)], dtype=f32),
            "seat_depth_m": np.array([depth if in_channel else 0.0], dtype=f32),
            "held": np.array([float(held)], dtype=f32),
        }
        return TaskStatus(
            reward=float(reward),
            success=bool(success),
            failure=bool(failure),
            privileged=privileged,
        )
