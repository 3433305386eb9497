"""Small gymnasium envs that robot_rl did not write, registered when this module is imported
(``--env toy_foreign_envs:ToyPointGoal-v0`` with this folder on PYTHONPATH): the shapes a
user's env arrives in, for the ``--env`` tests.

- ``ToyPointGoal-v0``: a point on a plane moves by its action (a 2-D Box in [-0.05, 0.05] m)
  towards a goal; a goal-env Dict observation (``observation``: position and velocity,
  ``achieved_goal``, ``desired_goal``), reward -distance, ``info["is_success"]`` within 3 cm.
- ``ToyPointPixels-v0``: the same with ``{"agent": {"pos": ...}, "pixels": {"top": (48, 64,
  3) uint8}}`` (the goal drawn green, the point red), success under ``info["success"]``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SUCCESS_M = 0.03
STEP_M = 0.05


class ToyPointGoal(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, pixels: bool = False) -> None:
        self.pixels = pixels
        self.action_space = gym.spaces.Box(-STEP_M, STEP_M, (2,), np.float32)
        if pixels:
            self.observation_space = gym.spaces.Dict(
                {
                    "agent": gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32)}),
                    "pixels": gym.spaces.Dict(
                        {"top": gym.spaces.Box(0, 255, (48, 64, 3), np.uint8)}
                    ),
                }
            )
        else:
            vec = gym.spaces.Box(-1, 1, (2,), np.float32)
            self.observation_space = gym.spaces.Dict(
                {
                    "observation": gym.spaces.Box(-1, 1, (4,), np.float32),
                    "achieved_goal": vec,
                    "desired_goal": vec,
                }
            )
        self._pos = np.zeros(2)
        self._vel = np.zeros(2)
        self._goal = np.zeros(2)

    def _obs(self):
        if self.pixels:
            img = np.zeros((48, 64, 3), np.uint8)
            for p, colour in ((self._goal, (0, 255, 0)), (self._pos, (255, 0, 0))):
                r, c = int((p[1] + 1) * 23.5), int((p[0] + 1) * 31.5)
                img[max(r - 2, 0) : r + 3, max(c - 2, 0) : c + 3] = colour
            return {"agent": {"pos": self._pos.astype(np.float32)}, "pixels": {"top": img}}
        return {
            "observation": np.concatenate([self._pos, self._vel]).astype(np.float32),
            "achieved_goal": self._pos.astype(np.float32),
            "desired_goal": self._goal.astype(np.float32),
        }

    def _info(self) -> dict:
        ok = bool(np.linalg.norm(self._pos - self._goal) < SUCCESS_M)
        return {"success": ok} if self.pixels else {"is_success": ok}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-0.1, 0.1, 2)
        self._goal = self.np_random.uniform(-0.1, 0.1, 2)
        self._vel = np.zeros(2)
        return self._obs(), self._info()

    def step(self, action):
        a = np.clip(np.asarray(action, np.float64), -STEP_M, STEP_M)
        self._vel = a
        self._pos = np.clip(self._pos + a, -1, 1)
        dist = float(np.linalg.norm(self._pos - self._goal))
        info = self._info()
        return self._obs(), -dist, bool(dist < SUCCESS_M), False, info


def goal_expert(obs, info) -> np.ndarray:
    """A scripted policy for ToyPointGoal-v0 in the env's own action units."""
    delta = np.asarray(obs["desired_goal"]) - np.asarray(obs["observation"][:2])
    return np.clip(delta, -STEP_M, STEP_M)


class AxisByAxisExpert:
    """A scripted policy with phases (a callable object with ``reset()``): along x until the
    goal's x is reached, then along y. ``resets`` counts the episodes it was reset for."""

    def __init__(self) -> None:
        self.resets = 0
        self.phase = 0

    def reset(self) -> None:
        self.resets += 1
        self.phase = 0

    def __call__(self, obs, info) -> np.ndarray:
        delta = np.asarray(obs["desired_goal"]) - np.asarray(obs["observation"][:2])
        if self.phase == 0 and abs(delta[0]) < 0.005:
            self.phase = 1
        a = np.zeros(2)
        a[self.phase] = delta[self.phase]
        return np.clip(a, -STEP_M, STEP_M)


axis_by_axis = AxisByAxisExpert()


gym.register("ToyPointGoal-v0", entry_point=ToyPointGoal, max_episode_steps=20)
gym.register(
    "ToyPointPixels-v0", entry_point=ToyPointGoal, kwargs={"pixels": True}, max_episode_steps=20
)
