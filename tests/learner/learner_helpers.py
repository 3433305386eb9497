"""Shared pieces of the learner tests: a tiny foreign Dict-obs env and small agent configs."""

from __future__ import annotations

import contextlib
import dataclasses

import gymnasium as gym
import numpy as np


class PointEnv(gym.Env):
    """A 1-D point pushed towards x = 0.5: not a robot_rl env (foreign Dict obs, [-2, 2] action).

    obs {"observation": (2,) float32 [x, velocity-free target 0.5]}; action (1,) in [-2, 2]
    moves x by 0.05 * a; reward -|x - 0.5| - 0.1 (a cost per step); success (terminated)
    within 0.1; 30-step limit.
    """

    metadata: dict = {}

    def __init__(self, max_steps: int = 30) -> None:
        self.observation_space = gym.spaces.Dict(
            {"observation": gym.spaces.Box(-2.0, 2.0, (2,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.max_steps = max_steps
        self._x = 0.0
        self._t = 0

    def _obs(self) -> dict:
        return {"observation": np.array([self._x, 0.5], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._x = float(self.np_random.uniform(-1.0, 1.0))
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        a = float(np.clip(np.asarray(action, dtype=np.float64)[0], -2.0, 2.0))
        self._x = float(np.clip(self._x + 0.05 * a, -2.0, 2.0))
        self._t += 1
        d = abs(self._x - 0.5)
        success = d < 0.1
        return self._obs(), -d - 0.1, success, self._t >= self.max_steps, {"is_success": success}


def small_sac(**overrides):
    """A small, fast SACConfig for tests (hidden sizes shrunk where the config has them)."""
    from policies.config import SACConfig

    names = {f.name for f in dataclasses.fields(SACConfig)}
    kw: dict = {"init_temperature": 0.1}  # rewards here are O(0.1-1): start with less entropy
    for name, value in (("hidden_dims", (64, 64)), ("hidden_sizes", (64, 64))):
        if name in names:
            kw[name] = value
    kw.update(overrides)
    return SACConfig(**kw)


def sac_factory(cfg, seed: int = 0):
    def make(layout, action_dim):
        from policies.sac import SACAgent

        return SACAgent(layout, action_dim, cfg, seed=seed)

    return make


@contextlib.contextmanager
def served_learner(root, layout, action_dim: int, actor_id: str = "arm"):
    """A real learner server on 127.0.0.1 (its log sink under ``root/learner``) and a
    connected client for ``actor_id``; yields ``(client, sink)`` and stops both."""
    from robot_rl.transport.client import LearnerClient, LearnerClientConfig
    from robot_rl.transport.codec import layout_fingerprint
    from robot_rl.transport.log_sink import LogSink
    from robot_rl.transport.server import LearnerServer, LearnerServerConfig

    sink = LogSink(root / "learner", layout, action_dim)
    server = LearnerServer(sink, layout, action_dim, LearnerServerConfig())
    client = LearnerClient(
        LearnerClientConfig(target=server.address, actor_id=actor_id),
        layout_fingerprint(layout, action_dim),
    )
    try:
        yield client, sink
    finally:
        client.close()
        server.stop()
        sink.close()
