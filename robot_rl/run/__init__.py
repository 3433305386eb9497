"""What a run needs whichever process drives it: the embedded trainer, ``robot-rl learner`` and
``robot-rl actor`` all use these, so they sit below :mod:`robot_rl.learner` and
:mod:`robot_rl.actor` (which may not import each other's innards).

- :mod:`robot_rl.run.evaluate`: deterministic evaluation, the [-1, 1] <-> Box action map and
  the robot-state stamp of an observation.
- :mod:`robot_rl.run.held`: held steps (a step whose learned reward is late waits here) and the
  episode writer.
- :mod:`robot_rl.run.normalize`: the frozen state normaliser applied at act and update time.
- :mod:`robot_rl.run.rundir`: the run directory's names, errors and ``config.json``.
- :mod:`robot_rl.run.traps`: the reward-trap check (per-step bonus + termination on success,
  per-step cost + termination on failure).

Import the submodules directly. They import only :mod:`robot_rl.core` from the repo.
"""
