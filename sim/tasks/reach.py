"""reach: move the TCP to a fixed goal point (the fast task for learning tests).

Scene: a visual-only green sphere (``GOAL_RADIUS_M``; no collision, no mass) marks the goal at
the FIXED position ``GOAL_POS_M``. The TCP starts at a random point in
``START_LOW_M .. START_HIGH_M`` pointing straight down (``DOWN_QUAT``), gripper open.

Why a fixed goal: policies never read privileged sim truth, so a randomised goal would be
invisible to a state-only policy (the robot state holds no goal). With a fixed goal the task is
well posed from the TCP pose alone (state learning) and from images (the marker is drawn); the
randomisation is the start pose. A random-goal variant would need the goal in the observation.

Success: the TCP is within ``SUCCESS_DIST_M`` of the goal. No failure condition.

Reward (dense, in (-1, 0]; exactly 0 on success, which ends the episode)::

    r = -tanh(10 |tcp - goal|)

A cost rather than a bonus on purpose: with a positive dense reward and termination on success,
hovering just outside the success radius would collect more discounted reward than succeeding.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import frames
from robot_rl.core.safety import DOWN_QUAT, SafetyConfig
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import TaskStatus
from sim.model import MjcfFragment
from sim.tasks.base import SimTask

GOAL_POS_M = (0.5, 0.0, 0.12)
"""Goal position of the TCP in the base frame, metres (fixed; see the module docstring)."""
GOAL_RADIUS_M = 0.015
"""Radius of the visual goal marker, metres."""
SUCCESS_DIST_M = 0.02
"""Success when the TCP is this close to the goal, metres."""
START_LOW_M = (0.38, -0.12, 0.06)
START_HIGH_M = (0.62, 0.12, 0.24)
START_NOMINAL_M = (0.42, -0.08, 0.2)
MAX_EPISODE_STEPS = 40
DESCRIPTION = (
    "Move the TCP to a fixed goal point (a green visual-only sphere) 12 cm above the table. "
    "The TCP starts at a random point in a 24 x 24 x 18 cm box around the goal, pointing down. "
    "Success: the TCP is within 2 cm of the goal. Dense cost reward -tanh(10 d) (0 on success). "
    "The goal is fixed so that a state-only policy can learn it; meant for fast learning tests."
)
DEFAULT_SAFETY = SafetyConfig(
    workspace_low_m=(0.3, -0.28, 0.03),
    workspace_high_m=(0.7, 0.28, 0.35),
    orientation_center_quat=DOWN_QUAT,
    orientation_max_rad=0.8,
    max_step_m=0.05,
    max_step_rad=0.3,
    watchdog_timeout_s=0.5,
)


class ReachTask(SimTask):
    """Reach a fixed point (see the module docstring)."""

    name = "reach"

    def mjcf_fragment(self) -> MjcfFragment:
        x, y, z = self.layout.point(GOAL_POS_M)
        r = self.layout.length(GOAL_RADIUS_M)
        return MjcfFragment(
            worldbody=f"""
    <geom name="reach_goal" type="sphere" size="{r}" pos="{x} {y} {z}"
          contype="0" conaffinity="0" mass="0" rgba="0.1 0.9 0.2 0.6"/>"""
        )

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        return {
            "tcp_pose": ArraySpec((7,), "float32"),
            "goal_pos": ArraySpec((3,), "float32"),
            "tcp_to_goal": ArraySpec((3,), "float32"),
        }

    def reset_scene(self, rng: np.random.Generator) -> np.ndarray:
        lay = self.layout
        if self.randomize_objects:
            start = rng.uniform(lay.point(START_LOW_M), lay.point(START_HIGH_M))
        else:
            start = lay.point(START_NOMINAL_M)
        return frames.pose(start, np.array(DOWN_QUAT))

    def evaluate(self) -> TaskStatus:
        tcp = self.world.tcp_pose()
        goal = self.layout.point(GOAL_POS_M)
        dist = float(np.linalg.norm(goal - tcp[:3]))
        success = dist < self.layout.length(SUCCESS_DIST_M)
        reward = 0.0 if success else -float(np.tanh(10.0 * dist / self.layout.scale))
        f32 = np.float32
        privileged = {
            "tcp_pose": tcp.astype(f32),
            "goal_pos": goal.astype(f32),
            "tcp_to_goal": (goal - tcp[:3]).astype(f32),
        }
        return TaskStatus(reward=reward, success=success, failure=False, privileged=privileged)
