"""assemble: place a bracket in its nest, then press a pin into the bracket (a two-stage
assembly, modelled on HIL-SERL's multi-step assembly tasks: one part located by a fixture,
the next fitted into it).

Scene: a square bracket (``BRACKET_SIDE_M`` wide, ``BRACKET_H_M`` tall, a square hole of
``PIN_SIDE_M + PIN_CLEARANCE_M`` through it) lies at a random position and yaw on the table; a
square pin (``PIN_SIDE_M``, ``PIN_H_M`` tall, a 1 mm bevel at its tip) stands at another; a
fixed nest (a mocap body: four low walls around a pocket ``NEST_CLEARANCE_M`` wider than the
bracket) stands at a random position and yaw. The TCP starts pointing down above the table,
gripper open.

Stage 1, place: grasp the bracket across two faces, high enough that the fingers clear the
nest's low walls, turn it to the nest's yaw (within about 0.05 rad: 2 mm of clearance over
4 cm) and lower it into the pocket; let go. Stage 2, press: grasp the pin, turn it to the
bracket's yaw, centre it on the bracket's hole (0.25 mm a side) and press it in. The pin's hole
moves with the bracket: a bracket left askew or beside the nest still takes the pin, but it is
not an assembly.

Success: the bracket is seated in the nest (its bottom within ``SEATED_M`` of the table and its
centre inside the pocket's clearance) and the pin's tip is ``PIN_SUCCESS_DEPTH_M`` deep in the
bracket's hole, the pin in the hand (pressed in: a pin dropped into the hole does not count).
Failure: the bracket or the pin left the table, or the pin fell over (tilted
more than ``TIPPED_RAD`` while not held and not in the hole).

Reward (dense cost in [-1, 0); exactly 0 on success, ``FAILURE_REWARD`` on failure): stage 1's
progress (reach the bracket, hold it, carry it over the nest, seat it) counts up to 0.5, then
stage 2's (reach the pin, hold it, carry it over the hole, its depth) the other 0.5::

    placed = seated ? 1 : 0.3 reach_b + 0.2 held_b + held_b * (0.3 carry_b + 0.2 sink_b)
    pressed = 0.3 reach_p + 0.2 held_p + held_p * (0.2 carry_p + 0.3 depth_p)
    r = 0.5 placed + 0.5 seated * pressed - 1

Both parts are symmetric under a quarter turn: yaw errors are reported mod pi/2.
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

BRACKET_SIDE_M = 0.04
BRACKET_H_M = 0.035
BRACKET_MASS_KG = 0.06
PIN_SIDE_M = 0.010
PIN_H_M = 0.05
PIN_MASS_KG = 0.01
PIN_CHAMFER_M = 0.001
PIN_CLEARANCE_M = 0.0005
"""The bracket's hole is this much wider than the pin on each axis (0.25 mm a side)."""
NEST_CLEARANCE_M = 0.002
"""The nest's pocket is this much wider than the bracket on each axis (1 mm a side: a locating
fixture; the tight fit is the pin's)."""
NEST_WALL_H_M = 0.008
"""The nest's walls are low, so that fingers holding the bracket high clear them."""
NEST_SIDE_M = 0.08
BRACKET_GRASP_ABOVE_BOTTOM_M = 0.03
"""Grasp the bracket with the TCP this far above its bottom: the pads (1.6 cm below the TCP)
then stay above the nest's walls."""
PIN_GRASP_BELOW_TOP_M = 0.015
SEATED_M = 0.002
PIN_SUCCESS_DEPTH_M = 0.015
TIPPED_RAD = 0.7
BRACKET_XY_LOW_M = (0.42, -0.17)
BRACKET_XY_HIGH_M = (0.52, -0.08)
BRACKET_NOMINAL_XY_M = (0.47, -0.12)
PIN_XY_LOW_M = (0.56, -0.15)
PIN_XY_HIGH_M = (0.62, -0.05)
PIN_NOMINAL_XY_M = (0.59, -0.10)
NEST_XY_LOW_M = (0.45, 0.05)
NEST_XY_HIGH_M = (0.58, 0.15)
NEST_NOMINAL_XY_M = (0.52, 0.10)
PART_YAW_MAX_RAD = 0.5
NEST_YAW_MAX_RAD = 0.3
START_LOW_M = (0.42, -0.10, 0.14)
START_HIGH_M = (0.56, 0.10, 0.22)
START_NOMINAL_M = (0.49, 0.0, 0.18)
MAX_EPISODE_STEPS = 300
ACTION_SCALE_M = 0.01

