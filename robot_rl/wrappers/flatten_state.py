"""FlattenState: concatenate the named state parts into one float32 vector.

``obs["state"]`` becomes a ``(D,)`` float32 Box; ``images`` and ``stamps`` pass through. The
layout is declared (``order``) and exposed as named slices (:attr:`FlattenState.slices`), so
downstream code writes ``state[w.slices["tcp_pose"]]``, never a magic index.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from robot_rl.core import keys


def default_order(parts: Sequence[str]) -> tuple[str, ...]:
    """robot_rl's canonical order (``keys.STATE_PARTS``) first, then unknown parts sorted."""
    known = [p for p in keys.STATE_PARTS if p in parts]
    return (*known, *sorted(p for p in parts if p not in keys.STATE_PARTS))


class FlattenState(gym.ObservationWrapper):
    """``obs["state"]``: Dict of 1-D parts -> one float32 vector in a declared order.

    Args:
        env: Inner env whose ``obs["state"]`` is a Dict of 1-D Boxes.
        order: Every state part exactly once, in the order to concatenate; None for
            :func:`default_order`.

    Attributes:
        order: The concatenation order.
        slices: Part name -> slice of the flat vector.
    """

    def __init__(self, env: gym.Env, order: Sequence[str] | None = None) -> None:
        super().__init__(env)
        obs_space = env.observation_space
        state = obs_space.spaces.get(keys.STATE) if isinstance(obs_space, gym.spaces.Dict) else None
        if not isinstance(state, gym.spaces.Dict):
            raise ValueError("FlattenState needs obs['state'] to be a Dict of named parts")
        parts = list(state.spaces)
        order = default_order(parts) if order is None else tuple(order)
        if sorted(order) != sorted(parts):
            raise ValueError(
                f"order {order} must list every state part exactly once; parts are {sorted(parts)}"
            )
        self.order: tuple[str, ...] = order
        self.slices: dict[str, slice] = {}
        lows, highs = [], []
        start = 0
        for name in order:
            box = state.spaces[name]
            if not isinstance(box, gym.spaces.Box) or len(box.shape) != 1:
                raise ValueError(f"state part {name!r} must be a 1-D Box, got {box}")
            n = int(box.shape[0])
            self.slices[name] = slice(start, start + n)
            lows.append(np.asarray(box.low, dtype=np.float32))
            highs.append(np.asarray(box.high, dtype=np.float32))
            start += n
        self.state_dim = start
        spaces = dict(obs_space.spaces)
        spaces[keys.STATE] = gym.spaces.Box(
            np.concatenate(lows), np.concatenate(highs), shape=(start,), dtype=np.float32
        )
        self.observation_space = gym.spaces.Dict(spaces)

    def flatten(self, state: dict) -> np.ndarray:
        """Dict of parts -> (D,) float32 vector (a new array)."""
        return np.concatenate(
            [np.asarray(state[name], dtype=np.float32).reshape(-1) for name in self.order]
        )

    def unflatten(self, obs: dict) -> dict:
        """Inverse of :meth:`observation`: flat ``obs["state"]`` -> Dict of parts (copies)."""
        flat = np.asarray(obs[keys.STATE])
        out = dict(obs)
        out[keys.STATE] = {name: flat[..., sl].copy() for name, sl in self.slices.items()}
        return out

    def observation(self, obs: dict) -> dict:
        """New observation dict with ``state`` flattened; other entries unchanged."""
        out = dict(obs)
        out[keys.STATE] = self.flatten(obs[keys.STATE])
        return out


def named_state_slices(env: gym.Env) -> dict[str, list[int]]:
    """Part name -> ``[start, stop)`` in the flat ``obs["state"]`` of ``env`` (the learner's
    layout): the slices of the :class:`FlattenState` in its wrapper chain. Stored with labelled
    frames so that a success gate (``gripper_pos>=0.45``) can be evaluated on them; empty when
    the chain does not flatten a named state."""
    inner: gym.Env | None = env
    while inner is not None:
        if isinstance(inner, FlattenState):
            return {k: [v.start, v.stop] for k, v in inner.slices.items()}
        inner = getattr(inner, "env", None)
    return {}
