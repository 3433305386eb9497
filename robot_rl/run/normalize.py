"""Fixed affine normalisation of the learner's state vector: ``clip((s - mean) / std)``.

Why: robot states mix scales (positions vary by centimetres around ~0.5 m, wrenches by newtons,
quaternion parts barely at all); an unnormalised MLP learns the centimetre-level dependence on
position very slowly (state ``reach`` did not learn in 3k steps without it, and in ~1.2k with
it). The statistics are fitted ONCE, when learning starts (on the demos and the online data
collected so far), then frozen, so stored data stay raw (the log and buffers hold env
values) and the normalisation is applied at act time and to sampled batches. They are saved in
the checkpoint's trainer state so evaluation applies the same map. Images are left alone (the
encoders handle uint8).

The std floor (:data:`MIN_STD`) only guards parts that (nearly) do not vary in the fitting data;
it must stay well below the spread of any part whose small changes matter. It was 0.05, which
for peg_insert (tip-to-hole offset std ~1.2 cm in the demos, 1.5 mm clearance a side) meant
1 mm of misalignment became 0.02 after normalising, so the mm-level difference between fitting
and landing on the fixture edge was nearly invisible to the networks; at 0.005 the data's own
std is used (1 mm -> ~0.08). Parts that are constant in the data (e.g. the hole height) get the
floor and the clip bounds whatever they later do.

What the demos do not cover is the weak point: on Meta-World push the puck's quaternion barely
moves in the scripted demos (std at or near the floor), and once the policy pushes it about,
17% of online states sit 10-300 fitted stds away in those parts (held at the clip), so that
parts irrelevant to the task dominate the networks' inputs. ``TrainConfig.normalize_refit``
refits whenever the data has doubled since the last fit; the agent folds each change into
the first layer that reads the state (``SACAgent.rescale_state_inputs``), so its networks
compute what they did on every state neither map clips.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from robot_rl.core import keys
from robot_rl.core.batch import Batch

MIN_STD = 0.005
"""Floor of the fitted per-part std (state units: metres, m/s, N, ...; see the module docstring)."""


class StateNormalizer:
    """``clip((s - mean) / std, -clip, clip)`` on the learner layout's ``"state"``.

    Args:
        mean: (S,) float.
        std: (S,) float, > 0.
        clip: Bound of the normalised values.
    """

    def __init__(self, mean: np.ndarray, std: np.ndarray, clip: float = 10.0) -> None:
        self.mean = np.asarray(mean, dtype=np.float32).reshape(-1)
        self.std = np.asarray(std, dtype=np.float32).reshape(-1)
        if self.mean.shape != self.std.shape or np.any(self.std <= 0):
            raise ValueError("mean and std need the same shape and std > 0")
        self.clip = float(clip)
        self._t: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def fit(
        cls, states: np.ndarray, min_std: float = MIN_STD, clip: float = 10.0
    ) -> StateNormalizer:
        """Statistics of ``states`` (N, S); per-dimension std floored at ``min_std``."""
        s = np.asarray(states, dtype=np.float64)
        if s.ndim != 2 or len(s) == 0:
            raise ValueError(f"fit needs (N, S) states with N >= 1, got shape {s.shape}")
        return cls(s.mean(0), np.maximum(s.std(0), min_std), clip)

    @classmethod
    def fit_buffers(
        cls, buffers: list[Any], max_samples: int = 4096, min_std: float = MIN_STD
    ) -> StateNormalizer:
        """Fit on up to ``max_samples`` states from each non-empty replay buffer (own RNG)."""
        rng = np.random.default_rng(0)
        parts = [
            b.sample(min(len(b), max_samples), rng).obs[keys.STATE].detach().cpu().numpy()
            for b in buffers
            if b is not None and len(b) > 0
        ]
        return cls.fit(np.concatenate(parts), min_std)

    def to_json(self) -> dict:
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "clip": self.clip}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StateNormalizer:
        return cls(np.array(d["mean"]), np.array(d["std"]), float(d["clip"]))

    def obs(self, o: Mapping[str, Any]) -> dict[str, Any]:
        """One learner observation (numpy, no batch dim) with the state normalised."""
        out = dict(o)
        if keys.STATE in out:
            s = (np.asarray(out[keys.STATE], dtype=np.float32) - self.mean) / self.std
            out[keys.STATE] = np.clip(s, -self.clip, self.clip).astype(np.float32)
        return out

    def _tensors(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = str(like.device)
        if key not in self._t:
            self._t[key] = (
                torch.as_tensor(self.mean, device=like.device),
                torch.as_tensor(self.std, device=like.device),
            )
        return self._t[key]

    def _obs_t(self, o: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(o)
        if keys.STATE in out:
            s = out[keys.STATE]  # (B, S)
            mean, std = self._tensors(s)
            out[keys.STATE] = ((s.float() - mean) / std).clamp(-self.clip, self.clip)
        return out

    def batch(self, b: Batch) -> Batch:
        """A sampled batch (torch) with obs and next_obs states normalised."""
        return dataclasses.replace(b, obs=self._obs_t(b.obs), next_obs=self._obs_t(b.next_obs))
