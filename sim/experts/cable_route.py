"""Scripted expert for cable_route: draw the cable nearly taut, swing it round the anchor high
enough that it clears the rails until its line is over the slot, then lower it on an arc about
the anchor (the cable stays taut), steering the line onto the slot as it comes down (near the
rails only while it is on the line), and once down draw it taut so that it snaps into the clip.

Works on privileged sim truth (anchor, clip, TCP, the cable's offset from the channel). The
gripper stays closed throughout. The TCP's position is set by its bearing from the anchor
(+y turned towards +x, as the task's ``bearing``) and its height; its distance from the anchor
follows from the height on a sphere of radius ``TAUT_REACH_M``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from sim.experts.base import ScriptedExpert
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.tasks.cable_route import CLIP_H_M, bearing

CARRY_Z_M = 0.18
"""TCP height while swinging the cable round, metres."""
TAUT_REACH_M = 0.295
"""Distance of the tab's centre from the anchor (the 30 cm cable nearly taut: the tab's centre
is 1.7 cm beyond the cable's end), metres."""
LOW_Z_M = 0.014
"""The tab centre's lowest height (its bottom just over the table), metres."""
LOWER_STEP_M = 0.01
"""Height lost per step while lowering, metres."""
SWING_STEP_RAD = 0.06
"""Largest change of bearing per step while swinging, rad."""
STEER_GAIN = 0.7
"""Fraction of the cable's measured offset at the clip corrected per step while lowering."""
DRAW_STEP_M = 0.004
DRAW_MAX_M = 0.03
"""Once down, the goal moves out along the line this much per step, up to this far beyond
``TAUT_REACH_M`` (the arm's compliance then pulls the cable taut over the clip), metres."""
HIGH_MARGIN_M = 0.01
"""The cable at the clip is "over the rails" this much above their top, metres."""
ON_LINE_M = 0.003
"""Near the rails, the cable comes down only while its offset is below this, metres."""
STEER_RANGE_M = 0.015
"""Steer only while the cable's offset at the clip is smaller than this, metres."""
STEER_MAX_RAD = 0.03
"""Largest bearing correction per step, rad."""
ARRIVED_M = 0.012
RISEN_M = 0.02
"""The swing starts once the tab is this close below the carrying height, metres."""


class CableRouteExpert(ScriptedExpert):
    """State-machine expert for :class:`sim.tasks.cable_route.CableRouteTask`.

    Args:
        env_cfg: The base env's config (action layout and scales).
        layout: Unused (the expert reads ``info["privileged"]``); kept for the registry's call.
    """

    def __init__(self, env_cfg: EnvConfig, layout: TaskLayout = FR3_LAYOUT) -> None:
        super().__init__(env_cfg)
        self.layout = layout
        self.reset(np.random.default_rng(0))

    def reset(self, rng: np.random.Generator) -> None:
        self.phase = "rise"
        self._draw = 0.0
        self._bearing: float | None = None
        self._z = CARRY_Z_M

    def _goal(self, anchor: np.ndarray) -> np.ndarray:
        h = self._z - anchor[2]
        reach = float(np.sqrt(max((TAUT_REACH_M + self._draw) ** 2 - h**2, 0.0)))
        return np.array([*(anchor[:2] + reach * bearing(self._bearing)), self._z])

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        p = info[keys.INFO_PRIVILEGED]
        tcp = np.asarray(p["tcp_pose"], dtype=np.float64)
        tab = np.asarray(p["tab_pos"], dtype=np.float64)
        grip = tcp[:3] - tab  # where the hand holds the tab (it may have slipped)
        anchor = np.asarray(p["anchor_pos"], dtype=np.float64)
        clip = np.asarray(p["clip_pos"], dtype=np.float64)
        to_clip = clip[:2] - anchor[:2]
        clip_bearing = float(np.arctan2(to_clip[0], to_clip[1]))
        if self._bearing is None:
            rel = tab[:2] - anchor[:2]
            self._bearing = float(np.arctan2(rel[0], rel[1]))
        if self.phase == "rise":  # up to the carrying height where the cable is
            goal = self._goal(anchor)
            if tab[2] > CARRY_Z_M - RISEN_M:
                self.phase = "swing"
            else:
                return self.action_towards(tcp, goal + grip, 1.0)
        if self.phase == "swing":
            turn = clip_bearing - self._bearing
            self._bearing += float(np.clip(turn, -SWING_STEP_RAD, SWING_STEP_RAD))
            goal = self._goal(anchor)
            if abs(turn) < 1e-6 and np.linalg.norm(goal - tab) < ARRIVED_M:
                self.phase = "lower"
            else:
                return self.action_towards(tcp, goal + grip, 1.0)
        # lower: steer the cable's line onto the channel while coming down
        offset = float(p["line_offset_m"][0])
        # Over the rails the whole offset is the line's; lower, a large one is of a cable that
        # slid off the clip (steering on it would walk the hand away).
        high = float(p["cable_at_clip"][2]) - clip[2] > CLIP_H_M + HIGH_MARGIN_M
        if high or abs(offset) < STEER_RANGE_M:
            turn = STEER_GAIN * offset / max(float(np.linalg.norm(to_clip)), 0.05)
            self._bearing -= float(np.clip(turn, -STEER_MAX_RAD, STEER_MAX_RAD))
        if self._z <= LOW_Z_M:  # down: draw the cable taut so that it presses into the clip
            self._draw = min(DRAW_MAX_M, self._draw + DRAW_STEP_M)
        if high or abs(offset) < ON_LINE_M:  # near the rails, come down only on the line
            self._z = max(LOW_Z_M, self._z - LOWER_STEP_M)
        return self.action_towards(tcp, self._goal(anchor) + grip, 1.0)
