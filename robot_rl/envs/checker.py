"""One env checker for every env and backend (STYLE.md #8).

:func:`check_env` builds fresh envs from a factory and checks, over a short random-action
rollout:

1. spec conformance: every observation matches ``observation_space`` (keys, shapes, exact
   dtypes, bounds, finite floats); rewards are finite floats; ``terminated`` / ``truncated``
   are bools; ``info`` is a dict;
2. determinism: two fresh envs reset with the same seed and fed the same actions return
   identical observations, rewards and flags (and ``reset(seed)`` again reproduces the first
   observation);
3. no shared memory: no array of an observation overlaps another array of the same
   observation or of any earlier observation of the rollout (a consumer that stores or
   mutates observations must not see them change);
4. reset randomisation: resets with different seeds give different initial observations
   (stamps ignored) or different privileged info;
5. optionally, success is reachable: an expert succeeds in at least one of a few episodes.

Works for any gymnasium env with a Dict observation space of Boxes (nested Dicts allowed).
Failures raise :class:`EnvCheckError` (an ``AssertionError``) or
:class:`robot_rl.core.specs.SpecError` with a message naming the key and the step.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.specs import SpecError


class EnvCheckError(AssertionError):
    """The env breaks one of the checked properties; the message says which and where."""


class Expert(Protocol):
    """A scripted (or learned) policy for the success-reachable check."""

    def reset(self, rng: np.random.Generator) -> None: ...

    def act(self, obs: Any, info: dict) -> np.ndarray: ...


@dataclass(frozen=True)
class EnvCheckReport:
    """What :func:`check_env` ran (it raises on the first failure, so all checks passed).

    Attributes:
        steps: Random-action steps per rollout (two rollouts are compared).
        episodes: Episodes started in the first rollout (resets).
        reset_seeds: Seeds whose initial observations were compared (empty if skipped).
        expert_episodes: Expert episodes run (0 if no expert was given).
        expert_successes: Expert episodes that reached success.
        observation_space: The env's observation space, as text.
    """

    steps: int
    episodes: int
    reset_seeds: tuple[int, ...]
    expert_episodes: int
    expert_successes: int
    observation_space: str


def check_env(
    env_fn: Callable[[], gym.Env],
    steps: int = 30,
    seed: int = 0,
    *,
    expert_fn: Callable[[gym.Env], Expert] | None = None,
    expert_env_fn: Callable[[], gym.Env] | None = None,
    expert_episodes: int = 3,
    expert_max_steps: int = 1000,
    success_key: str = keys.INFO_SUCCESS,
    privileged_key: str = keys.INFO_PRIVILEGED,
    check_reset_varies: bool = True,
    n_reset_seeds: int = 3,
    determinism_ignore: Collection[str] = (),
    bounds_atol: float = 1e-5,
) -> EnvCheckReport:
    """Check an env factory; raise on the first violated property. See the module docstring.

    Args:
        env_fn: Builds a fresh env (called twice, plus once more with an expert).
        steps: Random-action steps per rollout (episodes are reset when they end).
        seed: Seed of the first reset and of the random actions.
        expert_fn: Builds an expert for the env it is given (a fresh ``env_fn()``), with
            ``reset(rng)`` and ``act(obs, info) -> action`` in that env's spaces; None skips
            the success-reachable check.
        expert_env_fn: Builds the env for the expert episodes (None: ``env_fn``), e.g. with
            the task's full episode length when ``env_fn`` uses short episodes.
        expert_episodes: Expert episodes to try; at least one must succeed.
        expert_max_steps: Step cap per expert episode (for envs that never truncate).
        success_key: ``info`` key of the success flag.
        privileged_key: ``info`` key of sim-only truth compared by the reset check.
        check_reset_varies: Whether different seeds must give different initial states.
        n_reset_seeds: Seeds compared by the reset check (``seed, seed + 1, ...``), >= 2.
        determinism_ignore: Top-level observation keys not compared for determinism (e.g.
            ``"stamps"`` on a real robot, whose stamps are wall-clock times).
        bounds_atol: Tolerance of the bound checks.

    Returns:
        An :class:`EnvCheckReport` of what ran.

    Raises:
        SpecError: An observation does not match the observation space.
        EnvCheckError: Any other violated property.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if check_reset_varies and n_reset_seeds < 2:
        raise ValueError(f"n_reset_seeds must be >= 2, got {n_reset_seeds}")
    env_a = env_fn()
    try:
        space = env_a.observation_space
        if not isinstance(space, gym.spaces.Dict):
            raise EnvCheckError(f"observation_space must be a gymnasium Dict, got {space}")
        action_space = env_a.action_space
        action_space.seed(seed)
        actions = [action_space.sample() for _ in range(steps)]
        run_a = _rollout(env_a, actions, seed, bounds_atol)
        _check_same_reset(env_a, seed, run_a[0][0], determinism_ignore)
        reset_seeds: tuple[int, ...] = ()
        if check_reset_varies:
            reset_seeds = tuple(seed + i for i in range(n_reset_seeds))
            _check_reset_varies(env_a, reset_seeds, privileged_key)
        description = str(space)
    finally:
        env_a.close()
    env_b = env_fn()
    try:
        run_b = _rollout(env_b, actions, seed, bounds_atol)
    finally:
        env_b.close()
    _compare_runs(run_a, run_b, determinism_ignore)
    successes = 0
    n_expert = 0
    if expert_fn is not None:
        n_expert, successes = _expert_episodes(
            expert_env_fn or env_fn, expert_fn, seed, expert_episodes, expert_max_steps, success_key
        )
    return EnvCheckReport(
        steps=steps,
        episodes=sum(1 for rec in run_a if rec[1] is None),
        reset_seeds=reset_seeds,
        expert_episodes=n_expert,
        expert_successes=successes,
        observation_space=description,
    )


