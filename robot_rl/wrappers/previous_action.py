"""PreviousAction: observe the action sent on the previous step, as the state part
``prev_action``.

An action reaches a real arm a good part of a control period after the observation it answers
was taken (over ROS 2 on our machine 50-150 ms at 10 Hz), so during the start of every period
the arm still tracks the *previous* target. What the next observation will be then depends on
two actions, the one the policy is choosing and the one still in flight, and the second is in
no sensor reading: the state the policy sees is not Markov. Giving it the previous action
restores that (the augmented state of delayed-MDP and real-time RL formulations), and costs a
few inputs.

The action recorded is the one that reached this wrapper's ``step``: with an
:class:`~robot_rl.wrappers.Intervention` outside, the human's action when a person took over,
since that is the one the arm executes; clipped to the action space as the env clips it. At
``reset`` it is zero (the arm holds). Place it outside the action wrappers (RelativeFrame,
FixedGripper), so that it is the policy's own action, and inside FlattenState.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl.core import keys

PREV_ACTION = "prev_action"
"""The state part this wrapper adds."""


class PreviousAction(gym.Wrapper):
    """Add ``obs["state"]["prev_action"]``: the previous step's action (zeros after reset).

    Raises:
        ValueError: ``obs["state"]`` is not a Dict of parts, it already has ``prev_action``, or
            the action space is not a 1-D Box.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        obs_space = env.observation_space
        state = obs_space.spaces.get(keys.STATE) if isinstance(obs_space, gym.spaces.Dict) else None
        if not isinstance(state, gym.spaces.Dict):
            raise ValueError("PreviousAction needs obs['state'] to be a Dict of named parts")
        if PREV_ACTION in state.spaces:
            raise ValueError(f"obs['state'] already has a part {PREV_ACTION!r}")
        act = env.action_space
        if not isinstance(act, gym.spaces.Box) or len(act.shape) != 1:
            raise ValueError(f"PreviousAction needs a 1-D Box action space, got {act}")
        self._low = np.asarray(act.low, dtype=np.float32)
        self._high = np.asarray(act.high, dtype=np.float32)
        spaces = dict(state.spaces)
        spaces[PREV_ACTION] = gym.spaces.Box(self._low, self._high, dtype=np.float32)
        new = dict(obs_space.spaces)
        new[keys.STATE] = gym.spaces.Dict(spaces)
        self.observation_space = gym.spaces.Dict(new)
        self._prev = np.zeros(act.shape, dtype=np.float32)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._prev = np.zeros_like(self._low)
        return self._add(obs), info

    def step(self, action):
        sent = np.array(action, dtype=np.float32)  # a copy: the caller may reuse its array
        obs, reward, terminated, truncated, info = self.env.step(action)
        # Only once the inner env took it (a rejected action, e.g. NaN, raised there).
        self._prev = np.clip(sent.reshape(self._low.shape), self._low, self._high)
        return self._add(obs), reward, terminated, truncated, info

    def _add(self, obs: dict) -> dict:
        state = dict(obs[keys.STATE])
        state[PREV_ACTION] = self._prev.copy()
        out = dict(obs)
        out[keys.STATE] = state
        return out
