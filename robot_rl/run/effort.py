"""Human effort over a run: how often a person took over, how much of the robot's time they
drove, and when the policy stopped needing them.

Per training episode (in order) the record is its length, its **corrections** (takeovers: runs
of consecutive intervened steps, so a person who grabs the device once and lets go after 12
steps made one correction) and its **human steps** (steps a person drove). From them:

- corrections per episode and human-controlled steps per robot minute, over robot time
  (``steps / control_hz``), in bins of ``bin_minutes``;
- **robot minutes until no correction**: the robot time at the end of the first run of
  ``window`` consecutive episodes nobody corrected (None: it never came), the point from which
  a person could have walked away (HIL-SERL's intervention curves fall to zero there);
- the first and the last ``tail_minutes`` of robot time compared.

The records come from the intervention flags the actor logs with every step (``intervened``,
:func:`corrections_of`), from an episode's logged counts (``interventions``,
``intervened_steps``: the actor counts them from the same flags), or live from the learner's
router (:class:`robot_rl.learner.routing.Router` feeds :meth:`HumanEffort.add_step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NO_CORRECTION_WINDOW = 20
"""Episodes in a row without a correction for :meth:`HumanEffort.minutes_until_no_correction`."""


def corrections_of(intervened: Sequence[bool] | np.ndarray) -> int:
    """Takeovers in one episode's per-step intervention flags: runs of True."""
    f = np.asarray(intervened, dtype=bool)
    if f.size == 0:
        return 0
    return int(f[0]) + int(np.count_nonzero(f[1:] & ~f[:-1]))


@dataclass(frozen=True)
class EpisodeEffort:
    """One training episode's human effort."""

    steps: int
    corrections: int
    human_steps: int


