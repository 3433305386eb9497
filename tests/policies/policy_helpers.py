"""Shared helpers for policy tests (imported as ``policy_helpers``; the test dir is on sys.path)."""

from __future__ import annotations

import torch

from policies.config import EncoderConfig, SACConfig
from robot_rl.core import keys
from robot_rl.core.batch import Batch, ObsLayout
from robot_rl.core.specs import ArraySpec


def state_layout(state_dim: int = 4) -> ObsLayout:
    return ObsLayout(state_dim=state_dim, images={})


def pixel_layout(size: int = 16, cams: tuple[str, ...] = ("front",), state_dim: int = 3):
    return ObsLayout(
        state_dim=state_dim, images={c: ArraySpec((size, size, 3), "uint8") for c in cams}
    )


def small_sac(**kw) -> SACConfig:
    kw.setdefault("hidden_dims", (32, 32))
    enc = EncoderConfig(feature_dim=8, conv_channels=(8, 8), conv_strides=(2, 2))
    kw.setdefault("encoder", enc)
    return SACConfig(**kw)


def random_obs(layout: ObsLayout, batch: int, gen: torch.Generator) -> dict:
    obs: dict = {}
    if layout.state_dim:
        obs[keys.STATE] = torch.rand(batch, layout.state_dim, generator=gen)
    if layout.images:
        obs[keys.IMAGES] = {
            c: torch.randint(0, 256, (batch, *s.shape), dtype=torch.uint8, generator=gen)
            for c, s in layout.images.items()
        }
    return obs


def random_batch(layout: ObsLayout, action_dim: int, batch: int, gen: torch.Generator) -> Batch:
    return Batch(
        obs=random_obs(layout, batch, gen),
        action=torch.rand(batch, action_dim, generator=gen) * 2 - 1,
        reward=torch.rand(batch, generator=gen),
        next_obs=random_obs(layout, batch, gen),
        terminated=(torch.rand(batch, generator=gen) < 0.2).float(),
        intervened=torch.zeros(batch, dtype=torch.bool),
        is_demo=torch.zeros(batch, dtype=torch.bool),
    )


def sampler(layout: ObsLayout, action_dim: int, batch: int = 8, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return lambda: random_batch(layout, action_dim, batch, gen)


def numpy_obs(layout: ObsLayout, seed: int = 0) -> dict:
    """One learner-layout observation as numpy, no batch dim."""
    obs = random_obs(layout, 1, torch.Generator().manual_seed(seed))
    out: dict = {}
    if keys.STATE in obs:
        out[keys.STATE] = obs[keys.STATE][0].numpy()
    if keys.IMAGES in obs:
        out[keys.IMAGES] = {c: v[0].numpy() for c, v in obs[keys.IMAGES].items()}
    return out
