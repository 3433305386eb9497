"""Scripted expert for pick_cube: a small state machine on privileged sim truth.

approach (above the cube, fingers turned to the cube's faces when rotation is controlled)
-> descend (TCP to the cube centre) -> close (wait for the fingers) -> lift.
If the cube slips out while lifting, it opens and starts over.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT
from sim.experts.base import ScriptedExpert
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.tasks.pick_cube import LIFT_HEIGHT_M

PRE_GRASP_HEIGHT_M = 0.07
"""Approach height of the TCP above the cube centre, metres."""
LIFT_TARGET_Z_M = 0.16
"""TCP height to lift to, metres (well above the success height)."""
CLOSE_STEPS = 3
"""Control steps to wait with the gripper closing before lifting ..."""
CLOSE_MAX_STEPS = 15
"""... and, if the cube is not held by both pads by then, at most this many (a gripper that
closes slowly: the SO-101's jaw behind its bridge's closure rate limit)."""


def _yaw_of(quat: np.ndarray) -> float:
    R = frames.quat_to_mat(quat)
    return float(np.arctan2(R[1, 0], R[0, 0]))


class PickCubeExpert(ScriptedExpert):
    """State-machine expert for :class:`sim.tasks.pick_cube.PickCubeTask`.

    Args:
        env_cfg: The base env's config (action layout and scales).
        layout: Where the task lies for the twin's arm (:mod:`sim.layout`,
            :attr:`sim.tasks.base.SimTask.layout`): it scales the expert's heights and
            tolerances; the rest comes from ``info["privileged"]``.
    """

    def __init__(self, env_cfg: EnvConfig, layout: TaskLayout = FR3_LAYOUT) -> None:
        super().__init__(env_cfg)
        self.layout = layout
        self.phase = "approach"
        self._close_count = 0

    def reset(self, rng: np.random.Generator) -> None:
        self.phase = "approach"
        self._close_count = 0

    def _grasp_quat(self, cube_quat: np.ndarray, tcp_quat: np.ndarray) -> np.ndarray:
        """Pointing down, yaw aligned with a pair of cube faces, nearest to the current yaw."""
        down = np.asarray(DOWN_QUAT, dtype=np.float64)
        cube_yaw = _yaw_of(cube_quat)
        tcp_yaw = float(frames.quat_error(tcp_quat, down)[2])
        # Fingers close along the TCP y axis; cube faces repeat every pi/2.
        d = (cube_yaw - tcp_yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4
        psi = tcp_yaw + d
        return frames.quat_mul(frames.quat_from_rotvec(np.array([0.0, 0.0, psi])), down)

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        p = info[keys.INFO_PRIVILEGED]
        tcp = np.asarray(p["tcp_pose"], dtype=np.float64)
        cube = np.asarray(p["cube_pos"], dtype=np.float64)
        cube_q = np.asarray(p["cube_quat"], dtype=np.float64)
        grasped = bool(p["grasped"][0] > 0.5)
        lift = float(p["cube_lift_m"][0])
        q_goal = self._grasp_quat(cube_q, tcp[3:7]) if self.env_cfg.control_rotation else None
        rot_err = (
            0.0 if q_goal is None else float(np.linalg.norm(frames.quat_error(q_goal, tcp[3:7])))
        )
        xy_err = float(np.linalg.norm(cube[:2] - tcp[:2]))
        L = self.layout.length
        hover = np.array([0.0, 0.0, L(PRE_GRASP_HEIGHT_M)])

        if self.phase == "approach":
            goal = cube + hover
            if tcp[2] < goal[2] - L(0.01) and xy_err > L(0.02):
                # Below the hover height away from the cube: rise first, do not sweep it away.
                return self.action_towards(tcp, [tcp[0], tcp[1], goal[2]], 0.0, q_goal)
            if xy_err < max(L(0.01), 0.005) and abs(tcp[2] - goal[2]) < L(0.03) and rot_err < 0.08:
                self.phase = "descend"
            else:
                return self.action_towards(tcp, goal, 0.0, q_goal)
        if self.phase == "descend":
            goal = cube + np.array([0.0, 0.0, L(0.003)])
            if xy_err > L(0.02):
                self.phase = "approach"
                return self.action_towards(tcp, cube + hover, 0.0, q_goal)
            # (not scaled: a small arm's servos settle a few mm from their goal)
            if np.linalg.norm(goal - tcp[:3]) < 0.006:
                self.phase = "close"
                self._close_count = 0
            else:
                return self.action_towards(tcp, goal, 0.0, q_goal)
        if self.phase == "close":
            self._close_count += 1
            if (self._close_count > CLOSE_STEPS and grasped) or self._close_count > CLOSE_MAX_STEPS:
                self.phase = "lift"
            else:
                return self.action_towards(tcp, tcp[:3], 1.0, q_goal)
        # lift
        if not grasped and lift < 0.5 * L(LIFT_HEIGHT_M):
            # Lost the cube: open and start over.
            self.phase = "approach"
            return self.action_towards(tcp, tcp[:3] + [0, 0, L(0.02)], 0.0, None)
        goal = np.array([tcp[0], tcp[1], L(LIFT_TARGET_Z_M)])
        return self.action_towards(tcp, goal, 1.0, None)
