"""A scripted pick-and-insert: grasp a part squarely, carry it over its target, turn it to the
target's yaw, centre it to a fraction of the clearance, and press it in; back off and centre
again when it jams. The hard tasks' experts are made of these stages (plug_insert: one;
assemble: the bracket into its nest, then the pin into the bracket).

Closes the loop on the part itself (its tip and yaw from privileged truth, under the names a
:class:`PartKeys` gives), so that a part that slipped or turned in the fingers is still brought
onto the target's axis:

- approach / descend / close: the fingers turned to the part's faces (the task reports the yaw
  error mod the part's symmetry);
- lift until the tip is at ``carry_tip_z_m``; transfer until it is over the target at
  ``hover_m``, turned to the target's yaw;
- align: small steps until the tip is within ``align_tol_m`` of the axis and the yaw within
  ``align_yaw_tol_rad``, for ``settle_steps`` steps;
- insert: descend ``descent_step_m`` per step on the axis (the target a little below the tip:
  a bounded press); after ``stuck_steps`` steps without progress above ``entered_m`` depth,
  rise and align again;
- release (a stage that places rather than presses, ``release_depth_m``): once that deep, open
  and rise to ``carry_tip_z_m``; the stage is then ``done``.

If the part leaves the fingers before it is in, the stage opens and starts over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from robot_rl.core import frames
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import DOWN_QUAT
from sim.experts.base import ScriptedExpert


@dataclass(frozen=True)
class PartKeys:
    """Names of a stage's privileged entries (each a task's ``privileged_spec`` key)."""

    to_grasp: str
    """(3,) grasp point minus the TCP."""
    grasp_yaw: str
    """(1,) the part's yaw minus the TCP's, mod the part's symmetry."""
    tip: str
    """(3,) the part's leading point (its bottom centre)."""
    target: str
    """(3,) the target's top centre (where the tip goes in)."""
    target_quat: str
    """(4,) the target's orientation (its yaw)."""
    target_yaw: str
    """(1,) the target's yaw minus the part's, mod the part's symmetry."""
    held: str
    """(1,) 1 while both pads touch the part."""
    depth: str
    """(1,) how far the tip is below the target's top, inside it (else 0)."""


@dataclass(frozen=True)
class StageConfig:
    """Heights and tolerances of one pick-and-insert stage, metres / rad."""

    pre_grasp_m: float = 0.06
    close_steps: int = 4
    carry_tip_z_m: float = 0.07
    hover_m: float = 0.006
    transfer_tol_m: float = 0.002
    align_tol_m: float = 0.00012
    align_yaw_tol_rad: float = 0.008
    settle_steps: int = 2
    descent_step_m: float = 0.004
    press_m: float = 0.003
    stuck_steps: int = 5
    entered_m: float = 0.002
    release_depth_m: float | None = None
    """Place, not press: open the hand once the tip is this deep (None: press until the task
    ends)."""


def _yaw_quat(yaw: float) -> np.ndarray:
    return frames.quat_mul(
        frames.quat_from_rotvec(np.array([0.0, 0.0, yaw])), np.asarray(DOWN_QUAT, dtype=np.float64)
    )


def _tcp_yaw(tcp_quat: np.ndarray) -> float:
    return float(frames.quat_error(tcp_quat, np.asarray(DOWN_QUAT, dtype=np.float64))[2])


