"""What a failed twin episode got wrong, from the twin's own truth.

The twin scores every episode it runs (:mod:`sim.scoring`): whether it succeeded, and its
task's one-number truth fields at the end (``truth_end``) and at their largest
(``truth_max``). A task here is a row of stages (grasp, lift, alignment, insertion, ...), each
reached once a truth field has been at least a threshold during the episode. A failed
episode failed at the first stage it never reached; one that reached every stage but never
held them together (let go before the end, lifted and then dropped) failed at
:data:`NOT_AT_ONCE`. A rehearsal's report counts its failures by stage, so that a day that
misses its target says where: the grasp, the alignment, the insertion, or the timing.

A threshold is the task's own number; a distance the arm's layout scales (pick_cube's lift) is
scaled here as the task scales it (:mod:`sim.layout`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NOT_AT_ONCE = "not_at_once"
"""Every stage was reached, but never all at once (e.g. the part let go or dropped)."""


@dataclass(frozen=True)
class Stage:
    """One stage of a task: reached when ``truth_max[field] >= at_least``."""

    name: str
    """What fails when the stage is never reached: ``grasp``, ``lift``, ``alignment``, ..."""
    field: str
    """The twin's one-number truth field (a task's privileged state, :mod:`sim.scoring`)."""
    at_least: float
    """The threshold (for the FR3 layout when ``scaled``)."""
    scaled: bool = False
    """Whether ``at_least`` is a distance the arm's layout scales, as the task does (pick_cube's
    lift; the insertion tasks' depths are object sizes no layout changes)."""
    says: str = ""
    """The failure in words, for a report."""


def _stages() -> dict[str, tuple[Stage, ...]]:
    from sim.tasks import assemble, cable_route, peg_insert, pick_cube, plug_insert

    def insert(field: str, depth_m: float, part: str, opening: str) -> tuple[Stage, ...]:
        """Alignment (the tip half a millimetre into the opening), then the depth."""
        return (
            Stage(
                "alignment",
                field,
                0.0005,
                False,
                f"never brought the {part}'s tip into the {opening}",
            ),
            Stage(
                "insertion",
                field,
                depth_m,
                False,
                f"entered the {opening} but never pushed the {part} deep enough",
            ),
        )

    def held(name: str, field: str, says: str) -> Stage:
        return Stage(name, field, 0.5, False, says)

    return {
        "pick_cube": (
            held("grasp", "grasped", "never grasped the cube"),
            Stage("lift", "cube_lift_m", pick_cube.LIFT_HEIGHT_M, True,
                  "grasped the cube but never lifted it high enough"),
        ),
        "peg_insert": insert("insertion_depth_m", peg_insert.SUCCESS_DEPTH_M, "peg", "hole"),
        "plug_insert": (
            held("grasp", "held", "never held the plug in both fingers"),
            *insert("insertion_depth_m", plug_insert.SUCCESS_DEPTH_M, "plug", "socket"),
        ),
        "cable_route": (
            held("line", "line_ok", "never brought the cable's line over the channel"),
            Stage("seating", "seat_depth_m", cable_route.CLIP_H_M - cable_route.SEATED_Z_M,
                  False, "had the line over the channel but never pressed the cable in"),
        ),
        "assemble": (
            held("bracket_grasp", "bracket_held", "never held the bracket"),
            held("placement", "seated", "held the bracket but never seated it in its nest"),
            held("pin_grasp", "pin_held", "seated the bracket, never held the pin"),
            *insert("pin_depth_m", assemble.PIN_SUCCESS_DEPTH_M, "pin", "bracket's hole"),
        ),
    }  # fmt: skip


def task_stages(task: str) -> tuple[Stage, ...]:
    """The task's stages (empty for a task without: reach)."""
    return _stages().get(task, ())


def failed_stage(
    task: str, truth_max: Mapping[str, float], length_scale: float = 1.0
) -> str | None:
    """The stage a failed episode never reached (its first), :data:`NOT_AT_ONCE`, or None
    (a task without stages, or an episode whose truth lacks a stage's field: scored by an older
    twin).

    ``length_scale``: the arm's layout scale (:attr:`sim.layout.TaskLayout.scale`).
    """
    stages = task_stages(task)
    if not stages or any(s.field not in truth_max for s in stages):
        return None
    for s in stages:
        need = s.at_least * (length_scale if s.scaled else 1.0)
        if float(truth_max[s.field]) < need:
            return s.name
    return NOT_AT_ONCE


def failures_by_stage(
    task: str, scores: Iterable[Mapping], length_scale: float = 1.0
) -> dict[str, int]:
    """Failed episodes of ``scores`` (the twin's score lines) counted by
    :func:`failed_stage`, in the task's stage order (unknown ones under ``unknown``)."""
    counts: Counter[str] = Counter()
    for r in scores:
        if not r.get("success"):
            counts[failed_stage(task, r.get("truth_max") or {}, length_scale) or "unknown"] += 1
    order = [s.name for s in task_stages(task)] + [NOT_AT_ONCE, "unknown"]
    return {k: counts[k] for k in order if counts[k]}


def describe(task: str, counts: Mapping[str, int]) -> str:
    """``counts`` in words, e.g. ``2 never grasped the cube; 1 grasped the cube but never
    lifted it high enough``."""
    says = {s.name: s.says for s in task_stages(task)}
    says[NOT_AT_ONCE] = "reached every stage but never all at once (let go, or dropped it)"
    says["unknown"] = "no truth to say (the twin's score lacks the task's fields)"
    says["corrected"] = "needed the person"
    return "; ".join(f"{n} {says.get(k, k)}" for k, n in counts.items())
