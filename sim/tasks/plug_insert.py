"""plug_insert: pick a plug standing on the table and insert it into a socket with 0.5 mm total
clearance (a grasp first, then a tight insertion; modelled on HIL-SERL's USB and RAM tasks).

Scene: a rectangular plug (``PLUG_W_M`` x ``PLUG_T_M`` section, ``PLUG_H_M`` tall, its bottom
edges chamfered by ``PLUG_CHAMFER_M`` like a connector's lead-in) stands upright on the table at
a random xy in ``PLUG_XY_LOW_M .. PLUG_XY_HIGH_M`` and a random yaw in ``+-PLUG_YAW_MAX_RAD``. A
fixed socket (a mocap body: nothing pushes it) stands at a random xy in ``SOCKET_XY_LOW_M ..
SOCKET_XY_HIGH_M`` and yaw in ``+-SOCKET_YAW_MAX_RAD``: four walls around an opening of
``(PLUG_W_M + CLEARANCE_M) x (PLUG_T_M + CLEARANCE_M)``, ``SOCKET_DEPTH_M`` deep (0.25 mm a
side; a peg_insert hole has 1.5 mm). The TCP starts pointing down at a random point above the
table, gripper open.

Why it is hard, like the real ones: the plug must be grasped squarely (the fingers close across
its thin side), carried, turned to the socket's yaw to within about 0.025 rad (the plug fits in
two orientations, pi apart), and lowered to within 0.25 mm of the socket's axis; a plug that
tilted in the grasp or lands a millimetre off jams on the rim. Control rotation
(``--control-rotation``): without it the plug's and socket's yaws rarely agree.

Success: the plug's tip is inside the opening and at least ``SUCCESS_DEPTH_M`` below the socket
top, the plug held by both pads (pressed in: a real connector needs the insertion force, so a
plug dropped over the socket that slides in does not count). Failure: the plug fell over
(tilted more than ``TIPPED_RAD`` while not held) or left the table.

Reward (dense cost in [-1, 0); exactly 0 on success, ``FAILURE_REWARD`` on failure)::

    reach  = 1 - tanh(|tcp - grasp point| / 0.1 m)                # to the plug
    carry  = 1 - tanh(|tip - socket top|_xy / 0.03 m)             # plug over the socket
    align  = 1 - tanh(|tip - socket axis|_xy / 0.5 mm) * yaw_ok   # on the axis, turned
    depth  = clip(insertion depth / SUCCESS_DEPTH_M, 0, 1)
    r = 0.15 reach + 0.1 held + held * (0.15 carry + 0.15 lift + 0.1 align + 0.35 depth) - 1

``lift`` is the plug's lift over ``LIFT_M`` (clipped to 1) while it is not yet over the socket,
and 1 once it is. Privileged truth is in ``privileged_spec`` (base frame, metres, float32).
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
from sim.tasks.fixtures import (
    STIFF_CONTACT,
    bevelled_prism,
    mesh_vertex_attr,
    ring_geoms,
    wrap_symmetric,
)
from sim.tasks.peg_insert import yaw_of

PLUG_W_M = 0.020
"""Plug width along its x axis (along the fingers' pads), metres."""
PLUG_T_M = 0.012
"""Plug thickness along its y axis (the fingers close across it), metres."""
PLUG_H_M = 0.07
PLUG_MASS_KG = 0.03
PLUG_CHAMFER_M = 0.001
"""The plug's bottom edges are bevelled by this much (a connector's lead-in), metres."""
CLEARANCE_M = 0.0005
"""Total clearance of the opening on each axis (0.25 mm a side), metres."""
SOCKET_DEPTH_M = 0.03
SOCKET_SIDE_M = 0.08
"""Outer side of the square socket block, metres."""
SUCCESS_DEPTH_M = 0.02
"""Success needs the plug's tip this far below the socket top, metres."""
GRASP_BELOW_TOP_M = 0.02
"""The grasp: the TCP this far below the plug's top (its tip then 5 cm below the TCP, and the
fingers clear of the socket top at full depth)."""
PLUG_XY_LOW_M = (0.42, -0.16)
PLUG_XY_HIGH_M = (0.56, -0.04)
PLUG_NOMINAL_XY_M = (0.48, -0.10)
PLUG_YAW_MAX_RAD = 0.5
SOCKET_XY_LOW_M = (0.46, 0.05)
SOCKET_XY_HIGH_M = (0.58, 0.15)
SOCKET_NOMINAL_XY_M = (0.52, 0.10)
SOCKET_YAW_MAX_RAD = 0.3
START_LOW_M = (0.42, -0.10, 0.14)
START_HIGH_M = (0.56, 0.10, 0.22)
START_NOMINAL_M = (0.49, 0.0, 0.18)
LIFT_M = 0.04
"""Lift of the plug's tip over the table that the ``lift`` reward term saturates at, metres."""
TIPPED_RAD = 0.7
"""A plug tilted more than this (not held) has fallen over: the episode fails."""
MAX_EPISODE_STEPS = 200
"""At 10 Hz; the scripted expert needs 55-85 steps (50 seeded episodes)."""
ACTION_SCALE_M = 0.01
"""TCP translation per step for an action of 1.0, metres (as peg_insert: exploration noise
must stay near the clearance)."""

DESCRIPTION = (
    "Pick a 2.0 x 1.2 cm plug, 7 cm tall, standing at a random position and yaw on the table, "
    "and insert it 2 cm deep into a socket at a random position and yaw whose opening is 0.5 mm "
    "wider than the plug on each axis (0.25 mm a side; the plug fits two ways, pi apart). "
    "The TCP starts pointing down above the table, gripper open. Success: the plug's tip is "
    "inside the opening and 2 cm below the socket top, the plug in the hand (pressed in, not "
    "dropped in). Failure: the plug fell over or left the "
    "table. Needs rotation control. Dense cost in [-1, 0): reach + held + carry + lift + align "
    "+ depth - 1, 0 on success, -100 on failure."
)
DEFAULT_SAFETY = SafetyConfig(
    workspace_low_m=(0.36, -0.22, 0.03),
    workspace_high_m=(0.66, 0.22, 0.28),
    orientation_center_quat=DOWN_QUAT,
    orientation_max_rad=1.0,
    max_step_m=0.03,
    max_step_rad=0.2,
    watchdog_timeout_s=0.5,
)
"""The box reaches every plug and socket pose; the cone lets the TCP turn to any plug yaw and
then to the socket's (at most 0.5 + 0.3 rad from the start)."""


def wrap_half_pi(angle: float) -> float:
    """``angle`` mod pi into [-pi/2, pi/2) (the plug is symmetric under a half turn)."""
    return wrap_symmetric(angle, np.pi)


def plug_mesh_vertices() -> np.ndarray:
    """(12, 3) vertices of the plug, centred on its body origin: its bottom edges bevelled by
    ``PLUG_CHAMFER_M``."""
    return bevelled_prism(PLUG_W_M, PLUG_T_M, PLUG_H_M, PLUG_CHAMFER_M)


def _socket_geoms() -> str:
    """Four walls around the opening in the socket frame (origin: opening bottom centre), and
    a visual-only dark floor in the opening."""
    opening = (PLUG_W_M + CLEARANCE_M, PLUG_T_M + CLEARANCE_M)
    floor = (
        f'<geom name="socket_floor" type="box" pos="0 0 0.0005" '
        f'size="{opening[0] / 2} {opening[1] / 2} 0.0005" '
        'contype="0" conaffinity="0" group="2" rgba="0.05 0.05 0.05 1"/>'
    )
    return floor + ring_geoms("socket", opening, SOCKET_SIDE_M, SOCKET_DEPTH_M, "0.2 0.2 0.22 1")


class PlugInsertTask(SimTask):
    """Pick a plug and insert it into a tight socket (see the module docstring)."""

    name = "plug_insert"

    def __init__(self) -> None:
        super().__init__()
        top = mdl.TABLE_TOP_Z_M + SOCKET_DEPTH_M
        self._socket_pose = frames.pose(
            np.array([*SOCKET_NOMINAL_XY_M, top]), np.array([1.0, 0.0, 0.0, 0.0])
        )

    def mjcf_fragment(self) -> MjcfFragment:
        verts = mesh_vertex_attr(plug_mesh_vertices())
        px, py = PLUG_NOMINAL_XY_M
        sx, sy = SOCKET_NOMINAL_XY_M
        return MjcfFragment(
            assets=f'<mesh name="plug_mesh" vertex="{verts}"/>',
            worldbody=f"""
    <body name="socket" mocap="true" pos="{sx} {sy} {mdl.TABLE_TOP_Z_M}">
      {_socket_geoms()}
    </body>
    <body name="plug" pos="{px} {py} {mdl.TABLE_TOP_Z_M + PLUG_H_M / 2}">
      <freejoint name="plug_free"/>
      <geom name="plug_geom" class="object" type="mesh" mesh="plug_mesh" mass="{PLUG_MASS_KG}"
            {STIFF_CONTACT} rgba="0.9 0.75 0.1 1"/>
    </body>""",
        )

    def on_bind(self) -> None:
        w = self.world
        self._plug_body = w.model.body("plug").id
        self._plug_geoms = w.geom_ids_of_body("plug")
        self._socket_mocap = int(w.model.body("socket").mocapid[0])

    def randomized_bodies(self) -> tuple[str, ...]:
        return ("plug", "socket")

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        return {
            "tcp_pose": ArraySpec((7,), "float32"),
            "plug_pos": ArraySpec((3,), "float32"),
            "plug_quat": ArraySpec((4,), "float32", -1.0, 1.0),
            "plug_tip_pos": ArraySpec((3,), "float32"),
            "socket_pos": ArraySpec((3,), "float32"),
            "socket_quat": ArraySpec((4,), "float32", -1.0, 1.0),
            "tip_to_socket": ArraySpec((3,), "float32"),
            "tcp_to_grasp": ArraySpec((3,), "float32"),
            "grasp_yaw_error": ArraySpec((1,), "float32", -np.pi / 2, np.pi / 2),
            "socket_yaw_error": ArraySpec((1,), "float32", -np.pi / 2, np.pi / 2),
            "insertion_depth_m": ArraySpec((1,), "float32", 0.0, SOCKET_DEPTH_M),
            "held": ArraySpec((1,), "float32", 0.0, 1.0),
            "plug_lift_m": ArraySpec((1,), "float32"),
        }

    # -- scene ------------------------------------------------------------------------------

    @property
    def socket_pose(self) -> np.ndarray:
        """(7,) centre of the opening at the socket top, with the socket's yaw."""
        return self._socket_pose.copy()

    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        if self.randomize_objects:
            plug_xy = rng.uniform(PLUG_XY_LOW_M, PLUG_XY_HIGH_M)
            plug_yaw = float(rng.uniform(-PLUG_YAW_MAX_RAD, PLUG_YAW_MAX_RAD))
            sock_xy = rng.uniform(SOCKET_XY_LOW_M, SOCKET_XY_HIGH_M)
            sock_yaw = float(rng.uniform(-SOCKET_YAW_MAX_RAD, SOCKET_YAW_MAX_RAD))
            start = rng.uniform(START_LOW_M, START_HIGH_M)
        else:
            plug_xy, plug_yaw = np.array(PLUG_NOMINAL_XY_M), 0.0
            sock_xy, sock_yaw = np.array(SOCKET_NOMINAL_XY_M), 0.0
            start = np.array(START_NOMINAL_M)
        q_sock = frames.quat_from_rotvec(np.array([0.0, 0.0, sock_yaw]))
        d = self.world.data
        d.mocap_pos[self._socket_mocap] = [sock_xy[0], sock_xy[1], mdl.TABLE_TOP_Z_M]
        d.mocap_quat[self._socket_mocap] = q_sock
        top = mdl.TABLE_TOP_Z_M + SOCKET_DEPTH_M
        self._socket_pose = frames.pose(np.array([sock_xy[0], sock_xy[1], top]), q_sock)
        plug_pose = frames.pose(
            np.array([plug_xy[0], plug_xy[1], mdl.TABLE_TOP_Z_M + PLUG_H_M / 2]),
            frames.quat_from_rotvec(np.array([0.0, 0.0, plug_yaw])),
        )
        self.world.set_free_body_pose("plug", plug_pose)
        return frames.pose(start, np.array(DOWN_QUAT))

    # -- reading ----------------------------------------------------------------------------

    def held(self) -> bool:
        """Both finger pads touch the plug."""
        return self.world.held_by_pads(self._plug_geoms)

    def plug_tip(self) -> np.ndarray:
        """(3,) centre of the plug's bottom face (its local -z end)."""
        d = self.world.data
        R = d.xmat[self._plug_body].reshape(3, 3)
        return d.xpos[self._plug_body] - R[:, 2] * (PLUG_H_M / 2)

    def grasp_point(self) -> np.ndarray:
        """(3,) where the TCP grasps the plug: on its axis, ``GRASP_BELOW_TOP_M`` below the top."""
        d = self.world.data
        R = d.xmat[self._plug_body].reshape(3, 3)
        return d.xpos[self._plug_body] + R[:, 2] * (PLUG_H_M / 2 - GRASP_BELOW_TOP_M)

    def socket_offset(self) -> np.ndarray:
        """(3,) plug tip relative to the opening's top centre, in the socket frame."""
        q = self._socket_pose[3:7]
        return frames.quat_to_mat(q).T @ (self.plug_tip() - self._socket_pose[:3])

    def evaluate(self) -> TaskStatus:
        w = self.world
        d = w.data
        tcp = w.tcp_pose()
        plug_pos = d.xpos[self._plug_body].copy()
        plug_quat = frames.quat_normalize(d.xquat[self._plug_body])
        R = d.xmat[self._plug_body].reshape(3, 3)
        tilt = float(np.arccos(np.clip(R[2, 2], -1.0, 1.0)))
        tip = self.plug_tip()
        local = self.socket_offset()
        ow, ot = (PLUG_W_M + CLEARANCE_M) / 2, (PLUG_T_M + CLEARANCE_M) / 2
        in_opening = abs(local[0]) <= ow and abs(local[1]) <= ot
        depth = float(np.clip(-local[2], 0.0, SOCKET_DEPTH_M)) if in_opening else 0.0
        held = self.held()
        lift = float(tip[2] - mdl.TABLE_TOP_Z_M)
        plug_yaw = yaw_of(plug_quat)
        grasp_yaw_err = wrap_half_pi(plug_yaw - yaw_of(tcp[3:7]))
        sock_yaw_err = wrap_half_pi(yaw_of(self._socket_pose[3:7]) - plug_yaw)
        off_table = (
            plug_pos[2] < mdl.TABLE_TOP_Z_M
            or not mdl.TABLE_X_RANGE_M[0] <= plug_pos[0] <= mdl.TABLE_X_RANGE_M[1]
            or not mdl.TABLE_Y_RANGE_M[0] <= plug_pos[1] <= mdl.TABLE_Y_RANGE_M[1]
        )
        tipped = tilt > TIPPED_RAD and not held and not in_opening
        success = in_opening and depth >= SUCCESS_DEPTH_M and held
        failure = (off_table or tipped) and not success
        if success:
            reward = 0.0
        elif failure:
            reward = FAILURE_REWARD
        else:
            reach = 1.0 - float(np.tanh(np.linalg.norm(self.grasp_point() - tcp[:3]) / 0.1))
            xy = float(np.linalg.norm(local[:2]))
            carry = 1.0 - float(np.tanh(xy / 0.03))
            over = xy < 0.01
            lift_frac = 1.0 if over else float(np.clip(lift / LIFT_M, 0.0, 1.0))
            yaw_ok = 1.0 - float(np.tanh(abs(sock_yaw_err) / 0.05))
            align = (1.0 - float(np.tanh(xy / 0.0005))) * yaw_ok
            depth_frac = float(np.clip(depth / SUCCESS_DEPTH_M, 0.0, 1.0))
            reward = (
                0.15 * reach
                + 0.1 * held
                + held * (0.15 * carry + 0.15 * lift_frac + 0.1 * align + 0.35 * depth_frac)
                - 1.0
            )
        f32 = np.float32
        privileged = {
            "tcp_pose": tcp.astype(f32),
            "plug_pos": plug_pos.astype(f32),
            "plug_quat": plug_quat.astype(f32),
            "plug_tip_pos": tip.astype(f32),
            "socket_pos": self._socket_pose[:3].astype(f32),
            "socket_quat": self._socket_pose[3:7].astype(f32),
            "tip_to_socket": (self._socket_pose[:3] - tip).astype(f32),
            "tcp_to_grasp": (self.grasp_point() - tcp[:3]).astype(f32),
            "grasp_yaw_error": np.array([grasp_yaw_err], dtype=f32),
            "socket_yaw_error": np.array([sock_yaw_err], dtype=f32),
            "insertion_depth_m": np.array([depth], dtype=f32),
            "held": np.array([float(held)], dtype=f32),
            "plug_lift_m": np.array([lift], dtype=f32),
        }
        return TaskStatus(
            reward=float(reward),
            success=bool(success),
            failure=bool(failure),
            privileged=privileged,
        )