DESCRIPTION = (
    "Two stages. Place a 4 cm square bracket (3.5 cm tall, a 1.05 cm square hole through it), "
    "lying at a random position and yaw, into a nest at a random position and yaw whose pocket "
    "is 2 mm wider than the bracket; then press a 1 cm square pin (5 cm tall), standing "
    "elsewhere, 1.5 cm deep into the bracket's hole (0.25 mm a side). Success: the bracket "
    "seated in the nest and the pin in it. Failure: a part left the table or the pin fell "
    "over. Needs rotation control. Dense cost in [-1, 0): 0.5 placed + 0.5 pressed - 1, 0 on "
    "success, -100 on failure."
)
DEFAULT_SAFETY = SafetyConfig(
    workspace_low_m=(0.36, -0.24, 0.015),
    workspace_high_m=(0.68, 0.22, 0.28),
    orientation_center_quat=DOWN_QUAT,
    orientation_max_rad=1.0,
    max_step_m=0.03,
    max_step_rad=0.2,
    watchdog_timeout_s=0.5,
)


def wrap_quarter(angle: float) -> float:
    """``angle`` mod pi/2 into [-pi/4, pi/4) (a square part looks the same a quarter turn on)."""
    return wrap_symmetric(angle, np.pi / 2)


def pin_mesh_vertices() -> np.ndarray:
    """(12, 3) vertices of the pin (a square prism, its bottom edges bevelled)."""
    return bevelled_prism(PIN_SIDE_M, PIN_SIDE_M, PIN_H_M, PIN_CHAMFER_M)


