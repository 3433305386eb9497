"""Scripted expert for peg_insert: align above the hole, descend, press; search when stuck.

Works on privileged sim truth (peg tip and hole poses), closing the loop on the peg itself, so
that a peg that slipped in the fingers is still aligned correctly:

- align: move the peg tip to ``APPROACH_HEIGHT_M`` above the opening centre (and, with rotation
  control, turn the peg faces to the hole faces); straight line, fastest axis saturated; wait
  until it has been centred for ``SETTLE_STEPS`` steps (the arm stopped swinging);
- insert: keep the tip on the hole axis and descend at ``DESCENT_STEP_M`` per step; the target
  ends ``PRESS_DEPTH_M`` below the hole bottom, so the peg is pressed down with the impedance
  controller's bounded force (``kp * max_error_m``) rather than an unbounded one. Once the tip
  is ``ENTERED_DEPTH_M`` inside, the xy target is the peg's own xy: the hole guides it and the
  compliant arm follows;
- search: after ``STUCK_STEPS`` steps without downward progress at the fixture top (the peg
  landed on the edge: misaligned or jammed), spiral around the believed hole axis (Archimedean,
  ``SPIRAL_PITCH_M`` per turn, ``SPIRAL_ARC_STEP_M`` per step) while pressing lightly, until
  the tip drops in; then insert again.

``hole_xy_error_m`` gives the expert an imperfect belief of the hole position (drawn per
episode), like a real robot's hole estimate, for more varied demonstrations and to exercise the
search. The gripper stays closed throughout.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT
from sim.experts.base import ScriptedExpert
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.tasks.peg_insert import HOLE_DEPTH_M, SUCCESS_DEPTH_M, yaw_of

APPROACH_HEIGHT_M = 0.012
"""Tip height above the fixture top before descending, metres."""
ALIGN_TOL_M = 0.001
"""Largest tip xy error (per axis, fixture frame) to start descending, metres."""
ALIGN_ROT_TOL_RAD = 0.03
"""Largest yaw error to start descending with rotation control, rad."""
SETTLE_STEPS = 2
"""Consecutive aligned control steps (the peg has stopped swinging) before descending."""
DESCENT_STEP_M = 0.008
"""Commanded descent per control step while inserting, metres."""
PRESS_DEPTH_M = 0.02
"""How far below the hole bottom the insertion target goes (bounded press), metres."""
STUCK_STEPS = 4
"""Control steps without downward progress at or below the fixture top before searching."""
ENTERED_DEPTH_M = 0.001
"""Tip this far below the fixture top: it is (at least partly) in the opening; from then on
the insertion follows the peg's own xy (the hole guides it) instead of the believed centre."""
SPIRAL_PITCH_M = 0.002
"""Radial growth of the search spiral per turn, metres (about twice the capture radius)."""
SPIRAL_ARC_STEP_M = 0.0015
"""Path length along the spiral per control step, metres."""
SPIRAL_MAX_RADIUS_M = 0.008
"""The spiral restarts from the centre beyond this radius, metres."""
SEARCH_PRESS_M = 0.0015
"""While searching, the tip target is this far below the tip: a light press (about 3 N with
kp = 2000 N/m), so that friction on the fixture top barely drags the peg off the spiral."""


