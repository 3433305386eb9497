"""What both parts of bench/distributed.py share: the cameras and the CLI config.

The entry point (bench/distributed.py) and the end-to-end part (bench/distributed_e2e.py) both
import it; bench/distributed.py puts bench/ on sys.path first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

CAMERAS = ("front", "wrist")


@dataclass(frozen=True)
class DistributedBenchConfig:
    """What to measure."""

    transitions: int = 2_000
    """Transitions per actor."""
    batch: int = 10
    """Transitions per pushed batch (1 s of control at 10 Hz)."""
    image_size: int = 128
    """Camera frames are image_size x image_size."""
    frames: int = 200
    """Distinct twin frames per camera, cycled."""
    weights_rounds: int = 20
    """Weights broadcasts timed per policy."""
    part: Literal["transport", "e2e", "all"] = "transport"
    """transport: in-process transport benchmarks; e2e: real learner and actor processes."""
    pixel_steps: int = 1500
    """e2e: the learner's --steps (all actors together) of the pixel runs without updates."""
    pixel_learning_steps: int = 1000
    """e2e: the learner's --steps of the pixel run with updates."""
    state_steps: int = 1500
    """e2e: the learner's --steps of the state run with updates."""
    recovery_steps: int = 2000
    """e2e_recovery: the learner's --steps (over the restart)."""
    kill_after: int = 500
    """e2e_recovery: SIGKILL the learner once it acknowledged this many transitions."""
    away_s: float = 3.0
    """e2e_recovery: seconds between the SIGKILL and the restart."""
    random_steps: int = 100
    """e2e: the actors' --random-steps."""
    tick_budget_s: float = 0.1
    """e2e: the actors' --tick-budget-s."""
    run_timeout_s: float = 300.0
    """e2e: give up on a run (and kill its processes) after this long, seconds."""
    learner_exit_timeout_s: float = 20.0
    """e2e: after the actors ended, wait this long for the learner to exit, then SIGTERM (and
    SIGKILL 10 s later), seconds."""
    pixel_buffer_capacity: int = 20_000
    """e2e: the pixel learners' --buffer-capacity (the default 1M transitions, plus as many for
    interventions, is one 50 GiB array per 128 x 128 camera, which this machine refuses)."""
    e2e_runs: tuple[str, ...] = (
        "pixels_idle_learner",
        "pixels_idle_learner_2_actors",
        "pixels_learning",
        "state_learning",
        "recovery",
    )
    """e2e: which runs, in order."""
    e2e_dir: Path | None = None
    """e2e: keep the run directories here (None: a temporary directory, removed afterwards)."""
    out: Path | None = None
    """Also write the JSON objects here (one per line)."""
