"""Transitions held until their reward arrives (learned rewards that answer late).

With a reward server on another machine a step's reward may come after the step (the
control loop never waits for it). The training loop then pushes the step here instead of
writing it at once; a later label fills its reward in, and everything leaves in the order it
came in (episode starts, steps, episode ends), so the log and the replay buffers see each
episode whole and in order. A step whose label failed (no answer) is dropped and counted: it has
no reward to learn from.

Without pending steps (ground-truth rewards, an in-process model) every item leaves at once.
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
