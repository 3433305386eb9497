"""A gymnasium env we did not write, in the learner's terms: :class:`ForeignEnv`.

The learner reads ``{"state": (S,) float32, "images": {camera: (N, N, 3) uint8}}``, acts in
[-1, 1] per action dimension and reads success from ``info["is_success"]``. A foreign env has
its own observation shape, action bounds and success key; an :class:`ObsMapping` says how they
map, and :func:`plan_mapping` fills in what it leaves open from the env's spaces:

- **state**: the observation's numeric 0-D / 1-D Boxes, found by walking nested Dicts (a key
  path joins the keys with ``.``, e.g. ``agent.qpos``; a flat Box observation is the path
  ``""``), concatenated in the order given (automatic: sorted paths). A goal env's Dict
  (``observation``, ``achieved_goal``, ``desired_goal``) takes ``observation`` and
  ``desired_goal``: ``achieved_goal`` is a function of the observation in these envs (listed
  as left out, with why; name it to keep it).
- **cameras**: the (H, W, 3) or (H, W, 4) uint8 Boxes (alpha dropped), each named by its last
  key (``pixels.front`` -> ``front``; a bare image observation -> ``image``; ``name=path`` to
  choose), resized to ``image_size`` x ``image_size`` (cropped to a centred square first).
- **refused**, with why: Discrete / MultiDiscrete / MultiBinary / Text observations, numeric
  Boxes of 2 or more dimensions that are not images (flatten them in the env, or name them: a
  named path is flattened), and images that are not uint8.
- **actions**: a bounded 1-D Box, mapped affinely from [-1, 1]; a Discrete action space, a Box
  with an infinite bound or of another rank is refused (:class:`ForeignEnvError`: what to
  change).
- **success**: ``info[success_key]`` (automatic: the first of ``is_success``, ``success`` the
  env reports), or ``reward >= success_reward_at`` when the env reports no success key
  (``--success-reward-at``); neither: refused at the first step that has neither.

Reward and termination pass through unchanged (the caller stacks
:class:`robot_rl.wrappers.SuccessReward` for the sparse success reward).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core import keys

SUCCESS_KEYS = ("is_success", "success")
"""Info keys read as success, in this order, when the mapping names none."""
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
"""A goal env's observation keys (gymnasium-robotics' GoalEnv)."""


class ForeignEnvError(ValueError):
    """An env (or a mapping of it) that the learner cannot use; the message says what to do."""


@dataclass(frozen=True)
class ObsMapping:
    """How a foreign env's observation, actions and success map to the learner's.

    Attributes:
        state: Key paths whose values form the state vector, in order (None: automatic).
        cameras: Camera key paths, each ``path`` or ``name=path`` (None: automatic; empty:
            none, a state-only policy).
        image_size: Side of the square frames the learner gets, pixels.
        success_key: The info key read as success (None: automatic, :data:`SUCCESS_KEYS`).
        success_reward_at: Without a success key: success is ``reward >=`` this (None: off).
    """

    state: tuple[str, ...] | None = None
    cameras: tuple[str, ...] | None = None
    image_size: int = 128
    success_key: str | None = None
    success_reward_at: float | None = None

    def __post_init__(self) -> None:
        if not 8 <= self.image_size <= 1024:
            raise ForeignEnvError(f"image_size must be in 8..1024 pixels, got {self.image_size}")


@dataclass(frozen=True)
class MappingPlan:
    """What :func:`plan_mapping` chose: state paths and sizes, cameras, what it left out."""

    state: tuple[tuple[str, int], ...]
    """(key path, number of values) per state part, in order."""
    cameras: tuple[tuple[str, str], ...]
    """(camera name, key path) per camera."""
    left_out: tuple[tuple[str, str], ...] = ()
    """(key path, why) of each observation part not used."""
    action_low: np.ndarray = field(default_factory=lambda: np.zeros(0))
    action_high: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def state_dim(self) -> int:
        return sum(n for _, n in self.state)

    def describe(self) -> dict[str, Any]:
        """JSON-able: the mapping as ``robot-rl envs --env`` prints it."""
        return {
            "state": [{"path": p or "<observation>", "size": n} for p, n in self.state],
            "state_dim": self.state_dim,
            "cameras": {name: p or "<observation>" for name, p in self.cameras},
            "left_out": [{"path": p, "why": why} for p, why in self.left_out],
            "action_dim": int(self.action_low.size),
            "action_low": [float(f"{v:.6g}") for v in self.action_low],
            "action_high": [float(f"{v:.6g}") for v in self.action_high],
        }


def _leaves(space: gym.Space, path: str = "") -> list[tuple[str, gym.Space]]:
    """(key path, space) of every non-Dict part of ``space``, depth first, keys sorted."""
    if isinstance(space, gym.spaces.Dict):
        out = []
        for key in sorted(space.spaces):
            out += _leaves(space.spaces[key], f"{path}.{key}" if path else str(key))
        return out
    return [(path, space)]


def _kind(space: gym.Space) -> tuple[str, str]:
    """``("state" | "image" | "refused", why)`` of one observation part."""
    if isinstance(space, gym.spaces.Box):
        shape = tuple(space.shape)
        if len(shape) == 3 and shape[2] in (3, 4):
            if space.dtype != np.uint8:
                return "refused", f"an image of {space.dtype}, not uint8: convert it in the env"
            return "image", ""
        if not np.issubdtype(space.dtype, np.number):
            return "refused", f"a Box of {space.dtype}, not numbers"
        if len(shape) <= 1:
            return "state", ""
        return "refused", (
            f"a {len(shape)}-D Box {shape} that is not an (H, W, 3) image: name it in the state "
            "mapping to flatten it, or leave it out"
        )
    if isinstance(space, gym.spaces.Text):
        return "refused", "text: the learner reads numbers and images"
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return "refused", f"{type(space).__name__}: one-hot encode it in the env to use it"
    return "refused", f"{type(space).__name__} is not supported"


def _find(space: gym.Space, path: str) -> gym.Space:
    if path == "":
        return space
    node = space
    for key in path.split("."):
        if not isinstance(node, gym.spaces.Dict) or key not in node.spaces:
            known = ", ".join(p or "<observation>" for p, _ in _leaves(space))
            raise ForeignEnvError(f"observation has no part {path!r}; its parts: {known}")
        node = node.spaces[key]
    return node


def _get(obs: Any, path: str) -> Any:
    if path == "":
        return obs
    for key in path.split("."):
        obs = obs[key]
    return obs


def _camera_name(path: str) -> str:
    return path.rsplit(".", 1)[-1] if path else "image"


def plan_mapping(env: gym.Env, mapping: ObsMapping | None = None) -> MappingPlan:
    """The mapping of ``env`` (module docstring): ``mapping``'s choices, the rest automatic.

    Raises:
        ForeignEnvError: The action space cannot be mapped, a named part does not exist or
            cannot be used, or nothing of the observation is usable.
    """
    mapping = mapping or ObsMapping()
    act = env.action_space
    if not isinstance(act, gym.spaces.Box):
        raise ForeignEnvError(
            f"action space {act} is not a Box: the learner (SAC) acts with continuous actions; "
            "wrap a discrete env in a continuous action wrapper or use another learner"
        )
    if len(act.shape) != 1:
        raise ForeignEnvError(f"action space {act} is not 1-D: flatten its actions in the env")
    low, high = np.asarray(act.low, np.float64), np.asarray(act.high, np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
        raise ForeignEnvError(
            f"action space {act} has unbounded or empty dimensions: the policy's [-1, 1] "
            "maps onto finite bounds; clip the env's actions to a range in a wrapper"
        )
    space = env.observation_space
    leaves = _leaves(space)
    kinds = {p: _kind(s) for p, s in leaves}
    left_out: list[tuple[str, str]] = []

    if mapping.state is not None:
        state = []
        for path in mapping.state:
            s = _find(space, path)
            if not (isinstance(s, gym.spaces.Box) and np.issubdtype(s.dtype, np.number)):
                raise ForeignEnvError(f"state part {path!r} is {s}, not a numeric Box")
            state.append((path, int(np.prod(s.shape, dtype=int))))
    else:
        goal_env = isinstance(space, gym.spaces.Dict) and set(GOAL_KEYS) <= set(space.spaces)
        state = []
        for path, s in leaves:
            if kinds[path][0] != "state":
                continue
            if goal_env and path == "achieved_goal":
                left_out.append((path, "a goal env's achieved_goal follows from its observation"))
                continue
            state.append((path, int(np.prod(s.shape, dtype=int))))

    if mapping.cameras is not None:
        cameras = []
        for item in mapping.cameras:
            name, _, path = item.rpartition("=")
            name = name or _camera_name(path)
            if _kind(_find(space, path))[0] != "image":
                raise ForeignEnvError(f"camera {path!r} is {_find(space, path)}, not an image")
            cameras.append((name, path))
    else:
        cameras = [(_camera_name(p), p) for p, _ in leaves if kinds[p][0] == "image"]
    names = [n for n, _ in cameras]
    if len(set(names)) != len(names):
        raise ForeignEnvError(
            f"two cameras share a name in {cameras}: name them, e.g. --cameras left=a.rgb"
        )
    used = {p for p, _ in state} | {p for _, p in cameras}
    for path, (kind, why) in kinds.items():
        if path in used or any(p == path for p, _ in left_out):
            continue
        left_out.append((path or "<observation>", why or f"not chosen ({kind})"))
    if not state and not cameras:
        raise ForeignEnvError(
            "nothing of the observation is usable: "
            + "; ".join(f"{p}: {why}" for p, why in left_out)
        )
    return MappingPlan(tuple(state), tuple(cameras), tuple(left_out), low, high)


def _square(image: np.ndarray, size: int) -> np.ndarray:
    """Centre-crop to a square, resize to ``size``, drop alpha: (size, size, 3) uint8."""
    import cv2

    h, w = image.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    image = np.ascontiguousarray(image[top : top + side, left : left + side, :3])
    if side != size:
        interp = cv2.INTER_AREA if side > size else cv2.INTER_LINEAR
        image = cv2.resize(image, (size, size), interpolation=interp)
    return image


class ForeignEnv(gym.Wrapper):
    """``env`` in the learner's terms (module docstring): Dict observation of ``state`` and
    ``images``, actions in [-1, 1], ``info["is_success"]`` on every step.

    Args:
        env: Any gymnasium env.
        mapping: Choices (default: all automatic).

    Raises:
        ForeignEnvError: See :func:`plan_mapping`; at a step, no success key and no
            ``success_reward_at``.
    """

    def __init__(self, env: gym.Env, mapping: ObsMapping | None = None) -> None:
        super().__init__(env)
        self.mapping = mapping or ObsMapping()
        self.plan = plan_mapping(env, self.mapping)
        parts: dict[str, gym.Space] = {}
        if self.plan.state:
            dim = self.plan.state_dim
            parts[keys.STATE] = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        if self.plan.cameras:
            n = self.mapping.image_size
            parts[keys.IMAGES] = gym.spaces.Dict(
                {name: gym.spaces.Box(0, 255, (n, n, 3), np.uint8) for name, _ in self.plan.cameras}
            )
        self.observation_space = gym.spaces.Dict(parts)
        dim = self.plan.action_low.size
        self.action_space = gym.spaces.Box(-1.0, 1.0, (dim,), np.float32)
        self._mid = (self.plan.action_high + self.plan.action_low) / 2
        self._half = (self.plan.action_high - self.plan.action_low) / 2
        self.raw_obs: Any = None
        """The inner env's last observation as it gave it (what a scripted policy written for
        the env reads)."""

    def policy_action(self, env_action: Any) -> np.ndarray:
        """An action in the env's own units -> the [-1, 1] action that :meth:`action` maps to
        it (clipped to the bounds first): how a scripted policy's or a device's command enters
        the learner's data."""
        a = np.asarray(env_action, dtype=np.float64).reshape(-1)
        if a.shape != self._mid.shape or not np.all(np.isfinite(a)):
            raise ForeignEnvError(f"env action {a} must be {self._mid.size} finite values")
        return np.clip((a - self._mid) / self._half, -1.0, 1.0).astype(np.float32)

    def observation(self, obs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.plan.state:
            out[keys.STATE] = np.concatenate(
                [np.asarray(_get(obs, p), np.float32).reshape(-1) for p, _ in self.plan.state]
            )
        if self.plan.cameras:
            n = self.mapping.image_size
            out[keys.IMAGES] = {
                name: _square(np.asarray(_get(obs, p)), n) for name, p in self.plan.cameras
            }
        return out

    def action(self, action: Any) -> np.ndarray:
        """[-1, 1] -> the env's bounds (clipped first; NaN refused)."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != self._mid.shape or not np.all(np.isfinite(a)):
            raise ForeignEnvError(
                f"action {a} must be {self._mid.size} finite values in [-1, 1] for this env"
            )
        a = self._mid + self._half * np.clip(a, -1.0, 1.0)
        return a.astype(self.env.action_space.dtype)

    def _success(self, info: Mapping[str, Any], reward: float | None) -> bool:
        key = self.mapping.success_key
        if key is not None:
            if reward is None:  # many envs report success only on steps
                return bool(info.get(key, False))
            if key not in info:
                raise ForeignEnvError(
                    f"info has no {key!r} (it has {sorted(info)}): choose the success key"
                )
            return bool(info[key])
        for k in SUCCESS_KEYS:
            if k in info:
                return bool(info[k])
        at = self.mapping.success_reward_at
        if at is not None:
            return reward is not None and float(reward) >= at
        if reward is None:  # reset: no reward to judge yet
            return False
        raise ForeignEnvError(
            f"the env reports no success (info keys {sorted(info)}, none of {SUCCESS_KEYS}): "
            "name its success key (--success-key) or a reward that means success "
            "(--success-reward-at)"
        )

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.raw_obs = obs
        info = dict(info)
        info[keys.INFO_SUCCESS] = self._success(info, None)
        return self.observation(obs), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(self.action(action))
        self.raw_obs = obs
        info = dict(info)
        info[keys.INFO_SUCCESS] = self._success(info, float(reward))
        return self.observation(obs), reward, terminated, truncated, info


def find_foreign_env(env: gym.Env) -> ForeignEnv | None:
    """The :class:`ForeignEnv` in ``env``'s wrapper stack (None: ``env`` has none)."""
    while not isinstance(env, ForeignEnv):
        if not hasattr(env, "env"):
            return None
        env = env.env
    return env
