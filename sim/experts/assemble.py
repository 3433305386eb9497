"""Scripted expert for assemble: two pick-and-insert stages (:mod:`sim.experts.pick_insert`):
the bracket into its nest (placed: the hand opens once it is seated), then the pin into the
bracket's hole (pressed)."""

from __future__ import annotations

from robot_rl.core.config import EnvConfig
from sim.experts.pick_insert import PartKeys, StageConfig, StagedExpert
from sim.layout import FR3_LAYOUT, TaskLayout
from sim.tasks.assemble import NEST_WALL_H_M, SEATED_M

BRACKET_KEYS = PartKeys(
    to_grasp="tcp_to_bracket_grasp",
    grasp_yaw="bracket_grasp_yaw_error",
    tip="bracket_bottom_pos",
    target="nest_pos",
    target_quat="nest_quat",
    target_yaw="nest_yaw_error",
    held="bracket_held",
    depth="bracket_sink_m",
)
BRACKET_STAGE = StageConfig(
    carry_tip_z_m=0.07,
    hover_m=0.005,
    align_tol_m=0.0003,
    descent_step_m=0.003,
    release_depth_m=NEST_WALL_H_M - SEATED_M + 0.0005,
)
"""Carry the bracket's bottom 7 cm up (over the standing pin), centre it to 0.3 mm over the
pocket (1 mm a side), lower it 3 mm a step, let go once it is seated."""
PIN_KEYS = PartKeys(
    to_grasp="tcp_to_pin_grasp",
    grasp_yaw="pin_grasp_yaw_error",
    tip="pin_tip_pos",
    target="hole_pos",
    target_quat="hole_quat",
    target_yaw="hole_yaw_error",
    held="pin_held",
    depth="pin_depth_m",
)
PIN_STAGE = StageConfig(carry_tip_z_m=0.08, hover_m=0.006, align_tol_m=0.00012)


class AssembleExpert(StagedExpert):
    """Expert for :class:`sim.tasks.assemble.AssembleTask`.

    Args:
        env_cfg: The base env's config (needs rotation control for the yaws).
        layout: Unused (the expert reads ``info["privileged"]``); kept for the registry's call.
    """

    def __init__(self, env_cfg: EnvConfig, layout: TaskLayout = FR3_LAYOUT) -> None:
        super().__init__(env_cfg, [(BRACKET_KEYS, BRACKET_STAGE), (PIN_KEYS, PIN_STAGE)])
        self.layout = layout
