"""Mixer: RLPD symmetric sampling over an online and a demonstration buffer.

Every batch holds exactly ``round(batch_size * demo_fraction)`` demo transitions (Python
``round``: ties go to the even number) and the rest online ones, each drawn uniformly within its
buffer. With no (or an empty) demo buffer the batch is all online; with an empty online buffer
it is all demo. ``Batch.is_demo`` marks the demo rows (they come first).

With ``n_step`` > 1 every row is an n-step return within its buffer
(:meth:`ReplayBuffer.sample_into`) and the batch carries ``discount``; ``reward_offset`` is
added to every step's reward (the learner's ``TrainConfig.reward_offset``).
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.batch import Batch
from robot_rl.replay.buffer import ReplayBuffer, to_batch


class Mixer:
    """Symmetric demo/online sampler.

    Args:
        online: The online buffer (also sets the batch's device).
        demo: The demonstration buffer, or None.
        demo_fraction: Fraction of each batch drawn from ``demo``, in [0, 1] (RLPD: 0.5).
        n_step: Rewards summed per row (1: one-step transitions, no ``discount`` field).
        gamma: Discount of the n-step sum (used only with ``n_step`` > 1).
        reward_offset: Added to every step's reward.
        returns: Batches carry each row's Monte-Carlo return-to-go (``mc_return``; both buffers
            :meth:`~robot_rl.replay.ReplayBuffer.track_returns` with ``gamma``), for Cal-QL.
    """

    def __init__(
        self,
        online: ReplayBuffer,
        demo: ReplayBuffer | None,
        demo_fraction: float = 0.5,
        n_step: int = 1,
        gamma: float = 0.99,
        reward_offset: float = 0.0,
        returns: bool = False,
    ) -> None:
        if not 0.0 <= demo_fraction <= 1.0:
            raise ValueError(f"demo_fraction must be in [0, 1], got {demo_fraction}")
        if n_step < 1 or not 0.0 <= gamma <= 1.0 or not np.isfinite(reward_offset):
            raise ValueError(
                f"n_step {n_step} (>= 1), gamma {gamma} (in [0, 1]) or reward_offset "
                f"{reward_offset} (finite) out of range"
            )
        self.n_step, self.gamma = int(n_step), float(gamma)
        self.reward_offset = float(reward_offset)
        if demo is not None and (
            demo.layout != online.layout or demo.action_dim != online.action_dim
        ):
            raise ValueError(
                f"demo buffer layout {demo.layout} / action_dim {demo.action_dim} differs from "
                f"the online buffer's {online.layout} / {online.action_dim}"
            )
        if demo is not None and demo.feature_keys != online.feature_keys:
            raise ValueError(
                f"the demo buffer holds {demo.feature_keys or 'frames'}, the online buffer "
                f"{online.feature_keys or 'frames'}: both must store the same (see ReplayBuffer)"
            )
        self.online, self.demo, self.demo_fraction = online, demo, float(demo_fraction)
        self.returns = bool(returns)
        if self.returns:
            for buf in (online, demo):
                if buf is not None and buf.mc_gamma != self.gamma:
                    buf.track_returns(self.gamma)

    def __len__(self) -> int:
        return len(self.online) + (len(self.demo) if self.demo is not None else 0)

    def num_demo(self, batch_size: int) -> int:
        """How many of ``batch_size`` samples come from the demo buffer right now."""
        has_demo = self.demo is not None and len(self.demo) > 0
        if not has_demo:
            return 0
        if len(self.online) == 0:
            return batch_size
        return int(round(batch_size * self.demo_fraction))

    def sample(self, batch_size: int, generator: np.random.Generator) -> Batch:
        """A mixed :class:`Batch` (demo rows first, flagged in ``is_demo``).

        Raises:
            ValueError: Both buffers are empty.
        """
        if len(self) == 0:
            raise ValueError("cannot sample: the online and demo buffers are both empty")
        n_demo = self.num_demo(batch_size)
        arrays = self.online.empty_arrays(
            batch_size, discount=self.n_step > 1, returns=self.returns
        )
        how = {"n_step": self.n_step, "gamma": self.gamma, "reward_offset": self.reward_offset}
        if n_demo:
            self.demo.sample_into(arrays, 0, n_demo, generator, **how)
            arrays["is_demo"][:n_demo] = True
        if batch_size - n_demo:
            self.online.sample_into(arrays, n_demo, batch_size - n_demo, generator, **how)
        return to_batch(arrays, self.online.device)
