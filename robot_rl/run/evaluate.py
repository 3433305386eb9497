"""Deterministic evaluation of an agent on any gymnasium env with a Dict obs and a Box action
space, plus the action mapping between the policy's [-1, 1] and the env's Box.

Evaluation episode ``i`` resets with ``seed + i``; the trainer passes a seed disjoint from its
training seeds, so every evaluation sees the same episodes. An episode counts as a success if the
env reported ``info["is_success"]`` at any step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.types import truth_numbers


class ActingAgent(Protocol):
    """What evaluation needs from an agent (``policies.sac.SACAgent`` and ``BCAgent`` fit)."""

    def act(self, obs: Mapping, deterministic: bool, generator: Any = None) -> np.ndarray: ...


class ActionMap:
    """Affine map between the policy's action box [-1, 1]^A and the env's Box action space.

    Identity for the twin (its actions are already in [-1, 1]); e.g. Pendulum's [-2, 2] torque
    is scaled. Replay buffers and demo datasets hold policy-space actions.

    Args:
        space: The env's action space (finite bounds required).
    """

    def __init__(self, space: gym.spaces.Space) -> None:
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"the learner needs a 1-D Box action space, got {space}")
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError("the action space needs finite low/high bounds to map [-1, 1] onto")
        self.low = space.low.astype(np.float64)
        self.high = space.high.astype(np.float64)
        self.dtype = space.dtype
        self.dim = int(space.shape[0])

    def to_env(self, a_policy: np.ndarray) -> np.ndarray:
        """(A,) in [-1, 1] -> (A,) in [low, high] (the env's dtype)."""
        a = np.clip(np.asarray(a_policy, dtype=np.float64), -1.0, 1.0)
        return (self.low + 0.5 * (a + 1.0) * (self.high - self.low)).astype(self.dtype)

    def to_policy(self, a_env: np.ndarray) -> np.ndarray:
        """(A,) in [low, high] -> (A,) float32 in [-1, 1] (clipped)."""
        a = 2.0 * (np.asarray(a_env, dtype=np.float64) - self.low) / (self.high - self.low) - 1.0
        return np.clip(a, -1.0, 1.0).astype(np.float32)


@dataclass(frozen=True)
class EvalEpisode:
    """Outcome of one evaluation episode."""

    seed: int
    episode_return: float
    length: int
    success: bool
    mean_action_age_s: float | None = None
    """Mean age of the observation each action answered when it was sent
    (``info["action_age_s"]``; None: the env does not report it)."""
    max_action_age_s: float | None = None
    max_success_prob: float | None = None
    """The learned reward's highest success probability in the episode
    (``info["reward"]["success_prob"]``; None: no learned reward). For an episode that
    succeeded but was never confirmed: above the detector's threshold, its gates or k-of-n
    held it back; below, the classifier did not see it."""
    truth_max: dict[str, float] | None = None
    """The largest value over the episode of each one-number field of ``info["privileged"]``
    (the twin's truth, e.g. pick_cube's ``cube_lift_m``; None: the env has none): which stage
    a failed episode never reached (``sim.diagnosis``). Never shown to the policy."""


@dataclass(frozen=True)
class EvalResult:
    """Summary of an evaluation."""

    episodes: tuple[EvalEpisode, ...]

    @property
    def success_rate(self) -> float:
        return float(np.mean([e.success for e in self.episodes]))

    @property
    def mean_return(self) -> float:
        return float(np.mean([e.episode_return for e in self.episodes]))

    @property
    def mean_length(self) -> float:
        return float(np.mean([e.length for e in self.episodes]))

    def summary(self) -> dict:
        """JSON-able ``{episodes, success_rate, mean_return, mean_length, per_episode}``."""
        return {
            "episodes": len(self.episodes),
            "success_rate": self.success_rate,
            "mean_return": self.mean_return,
            "mean_length": self.mean_length,
            "per_episode": [asdict(e) for e in self.episodes],
        } | self._action_age()

    def _action_age(self) -> dict:
        """``mean_action_age_s`` / ``max_action_age_s`` over the episodes that report one."""
        eps = [e for e in self.episodes if e.mean_action_age_s is not None]
        if not eps:
            return {}
        steps = sum(e.length for e in eps)
        return {
            "mean_action_age_s": sum(e.mean_action_age_s * e.length for e in eps) / steps,
            "max_action_age_s": max(e.max_action_age_s for e in eps),
        }


FrameHook = Callable[[int, int, float, bool], None]
"""Called after reset (step 0) and every step with (episode, step, return so far, success)."""


def evaluate(
    env: gym.Env,
    agent: ActingAgent,
    to_learner: Callable[[Mapping], Mapping],
    episodes: int,
    seed: int,
    deterministic: bool = True,
    on_step: FrameHook | None = None,
) -> EvalResult:
    """Run ``episodes`` episodes with ``agent`` acting on ``env``.

    Args:
        env: Any gymnasium env with a Dict observation and a Box action space.
        agent: Acts on learner-layout observations, returns (A,) in [-1, 1].
        to_learner: Env observation -> learner layout (``ObsAdapter.to_learner``).
        episodes: Number of episodes.
        seed: Episode i resets with ``seed + i``.
        deterministic: Use the policy mean (True for evaluation).
        on_step: Optional hook (e.g. a video recorder), see :data:`FrameHook`.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    amap = ActionMap(env.action_space)
    out: list[EvalEpisode] = []
    for i in range(episodes):
        obs, info = env.reset(seed=seed + i)
        ret, length, success = 0.0, 0, False
        ages: list[float] = []
        probs: list[float] = []
        peak: dict[str, float] | None = None
        if on_step is not None:
            on_step(i, 0, ret, success)
        while True:
            a = agent.act(to_learner(obs), deterministic=deterministic)
            obs, reward, terminated, truncated, info = env.step(amap.to_env(a))
            ret += float(reward)
            length += 1
            success = success or bool(info.get(keys.INFO_SUCCESS, False))
            if (age := info.get(keys.INFO_ACTION_AGE)) is not None:
                ages.append(float(age))
            prob = (info.get(keys.INFO_REWARD) or {}).get("success_prob")
            if prob is not None and math.isfinite(prob):  # NaN: the step's label came late
                probs.append(float(prob))
            if isinstance(truth := info.get(keys.INFO_PRIVILEGED), Mapping):
                peak = peak or {}
                for name, x in truth_numbers(truth).items():
                    peak[name] = max(peak.get(name, x), x)
            if on_step is not None:
                on_step(i, length, ret, success)
            if terminated or truncated:
                break
        age_fig = (float(np.mean(ages)), float(np.max(ages))) if ages else (None, None)
        top = max(probs) if probs else None
        out.append(EvalEpisode(seed + i, ret, length, success, *age_fig, top, peak))
    return EvalResult(tuple(out))
