"""ObjectState: add object state that arrives in ``info`` to ``obs["state"]`` as named parts.

A state-based policy for a manipulation task needs to know where the object is; the robot's own
state does not say. On the twin the object's pose is sim truth, delivered in
``info["privileged"]`` (:data:`robot_rl.core.keys.INFO_PRIVILEGED`), which policies never read
directly. This wrapper is the one explicit, declared door through which chosen entries become
observation parts (``cube_pos``, ``tcp_to_cube``, ...): the learner then sees them like any
other state part, with their names, and a run's config records which ones it used. On a real
robot the same wrapper takes an object tracker's estimate placed in ``info`` under the same key.

Pixel policies do not need it: the object is in the images.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.specs import ArraySpec, to_space


class ObjectStateMissingError(KeyError):
    """A declared object-state entry is missing from ``info`` (or has the wrong shape)."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0]) if self.args else ""


class ObjectState(gym.Wrapper):
    """Copy declared entries of ``info[info_key]`` into ``obs["state"]`` (a Dict of parts).

    Args:
        env: Inner env whose ``obs["state"]`` is a Dict of named 1-D parts.
        parts: Entry name -> spec (1-D) of each entry to observe, e.g. from a twin task's
            ``privileged_spec``. Names must not clash with existing state parts.
        info_key: Where the entries are in ``info`` (default ``info["privileged"]``).

    Raises:
        ValueError: no parts, a name clash, a non-1-D spec, or ``obs["state"]`` not a Dict.
        ObjectStateMissingError: (at reset/step) an entry is missing or has the wrong shape.
    """

    def __init__(
        self,
        env: gym.Env,
        parts: Mapping[str, ArraySpec],
        info_key: str = keys.INFO_PRIVILEGED,
    ) -> None:
        super().__init__(env)
        if not parts:
            raise ValueError("ObjectState needs at least one part")
        obs_space = env.observation_space
        state = obs_space.spaces.get(keys.STATE) if isinstance(obs_space, gym.spaces.Dict) else None
        if not isinstance(state, gym.spaces.Dict):
            raise ValueError("ObjectState needs obs['state'] to be a Dict of named parts")
        clash = sorted(set(parts) & set(state.spaces))
        if clash:
            raise ValueError(f"object state parts {clash} clash with robot state parts")
        spaces = dict(state.spaces)
        for name, spec in parts.items():
            if len(spec.shape) != 1:
                raise ValueError(f"object state part {name!r} must be 1-D, got shape {spec.shape}")
            spaces[name] = to_space(ArraySpec(tuple(spec.shape), "float32", spec.low, spec.high))
        self.parts: dict[str, ArraySpec] = dict(parts)
        self.info_key = info_key
        new = dict(obs_space.spaces)
        new[keys.STATE] = gym.spaces.Dict(spaces)
        self.observation_space = gym.spaces.Dict(new)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._add(obs, info), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._add(obs, info), reward, terminated, truncated, info

    def _add(self, obs: dict, info: dict) -> dict:
        src = info.get(self.info_key) if isinstance(info, dict) else None
        if not isinstance(src, Mapping):
            raise ObjectStateMissingError(
                f"ObjectState: info has no {self.info_key!r} mapping; the env must put the "
                f"object state {sorted(self.parts)} there (the twin does; on a robot, a tracker)"
            )
        state = dict(obs[keys.STATE])
        for name, spec in self.parts.items():
            if name not in src:
                raise ObjectStateMissingError(
                    f"ObjectState: info[{self.info_key!r}] has no {name!r} "
                    f"(it has {sorted(src)}); drop it from the object state or provide it"
                )
            v = np.array(src[name], dtype=np.float32, copy=True).reshape(-1)
            if v.shape != tuple(spec.shape):
                raise ObjectStateMissingError(
                    f"ObjectState: info[{self.info_key!r}][{name!r}] has shape {v.shape}, "
                    f"declared {tuple(spec.shape)}"
                )
            state[name] = v
        out = dict(obs)
        out[keys.STATE] = state
        return out