# -- spec conformance ------------------------------------------------------------------------


def check_observation(obs: Any, space: gym.Space, name: str = "obs", atol: float = 1e-5) -> None:
    """Raise :class:`SpecError` unless ``obs`` matches ``space`` exactly (dtype included).

    Dict spaces need a mapping with exactly the same keys; Box spaces need a numpy array of the
    same shape and dtype, finite (floats) and within bounds (with ``atol``). Other spaces fall
    back to ``space.contains``.
    """
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            raise SpecError(f"{name}: expected a dict, got {type(obs).__name__}")
        missing = sorted(set(space.spaces) - set(obs))
        extra = sorted(set(obs) - set(space.spaces))
        if missing or extra:
            raise SpecError(f"{name}: keys differ from the space; missing {missing}, extra {extra}")
        for key, sub in space.spaces.items():
            check_observation(obs[key], sub, f"{name}[{key!r}]", atol)
        return
    if isinstance(space, gym.spaces.Box):
        if not isinstance(obs, np.ndarray):
            raise SpecError(f"{name}: expected a numpy array, got {type(obs).__name__}")
        if obs.shape != space.shape:
            raise SpecError(f"{name}: expected shape {space.shape}, got {obs.shape}")
        if obs.dtype != space.dtype:
            raise SpecError(f"{name}: expected dtype {space.dtype}, got {obs.dtype}")
        if np.issubdtype(obs.dtype, np.floating) and not np.all(np.isfinite(obs)):
            raise SpecError(f"{name}: contains NaN or inf")
        below = obs < space.low - atol if obs.dtype.kind == "f" else obs < space.low
        above = obs > space.high + atol if obs.dtype.kind == "f" else obs > space.high
        if np.any(below) or np.any(above):
            idx = np.flatnonzero(np.logical_or(below, above).reshape(-1))[0]
            raise SpecError(
                f"{name}: element {idx} = {obs.reshape(-1)[idx]} outside "
                f"[{space.low.reshape(-1)[idx]}, {space.high.reshape(-1)[idx]}]"
            )
        return
    if not space.contains(obs):
        raise SpecError(f"{name}: {obs!r} is not in {space}")


def _check_step_types(reward: Any, terminated: Any, truncated: Any, info: Any, where: str) -> None:
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (float, np.floating)):
        raise EnvCheckError(f"{where}: reward must be a float, got {type(reward).__name__}")
    if not np.isfinite(reward):
        raise EnvCheckError(f"{where}: reward is not finite: {reward}")
    for flag_name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            raise EnvCheckError(f"{where}: {flag_name} must be a bool, got {type(flag).__name__}")
    if not isinstance(info, dict):
        raise EnvCheckError(f"{where}: info must be a dict, got {type(info).__name__}")


# -- memory ----------------------------------------------------------------------------------


def _leaves(tree: Any, prefix: str = "obs") -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of a nested mapping, depth first."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from _leaves(value, f"{prefix}[{key!r}]")
    else:
        yield prefix, tree


def _arrays(obs: Any) -> list[tuple[str, np.ndarray]]:
    return [(path, leaf) for path, leaf in _leaves(obs) if isinstance(leaf, np.ndarray)]


def _check_no_overlap(
    new: list[tuple[str, np.ndarray]], old: list[tuple[str, np.ndarray]] | None, where: str
) -> None:
    """No array of ``new`` overlaps another array of ``new`` or any array of ``old``."""
    for i, (path, arr) in enumerate(new):
        others = [(p, a, "this observation") for p, a in new[i + 1 :]]
        if old is not None:
            others += [(p, a, "an earlier observation") for p, a in old]
        for other_path, other, which in others:
            if np.may_share_memory(arr, other) and np.shares_memory(arr, other):
                raise EnvCheckError(
                    f"{where}: {path} shares memory with {other_path} of {which}; return a new "
                    "array (copy what the env or a wrapper modifies or caches)"
                )


# -- rollouts --------------------------------------------------------------------------------

# One record per reset or step: (obs, reward or None for a reset, terminated, truncated).
_Record = tuple[Any, Any, bool, bool]


