"""Scripted expert for reach: a straight line to the goal, orientation held down, gripper open."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT
from sim.experts.base import ScriptedExpert
from sim.layout import FR3_LAYOUT, TaskLayout


class ReachExpert(ScriptedExpert):
    """Moves the TCP straight to ``info["privileged"]["goal_pos"]``.

    Args:
        env_cfg: The base env's config (action layout and scales).
        layout: Where the task lies for the twin's arm (:mod:`sim.layout`; unused: the expert
            reads ``info["privileged"]``).
    """

    def __init__(self, env_cfg: EnvConfig, layout: TaskLayout = FR3_LAYOUT) -> None:
        super().__init__(env_cfg)

    def reset(self, rng: np.random.Generator) -> None:
        pass

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        p = info[keys.INFO_PRIVILEGED]
        tcp = np.asarray(p["tcp_pose"], dtype=np.float64)
        goal = np.asarray(p["goal_pos"], dtype=np.float64)
        return self.action_towards(tcp, goal, 0.0, np.asarray(DOWN_QUAT, dtype=np.float64))
