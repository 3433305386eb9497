"""The twin's own scoring of its episodes (``sim.ros_node --score-log PATH``).

When a run plays a real robot on the twin (a setup with ``privileged: false``), nothing in the
run reads the twin's truth; what the run really achieved is scored here, inside the twin, from
its own physics, with nothing sent over ROS 2. An episode is the time between two scene resets
(``task/reset``); when the next reset comes (or the twin stops), one JSON line is appended:

    {"episode": 3, "seed": 123, "wall_start": ..., "wall_end": ..., "sim_s": 4.2,
     "success": true, "first_success_sim_s": 3.1, "failure": false, "end": "reset",
     "truth_end": {"grasped": 1.0, "cube_lift_m": 0.052}, "truth_max": {...}}

``success`` is whether the task's success held at any state update of the episode (as
evaluation counts it: an episode that once succeeded succeeded), ``first_success_sim_s`` when it
first did (None if never), ``end`` is ``reset`` or ``stop`` (the twin shut down mid-episode).
``truth_end`` holds the task's one-number privileged fields (pick_cube: ``grasped``,
``cube_lift_m``) at the episode's last state update and ``truth_max`` their largest values over
the episode: when a run's learned reward ends an episode as a success that the twin scored a
failure, they say what the scene was (a cube up but not held by both pads, held but too low).
Episode 0 is the scene the twin starts with. Each line is flushed as written, so a killed twin
loses at most the open episode.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

from robot_rl.core.types import TaskStatus, truth_numbers


class EpisodeScores:
    """Appends one JSON line per finished episode to ``path`` (see the module docstring).

    Args:
        path: The JSONL file (created with its parent directory; appended to if it exists).
        wall: Wall clock (seconds since the epoch), for the episode's ``wall_start/end``.
    """

    def __init__(self, path: str | Path, wall: Any = time.time) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wall = wall
        self._f: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._open: dict[str, Any] | None = None

    def start(self, episode: int, seed: int) -> None:
        """A new scene (episode ``episode``, reset with ``seed``); closes none (see
        :meth:`finish`)."""
        self._open = {
            "episode": int(episode),
            "seed": int(seed),
            "wall_start": self._wall(),
            "sim_s": 0.0,
            "success": False,
            "first_success_sim_s": None,
            "failure": False,
            "truth_end": {},
            "truth_max": {},
        }

    def observe(self, sim_s: float, status: TaskStatus) -> None:
        """One state update of the open episode at sim time ``sim_s``."""
        ep = self._open
        if ep is None:
            return
        ep["sim_s"] = max(ep["sim_s"], float(sim_s))
        if status.success and not ep["success"]:
            ep["success"], ep["first_success_sim_s"] = True, float(sim_s)
        ep["failure"] = ep["failure"] or bool(status.failure)
        end, peak = ep["truth_end"], ep["truth_max"]
        for name, x in truth_numbers(status.privileged).items():
            end[name] = x
            peak[name] = max(peak.get(name, x), x)

    def finish(self, end: str = "reset") -> dict[str, Any] | None:
        """Write the open episode (``end``: ``reset`` or ``stop``); returns its record."""
        ep, self._open = self._open, None
        if ep is None or self._f is None:
            return None
        rec = {**ep, "wall_end": self._wall(), "end": end}
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        return rec

    def close(self) -> None:
        """Finish the open episode as ``stop`` and close the file (idempotent)."""
        if self._f is None:
            return
        self.finish("stop")
        self._f.close()
        self._f = None


def read_scores(path: str | Path) -> list[dict[str, Any]]:
    """The records of a score log (a torn last line, from a twin killed mid-write, is
    skipped)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