class PickInsertStage:
    """One stage's state machine (see the module docstring); ``act`` returns a base-env
    action, ``phase`` is where it is (``done`` once a placing stage let go and rose)."""

    def __init__(self, helper: ScriptedExpert, keys: PartKeys, cfg: StageConfig) -> None:
        self.helper, self.keys, self.cfg = helper, keys, cfg
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self._count = 0
        self._best_depth = 0.0

    def act(self, p: Mapping) -> np.ndarray:
        k, c, to = self.keys, self.cfg, self.helper.action_towards
        tcp = np.asarray(p["tcp_pose"], dtype=np.float64)
        grasp = tcp[:3] + np.asarray(p[k.to_grasp], dtype=np.float64)
        tip = np.asarray(p[k.tip], dtype=np.float64)
        target = np.asarray(p[k.target], dtype=np.float64)
        held = bool(p[k.held][0] > 0.5)
        depth = float(p[k.depth][0])
        tcp_yaw = _tcp_yaw(tcp[3:7])

        if self.phase == "release":
            if self._count < c.close_steps:
                self._count += 1
                return to(tcp, tcp[:3], 0.0, None)
            goal = tcp[:3] + [0.0, 0.0, c.carry_tip_z_m + c.pre_grasp_m - tcp[2]]
            if tcp[2] >= c.carry_tip_z_m + c.pre_grasp_m - 0.005:
                self.phase = "done"
            return to(tcp, goal, 0.0, None)
        if self.phase == "done":
            return to(tcp, tcp[:3], 0.0, None)

        if self.phase in ("approach", "descend", "close"):
            grasp_yaw = float(p[k.grasp_yaw][0])
            q = _yaw_quat(tcp_yaw + grasp_yaw)
            if self.phase == "approach":
                goal = grasp + [0.0, 0.0, c.pre_grasp_m]
                xy = float(np.linalg.norm(grasp[:2] - tcp[:2]))
                if tcp[2] < goal[2] - 0.02 and xy > 0.01:  # low and away: rise first
                    return to(tcp, [tcp[0], tcp[1], goal[2]], 0.0, q)
                if xy < 0.003 and abs(tcp[2] - goal[2]) < 0.02 and abs(grasp_yaw) < 0.03:
                    self.phase = "descend"
                else:
                    return to(tcp, goal, 0.0, q)
            if self.phase == "descend":
                if np.linalg.norm(grasp - tcp[:3]) < 0.003:
                    self.phase, self._count = "close", 0
                else:
                    return to(tcp, grasp, 0.0, q)
            self._count += 1
            if self._count <= c.close_steps or not held:
                if self._count > 4 * c.close_steps:  # never closed on it: start over
                    self.phase = "approach"
                return to(tcp, tcp[:3], 1.0, q)
            self.phase = "lift"

        if not held and depth < c.entered_m:  # lost it on the way: open, start over
            self.phase = "approach"
            return to(tcp, tcp[:3] + [0.0, 0.0, 0.02], 0.0, None)

        q_target = np.asarray(p[k.target_quat], dtype=np.float64)
        yaw_err = float(p[k.target_yaw][0])
        q = _yaw_quat(tcp_yaw + yaw_err)
        if self.phase == "lift":
            if tip[2] > c.carry_tip_z_m - 0.005:
                self.phase = "transfer"
            else:
                return to(tcp, tcp[:3] + [0.0, 0.0, c.carry_tip_z_m - tip[2]], 1.0, None)
        over = target + [0.0, 0.0, c.hover_m]
        if self.phase == "transfer":
            if tip[2] < target[2] + 0.003 and np.linalg.norm(tip[:2] - target[:2]) > 0.002:
                return to(tcp, tcp[:3] + [0.0, 0.0, 0.01], 1.0, q)  # low and off: rise first
            err = over - tip
            if np.linalg.norm(err) < c.transfer_tol_m and abs(yaw_err) < 0.03:
                self.phase, self._count = "align", 0
            else:
                far = np.linalg.norm(err[:2]) > 0.02
                goal_tip = np.array([over[0], over[1], c.carry_tip_z_m]) if far else over
                return to(tcp, tcp[:3] + goal_tip - tip, 1.0, q)
        if self.phase == "align":
            err = over - tip
            err_target = frames.quat_to_mat(q_target).T @ err
            if (
                np.all(np.abs(err_target[:2]) < c.align_tol_m)
                and abs(yaw_err) < c.align_yaw_tol_rad
            ):
                self._count += 1
                if self._count >= c.settle_steps:
                    self.phase, self._count, self._best_depth = "insert", 0, depth
            else:
                self._count = 0
            return to(tcp, tcp[:3] + err, 1.0, q)
        # insert
        if c.release_depth_m is not None and depth >= c.release_depth_m:
            self.phase, self._count = "release", 0
            return to(tcp, tcp[:3], 0.0, None)
        if depth > self._best_depth + 0.0005:
            self._best_depth, self._count = depth, 0
        else:
            self._count += 1
        if self._count >= c.stuck_steps and depth < c.entered_m:
            self.phase, self._count = "align", 0
            return to(tcp, tcp[:3] + (over - tip), 1.0, q)
        err_xy = target[:2] - tip[:2] if depth < c.entered_m else np.zeros(2)
        goal = tcp[:3] + [err_xy[0], err_xy[1], -min(c.descent_step_m, c.press_m + 0.001)]
        return to(tcp, goal, 1.0, q)


class StagedExpert(ScriptedExpert):
    """Runs pick-and-insert stages one after the other (a stage that places hands over once it
    is ``done``; the last one presses until the task ends).

    Args:
        env_cfg: The base env's config (needs rotation control for the yaws).
        stages: ``(keys, config)`` per stage, in order.
    """

    def __init__(self, env_cfg: EnvConfig, stages: list[tuple[PartKeys, StageConfig]]) -> None:
        super().__init__(env_cfg)
        self.stages = [PickInsertStage(self, k, c) for k, c in stages]
        self.reset(np.random.default_rng(0))

    def reset(self, rng: np.random.Generator) -> None:
        for s in self.stages:
            s.reset()
        self._i = 0

    @property
    def phase(self) -> str:
        """``<stage>:<phase>`` with several stages, else the phase."""
        s = self.stages[self._i].phase
        return s if len(self.stages) == 1 else f"{self._i}:{s}"

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        from robot_rl.core import keys

        p = info[keys.INFO_PRIVILEGED]
        while self.stages[self._i].phase == "done" and self._i + 1 < len(self.stages):
            self._i += 1
        return self.stages[self._i].act(p)
