"""Configuration of the embedded training loop (frozen, validated dataclasses)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

InterventionMode = Literal["hil-serl", "rlif", "online"]
INTERVENTION_MODES: tuple[str, ...] = ("hil-serl", "rlif", "online")
DEFAULT_RLIF_PENALTY = -100.0
"""The twin's failure reward: the bottom of its value scale (see robot_rl.learner.routing)."""


@dataclass(frozen=True)
class TrainConfig:
    """How the embedded trainer interleaves acting, learning, evaluation and checkpoints.

    The agent's own settings (network sizes, UTD, ensemble, ...) live in
    :class:`policies.config.SACConfig`; this is the loop around it.
    """

    total_env_steps: int = 10_000
    """Stop after this many online env steps (counted over resumes)."""
    seed: int = 0
    """Seeds the agent, the action sampling, the batch sampling and the training resets
    (episode i resets with seed + i). Evaluation uses seeds from ``eval_seed`` instead."""
    batch_size: int = 256
    """Transitions per critic update."""
    demo_fraction: float = 0.5
    """Fraction of each batch drawn from the demo buffer (RLPD symmetric sampling: 0.5)."""
    buffer_capacity: int = 1_000_000
    """Capacity of the RAM online buffer, transitions."""
    random_steps: int = 1_000
    """Uniform random actions for the first random_steps env steps; skipped (0) when demos are
    given, since the demos seed the buffer."""
    learning_starts: int = 500
    """First learner update once this many transitions (online + demo) are in the buffers."""
    eval_every_steps: int = 2_000
    """Evaluate (and checkpoint) every this many env steps, and at the end."""
    eval_episodes: int = 10
    """Episodes per evaluation (deterministic policy)."""
    eval_seed: int = 1_000_000
    """Evaluation episode i resets with eval_seed + i (the same episodes at every evaluation,
    disjoint from the training seeds)."""
    log_every_steps: int = 100
    """Write learner metrics to tensorboard every this many env steps."""
    normalize_state: bool = True
    """Normalise the state vector with fixed statistics fitted when learning starts (demos +
    online data so far); see :mod:`robot_rl.run.normalize`."""
    normalize_refit: bool = False
    """Refit the state normaliser each time the data it was last fitted on has doubled (demos +
    online transitions), so that states the policy reaches later than the demos (a pushed
    puck's rotation, still in the demos) are not held at the clip, tens of fitted stds away.
    A few refits per run (log2 of the data's growth); the agent folds each into the first
    layer that reads the state, so its networks compute what they did on unclipped states."""
    reward_offset: float = 0.0
    """Added to every sampled reward at update time (logs keep raw rewards). -1 turns a dense
    reward in [0, 1] with termination on success into a cost, so that succeeding (ending the
    episode) beats hovering near success and collecting dense reward."""
    num_threads: int = 1
    """torch.set_num_threads for the run (1 suits small networks on few cores)."""
    progress: bool = True
    """Show a rich progress bar on stderr."""
    intervention_mode: InterventionMode = "hil-serl"
    """How human interventions are used (see :mod:`robot_rl.learner.routing`): ``hil-serl``
    (intervened transitions go to the online AND the demo buffer), ``rlif`` (the refused
    proposal at each intervention onset becomes a terminal transition rewarded
    ``rlif_penalty``) or ``online`` (plain online data). Without a teleop nothing is intervened
    and the modes coincide. Default hil-serl: fastest to 90% in the twin (see
    :mod:`robot_rl.learner.routing` for the numbers and ``bench/hil_efficiency.py``)."""
    rlif_penalty: float = DEFAULT_RLIF_PENALTY
    """Reward of the rlif penalty transition; must lie below the Q values it competes with
    (the twin: costs in [-1, 0) per step, -100 on failure)."""
    control_hz: float = 10.0
    """The env's control rate: robot time is env steps / control_hz (the human-effort figures,
    :mod:`robot_rl.run.effort`; the twin's and the setups' default rate)."""

    def __post_init__(self) -> None:
        if self.total_env_steps < 1:
            raise ValueError(f"total_env_steps must be >= 1, got {self.total_env_steps}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.demo_fraction <= 1.0:
            raise ValueError(f"demo_fraction {self.demo_fraction} must be in [0, 1]")
        if self.buffer_capacity < 2:
            raise ValueError(f"buffer_capacity must be >= 2, got {self.buffer_capacity}")
        if self.random_steps < 0 or self.learning_starts < 0:
            raise ValueError("random_steps and learning_starts must be >= 0")
        if self.eval_every_steps < 1:
            raise ValueError(f"eval_every_steps must be >= 1, got {self.eval_every_steps}")
        if self.eval_episodes < 1:
            raise ValueError(f"eval_episodes must be >= 1, got {self.eval_episodes}")
        if self.log_every_steps < 1:
            raise ValueError(f"log_every_steps must be >= 1, got {self.log_every_steps}")
        if self.intervention_mode not in INTERVENTION_MODES:
            raise ValueError(
                f"intervention_mode {self.intervention_mode!r}; choose one of {INTERVENTION_MODES}"
            )
        if not math.isfinite(self.rlif_penalty):
            raise ValueError(f"rlif_penalty must be a finite number, got {self.rlif_penalty}")
        if not (math.isfinite(self.control_hz) and self.control_hz > 0):
            raise ValueError(f"control_hz must be > 0, got {self.control_hz}")
        if self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
