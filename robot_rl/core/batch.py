"""The learner's batch and observation layout, shared by replay (producer) and policies
(consumer). Core never imports torch: tensors are typed ``Any`` here.

Learner observation layout (what encoders read; produced from any gymnasium Dict env by
``robot_rl.replay.ObsAdapter``)::

    {"state": (B, S) float32, "images": {camera: (B, H, W, 3) uint8}}

``"state"`` or ``"images"`` may be absent (images-only or state-only tasks). Images stay uint8
until the encoder converts them (replay memory, transfer size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from robot_rl.core.specs import ArraySpec


@dataclass(frozen=True)
class ObsLayout:
    """Shapes of the learner observation (per sample, no batch dimension).

    Attributes:
        state_dim: Length of the flat state vector, or 0 for none.
        images: Camera name -> (H, W, 3) uint8 spec (empty for none).
    """

    state_dim: int
    images: Mapping[str, ArraySpec]

    def __post_init__(self) -> None:
        if self.state_dim < 0:
            raise ValueError("state_dim must be >= 0")
        if self.state_dim == 0 and not self.images:
            raise ValueError("an observation needs a state vector, images, or both")
        for cam, spec in self.images.items():
            if len(spec.shape) != 3 or spec.shape[2] != 3 or spec.dtype != "uint8":
                raise ValueError(f"camera {cam!r}: expected (H, W, 3) uint8, got {spec}")


@dataclass(frozen=True)
class Batch:
    """A sampled batch of transitions (torch tensors on the learner's device).

    Attributes:
        obs: Learner observation layout, batch-first (see module docstring).
        action: (B, A) float32, as executed, in the policy's action space.
        reward: (B,) float32.
        next_obs: Like ``obs``.
        terminated: (B,) float32, 1.0 where the episode ended by the task (no bootstrap).
        intervened: (B,) bool, a person chose the action.
        is_demo: (B,) bool, drawn from the demonstration buffer.
        discount: (B,) float32 or None. With n-step returns (``Mixer(n_step=k)``) ``reward``
            is the discounted sum of up to k rewards, ``next_obs`` the observation after the
            last of them and ``discount`` gamma ** (the number summed): the factor of the
            bootstrap value. None: a one-step transition (the agent's own gamma).
        mc_return: (B,) float32 or None. The Monte-Carlo return-to-go of each row's episode
            from it on (``Mixer(returns=True)``; NaN where the episode is still open), for
            Cal-QL's floor. None: not sampled.
    """

    obs: Mapping[str, Any]
    action: Any
    reward: Any
    next_obs: Mapping[str, Any]
    terminated: Any
    intervened: Any
    is_demo: Any
    discount: Any = None
    mc_return: Any = None
