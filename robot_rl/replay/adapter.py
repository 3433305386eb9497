"""ObsAdapter: any gymnasium Dict observation -> the learner layout of :mod:`robot_rl.core.batch`.

Rules, applied to the top-level keys of the Dict space:

* ``keys.STATE`` as a 1-D Box (after ``FlattenState``): used as is.
* ``keys.STATE`` as a Dict of 1-D Boxes (the twin's nested parts): concatenated in robot_rl's
  canonical order (``keys.STATE_PARTS`` first, then unknown parts in sorted-name order), the
  same order ``FlattenState`` uses by default, so an env gives the same state vector with or
  without that wrapper.
* ``keys.IMAGES`` as a Dict of (H, W, 3) uint8 Boxes: one camera per key.
* ``keys.STAMPS``: ignored (timing is logged separately, never learned from).
* Foreign envs: any other top-level 0-D/1-D numeric Box is appended to the state (after
  ``keys.STATE``, in sorted-key order, e.g. a goal env's ``achieved_goal``, ``desired_goal``,
  ``observation``); any other top-level (H, W, 3) uint8 Box is a camera named by its key.
* Anything else (Discrete, 2-D float arrays, deeper Dicts...) raises ``ValueError`` naming the
  key; wrap the env to flatten or drop it.

The resulting state is float32 ``(S,)``; images are uint8 ``(H, W, 3)``; every output is a copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec


def canonical_state_order(parts: list[str]) -> tuple[str, ...]:
    """``keys.STATE_PARTS`` order first, then unknown part names sorted."""
    known = [p for p in keys.STATE_PARTS if p in parts]
    return (*known, *sorted(p for p in parts if p not in keys.STATE_PARTS))


def _is_image_box(space: gym.Space) -> bool:
    return (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[2] == 3
    )


def _is_vector_box(space: gym.Space) -> bool:
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) <= 1
        and np.issubdtype(space.dtype, np.number)
    )


class ObsAdapter:
    """Maps one env observation dict to ``{"state": (S,) float32, "images": {cam: (H,W,3) uint8}}``.

    ``"state"`` is absent when the env has no vector parts, ``"images"`` when it has no cameras.

    Args:
        observation_space: The env's ``gymnasium.spaces.Dict`` observation space.

    Attributes:
        layout: The learner :class:`ObsLayout`.
        state_slices: Source name (``"state"``, ``"state/<part>"`` or a top-level key) -> slice of
            the state vector.
        image_sources: Camera name -> (top-level key, sub-key or None) it is read from.

    Raises:
        ValueError: The space is not a Dict, or holds a key the rules above cannot map.
    """

    def __init__(self, observation_space: gym.spaces.Dict) -> None:
        if not isinstance(observation_space, gym.spaces.Dict):
            raise ValueError(
                f"ObsAdapter needs a gymnasium Dict observation space, got {observation_space}; "
                "wrap the env so its observation is a Dict (e.g. {'state': Box} or images)"
            )
        # (top-level key, sub-key or None, length)
        self._state_parts: list[tuple[str, str | None, int]] = []
        self.image_sources: dict[str, tuple[str, str | None]] = {}
        images: dict[str, ArraySpec] = {}
        spaces = observation_space.spaces

        def add_image(cam: str, top: str, sub: str | None, space: gym.Space) -> None:
            if cam in images:
                raise ValueError(f"two image sources are both named camera {cam!r}; rename one")
            images[cam] = ArraySpec(tuple(int(d) for d in space.shape), "uint8")
            self.image_sources[cam] = (top, sub)

        if keys.STATE in spaces:
            st = spaces[keys.STATE]
            if _is_vector_box(st):
                self._state_parts.append((keys.STATE, None, int(np.prod(st.shape, dtype=int))))
            elif isinstance(st, gym.spaces.Dict):
                for name in canonical_state_order(list(st.spaces)):
                    part = st.spaces[name]
                    if not _is_vector_box(part):
                        raise ValueError(
                            f"obs[{keys.STATE!r}][{name!r}] must be a 0-D/1-D numeric Box, got "
                            f"{part}; flatten it with a wrapper"
                        )
                    n = int(np.prod(part.shape, dtype=int))
                    self._state_parts.append((keys.STATE, name, n))
            else:
                raise ValueError(
                    f"obs[{keys.STATE!r}] must be a 1-D Box or a Dict of 1-D Boxes, got {st}"
                )
        if keys.IMAGES in spaces:
            im = spaces[keys.IMAGES]
            if not isinstance(im, gym.spaces.Dict):
                raise ValueError(f"obs[{keys.IMAGES!r}] must be a Dict of cameras, got {im}")
            for cam in sorted(im.spaces):
                if not _is_image_box(im.spaces[cam]):
                    raise ValueError(
                        f"obs[{keys.IMAGES!r}][{cam!r}] must be an (H, W, 3) uint8 Box, got "
                        f"{im.spaces[cam]}; resize/convert it with a wrapper"
                    )
                add_image(cam, keys.IMAGES, cam, im.spaces[cam])
        for key in sorted(spaces):
            if key in (keys.STATE, keys.IMAGES, keys.STAMPS):
                continue
            space = spaces[key]
            if _is_image_box(space):
                add_image(key, key, None, space)
            elif _is_vector_box(space):
                self._state_parts.append((key, None, int(np.prod(space.shape, dtype=int))))
            else:
                raise ValueError(
                    f"observation key {key!r} ({space}) is neither a 0-D/1-D numeric Box (state) "
                    "nor an (H, W, 3) uint8 Box (camera); wrap the env to convert or drop it"
                )
        self.state_slices: dict[str, slice] = {}
        start = 0
        for top, sub, n in self._state_parts:
            name = top if sub is None else f"{top}/{sub}"
            self.state_slices[name] = slice(start, start + n)
            start += n
        self.layout = ObsLayout(state_dim=start, images=images)

    def to_learner(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """One env observation -> learner layout (copies; no batch dimension).

        Args:
            obs: An observation from the env this adapter was built for.

        Returns:
            ``{"state": (S,) float32, "images": {cam: (H, W, 3) uint8}}`` (keys present per layout).

        Raises:
            ValueError: A part has the wrong size or an image the wrong shape/dtype.
        """
        out: dict[str, Any] = {}
        if self._state_parts:
            pieces = []
            for top, sub, n in self._state_parts:
                v = obs[top] if sub is None else obs[top][sub]
                v = np.asarray(v, dtype=np.float32).reshape(-1)
                if v.shape[0] != n:
                    name = top if sub is None else f"{top}/{sub}"
                    raise ValueError(f"state part {name!r} has {v.shape[0]} values, expected {n}")
                pieces.append(v)
            out[keys.STATE] = np.concatenate(pieces).astype(np.float32, copy=True)  # (S,)
        if self.image_sources:
            imgs = {}
            for cam, (top, sub) in self.image_sources.items():
                v = obs[top] if sub is None else obs[top][sub]
                spec = self.layout.images[cam]
                v = np.asarray(v)
                if v.shape != spec.shape or v.dtype != np.uint8:
                    raise ValueError(
                        f"camera {cam!r}: expected {spec.shape} uint8, got {v.shape} {v.dtype}"
                    )
                imgs[cam] = v.copy()  # (H, W, 3)
            out[keys.IMAGES] = imgs
        return out
