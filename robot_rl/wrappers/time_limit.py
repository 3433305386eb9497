"""TimeLimit: truncate episodes after a number of steps, for any gymnasium env.

Follows :class:`robot_rl.envs.RobotEnv`'s convention: a step that ends the episode by the task
(``terminated``) is not also marked ``truncated``; the inner env's own ``truncated`` is kept.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class TimeLimit(gym.Wrapper):
    """Set ``truncated`` once ``max_episode_steps`` steps have run since reset.

    Args:
        env: Any gymnasium env.
        max_episode_steps: Steps per episode, >= 1.
    """

    def __init__(self, env: gym.Env, max_episode_steps: int) -> None:
        super().__init__(env)
        if int(max_episode_steps) != max_episode_steps or max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be an integer >= 1, got {max_episode_steps}")
        self.max_episode_steps = int(max_episode_steps)
        self._elapsed: int | None = None

    @property
    def elapsed_steps(self) -> int:
        """Steps taken since the last reset."""
        if self._elapsed is None:
            raise RuntimeError("call reset() first")
        return self._elapsed

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._elapsed = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        if self._elapsed is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        if self._elapsed >= self.max_episode_steps and not terminated:
            truncated = True
        return obs, reward, terminated, bool(truncated), info