class PegInsertExpert(ScriptedExpert):
    """State-machine expert for :class:`sim.tasks.peg_insert.PegInsertTask`.

    Args:
        env_cfg: The base env's config (action layout and scales).
        layout: Where the task lies for the twin's arm (:mod:`sim.layout`; unused: the expert
            reads ``info["privileged"]``).
        hole_xy_error_m: Largest per-axis error of the expert's belief of the hole position,
            metres; a fresh error is drawn uniformly at every :meth:`reset` (0: exact sim truth).
            Like a real robot's imperfect hole estimate; above half the clearance (1.5 mm) the
            peg lands on the fixture edge and the search has to find the hole.
    """

    def __init__(
        self, env_cfg: EnvConfig, layout: TaskLayout = FR3_LAYOUT, hole_xy_error_m: float = 0.0
    ) -> None:
        super().__init__(env_cfg)
        if hole_xy_error_m < 0:
            raise ValueError(f"hole_xy_error_m must be >= 0, got {hole_xy_error_m}")
        self.hole_xy_error_m = hole_xy_error_m
        self._hole_error = np.zeros(3)
        self.phase = "align"
        self._stuck = 0
        self._aligned = 0
        self._spiral_angle_rad = 0.0
        self._spiral_phase_rad = 0.0

    def reset(self, rng: np.random.Generator) -> None:
        self.phase = "align"
        self._stuck = 0
        self._aligned = 0
        self._spiral_angle_rad = 0.0
        # A random start direction of the spiral, so repeated searches differ.
        self._spiral_phase_rad = float(rng.uniform(0.0, 2 * np.pi))
        e = self.hole_xy_error_m
        self._hole_error = np.array([*rng.uniform(-e, e, size=2), 0.0])

    def _goal_quat(self, hole_quat: np.ndarray, peg_quat: np.ndarray, tcp_quat: np.ndarray):
        """TCP orientation that turns the peg faces onto the hole faces (nearest multiple of
        90 deg), pointing down; the peg's yaw error is applied to the current TCP yaw."""
        d = (yaw_of(hole_quat) - yaw_of(peg_quat) + np.pi / 4) % (np.pi / 2) - np.pi / 4
        tcp_yaw = float(frames.quat_error(tcp_quat, np.asarray(DOWN_QUAT, dtype=np.float64))[2])
        q = frames.quat_from_rotvec(np.array([0.0, 0.0, tcp_yaw + d]))
        return frames.quat_mul(q, np.asarray(DOWN_QUAT, dtype=np.float64)), abs(d)

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        p = info[keys.INFO_PRIVILEGED]
        tcp = np.asarray(p["tcp_pose"], dtype=np.float64)
        tip = np.asarray(p["peg_tip_pos"], dtype=np.float64)
        # Opening centre at the fixture top, as the expert believes it to be.
        hole = np.asarray(p["hole_pos"], dtype=np.float64) + self._hole_error
        hole_q = np.asarray(p["hole_quat"], dtype=np.float64)
        depth = float(p["insertion_depth_m"][0])
        q_goal, yaw_err = None, 0.0
        if self.env_cfg.control_rotation:
            q_goal, yaw_err = self._goal_quat(hole_q, np.asarray(p["peg_quat"]), tcp[3:7])
        R_hole = frames.quat_to_mat(hole_q)
        local = R_hole.T @ (tip - hole)  # (3,) tip in the fixture frame
        xy_err = float(np.max(np.abs(local[:2])))
        above = local[2]  # tip height over the fixture top (negative: inside the hole)

        if self.phase == "align":
            aligned = xy_err < ALIGN_TOL_M and yaw_err < ALIGN_ROT_TOL_RAD
            self._aligned = self._aligned + 1 if aligned and above < 0.02 else 0
            if self._aligned >= SETTLE_STEPS:
                self.phase = "insert"
                self._stuck = 0
                self._last_above = above
            else:
                # Stay above the top until centred, then come down to the approach height.
                z = APPROACH_HEIGHT_M if xy_err < 0.01 else max(above, APPROACH_HEIGHT_M)
                goal_tip = hole + np.array([0.0, 0.0, z])
                return self._towards(tcp, tip, goal_tip, q_goal)

        if self.phase in ("insert", "search"):
            entered = above < -ENTERED_DEPTH_M
            progress = self._last_above - above > 0.0005
            self._last_above = above
            if above < 0.004 and depth < SUCCESS_DEPTH_M and not progress:
                self._stuck += 1
            else:
                self._stuck = 0
            if entered and self.phase == "search":
                self.phase = "insert"
                self._stuck = 0
            if xy_err > 0.008 and not entered:
                self.phase = "align"  # pushed far off: start over from above
                self._aligned = 0
                goal_tip = hole + np.array([0.0, 0.0, APPROACH_HEIGHT_M])
                return self._towards(tcp, tip, goal_tip, q_goal)
            if self.phase == "insert" and self._stuck >= STUCK_STEPS:
                self.phase = "search"
                self._stuck = 0
                self._spiral_angle_rad = 0.0

        bottom_z = hole[2] - HOLE_DEPTH_M
        if self.phase == "search":
            r = SPIRAL_PITCH_M * self._spiral_angle_rad / (2 * np.pi)
            self._spiral_angle_rad += min(0.9, SPIRAL_ARC_STEP_M / max(r, 1e-3))
            r = SPIRAL_PITCH_M * self._spiral_angle_rad / (2 * np.pi)
            if r > SPIRAL_MAX_RADIUS_M:
                self._spiral_angle_rad, r = 0.0, 0.0
            ang = self._spiral_angle_rad + self._spiral_phase_rad
            goal_tip = hole + R_hole @ np.array([r * np.cos(ang), r * np.sin(ang), 0.0])
            goal_tip[2] = tip[2] - SEARCH_PRESS_M
            return self._towards(tcp, tip, goal_tip, q_goal)

        # insert: centre on the axis (once inside, let the hole guide the peg), descend at a
        # bounded rate, end in a bounded press.
        goal_tip = tip.copy() if above < -ENTERED_DEPTH_M else hole.copy()
        goal_tip[2] = max(tip[2] - DESCENT_STEP_M, bottom_z - PRESS_DEPTH_M)
        return self._towards(tcp, tip, goal_tip, q_goal)

    def _towards(
        self,
        tcp: np.ndarray,
        tip: np.ndarray,
        goal_tip: np.ndarray,
        q_goal: np.ndarray | None,
    ) -> np.ndarray:
        """Action moving the peg tip to ``goal_tip`` (the TCP moves by the same offset)."""
        target = tcp[:3] + (goal_tip - tip)
        return self.action_towards(tcp, target, 1.0, q_goal)
