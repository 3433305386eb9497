"""Transitions held until their reward arrives (learned rewards that answer late).

With a reward server on another machine a step's reward may come after the step (the
control loop never waits for it). The training loop then pushes the step here instead of
writing it at once; a later label fills its reward in, and everything leaves in the order it
came in (episode starts, steps, episode ends), so the log and the replay buffers see each
episode whole and in order. A step whose label failed (no answer) is dropped and counted: it has
no reward to learn from.

Without pending steps (ground-truth rewards, an in-process model) every item leaves at once.
:class:`EpisodeWriter` writes what leaves: the log's episodes and the buffers' transitions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from robot_rl.core.learned_reward import StepLabel

Kind = Literal["begin", "step", "end"]


@dataclass
class Held:
    """One queued item.

    Attributes:
        kind: ``"begin"`` / ``"end"`` of an episode, or a ``"step"``.
        data: What the loop needs to write it.
        key: (episode, step) of a pending step's label, else None.
        reward: The step's reward (NaN until labelled).
        failed: The step's label failed; it is dropped.
    """

    kind: Kind
    data: dict[str, Any] = field(default_factory=dict)
    key: tuple[int, int] | None = None
    reward: float = math.nan
    failed: bool = False

    @property
    def ready(self) -> bool:
        return self.kind != "step" or self.failed or not math.isnan(self.reward)


class HeldSteps:
    """FIFO of episode events and steps; steps wait for their labels.

    Args:
        write: Called with each ready item, in order (failed steps are not written).
        on_drop: Called with each failed step, in its place in the order, or None.
    """

    def __init__(
        self, write: Callable[[Held], None], on_drop: Callable[[Held], None] | None = None
    ) -> None:
        self._write = write
        self._on_drop = on_drop
        self._queue: deque[Held] = deque()
        self._by_key: dict[tuple[int, int], Held] = {}
        self.dropped = 0  # steps whose label failed
        self.late = 0  # steps that waited for a late label

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def waiting(self) -> int:
        """Steps waiting for a label."""
        return len(self._by_key)

    def push(self, item: Held) -> None:
        """Queue ``item``; a step with a key waits for :meth:`label`."""
        if item.kind == "step" and item.key is not None:
            if item.key in self._by_key:
                raise ValueError(f"step {item.key} is already waiting for its label")
            self._by_key[item.key] = item
            self.late += 1
        elif item.kind == "step" and math.isnan(item.reward):
            raise ValueError(
                "the env returned reward NaN for a step it did not mark pending; a learned-reward "
                "env must be handed to the Trainer as late_rewards"
            )
        self._queue.append(item)
        self.flush()

    def label(self, labels: Iterable[StepLabel]) -> None:
        """Fill in arrived labels (labels of unknown steps are ignored), then flush."""
        for lab in labels:
            item = self._by_key.pop((lab.episode, lab.step), None)
            if item is None:
                continue
            if lab.failed or not math.isfinite(lab.reward):
                item.failed = True
            else:
                item.reward = float(lab.reward)
        self.flush()

    def give_up(self) -> None:
        """Mark every step still waiting as failed (its label will not come), then flush."""
        for item in self._by_key.values():
            item.failed = True
        self._by_key.clear()
        self.flush()

    def flush(self) -> None:
        while self._queue and self._queue[0].ready:
            item = self._queue.popleft()
            if item.kind == "step" and item.failed:
                self.dropped += 1
                if self._on_drop is not None:
                    self._on_drop(item)
                continue
            self._write(item)


class EpisodeWriter:
    """Writes what leaves :class:`HeldSteps` to the run's log and the replay buffers.

    A log episode opens with its first written step (a budget-ended run leaves no empty
    episode). The log chains each episode's observations, so a dropped step (its reward never
    came) closes the part written before it (``cut_by_dropped_step``, success unknown) and the
    rest of the env episode is logged as a new log episode; routing and the episode's return
    still count the env episode whole.

    Args:
        router: Routes each written transition to the buffers (``begin_episode``, ``add``),
            or None (a distributed actor: the learner routes the log's rows on its side).
        on_episode_end: ``(success, meta, return)`` after each env episode with written steps
            (tensorboard, progress).
        reward_model_id: Recorded in every log episode's metadata, or None.
    """

    def __init__(
        self,
        router: Any | None,
        on_episode_end: Callable[[bool, dict[str, Any], float], None],
        reward_model_id: str | None = None,
    ) -> None:
        self.router = router
        self.on_episode_end = on_episode_end
        self.log: Any = None  # the open EpisodeLog; set by the trainer
        self._meta = {} if reward_model_id is None else {"reward_model_id": reward_model_id}
        self._begin: dict[str, Any] = {}
        self._len = 0  # the env episode's written steps (0 again once its end is reported)
        self._part_len = 0  # steps in the open log episode
        self.episode_rewards: list[float] = []
        """The written rewards of the current (or, in on_episode_end, the ending) env episode
        (its written return is their sum)."""
        self.episode_terminated = False
        """Its last written step was terminal."""

    def write(self, item: Held) -> None:
        d = item.data
        if item.kind == "begin":
            self._begin, self._len, self._part_len = d, 0, 0
            self.episode_rewards, self.episode_terminated = [], False
        elif item.kind == "step":
            if self._part_len == 0:
                b = self._begin
                self.log.begin_episode(b["source"], policy_version=b["version"], seed=b["seed"])
            if self._len == 0 and self.router is not None:
                self.router.begin_episode()
            self.log.append(reward=item.reward, **d)
            if self.router is not None:
                self.router.add(
                    d["obs_learner"], d["action"], d["policy_action"], item.reward,
                    d["next_obs_learner"], d["terminated"], d["intervened"],
                )  # fmt: skip
            self.episode_rewards.append(float(item.reward))
            self.episode_terminated = bool(d["terminated"])
            self._len += 1
            self._part_len += 1
        elif self._len > 0:  # "end"; nothing to report if every step lost its reward label
            if self._part_len > 0:
                self.log.end_episode(success=d["success"], **d["meta"], **self._meta)
            self.on_episode_end(bool(d["success"]), d["meta"], sum(self.episode_rewards))
            self._len = self._part_len = 0

    def drop(self, item: Held) -> None:
        del item
        if self._part_len > 0:
            self.log.end_episode(success=None, cut_by_dropped_step=True, **self._meta)
            self._part_len = 0
