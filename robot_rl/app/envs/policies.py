"""Policies that act in a twin env without learning: the task's scripted expert (its actions
mapped into the env's action space), uniform random actions, and no motion. ``robot-rl
rollout`` and ``robot-rl collect`` choose one by name (:func:`make_policy`)."""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym
import numpy as np

PolicyName = str
"""``scripted`` (the twin task's expert), ``random``, ``zero``, or ``module:function``: a
scripted policy for a foreign env (:class:`FunctionPolicy`)."""
BUILTIN_POLICIES = ("scripted", "random", "zero")


def check_policy_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a built-in policy or ``module:function``."""
    module, sep, function = name.partition(":")
    if name not in BUILTIN_POLICIES and not (sep and module and function):
        raise ValueError(
            f"--policy {name!r}: choose {', '.join(BUILTIN_POLICIES)} or module:function (a "
            "scripted policy for an --env: function(observation, info) -> action in the env's "
            "own units)"
        )


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


class FunctionPolicy:
    """A scripted policy written for a foreign env: ``function(observation, info)`` with the
    env's own observation (not the learner's mapping of it) returns an action in the env's own
    units, which enters the data as the learner's [-1, 1] action
    (:meth:`robot_rl.wrappers.foreign_env.ForeignEnv.policy_action`). A policy with phases is
    a callable object with a ``reset()`` method, called at every episode start."""

    def __init__(self, function, env: gym.Env, name: str) -> None:
        from robot_rl.wrappers.foreign_env import find_foreign_env

        foreign = find_foreign_env(env)
        if foreign is None:
            raise ValueError(f"--policy {name}: a module:function policy needs an --env")
        self._foreign = foreign
        self._function = function

    def reset(self, rng: np.random.Generator) -> None:
        reset = getattr(self._function, "reset", None)
        if callable(reset):  # a stateful policy object: a new episode
            reset()

    def act(self, obs: Any, info: dict) -> np.ndarray:
        return self._foreign.policy_action(self._function(self._foreign.raw_obs, info))


def make_policy(name: PolicyName, env: gym.Env, backend) -> Policy:
    """The policy called ``name`` for ``env`` (``backend`` provides the scripted expert)."""
    check_policy_name(name)
    if ":" in name:
        from robot_rl.app.envs.foreign import load_function

        return FunctionPolicy(load_function(name), env, name)
    if name == "scripted":
        return ExpertPolicy(backend.make_expert(), env)
    if name == "random":
        return RandomPolicy(env.action_space)
    if name == "zero":
        return ZeroPolicy(env.action_space)
    raise ValueError(f"unknown policy {name!r}; choose scripted, random or zero")
