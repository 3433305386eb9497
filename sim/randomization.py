"""Domain randomisation applied at every task reset (:class:`sim.config.RandomizationConfig`).

Always computed from the nominal values stored at construction, so nothing drifts across
resets. Object poses are the task's job, not this module's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import mujoco
import numpy as np

from robot_rl.core import frames
from sim.config import RandomizationConfig

if TYPE_CHECKING:
    from sim.world import SimWorld


class DomainRandomizer:
    """Randomises friction, light, colours and camera poses of a world.

    Args:
        world: The world to modify.
        config: Ranges (zero / (1, 1) disables an item).
        object_geom_ids: Task object geoms (friction and colour randomised with the finger
            pads and the table).
    """

    def __init__(
        self, world: SimWorld, config: RandomizationConfig, object_geom_ids: Sequence[int]
    ) -> None:
        m = world.model
        self.model = m
        self.config = config
        self._friction_geoms = np.array(
            sorted(set(object_geom_ids) | set(world.pad_geom_ids)), dtype=np.int64
        )
        self._color_geoms = np.array(
            sorted(set(object_geom_ids) | {world.table_geom_id}), dtype=np.int64
        )
        self._friction0 = m.geom_friction[self._friction_geoms].copy()
        self._rgba0 = m.geom_rgba[self._color_geoms].copy()
        self._light0 = m.light_diffuse.copy()
        self._headlight0 = m.vis.headlight.diffuse.copy()
        self._cam_pos0 = m.cam_pos.copy()
        self._cam_quat0 = m.cam_quat.copy()

    def apply(self, rng: np.random.Generator) -> None:
        """Sample new parameters from ``rng`` and write them into the model."""
        c, m = self.config, self.model
        lo, hi = c.friction_scale
        if hi > lo or lo != 1.0:
            scale = rng.uniform(lo, hi, size=len(self._friction_geoms))
            m.geom_friction[self._friction_geoms, 0] = self._friction0[:, 0] * scale
        if c.color_jitter > 0:
            jitter = rng.uniform(-c.color_jitter, c.color_jitter, size=(len(self._color_geoms), 3))
            m.geom_rgba[self._color_geoms, :3] = np.clip(self._rgba0[:, :3] + jitter, 0.0, 1.0)
        if c.light_jitter > 0:
            dl = rng.uniform(-c.light_jitter, c.light_jitter, size=(m.nlight, 1))
            m.light_diffuse[:] = np.clip(self._light0 + dl, 0.0, 1.0)
            dh = rng.uniform(-c.light_jitter, c.light_jitter)
            m.vis.headlight.diffuse[:] = np.clip(self._headlight0 + dh, 0.0, 1.0)
        if c.camera_pos_jitter_m > 0:
            dp = rng.uniform(-c.camera_pos_jitter_m, c.camera_pos_jitter_m, size=(m.ncam, 3))
            m.cam_pos[:] = self._cam_pos0 + dp
        if c.camera_rot_jitter_rad > 0:
            for i in range(m.ncam):
                v = rng.normal(size=3)
                v *= rng.uniform(0.0, c.camera_rot_jitter_rad) / max(np.linalg.norm(v), 1e-9)
                q = np.zeros(4)
                mujoco.mju_mulQuat(q, self._cam_quat0[i], frames.quat_from_rotvec(v))
                m.cam_quat[i] = q
