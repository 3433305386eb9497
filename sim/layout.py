"""Where the twin's tasks lie for an arm of another size: :class:`TaskLayout`.

The tasks are written for the FR3-class arm (objects 0.42 .. 0.60 m in front of the base, a 4 cm
cube, lifts of 5 cm; a UR5e reaches the same places). A low-cost arm such as the SO-101 reaches
about 0.3 m and grips a few centimetres: the same task at FR3 size is out of its reach. A layout
maps the task's FR3 numbers onto the arm's workspace with one similarity, so that each task
keeps one definition and its difficulty (ranges relative to the arm's reach, objects relative
to its gripper):

- a point ``p`` (base frame, metres) -> ``(c + s (p_xy - FR3_CENTRE_XY), s p_z)``: the FR3
  workspace centre goes to the arm's :attr:`TaskLayout.centre_xy_m`, distances shrink by
  :attr:`TaskLayout.scale`, heights above the table (``z = 0``) too;
- a length (a lift height, a hover height, a motion per step) -> ``s * length``;
- an object's size -> ``object_scale * size`` (a gripper's opening and a workspace need not
  shrink alike).

The identity layout (:data:`FR3_LAYOUT`) changes nothing: the FR3 and UR5e twins run the tasks
exactly as written. Masses are the task's (scaled by ``object_scale ** 3`` where a task says so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from robot_rl.core.safety import SafetyConfig

FR3_CENTRE_XY_M = (0.5, 0.0)
"""The centre of the tasks' workspace as written (FR3 size), metres in the base frame."""


@dataclass(frozen=True)
class TaskLayout:
    """A similarity from the tasks' FR3 numbers to an arm's workspace (module docstring).

    Attributes:
        name: Shown in reports (``"fr3"``: the tasks as written).
        centre_xy_m: Where the FR3 workspace centre (0.5, 0) goes, metres.
        scale: Factor on distances and heights.
        object_scale: Factor on object sizes.
    """

    name: str = "fr3"
    centre_xy_m: tuple[float, float] = FR3_CENTRE_XY_M
    scale: float = 1.0
    object_scale: float = 1.0

    def __post_init__(self) -> None:
        if not (0.0 < self.scale <= 2.0 and 0.0 < self.object_scale <= 2.0):
            raise ValueError(
                f"layout {self.name!r}: scale and object_scale must be in (0, 2], got "
                f"{self.scale} and {self.object_scale}"
            )

    @property
    def identity(self) -> bool:
        """The tasks as written."""
        return (
            self.scale == 1.0
            and self.object_scale == 1.0
            and tuple(self.centre_xy_m) == FR3_CENTRE_XY_M
        )

    def point(self, p_m: tuple[float, ...] | np.ndarray) -> np.ndarray:
        """(3,) a task point (or (2,) an xy point) in this layout, metres."""
        p = np.asarray(p_m, dtype=np.float64)
        if p.shape not in ((2,), (3,)):
            raise ValueError(f"a layout maps (2,) or (3,) points, got shape {p.shape}")
        out = p * self.scale
        out[:2] = np.asarray(self.centre_xy_m) + self.scale * (p[:2] - np.asarray(FR3_CENTRE_XY_M))
        return out

    def length(self, x_m: float) -> float:
        """A distance or height, metres."""
        return float(x_m) * self.scale

    def size(self, x_m: float) -> float:
        """An object's size, metres."""
        return float(x_m) * self.object_scale

    def safety(self, cfg: SafetyConfig) -> SafetyConfig:
        """``cfg`` with its workspace box mapped and its per-step translation scaled (the
        orientation cone, rotation step and watchdog are the arm's own, unchanged)."""
        if self.identity:
            return cfg
        return replace(
            cfg,
            workspace_low_m=tuple(float(c) for c in self.point(cfg.workspace_low_m)),
            workspace_high_m=tuple(float(c) for c in self.point(cfg.workspace_high_m)),
            max_step_m=self.length(cfg.max_step_m),
        )


FR3_LAYOUT = TaskLayout()
"""The tasks as written (FR3 and UR5e twins)."""
