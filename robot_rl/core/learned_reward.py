"""Typed records and Protocols of learned rewards at run time, shared by the reward wrapper
(:class:`robot_rl.wrappers.LearnedReward`), the rewarder that answers it
(:class:`rewards.online.OnlineRewarder`) and the training loop.

A learned reward may answer late (a reward server on another machine): the env step then
proceeds without it, the wrapper marks the step *pending*, and the loop holds the transition
until its label arrives (off-policy RL can label a transition late). No side channel through
``info`` (STYLE.md #6): the loop reads pending steps and late labels through
:class:`LateRewardSource`.

Steps are numbered per episode from 0 (the first ``env.step`` after a reset); episodes are
numbered by the wrapper from 0 at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class StepLabel:
    """A reward model's verdict on one env step.

    Attributes:
        episode: Episode number (the wrapper's).
        step: Step number within the episode.
        reward: The model's reward for the step's frame (NaN if ``failed``).
        success_prob: The model's success probability (NaN if ``failed``).
        terminated: The success detector confirmed the episode's end at this step.
        success: The episode ended in success at this step (False unless ``terminated``).
        failed: No answer came (server error or past the late timeout): the step has no reward.
        error: Why it failed ("" unless ``failed``).
    """

    episode: int
    step: int
    reward: float
    success_prob: float
    terminated: bool = False
    success: bool = False
    failed: bool = False
    error: str = ""


@runtime_checkable
class StepRewarder(Protocol):
    """What the reward wrapper asks for labels: submit a step's frames, collect verdicts.

    Labels come back in step order within an episode (the success detector judges them in
    that order); an answer that arrives before an earlier step's is held back until that one
    arrives or fails.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def model_version(self) -> str: ...

    @property
    def cameras(self) -> tuple[str, ...]:
        """Cameras every submitted step must carry."""
        ...

    def begin_episode(self, episode: int) -> None:
        """A new episode starts (the detector forgets the last one)."""
        ...

    def submit(
        self,
        episode: int,
        step: int,
        frames: Mapping[str, np.ndarray],
        state: Mapping[str, np.ndarray] | None,
        human: str | None = None,
    ) -> None:
        """Queue a step: camera -> (H, W, 3) uint8 frame, named state parts (detector gates),
        and a person's verdict at this step (``"success"`` / ``"failure"``: ends the episode,
        overriding the model), if any."""
        ...

    def collect(self, wait_for: tuple[int, int] | None, timeout_s: float) -> list[StepLabel]:
        """Labels decided since the last call, in order; first waits up to ``timeout_s`` for
        the label of ``wait_for`` = (episode, step), if given."""
        ...

    def drain(self, timeout_s: float) -> list[StepLabel]:
        """Wait up to ``timeout_s`` for every submitted step; the unanswered come back failed."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class HumanVerdicts(Protocol):
    """A person's success / failure presses (e.g. teleop buttons), read once per step."""

    def reset(self) -> None:
        """A new episode starts (buttons held through the reset do not count)."""
        ...

    def __call__(self) -> str | None:
        """``"success"`` or ``"failure"`` if pressed since the last call, else None."""
        ...


@dataclass(frozen=True)
class RewardStep:
    """What the reward wrapper did at the last ``env.step``.

    Attributes:
        episode: Episode number.
        step: Step number within the episode.
        pending: The step's reward had not arrived; the returned reward is NaN and the label
            comes later through :meth:`LateRewardSource.poll`.
    """

    episode: int
    step: int
    pending: bool


@runtime_checkable
class LateRewardSource(Protocol):
    """What the training loop reads from a learned-reward wrapper."""

    @property
    def model_id(self) -> str: ...

    @property
    def last_step(self) -> RewardStep | None:
        """The record of the last step (None before the first step of an episode)."""
        ...

    def poll(self) -> list[StepLabel]:
        """Labels of steps that were returned pending, arrived since the last poll."""
        ...

    def drain(self, timeout_s: float) -> list[StepLabel]:
        """Labels of every still-pending step, waiting up to ``timeout_s`` (the rest failed)."""
        ...

    def stats(self) -> Mapping[str, float]:
        """Cumulative counters (labels, late labels, failures, confirmations, false ones)."""
        ...
