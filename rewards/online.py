"""OnlineRewarder: a reward model plus the success detector, labelling env steps as they come.

It answers the reward wrapper (:class:`robot_rl.wrappers.LearnedReward`) through the
:class:`robot_rl.core.learned_reward.StepRewarder` Protocol:

- **in process** (``OnlineRewarder(model, ...)``): each submitted step is judged at once (batch
  of one), so every label is ready before ``env.step`` returns;
- **through a reward server** (``OnlineRewarder.remote(labeller, ...)``): each step is sent by an
  :class:`rewards.serve.client.AsyncRewardLabeller` and the wrapper waits at most its deadline;
  an answer that comes later is labelled late, and one that never comes (server down, past the
  labeller's late timeout) comes back ``failed``.

A person's verdict (``submit(..., human="success" | "failure")``, e.g. a teleop button) ends the
episode at that step whatever the model says, and a "success" step gets the success reward.

Labels leave in step order within an episode, because the detector's k-of-n window must see the
frames in order; an answer that overtakes an earlier step's waits for it. The detector runs for
the current episode only: labels of an episode that already ended (late answers) carry their
reward but never terminate anything.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Mapping
from typing import Any, Protocol

import numpy as np

from rewards.detector import DetectorConfig, SuccessDetector
from rewards.trigger_log import TriggerLog
from robot_rl.core.learned_reward import StepLabel
from robot_rl.core.protocols import RewardModel, RewardQuery, RewardResult

Key = tuple[int, int]

HUMAN_SUCCESS_REWARD = 0.0
"""Reward of a step a person marked "success": the binary cost's success value (every model
here gives 0 on success, -1 otherwise); a "failure" keeps the model's reward (-1 without one)."""


class _Labeller(Protocol):
    """The part of :class:`rewards.serve.client.AsyncRewardLabeller` used here."""

    def submit(self, step_id: Hashable, query: RewardQuery) -> None: ...

    def ready(self, step_id: Hashable, timeout_s: float | None = None) -> bool: ...

    def poll(self) -> list[tuple[Hashable, RewardResult]]: ...

    def failures(self) -> list[tuple[Hashable, Exception]]: ...

    def close(self) -> None: ...


