"""pick_cube: grasp a cube from the table and lift it.

Scene: a ``CUBE_SIZE_M`` cube at a random xy in ``CUBE_XY_LOW_M .. CUBE_XY_HIGH_M`` (in front of
the robot) and a random yaw; the TCP starts at a random point in ``START_LOW_M .. START_HIGH_M``
pointing straight down (``DOWN_QUAT``), gripper open.

Success: the cube touches both finger pads (grasped) and its bottom face is at least
``LIFT_HEIGHT_M`` above the table top. Failure: the cube left the table (centre below the table
top or outside its footprint).

Reward (dense cost, in [-1, 0); exactly 0 on success, ``FAILURE_REWARD`` on failure)::

    reach = 1 - tanh(10 |tcp - cube|)            # 0..1
    lift  = clip(height_of_bottom / LIFT_HEIGHT_M, 0, 1)
    r     = 0.3 reach + 0.2 grasped + 0.5 grasped * lift - 1

A cost rather than a bonus on purpose: with a positive dense reward and termination on success,
holding the cube just below the lift height would collect more discounted reward than lifting
it (SAC learned exactly that: hover, never succeed).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import frames
from robot_rl.core.safety import DOWN_QUAT
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import TaskStatus
from sim import model as mdl
from sim.model import MjcfFragment
from sim.tasks.base import FAILURE_REWARD, SimTask

CUBE_SIZE_M = 0.04
CUBE_MASS_KG = 0.08
CUBE_XY_LOW_M = (0.42, -0.15)
CUBE_XY_HIGH_M = (0.60, 0.15)
CUBE_NOMINAL_XY_M = (0.5, 0.0)
START_LOW_M = (0.40, -0.12, 0.14)
START_HIGH_M = (0.58, 0.12, 0.24)
START_NOMINAL_M = (0.5, 0.0, 0.2)
LIFT_HEIGHT_M = 0.05
"""Success needs the cube's bottom face this far above the table top, metres."""


class PickCubeTask(SimTask):
    """Pick up a cube (see the module docstring)."""

    name = "pick_cube"

    @property
    def cube_size_m(self) -> float:
        """The cube's side in this task's layout, metres."""
        return self.layout.size(CUBE_SIZE_M)

    @property
    def lift_height_m(self) -> float:
        """The lift that counts as success in this task's layout, metres."""
        return self.layout.length(LIFT_HEIGHT_M)

    def mjcf_fragment(self) -> MjcfFragment:
        h = self.cube_size_m / 2
        x, y = self.layout.point(CUBE_NOMINAL_XY_M)
        mass = CUBE_MASS_KG * self.layout.object_scale**3
        return MjcfFragment(
            worldbody=f"""
    <body name="cube" pos="{x} {y} {h}">
      <freejoint name="cube_free"/>
      <geom name="cube_geom" class="object" type="box" size="{h} {h} {h}" mass="{mass}"
            rgba="0.85 0.2 0.15 1"/>
    </body>"""
        )

    def on_bind(self) -> None:
        m = self.world.model
        self._cube_body = m.body("cube").id
        self._cube_geoms = self.world.geom_ids_of_body("cube")

    def randomized_bodies(self) -> tuple[str, ...]:
        return ("cube",)

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        return {
            "cube_pos": ArraySpec((3,), "float32"),
            "cube_quat": ArraySpec((4,), "float32", -1.0, 1.0),
            "tcp_to_cube": ArraySpec((3,), "float32"),
            "tcp_pose": ArraySpec((7,), "float32"),
            "grasped": ArraySpec((1,), "float32", 0.0, 1.0),
            "cube_lift_m": ArraySpec((1,), "float32"),
        }

    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        h = self.cube_size_m / 2
        lay = self.layout
        if self.randomize_objects:
            xy = rng.uniform(lay.point(CUBE_XY_LOW_M), lay.point(CUBE_XY_HIGH_M))
            yaw = rng.uniform(-np.pi, np.pi)
            start = rng.uniform(lay.point(START_LOW_M), lay.point(START_HIGH_M))
        else:
            xy, yaw = lay.point(CUBE_NOMINAL_XY_M), 0.0
            start = lay.point(START_NOMINAL_M)
        cube_pose = frames.pose(
            np.array([xy[0], xy[1], mdl.TABLE_TOP_Z_M + h]),
            frames.quat_from_rotvec(np.array([0.0, 0.0, yaw])),
        )
        self.world.set_free_body_pose("cube", cube_pose)
        return frames.pose(start, np.array(DOWN_QUAT))

    def grasped(self) -> bool:
        """Both finger pads touch the cube."""
        return self.world.held_by_pads(self._cube_geoms)

    def evaluate(self) -> TaskStatus:
        w = self.world
        cube_pos = w.data.xpos[self._cube_body].copy()
        cube_quat = frames.quat_normalize(w.data.xquat[self._cube_body])
        tcp = w.tcp_pose()
        lift = float(cube_pos[2] - self.cube_size_m / 2 - mdl.TABLE_TOP_Z_M)
        grasped = self.grasped()
        off_table = (
            cube_pos[2] < mdl.TABLE_TOP_Z_M
            or not mdl.TABLE_X_RANGE_M[0] <= cube_pos[0] <= mdl.TABLE_X_RANGE_M[1]
            or not mdl.TABLE_Y_RANGE_M[0] <= cube_pos[1] <= mdl.TABLE_Y_RANGE_M[1]
        )
        success = grasped and lift >= self.lift_height_m and not off_table
        reach_m = np.linalg.norm(cube_pos - tcp[:3]) / self.layout.scale
        reach = 1.0 - float(np.tanh(10.0 * reach_m))
        lift_frac = float(np.clip(lift / self.lift_height_m, 0.0, 1.0))
        if success:
            reward = 0.0
        elif off_table:
            reward = FAILURE_REWARD
        else:
            reward = 0.3 * reach + 0.2 * grasped + 0.5 * grasped * lift_frac - 1.0
        f32 = np.float32
        privileged = {
            "cube_pos": cube_pos.astype(f32),
            "cube_quat": cube_quat.astype(f32),
            "tcp_to_cube": (cube_pos - tcp[:3]).astype(f32),
            "tcp_pose": tcp.astype(f32),
            "grasped": np.array([float(grasped)], dtype=f32),
            "cube_lift_m": np.array([lift], dtype=f32),
        }
        return TaskStatus(
            reward=float(reward),
            success=bool(success),
            failure=bool(off_table),
            privileged=privileged,
        )
