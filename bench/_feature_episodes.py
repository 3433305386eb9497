"""Synthetic replay content for the pixel benchmarks (``pixel_features``, ``learner_throughput``).

Random uint8 feature maps of a frozen backbone's shape, one per camera, with random state,
actions and rewards, added to a feature-holding :class:`robot_rl.replay.ReplayBuffer` episode
by episode (the learner's insert path). Timing and memory do not depend on the values.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core import keys


def add_feature_episodes(
    buf,
    obs_rows: int,
    cams: tuple[str, ...],
    feature_shape: tuple[int, int, int],
    state_dim: int,
    action_dim: int,
    rng: np.random.Generator,
    ep_len: int = 100,
) -> None:
    """Add episodes of up to ``ep_len`` transitions (``ep_len + 1`` obs rows each) until
    ``obs_rows`` rows are used; a last remainder under 2 rows is skipped."""
    for lo in range(0, obs_rows, ep_len + 1):
        t = min(ep_len, obs_rows - lo - 1)
        if t < 1:
            break
        f = {c: rng.integers(0, 256, (t + 1, *feature_shape), dtype=np.uint8) for c in cams}
        st = rng.standard_normal((t + 1, state_dim)).astype(np.float32)
        buf.add_episode(
            {
                "obs": {keys.STATE: st[:-1], keys.FEATURES: {c: v[:-1] for c, v in f.items()}},
                "next_obs": {keys.STATE: st[1:], keys.FEATURES: {c: v[1:] for c, v in f.items()}},
                "action": rng.uniform(-1, 1, (t, action_dim)).astype(np.float32),
                "reward": rng.standard_normal(t).astype(np.float32),
                "terminated": np.zeros(t, np.float32),
                "intervened": np.zeros(t, bool),
            }
        )