class OnlineRewarder:
    """Labels env steps with a reward model and decides termination with a success detector.

    Args:
        model: The reward model, judged in process (None with :meth:`remote`).
        detector: Threshold, k-of-n window and state gates.
        cameras: Cameras the model reads (every submitted step must carry them); empty for a
            model that reads no images (SimReward).
        model_id, model_version: Recorded with the run (defaults: the model's).
        trigger_log: Where confirmations are logged with their frames, or None.
        task_text: Sent with every query (VLM rewards), or None.
    """

    def __init__(
        self,
        model: RewardModel | None,
        detector: DetectorConfig,
        cameras: tuple[str, ...],
        *,
        model_id: str | None = None,
        model_version: str | None = None,
        trigger_log: TriggerLog | None = None,
        task_text: str | None = None,
        _labeller: _Labeller | None = None,
    ) -> None:
        if (model is None) == (_labeller is None):
            raise ValueError("give a reward model, or build a remote rewarder with remote()")
        self._model, self._labeller = model, _labeller
        self._cameras = tuple(cameras)
        self._id = model_id or (model.model_id if model is not None else "remote")
        self._version = model_version or (model.model_version if model is not None else "")
        self._detector = SuccessDetector(detector, log=trigger_log)
        self._task_text = task_text
        self._episode: int | None = None
        self._done = False  # the detector ended the current episode
        self._submitted: list[Key] = []  # in submission order, not yet labelled
        self._answers: dict[Key, tuple[RewardResult | None, str]] = {}
        self._state: dict[Key, Mapping[str, np.ndarray] | None] = {}
        self._frames: dict[Key, Mapping[str, np.ndarray]] = {}
        self._human: dict[Key, str] = {}

    @property
    def detector_config(self) -> DetectorConfig:
        """The success detector's settings (threshold, k of n, gates)."""
        return self._detector.config

    @classmethod
    def remote(
        cls,
        labeller: _Labeller,
        detector: DetectorConfig,
        cameras: tuple[str, ...],
        model_id: str,
        model_version: str,
        **kw: Any,
    ) -> OnlineRewarder:
        """A rewarder whose model runs behind ``labeller`` (an AsyncRewardLabeller)."""
        return cls(
            None,
            detector,
            cameras,
            model_id=model_id,
            model_version=model_version,
            _labeller=labeller,
            **kw,
        )

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def model_version(self) -> str:
        return self._version

    @property
    def cameras(self) -> tuple[str, ...]:
        return self._cameras

    @property
    def in_flight(self) -> int:
        """Steps submitted and not labelled yet."""
        return len(self._submitted)

    def begin_episode(self, episode: int) -> None:
        if self._episode is not None and episode <= self._episode:
            raise ValueError(f"episode {episode} does not follow episode {self._episode}")
        self._episode = episode
        self._done = False
        self._detector.reset()

    def submit(
        self,
        episode: int,
        step: int,
        frames: Mapping[str, np.ndarray],
        state: Mapping[str, np.ndarray] | None,
        human: str | None = None,
    ) -> None:
        if human not in (None, "success", "failure"):
            raise ValueError(f"human must be 'success', 'failure' or None, got {human!r}")
        if episode != self._episode:
            raise ValueError(f"submit for episode {episode}; begin_episode({episode}) first")
        missing = [c for c in self._cameras if c not in frames]
        if missing:
            raise KeyError(
                f"reward model {self._id} reads cameras {list(self._cameras)}; step {step} of "
                f"episode {episode} lacks {missing}"
            )
        key = (episode, step)
        if key in self._state:
            raise ValueError(f"step {key} was already submitted")
        images = {c: np.asarray(frames[c])[None] for c in self._cameras}
        query = RewardQuery(images=images, task_text=self._task_text)
        self._submitted.append(key)
        self._state[key] = state
        if human is not None:
            self._human[key] = human
        self._frames[key] = {c: images[c][0] for c in self._cameras}
        if self._model is not None:
            self._answers[key] = (self._model.predict(query), "")
        else:
            assert self._labeller is not None
            self._labeller.submit(key, query)

    def collect(self, wait_for: Key | None, timeout_s: float) -> list[StepLabel]:
        if self._labeller is not None:
            if wait_for is not None and wait_for in self._state and wait_for not in self._answers:
                self._wait(wait_for, timeout_s)
            self._gather()
        return self._release()

    def drain(self, timeout_s: float) -> list[StepLabel]:
        end = time.monotonic() + max(timeout_s, 0.0)
        if self._labeller is not None:
            for key in list(self._submitted):
                if key not in self._answers:
                    self._wait(key, max(end - time.monotonic(), 0.0))
            self._gather()
        for key in self._submitted:  # whatever is still unanswered has failed
            self._answers.setdefault(key, (None, f"no answer within {timeout_s} s at drain"))
        return self._release()

    def close(self) -> None:
        if self._labeller is not None:
            self._labeller.close()

    # -- internals -----------------------------------------------------------------------------

    def _wait(self, key: Key, timeout_s: float) -> None:
        assert self._labeller is not None
        self._labeller.ready(key, timeout_s)

    def _gather(self) -> None:
        assert self._labeller is not None
        # Answers of steps no longer awaited (given up at drain) are dropped, not kept forever.
        for key, result in self._labeller.poll():
            if key in self._state:
                self._answers[key] = (result, "")  # type: ignore[index]
        for key, error in self._labeller.failures():
            if key in self._state:
                self._answers[key] = (None, f"{type(error).__name__}: {error}")  # type: ignore[index]

    def _release(self) -> list[StepLabel]:
        """Labels of the answered steps at the head of the submission order."""
        out = []
        while self._submitted and self._submitted[0] in self._answers:
            key = self._submitted.pop(0)
            result, error = self._answers.pop(key)
            state, frames = self._state.pop(key), self._frames.pop(key)
            human = self._human.pop(key, None)
            out.append(self._label(key, result, error, state, frames, human))
        return out

    def _label(
        self,
        key: Key,
        result: RewardResult | None,
        error: str,
        state: Mapping[str, np.ndarray] | None,
        frames: Mapping[str, np.ndarray],
        human: str | None = None,
    ) -> StepLabel:
        episode, step = key
        if result is None:
            prob, reward, error = math.nan, math.nan, error
        else:
            prob = float(np.asarray(result.success_prob).reshape(-1)[0])
            reward = float(np.asarray(result.reward).reshape(-1)[0])
            if not (math.isfinite(reward) and 0.0 <= prob <= 1.0):  # NaN fails both
                error = f"reward model {self._id} returned prob {prob}, reward {reward}"
                prob, reward = math.nan, math.nan
        if human is not None:  # a person's verdict is an answer too, and the final one
            prob = 1.0 if human == "success" else (prob if math.isfinite(prob) else 0.0)
            reward = HUMAN_SUCCESS_REWARD if human == "success" else (
                reward if math.isfinite(reward) else HUMAN_SUCCESS_REWARD - 1.0
            )  # fmt: skip
        if math.isnan(reward):
            return StepLabel(episode, step, math.nan, math.nan, failed=True, error=error)
        if episode != self._episode or self._done:
            return StepLabel(episode, step, reward, prob)
        d = self._detector.update(
            prob, step=step, episode=episode, state=state, frames=frames,
            human=human,  # type: ignore[arg-type]
        )  # fmt: skip
        self._done = d.terminated
        return StepLabel(episode, step, reward, prob, d.terminated, d.success)
