"""Policies that act in a twin env without learning: the task's scripted expert (its actions
mapped into the env's action space), uniform random actions, and no motion. ``robot-rl
rollout`` and ``robot-rl collect`` choose one by name (:func:`make_policy`)."""

from __future__ import annotations

from typing import Any, Literal, Protocol

import gymnasium as gym
import numpy as np

PolicyName = Literal["scripted", "random", "zero"]


class Policy(Protocol):
    """What rollout and collect need of a policy: reset per episode, act per step."""

    def reset(self, rng: np.random.Generator) -> None: ...

    def act(self, obs: Any, info: dict) -> np.ndarray: ...


class ExpertPolicy:
    """The task's scripted expert, its base-env actions mapped into ``env``'s action space.

    The experts read only ``info["privileged"]`` (sim truth), so observation wrappers do not
    matter; action wrappers are undone with their ``inverse_action`` (see
    :func:`robot_rl.app.envs.build.base_to_policy_action`).
    """

    def __init__(self, expert, env: gym.Env) -> None:
        from robot_rl.app.envs.build import base_to_policy_action

        self._expert = expert
        self._to_policy = base_to_policy_action(env)

    def reset(self, rng: np.random.Generator) -> None:
        self._expert.reset(rng)

    def act(self, obs: Any, info: dict) -> np.ndarray:
        return self._to_policy(self._expert.act(obs, info))


class RandomPolicy:
    """Uniform actions in a Box action space, from the episode's Generator."""

    def __init__(self, space: gym.spaces.Box) -> None:
        self._space = space
        self._rng: np.random.Generator | None = None

    def reset(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def act(self, obs: Any, info: dict) -> np.ndarray:
        if self._rng is None:
            raise RuntimeError("call reset(rng) before act()")
        low, high = self._space.low, self._space.high
        return self._rng.uniform(low, high).astype(self._space.dtype)  # (A,)


class ZeroPolicy:
    """All-zero actions: no motion, gripper target half closed."""

    def __init__(self, space: gym.spaces.Box) -> None:
        self._zero = np.zeros(space.shape, dtype=space.dtype)

    def reset(self, rng: np.random.Generator) -> None:
        pass

    def act(self, obs: Any, info: dict) -> np.ndarray:
        return self._zero.copy()


def make_policy(name: PolicyName, env: gym.Env, backend) -> Policy:
    """The policy called ``name`` for ``env`` (``backend`` provides the scripted expert)."""
    if name == "scripted":
        return ExpertPolicy(backend.make_expert(), env)
    if name == "random":
        return RandomPolicy(env.action_space)
    if name == "zero":
        return ZeroPolicy(env.action_space)
    raise ValueError(f"unknown policy {name!r}; choose scripted, random or zero")