class AssembleTask(SimTask):
    """Place a bracket in its nest, then press a pin into it (see the module docstring)."""

    name = "assemble"

    def __init__(self) -> None:
        super().__init__()
        self._nest_pose = frames.pose(
            np.array([*NEST_NOMINAL_XY_M, mdl.TABLE_TOP_Z_M + NEST_WALL_H_M]),
            np.array([1.0, 0.0, 0.0, 0.0]),
        )

    def mjcf_fragment(self) -> MjcfFragment:
        verts = mesh_vertex_attr(pin_mesh_vertices())
        bx, by = BRACKET_NOMINAL_XY_M
        px, py = PIN_NOMINAL_XY_M
        nx, ny = NEST_NOMINAL_XY_M
        hole = PIN_SIDE_M + PIN_CLEARANCE_M
        pocket = BRACKET_SIDE_M + NEST_CLEARANCE_M
        bracket = ring_geoms(
            "bracket", (hole, hole), BRACKET_SIDE_M, BRACKET_H_M, "0.2 0.5 0.8 1", -BRACKET_H_M / 2
        )
        nest = ring_geoms("nest", (pocket, pocket), NEST_SIDE_M, NEST_WALL_H_M, "0.3 0.3 0.32 1")
        return MjcfFragment(
            assets=f'<mesh name="pin_mesh" vertex="{verts}"/>',
            worldbody=f"""
    <body name="nest" mocap="true" pos="{nx} {ny} {mdl.TABLE_TOP_Z_M}">
      {nest}
    </body>
    <body name="bracket" pos="{bx} {by} {mdl.TABLE_TOP_Z_M + BRACKET_H_M / 2}">
      <freejoint name="bracket_free"/>
      <inertial pos="0 0 0" mass="{BRACKET_MASS_KG}" diaginertia="2e-5 2e-5 2e-5"/>
      {bracket}
    </body>
    <body name="pin" pos="{px} {py} {mdl.TABLE_TOP_Z_M + PIN_H_M / 2}">
      <freejoint name="pin_free"/>
      <geom name="pin_geom" class="object" type="mesh" mesh="pin_mesh" mass="{PIN_MASS_KG}"
            {STIFF_CONTACT} rgba="0.9 0.75 0.1 1"/>
    </body>""",
        )

    def on_bind(self) -> None:
        w = self.world
        m = w.model
        self._bracket = m.body("bracket").id
        self._pin = m.body("pin").id
        self._bracket_geoms = w.geom_ids_of_body("bracket")
        self._pin_geoms = w.geom_ids_of_body("pin")
        self._nest_mocap = int(m.body("nest").mocapid[0])

    def randomized_bodies(self) -> tuple[str, ...]:
        return ("bracket", "pin", "nest")

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        f3 = ArraySpec((3,), "float32")
        q = ArraySpec((4,), "float32", -1.0, 1.0)
        yaw = ArraySpec((1,), "float32", -np.pi / 4, np.pi / 4)
        one = ArraySpec((1,), "float32")
        return {
            "tcp_pose": ArraySpec((7,), "float32"),
            "bracket_pos": f3,
            "bracket_quat": q,
            "bracket_bottom_pos": f3,
            "tcp_to_bracket_grasp": f3,
            "bracket_grasp_yaw_error": yaw,
            "nest_pos": f3,
            "nest_quat": q,
            "nest_yaw_error": yaw,
            "bracket_held": ArraySpec((1,), "float32", 0.0, 1.0),
            "bracket_sink_m": one,
            "seated": ArraySpec((1,), "float32", 0.0, 1.0),
            "pin_pos": f3,
            "pin_tip_pos": f3,
            "tcp_to_pin_grasp": f3,
            "pin_grasp_yaw_error": yaw,
            "hole_pos": f3,
            "hole_quat": q,
            "hole_yaw_error": yaw,
            "pin_held": ArraySpec((1,), "float32", 0.0, 1.0),
            "pin_depth_m": one,
            "bracket_to_nest": f3,
            "pin_tip_to_hole": f3,
        }

    # -- scene ------------------------------------------------------------------------------

    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        if self.randomize_objects:
            b_xy = rng.uniform(BRACKET_XY_LOW_M, BRACKET_XY_HIGH_M)
            p_xy = rng.uniform(PIN_XY_LOW_M, PIN_XY_HIGH_M)
            n_xy = rng.uniform(NEST_XY_LOW_M, NEST_XY_HIGH_M)
            b_yaw, p_yaw = rng.uniform(-PART_YAW_MAX_RAD, PART_YAW_MAX_RAD, 2)
            n_yaw = float(rng.uniform(-NEST_YAW_MAX_RAD, NEST_YAW_MAX_RAD))
            start = rng.uniform(START_LOW_M, START_HIGH_M)
        else:
            b_xy, p_xy, n_xy = (np.array(v) for v in (BRACKET_NOMINAL_XY_M, PIN_NOMINAL_XY_M,
                                                       NEST_NOMINAL_XY_M))  # fmt: skip
            b_yaw = p_yaw = n_yaw = 0.0
            start = np.array(START_NOMINAL_M)
        z = mdl.TABLE_TOP_Z_M
        q_nest = frames.quat_from_rotvec(np.array([0.0, 0.0, n_yaw]))
        d = self.world.data
        d.mocap_pos[self._nest_mocap] = [n_xy[0], n_xy[1], z]
        d.mocap_quat[self._nest_mocap] = q_nest
        self._nest_pose = frames.pose(np.array([n_xy[0], n_xy[1], z + NEST_WALL_H_M]), q_nest)
        for body, xy, yaw, h in (
            ("bracket", b_xy, b_yaw, BRACKET_H_M),
            ("pin", p_xy, p_yaw, PIN_H_M),
        ):
            pose = frames.pose(
                np.array([xy[0], xy[1], z + h / 2]),
                frames.quat_from_rotvec(np.array([0.0, 0.0, float(yaw)])),
            )
            self.world.set_free_body_pose(body, pose)
        return frames.pose(start, np.array(DOWN_QUAT))

    # -- reading ----------------------------------------------------------------------------

    def _held(self, geoms: tuple[int, ...]) -> bool:
        return self.world.held_by_pads(geoms)

    def _axis(self, body: int) -> tuple[np.ndarray, np.ndarray]:
        d = self.world.data
        return d.xpos[body].copy(), d.xmat[body].reshape(3, 3).copy()

    def evaluate(self) -> TaskStatus:
        w = self.world
        tcp = w.tcp_pose()
        tcp_yaw = yaw_of(tcp[3:7])
        table = mdl.TABLE_TOP_Z_M
        b_pos, b_R = self._axis(self._bracket)
        p_pos, p_R = self._axis(self._pin)
        b_quat = frames.quat_normalize(w.data.xquat[self._bracket])
        p_quat = frames.quat_normalize(w.data.xquat[self._pin])
        b_yaw, p_yaw = yaw_of(b_quat), yaw_of(p_quat)
        n_yaw = yaw_of(self._nest_pose[3:7])
        b_bottom = b_pos - b_R[:, 2] * (BRACKET_H_M / 2)
        b_grasp = b_bottom + b_R[:, 2] * BRACKET_GRASP_ABOVE_BOTTOM_M
        p_tip = p_pos - p_R[:, 2] * (PIN_H_M / 2)
        p_grasp = p_pos + p_R[:, 2] * (PIN_H_M / 2 - PIN_GRASP_BELOW_TOP_M)
        # Stage 1: the bracket's bottom against the nest (pocket top centre), nest frame.
        R_nest = frames.quat_to_mat(self._nest_pose[3:7])
        b_local = R_nest.T @ (b_bottom - self._nest_pose[:3])
        in_pocket = bool(np.all(np.abs(b_local[:2]) <= NEST_CLEARANCE_M / 2 + 1e-4))
        sink = float(np.clip(-b_local[2], 0.0, NEST_WALL_H_M)) if in_pocket else 0.0
        seated = in_pocket and b_bottom[2] - table <= SEATED_M and abs(b_R[2, 2]) > 0.999
        # Stage 2: the pin's tip against the bracket's hole (top centre), bracket frame.
        hole_top = b_pos + b_R[:, 2] * (BRACKET_H_M / 2)
        p_local = b_R.T @ (p_tip - hole_top)
        in_hole = bool(np.all(np.abs(p_local[:2]) <= (PIN_SIDE_M + PIN_CLEARANCE_M) / 2))
        depth = float(np.clip(-p_local[2], 0.0, BRACKET_H_M)) if in_hole else 0.0
        b_held, p_held = self._held(self._bracket_geoms), self._held(self._pin_geoms)
        off = any(
            pos[2] < table
            or not mdl.TABLE_X_RANGE_M[0] <= pos[0] <= mdl.TABLE_X_RANGE_M[1]
            or not mdl.TABLE_Y_RANGE_M[0] <= pos[1] <= mdl.TABLE_Y_RANGE_M[1]
            for pos in (b_pos, p_pos)
        )
        tilt = float(np.arccos(np.clip(p_R[2, 2], -1.0, 1.0)))
        tipped = tilt > TIPPED_RAD and not p_held and not in_hole
        success = seated and depth >= PIN_SUCCESS_DEPTH_M and p_held
        failure = (off or tipped) and not success
        if success:
            reward = 0.0
        elif failure:
            reward = FAILURE_REWARD
        else:

            def near(a: np.ndarray, b: np.ndarray, scale: float) -> float:
                return 1.0 - float(np.tanh(np.linalg.norm(a - b) / scale))

            carry_b = near(b_bottom[:2], self._nest_pose[:2], 0.03)
            placed = 1.0 if seated else (
                0.3 * near(tcp[:3], b_grasp, 0.1) + 0.2 * b_held
                + b_held * (0.3 * carry_b + 0.2 * sink / NEST_WALL_H_M)
            )  # fmt: skip
            pressed = (
                0.3 * near(tcp[:3], p_grasp, 0.1) + 0.2 * p_held
                + p_held * (0.2 * near(p_tip[:2], hole_top[:2], 0.03)
                            + 0.3 * min(depth / PIN_SUCCESS_DEPTH_M, 1.0))
            )  # fmt: skip
            reward = 0.5 * placed + 0.5 * float(seated) * pressed - 1.0
        f32 = np.float32

        def v(x) -> np.ndarray:
            return np.asarray(x, dtype=f32).reshape(-1)

        privileged = {
            "tcp_pose": v(tcp),
            "bracket_pos": v(b_pos),
            "bracket_quat": v(b_quat),
            "bracket_bottom_pos": v(b_bottom),
            "tcp_to_bracket_grasp": v(b_grasp - tcp[:3]),
            "bracket_grasp_yaw_error": v(wrap_quarter(b_yaw - tcp_yaw)),
            "nest_pos": v(self._nest_pose[:3]),
            "nest_quat": v(self._nest_pose[3:7]),
            "nest_yaw_error": v(wrap_quarter(n_yaw - b_yaw)),
            "bracket_held": v(float(b_held)),
            "bracket_sink_m": v(sink),
            "seated": v(float(seated)),
            "pin_pos": v(p_pos),
            "pin_tip_pos": v(p_tip),
            "tcp_to_pin_grasp": v(p_grasp - tcp[:3]),
            "pin_grasp_yaw_error": v(wrap_quarter(p_yaw - tcp_yaw)),
            "hole_pos": v(hole_top),
            "hole_quat": v(b_quat),
            "hole_yaw_error": v(wrap_quarter(b_yaw - p_yaw)),
            "pin_held": v(float(p_held)),
            "pin_depth_m": v(depth),
            "bracket_to_nest": v(self._nest_pose[:3] - b_bottom),
            "pin_tip_to_hole": v(hole_top - p_tip),
        }
        return TaskStatus(
            reward=float(reward),
            success=bool(success),
            failure=bool(failure),
            privileged=privileged,
        )