class HumanEffort:
    """Per-episode human effort of a run, in order (see the module docstring).

    Args:
        control_hz: Control rate: ``steps / control_hz`` is robot time, seconds.
    """

    def __init__(self, control_hz: float) -> None:
        if not control_hz > 0:
            raise ValueError(f"control_hz must be > 0, got {control_hz}")
        self.control_hz = float(control_hz)
        self.episodes: list[EpisodeEffort] = []
        self._open: list[bool] = []

    # -- filling ----------------------------------------------------------------------------

    def add_episode(self, steps: int, corrections: int, human_steps: int) -> None:
        """A finished episode from its counts."""
        if steps < 0 or corrections < 0 or not 0 <= human_steps <= steps:
            raise ValueError(
                f"episode effort steps={steps}, corrections={corrections}, "
                f"human_steps={human_steps}: need 0 <= human_steps <= steps, corrections >= 0"
            )
        self.episodes.append(EpisodeEffort(int(steps), int(corrections), int(human_steps)))

    def add_flags(self, intervened: Sequence[bool] | np.ndarray) -> None:
        """A finished episode from its per-step intervention flags."""
        f = np.asarray(intervened, dtype=bool)
        self.add_episode(f.size, corrections_of(f), int(f.sum()))

    def add_step(self, intervened: bool) -> None:
        """One step of the open episode (live); :meth:`end_episode` closes it."""
        self._open.append(bool(intervened))

    def end_episode(self) -> None:
        """Close the open episode (nothing happens when it has no steps)."""
        if self._open:
            self.add_flags(self._open)
        self._open = []

    @classmethod
    def from_log(cls, log: Any, control_hz: float, sources: tuple[str, ...] = ("online",)):
        """From a run's log (:class:`robot_rl.replay.EpisodeLogReader`): the ``intervened`` flags
        of every finished episode of ``sources``, in order."""
        out = cls(control_hz)
        for meta in log.episodes:
            if meta.source in sources and meta.length > 0:
                ep = log.read_episode(meta.index, images=False)
                out.add_flags(ep["intervened"])
        return out

    # -- figures ----------------------------------------------------------------------------

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        steps = np.array([e.steps for e in self.episodes], dtype=np.float64)
        corr = np.array([e.corrections for e in self.episodes], dtype=np.float64)
        human = np.array([e.human_steps for e in self.episodes], dtype=np.float64)
        end_min = np.cumsum(steps) / self.control_hz / 60.0
        return steps, corr, human, end_min

    @property
    def robot_minutes(self) -> float:
        """Robot time of the finished episodes, minutes."""
        return float(sum(e.steps for e in self.episodes)) / self.control_hz / 60.0

    def minutes_until_no_correction(self, window: int = NO_CORRECTION_WINDOW) -> float | None:
        """Robot minutes at the end of the first ``window`` consecutive uncorrected episodes
        (None: there was no such run)."""
        _, corr, _, end_min = self._arrays()
        run = 0
        for i, c in enumerate(corr):
            run = run + 1 if c == 0 else 0
            if run >= window:
                return float(end_min[i])
        return None

    def over_time(self, bin_minutes: float = 1.0) -> dict[str, list[float]]:
        """Per bin of robot time (by each episode's end): the bin's end (minutes), corrections
        per episode, human-controlled steps per robot minute, episodes. Empty bins are left
        out."""
        steps, corr, human, end_min = self._arrays()
        out: dict[str, list[float]] = {
            "robot_minutes": [],
            "corrections_per_episode": [],
            "human_steps_per_robot_minute": [],
            "episodes": [],
        }
        if not len(steps):
            return out
        bins = np.floor((end_min - 1e-12) / bin_minutes).astype(int)
        for b in np.unique(bins):
            m = bins == b
            minutes = steps[m].sum() / self.control_hz / 60.0
            out["robot_minutes"].append(float((b + 1) * bin_minutes))
            out["corrections_per_episode"].append(float(corr[m].mean()))
            out["human_steps_per_robot_minute"].append(float(human[m].sum() / minutes))
            out["episodes"].append(float(m.sum()))
        return out

    def _span(self, m: np.ndarray) -> dict[str, float | int | None]:
        steps, corr, human, _ = self._arrays()
        if not m.any():
            return {"episodes": 0, "corrections_per_episode": None, "human_share": None}
        return {
            "episodes": int(m.sum()),
            "corrections_per_episode": float(corr[m].mean()),
            "human_share": float(human[m].sum() / max(steps[m].sum(), 1.0)),
        }

    def summary(
        self, tail_minutes: float = 10.0, window: int = NO_CORRECTION_WINDOW
    ) -> dict[str, Any]:
        """JSON-ready figures: totals, the first and the last ``tail_minutes`` of robot time
        (corrections per episode, share of steps a person drove), minutes until no
        correction."""
        steps, corr, human, end_min = self._arrays()
        total = self.robot_minutes
        start_min = end_min - steps / self.control_hz / 60.0
        return {
            "episodes": len(self.episodes),
            "robot_minutes": total,
            "corrections": int(corr.sum()),
            "human_steps": int(human.sum()),
            "corrections_per_episode": float(corr.mean()) if len(corr) else None,
            "human_share": float(human.sum() / steps.sum()) if steps.sum() else None,
            "first_minutes": self._span(end_min <= tail_minutes),
            "last_minutes": self._span(start_min >= total - tail_minutes),
            "tail_minutes": tail_minutes,
            "no_correction_window": window,
            "robot_minutes_until_no_correction": self.minutes_until_no_correction(window),
        }


def describe_effort(effort: dict | None) -> str | None:
    """One line on the human's effort from a :meth:`HumanEffort.summary` (None: nobody
    corrected the policy)."""
    if not effort or not effort.get("corrections"):
        return None
    first, last = effort["first_minutes"], effort["last_minutes"]

    def rate(span: dict) -> str:
        c = span.get("corrections_per_episode")
        return "-" if c is None else f"{c:.2f}"

    until = effort.get("robot_minutes_until_no_correction")
    n, tail = effort["no_correction_window"], effort["tail_minutes"]
    done = (
        f"the first {n} episodes in a row without a correction ended at {until:.1f} robot minutes"
        if until is not None
        else f"never {n} episodes in a row without a correction"
    )
    return (
        f"human effort: {effort['corrections']} corrections, {effort['human_share']:.0%} of the "
        f"steps; per episode {rate(first)} in the first {tail:g} robot minutes, {rate(last)} "
        f"in the last {tail:g}; {done}"
    )
