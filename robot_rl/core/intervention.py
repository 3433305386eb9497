"""Typed records of human interventions, shared by the intervention wrapper (producer) and the
training loop (consumer), plus the optional hook through which a simulated teleop sees the env.

No side channels through ``info`` (STYLE.md #6): the wrapper
(:class:`robot_rl.wrappers.intervention.Intervention`) keeps the last step's
:class:`InterventionStep` and the episode's :class:`InterventionStats`; the loop reads them
through the :class:`InterventionSource` Protocol (``robot_rl.learner`` may not import wrappers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class InterventionStep:
    """What happened in the last ``env.step`` of an intervention wrapper.

    Attributes:
        action: (A,) the action as executed, in the wrapper's (policy-facing) action space:
            the policy's proposal, or the human's base-env action mapped through the inverses of
            the action wrappers (clipped to the action space, and executed clipped).
        policy_action: (A,) what the policy proposed (as passed to ``step``).
        intervened: The human chose ``action``.
        onset: First intervened step after a step (or episode start) without intervention.
        buttons: Buttons of the teleop reading used for this step.
    """

    action: np.ndarray
    policy_action: np.ndarray
    intervened: bool
    onset: bool
    buttons: frozenset[str] = frozenset()


@dataclass(frozen=True)
class InterventionStats:
    """Intervention counters of one episode (so far).

    Attributes:
        steps: Env steps of the episode.
        interventions: Number of takeovers (onsets).
        intervened_steps: Steps the human drove (hold window included).
    """

    steps: int = 0
    interventions: int = 0
    intervened_steps: int = 0

    @property
    def rate(self) -> float:
        """Fraction of the episode's steps the human drove (0 for an empty episode)."""
        return self.intervened_steps / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, float | int]:
        """JSON-able ``{interventions, intervened_steps, intervention_rate}``."""
        return {
            "interventions": self.interventions,
            "intervened_steps": self.intervened_steps,
            "intervention_rate": self.rate,
        }


@runtime_checkable
class InterventionSource(Protocol):
    """What the training loop reads from an intervention wrapper after every step."""

    @property
    def last_step(self) -> InterventionStep | None:
        """The record of the last step (None before the first step of an episode)."""
        ...

    @property
    def episode_stats(self) -> InterventionStats:
        """Counters of the current (or just ended) episode; reset by ``env.reset``."""
        ...


@runtime_checkable
class StepObserver(Protocol):
    """Optional hooks of a :class:`robot_rl.core.protocols.Teleop` that must see the env.

    A simulated human (``sim.human.SimHumanTeleop``) decides from the task's privileged state
    and reward; the intervention wrapper calls these after ``reset`` and after every ``step``.
    Real devices do not implement them and are never called.
    """

    def observe_reset(self, obs: Mapping, info: Mapping[str, Any], seed: int | None) -> None:
        """The episode started (``seed``: the env's reset seed, if any)."""
        ...

    def observe_step(self, obs: Mapping, reward: float, info: Mapping[str, Any]) -> None:
        """An env step finished with ``reward``; ``info`` is the env's step info."""
        ...
