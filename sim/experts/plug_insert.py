"""Scripted expert for plug_insert: one pick-and-insert stage (:mod:`sim.experts.pick_insert`):
grasp the plug across its thin side, carry it over the socket, turn it to the socket's yaw,
centre it to 0.12 mm (the clearance is 0.25 mm a side), press it in; back off and centre again
when it jams."""

from __future__ import annotations

from robot_rl.core.config import EnvConfig
from sim.experts.pick_insert import PartKeys, StageConfig, StagedExpert
from sim.layout import FR3_LAYOUT, TaskLayout

PLUG_KEYS = PartKeys(
    to_grasp="tcp_to_grasp",
    grasp_yaw="grasp_yaw_error",
    tip="plug_tip_pos",
    target="socket_pos",
    target_quat="socket_quat",
    target_yaw="socket_yaw_error",
    held="held",
    depth="insertion_depth_m",
)
PLUG_STAGE = StageConfig(carry_tip_z_m=0.07, hover_m=0.006, align_tol_m=0.00012)
"""Carry the tip 4 cm above the 3 cm socket; hover 6 mm over it while centring."""


class PlugInsertExpert(StagedExpert):
    """Expert for :class:`sim.tasks.plug_insert.PlugInsertTask`.

    Args:
        env_cfg: The base env's config (needs rotation control for the yaw).
        layout: Unused (the expert reads ``info["privileged"]``); kept for the registry's call.
    """

    def __init__(self, env_cfg: EnvConfig, layout: TaskLayout = FR3_LAYOUT) -> None:
        super().__init__(env_cfg, [(PLUG_KEYS, PLUG_STAGE)])
        self.layout = layout
