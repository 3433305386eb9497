"""Deterministic synthetic episodes for the replay tests (and the crash-writer subprocess).

Observation ``t`` of episode ``ep`` is a pure function of ``(ep, t)``, so a test can rebuild what
a killed writer had appended and compare bit for bit.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec

STATE_DIM = 5
ACTION_DIM = 3


def layout(image_px: int = 12, cams: tuple[str, ...] = ("front", "wrist")) -> ObsLayout:
    return ObsLayout(STATE_DIM, {c: ArraySpec((image_px, image_px, 3), "uint8") for c in cams})


def obs(lay: ObsLayout, ep: int, t: int) -> dict:
    """Observation ``t`` (0..T) of episode ``ep``; the state encodes (ep, t) exactly."""
    rng = np.random.default_rng([ep, t])
    out: dict = {}
    if lay.state_dim:
        s = np.zeros(lay.state_dim, np.float32)
        s[0], s[1] = ep, t
        s[2:] = rng.normal(size=lay.state_dim - 2)
        out["state"] = s
    if lay.images:
        out["images"] = {
            c: rng.integers(0, 256, spec.shape, dtype=np.uint8) for c, spec in lay.images.items()
        }
    return out


def step(lay: ObsLayout, ep: int, t: int, length: int, pv: int = 0) -> dict:
    """Keyword arguments of ``EpisodeLog.append`` for step ``t`` of an episode of ``length``."""
    a = np.array([ep, t, -1.0], np.float32)
    return dict(
        obs_learner=obs(lay, ep, t),
        action=a,
        policy_action=a,
        reward=float(ep + t / 100),
        terminated=t == length - 1,
        truncated=False,
        intervened=False,
        policy_version=pv,
        stamp_s=0.1 * (t + 1),
        next_obs_learner=obs(lay, ep, t + 1),
    )


def write_episode(log, ep: int, length: int, source: str = "demo", success: bool = True) -> None:
    log.begin_episode(source, policy_version=ep, seed=ep)
    for t in range(length):
        log.append(**step(log.layout, ep, t, length, pv=ep))
    log.end_episode(success=success, reward_model_id="test@1")
