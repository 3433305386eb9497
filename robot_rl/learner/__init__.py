"""The training loop around the agent: embedded trainer, checkpoints, evaluation, plots.

Modules (import what you need; this package imports nothing heavy on its own):

- :mod:`robot_rl.learner.config`: :class:`~robot_rl.learner.config.TrainConfig`.
- :mod:`robot_rl.learner.loop`: :class:`~robot_rl.learner.loop.Trainer` (act, log, update,
  evaluate, checkpoint, resume) and the run-directory layout.
- :mod:`robot_rl.learner.checkpoint`: agent (policies.io) + counters and RNG states, no pickle.
- :mod:`robot_rl.learner.evaluate`: deterministic evaluation and the [-1, 1] <-> Box action map.
- :mod:`robot_rl.learner.normalize`: the frozen state normaliser applied at act and update time.
- :mod:`robot_rl.learner.plots`: the learning-curve PNG.
- :mod:`robot_rl.learner.routing`: where (intervened) transitions go: hil-serl, rlif, online.
- :mod:`robot_rl.learner.rundir`: the run directory's names, errors and ``config.json``.
- :mod:`robot_rl.learner.progress`: the progress bar.
"""

from robot_rl.learner.config import TrainConfig

__all__ = ["TrainConfig"]
