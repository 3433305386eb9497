"""The training loop around the agent: embedded trainer, checkpoints, evaluation, plots.

Modules (import what you need; this package imports nothing heavy on its own):

- :mod:`robot_rl.learner.config`: :class:`~robot_rl.learner.config.TrainConfig`.
- :mod:`robot_rl.learner.loop`: :class:`~robot_rl.learner.loop.Trainer` (act, log, update,
  evaluate, checkpoint, resume) and the run-directory layout.
- :mod:`robot_rl.learner.checkpoint`: agent (policies.io) + counters and RNG states, no pickle.
- :mod:`robot_rl.learner.plots`: the learning-curve PNG.
- :mod:`robot_rl.learner.routing`: where (intervened) transitions go: hil-serl, rlif, online.
- :mod:`robot_rl.learner.progress`: the progress bar.

Evaluation, held steps, the state normaliser, the run directory and the reward-trap check,
which the actor uses too, live in :mod:`robot_rl.run`.
"""

from robot_rl.learner.config import TrainConfig

__all__ = ["TrainConfig"]