def _rollout(env: gym.Env, actions: list, seed: int, atol: float) -> list[_Record]:
    """Reset with ``seed`` and run ``actions``, resetting (unseeded) when an episode ends."""
    space = env.observation_space
    obs, info = env.reset(seed=seed)
    where = "reset(seed)"
    check_observation(obs, space, f"{where} obs", atol)
    if not isinstance(info, dict):
        raise EnvCheckError(f"{where}: info must be a dict, got {type(info).__name__}")
    records: list[_Record] = [(obs, None, False, False)]
    earlier = _arrays(obs)  # every array returned so far by this rollout
    _check_no_overlap(earlier, None, where)
    for t, action in enumerate(actions):
        where = f"step {t}"
        obs, reward, terminated, truncated, info = env.step(action)
        check_observation(obs, space, f"{where} obs", atol)
        _check_step_types(reward, terminated, truncated, info, where)
        cur = _arrays(obs)
        _check_no_overlap(cur, earlier, where)
        records.append((obs, float(reward), bool(terminated), bool(truncated)))
        earlier += cur
        if terminated or truncated:
            obs, info = env.reset()
            where = f"reset after step {t}"
            check_observation(obs, space, f"{where} obs", atol)
            cur = _arrays(obs)
            _check_no_overlap(cur, earlier, where)
            records.append((obs, None, False, False))
            earlier += cur
    return records


def _equal_trees(a: Any, b: Any, ignore: Collection[str]) -> str | None:
    """None if equal, else the path of the first difference."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys_a = [k for k in a if k not in ignore]
        if set(keys_a) != {k for k in b if k not in ignore}:
            return f"keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        return next(
            (f"[{k!r}]{d}" for k in keys_a if (d := _equal_trees(a[k], b[k], ())) is not None),
            None,
        )
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if a_arr.shape != b_arr.shape or a_arr.dtype != b_arr.dtype:
        return f": shape/dtype {a_arr.shape} {a_arr.dtype} vs {b_arr.shape} {b_arr.dtype}"
    if not np.array_equal(a_arr, b_arr):
        return f": {a_arr} vs {b_arr}"
    return None


def _compare_runs(run_a: list[_Record], run_b: list[_Record], ignore: Collection[str]) -> None:
    if len(run_a) != len(run_b):
        raise EnvCheckError(
            f"not deterministic: episodes ended at different steps ({len(run_a)} vs "
            f"{len(run_b)} records) for the same seed and actions"
        )
    for i, (rec_a, rec_b) in enumerate(zip(run_a, run_b, strict=True)):
        diff = _equal_trees(rec_a[0], rec_b[0], ignore)
        if diff is not None:
            raise EnvCheckError(
                f"not deterministic: record {i} observation differs at obs{diff} between two "
                "fresh envs with the same seed and actions; draw all randomness from "
                "env.np_random (seeded by reset) and avoid wall-clock time in observations"
            )
        if rec_a[1:] != rec_b[1:]:
            raise EnvCheckError(
                f"not deterministic: record {i} (reward, terminated, truncated) {rec_a[1:]} vs "
                f"{rec_b[1:]} for the same seed and actions"
            )


def _check_same_reset(env: gym.Env, seed: int, first_obs: Any, ignore: Collection[str]) -> None:
    obs, _ = env.reset(seed=seed)
    diff = _equal_trees(first_obs, obs, ignore)
    if diff is not None:
        raise EnvCheckError(
            f"reset(seed={seed}) twice on one env gave different observations at obs{diff}; "
            "reset must re-seed every source of randomness"
        )


def _check_reset_varies(env: gym.Env, seeds: tuple[int, ...], privileged_key: str) -> None:
    starts = []
    for s in seeds:
        obs, info = env.reset(seed=s)
        priv = info.get(privileged_key, {}) if isinstance(info, dict) else {}
        starts.append(({k: v for k, v in obs.items() if k != keys.STAMPS}, priv))
    base_obs, base_priv = starts[0]
    for obs, priv in starts[1:]:
        if (
            _equal_trees(base_obs, obs, ()) is not None
            or _equal_trees(base_priv, priv, ()) is not None
        ):
            return
    raise EnvCheckError(
        f"reset with seeds {list(seeds)} gave identical initial observations and privileged "
        "info; the reset distribution is not randomised (pass check_reset_varies=False if "
        "that is intended)"
    )


def _expert_episodes(
    env_fn: Callable[[], gym.Env],
    expert_fn: Callable[[gym.Env], Expert],
    seed: int,
    episodes: int,
    max_steps: int,
    success_key: str,
) -> tuple[int, int]:
    """Run expert episodes until one succeeds; (episodes run, successes)."""
    env = env_fn()
    try:
        expert = expert_fn(env)
        for ep in range(episodes):
            rng = np.random.default_rng(seed + ep)
            obs, info = env.reset(seed=seed + ep)
            expert.reset(rng)
            for _ in range(max_steps):
                obs, _, terminated, truncated, info = env.step(expert.act(obs, info))
                if info.get(success_key, False):
                    return ep + 1, 1
                if terminated or truncated:
                    break
    finally:
        env.close()
    raise EnvCheckError(
        f"the expert reached success ({success_key!r} in info) in none of {episodes} episodes "
        f"(seeds {seed}..{seed + episodes - 1}); the task may be unreachable, the success "
        "check too strict, or the expert broken"
    )
