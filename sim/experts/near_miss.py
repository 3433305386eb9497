"""Near-miss expert: the task's scripted expert, stopped just short of success.

Success classifiers learn most from the frames that look almost like success (HIL-SERL's hard
negatives): the cube grasped but not lifted high enough, the peg on the opening or partly in.
This wrapper drives the task's own expert and caps its progress at a per-episode level drawn
below the success threshold, by refusing the motion that would pass it:

- ``pick_cube``: the commanded rise never takes the cube's bottom above ``cap``
  (``cube_lift_m``; success needs ``LIFT_HEIGHT_M``), so the arm holds the grasped cube low;
- ``peg_insert``: the commanded descent never takes the peg tip deeper than ``cap`` below the
  fixture top (success needs ``SUCCESS_DEPTH_M`` inside the opening), so the peg rests on the
  fixture or at the opening, or sits partly inserted;
- ``plug_insert``: the same for the plug's tip below the socket top (success needs its
  ``SUCCESS_DEPTH_M``): the plug carried over the socket, resting on it, or partly in.

The cap is a proportional hold, not only a refusal: a zero action holds the measured pose, and
a held payload sags about 0.2 mm per step at zero action (the twin's controller), which would
slide a capped peg into success within a few dozen steps.

``cap`` is drawn uniformly in ``[0, margin * threshold]`` at every reset (default margin 0.6:
the cube at most 3 cm up, the peg at most 1.5 cm in; closer to the threshold the frames differ
from success by a few pixels at the learner's 64 x 64, and the labels stop being learnable).
Reads the privileged sim truth, like the experts themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.core import keys
from sim.experts.base import Expert
from sim.tasks import plug_insert
from sim.tasks.peg_insert import SUCCESS_DEPTH_M
from sim.tasks.pick_cube import LIFT_HEIGHT_M

NEAR_MISS_TASKS = ("pick_cube", "peg_insert", "plug_insert")
"""Tasks with a near-miss rule."""
NEAR_MISS_MARGIN = 0.6
"""Default margin: caps in ``[0, 0.6 x threshold]``. ``bench/classifier_near_miss.py`` measures
closer ones (0.95) on the SO-101, whose 2 cm lift is a few pixels: fewer false frames, about as
many false successes."""


def check_margin(margin: float, name: str = "margin") -> float:
    """``margin`` if it lies in (0, 1), for the expert and the options that pass one to it.

    Raises:
        ValueError: Outside (0, 1) (``name`` says which option).
    """
    if not 0.0 < margin < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {margin}: a cap at 1 would be success")
    return float(margin)


class NearMissExpert:
    """The task's expert with progress capped below success (see the module docstring).

    Args:
        expert: The task's scripted expert (base-env actions).
        task: ``pick_cube`` or ``peg_insert``.
        margin: The cap is drawn in ``[0, margin * success threshold]``; < 1.

    Raises:
        ValueError: A task without a near-miss rule, or ``margin`` outside (0, 1).
    """

    def __init__(self, expert: Expert, task: str, margin: float = NEAR_MISS_MARGIN) -> None:
        if task not in NEAR_MISS_TASKS:
            raise ValueError(f"no near-miss rule for task {task!r}; have {NEAR_MISS_TASKS}")
        self.expert, self.task, self.margin = expert, task, check_margin(margin)
        layout = getattr(expert, "layout", None)  # pick_cube's lift scales with the task
        lift_m = LIFT_HEIGHT_M if layout is None else layout.length(LIFT_HEIGHT_M)
        self.threshold_m = {
            "pick_cube": lift_m,
            "peg_insert": SUCCESS_DEPTH_M,
            "plug_insert": plug_insert.SUCCESS_DEPTH_M,
        }[task]
        self.cap_m = 0.0

    def reset(self, rng: np.random.Generator) -> None:
        self.expert.reset(rng)
        self.cap_m = float(rng.uniform(0.0, self.margin * self.threshold_m))

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        a = np.array(self.expert.act(obs, info), dtype=np.float32, copy=True)
        p = info[keys.INFO_PRIVILEGED]
        scale = self.expert.env_cfg.action_scale_m
        if self.task == "pick_cube":
            # Up by at most what is left below the cap (the target, not only the direction).
            room_m = self.cap_m - float(p["cube_lift_m"][0])
            a[2] = min(float(a[2]), room_m / scale)  # room < 0 (drifted past): back down
        else:
            # Down by at most what is left above the cap: the tip's height above the fixture
            # top (negative once inside) plus the cap depth.
            to_top = p["peg_to_hole"] if self.task == "peg_insert" else p["tip_to_socket"]
            room_m = self.cap_m - float(to_top[2])  # z = top - tip
            a[2] = max(float(a[2]), -room_m / scale)  # room < 0 (sagged past): back up
        return a
