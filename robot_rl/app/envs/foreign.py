"""Envs we did not write, by gymnasium id: ``--env ID`` or ``--env module:ID`` (the module is
imported first, so that its import registers the id), wrapped in
:class:`robot_rl.wrappers.foreign_env.ForeignEnv` (observation mapping, [-1, 1] actions,
success) and the sparse success reward where asked; the episode limit is ``gym.make``'s.

:func:`make_foreign_env` builds one; :func:`describe_foreign_env` is what ``robot-rl envs --env``
prints: the mapping, what it left out and why, the spaces.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from robot_rl.wrappers.foreign_env import (
    ForeignEnv,
    ForeignEnvError,
    ObsMapping,
    find_foreign_env,
)


def resolve_env_id(spec: str) -> str:
    """The gymnasium id of ``spec`` (``ID`` or ``module:ID``), its module imported.

    Raises:
        ForeignEnvError: The module does not import, or the id is not registered (the message
            lists registered ids that look alike).
    """
    module, sep, env_id = spec.rpartition(":")
    if sep and not module:
        raise ForeignEnvError(f"--env {spec!r}: write module:ID or ID")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ForeignEnvError(
                f"--env {spec!r}: cannot import module {module!r} ({e}); install the package "
                "that provides it, or put its directory on PYTHONPATH"
            ) from e
    if env_id not in gym.registry:
        stem = env_id.split("-v")[0].lower()
        alike = sorted(i for i in gym.registry if stem and stem in i.lower())[:10]
        hint = f"; registered ids like it: {', '.join(alike)}" if alike else ""
        raise ForeignEnvError(
            f"--env {spec!r}: {env_id!r} is not a registered gymnasium id{hint} (with "
            "module:ID the module is imported first, e.g. --env gymnasium_robotics:"
            "FetchReach-v4)"
        )
    return env_id


@dataclass(frozen=True)
class ForeignSetup:
    """A foreign env as the learner builds it."""

    env: str
    """``ID`` or ``module:ID``."""
    mapping: ObsMapping = field(default_factory=ObsMapping)
    """Observation, camera and success mapping (automatic where it leaves a choice open)."""
    pixels: bool = False
    """Cameras in the observation (False: the state only, whatever cameras the env has)."""
    max_episode_steps: int | None = None
    """Episode step limit (None: the env's registered one)."""
    success_reward: bool = False
    """Replace the env's reward with 1 on success steps, 0 elsewhere (``--task-reward
    sparse``)."""
    make_kwargs: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments of ``gym.make``."""
    python: str | None = None
    """Run the env in this other interpreter (:class:`robot_rl.envs.remote_env.RemoteEnv`),
    for an env whose pins conflict with ours; None: in this process."""


def load_function(spec: str):
    """``module:function`` -> the function (its module imported)."""
    module, _, function = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--policy {spec!r}: cannot load it ({e})") from e
    if not callable(fn):
        raise ValueError(f"--policy {spec!r} is not callable")
    return fn


class ForeignBackend:
    """What the learner's workflows ask of an env's backend, for a foreign env: no cameras out
    of band, no twin task, no scripted expert (demos come from a policy or a device)."""

    cameras: tuple = ()
    task = None

    def __init__(self, env_id: str) -> None:
        self.env_id = env_id

    def make_expert(self):
        raise ForeignEnvError(
            f"{self.env_id} has no scripted expert in robot_rl: give a policy "
            "(--policy module:function) or a teleop device"
        )

    def close(self) -> None:
        pass


def make_foreign_env(setup: ForeignSetup) -> tuple[gym.Env, ForeignBackend]:
    """``(env, backend)`` for ``setup`` (module docstring).

    Raises:
        ForeignEnvError: The id, its spaces or the mapping cannot be used (the message says
            what to change).
    """
    kwargs = dict(setup.make_kwargs)
    if setup.max_episode_steps is not None:
        kwargs["max_episode_steps"] = setup.max_episode_steps
    mapping = setup.mapping if setup.pixels else _state_only(setup.mapping)
    if setup.python is not None:
        from robot_rl.envs.remote_env import RemoteEnv, RemoteEnvError

        try:
            base: gym.Env = RemoteEnv(setup.python, setup.env, kwargs)
        except RemoteEnvError as e:
            raise ForeignEnvError(str(e)) from e
        env_id = setup.env.rpartition(":")[2]
    else:
        env_id = resolve_env_id(setup.env)
        base = gym.make(env_id, **kwargs)
    try:
        env: gym.Env = ForeignEnv(base, mapping)
        if setup.success_reward:
            from robot_rl.wrappers import SuccessReward

            env = SuccessReward(env)
    except BaseException:
        base.close()
        raise
    return env, ForeignBackend(env_id)


def _state_only(mapping: ObsMapping) -> ObsMapping:
    from dataclasses import replace

    return replace(mapping, cameras=())


def describe_foreign_env(setup: ForeignSetup) -> dict[str, Any]:
    """``robot-rl envs --env``: the id, the mapping (state parts, cameras, what was left out
    and why), the learner's observation and action spaces."""
    from robot_rl.core.specs import describe, from_space

    env, backend = make_foreign_env(setup)
    try:
        inner = find_foreign_env(env)
        assert inner is not None  # make_foreign_env built it
        obs_spec = from_space(env.observation_space)
        versions = getattr(env.unwrapped, "versions", None)
        return {
            "env": setup.env,
            "id": backend.env_id,
            **({"python": setup.python, "versions": versions} if setup.python else {}),
            "max_episode_steps": env.spec.max_episode_steps if env.spec else None,
            "mapping": inner.plan.describe(),
            "observation": describe(obs_spec),
            "action": describe(from_space(env.action_space)),
        }
    finally:
        env.close()


class ForeignExpert:
    """A scripted policy written for a foreign env (``module:function``, the signature of
    ``collect --policy``) as a simulated human's expert: it reads the env's own last
    observation and the step's ``info`` (handed over as ``info["privileged"]``, see
    :class:`sim.human.SimHumanTeleop`'s ``scene``) and acts in the learner's [-1, 1] action."""

    def __init__(self, function, foreign: ForeignEnv) -> None:
        self._function = function
        self._foreign = foreign

    def reset(self, rng) -> None:
        reset = getattr(self._function, "reset", None)
        if callable(reset):  # a stateful policy object: each takeover starts its phases anew
            reset()

    def act(self, obs, info):
        from robot_rl.core import keys

        raw_info = info.get(keys.INFO_PRIVILEGED, {})
        return self._foreign.policy_action(self._function(self._foreign.raw_obs, raw_info))


def _whole_info(info):
    return info


def with_foreign_human(
    env: gym.Env,
    human_policy: str,
    human,
    axes_spec: str | None,
    cfg=None,
    seed: int = 0,
):
    """``env`` (a foreign env's stack) with a simulated human who drives with the scripted
    policy ``human_policy`` (``module:function``) through a device reading mapped by the teleop
    axes, read by an outermost :class:`robot_rl.wrappers.Intervention` (returned).

    Args:
        human: :class:`sim.human.HumanConfig` (when it takes over; its progress is the env's own
            reward, also under ``--task-reward sparse``).
        axes_spec: ``--teleop-axes`` (None: the default for the action size).
        cfg: :class:`robot_rl.wrappers.InterventionConfig`.
    """
    from robot_rl.core.teleop_axes import TeleopAxes
    from robot_rl.wrappers import Intervention
    from sim.human import SimHumanTeleop, SimulatedHuman

    foreign = find_foreign_env(env)
    if foreign is None:
        raise ValueError("--human-policy drives an env robot_rl did not write: add --env")
    axes = TeleopAxes.parse(axes_spec, int(env.action_space.shape[0]))
    expert = ForeignExpert(load_function(human_policy), foreign)
    sim_human = SimulatedHuman(expert, human, to_reading=axes.to_teleop)
    teleop = SimHumanTeleop(sim_human, seed=seed, scene=_whole_info)
    return Intervention(env, teleop, cfg, axes=axes)


def with_device(env: gym.Env, device, axes_spec: str | None, cfg=None):
    """``env`` (a foreign env's stack) with a person at ``device``
    (:class:`robot_rl.app.envs.devices.DeviceSession`) able to take over, through an outermost
    :class:`robot_rl.wrappers.Intervention` (returned) that maps readings by the teleop axes."""
    from robot_rl.core.teleop_axes import TeleopAxes
    from robot_rl.wrappers import Intervention

    axes = TeleopAxes.parse(axes_spec, int(env.action_space.shape[0]))
    return Intervention(env, device, cfg, axes=axes)
