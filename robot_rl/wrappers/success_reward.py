"""SuccessReward: the binary success reward a real robot has, from the env's own success test.

A real arm has no distances between gripper and object to shape a reward with: it has a success
classifier or a person's button. This wrapper gives any env that reports ``info["is_success"]``
that reward: ``success_reward`` (1.0) on a step where the task succeeds, ``0.0`` on every other
step, failures included. Termination is the inner env's (the twin ends an episode on success
and on failure). The inner env's own reward stays in ``info["task_reward"]`` for diagnostics.

Why 0/1 and not a cost of -1 per step: with termination on failure, a per-step cost makes
failing early the cheapest way out (see :mod:`robot_rl.run.traps`); 0 per step and 1 on
success has no such trap, and discounting alone rewards finishing sooner. It is HIL-SERL's
convention (reward 1 and done on success). ``--reward-offset -1`` still turns it into a cost if
one wants that, and the trap check then says what it risks.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym

from robot_rl.core import keys


class SuccessReward(gym.Wrapper):
    """Replace the reward with ``success_reward`` on success steps and 0 elsewhere.

    Args:
        env: Any gymnasium env whose ``info`` carries ``is_success`` (bool) on every step.
        success_reward: The reward of a success step (> 0, finite).

    Raises:
        ValueError: ``success_reward`` not finite or <= 0.
        KeyError (at step): the inner env's info has no ``is_success``.
    """

    def __init__(self, env: gym.Env, success_reward: float = 1.0) -> None:
        super().__init__(env)
        if not math.isfinite(success_reward) or success_reward <= 0:
            raise ValueError(f"success_reward must be finite and > 0, got {success_reward}")
        self.success_reward = float(success_reward)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if keys.INFO_SUCCESS not in info:
            raise KeyError(
                f"SuccessReward needs info[{keys.INFO_SUCCESS!r}] from the inner env "
                f"({type(self.env.unwrapped).__name__} gave {sorted(info)}): wrap an env that "
                "reports success, or compute the reward another way"
            )
        info = {**info, keys.INFO_TASK_REWARD: float(reward)}
        success = bool(info[keys.INFO_SUCCESS])
        return obs, self.success_reward if success else 0.0, terminated, truncated, info
