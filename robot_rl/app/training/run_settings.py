"""The run's env settings in distributed training: the learner owns them, actors take them.

``robot-rl learner --task reach --obs state ...`` serves its :class:`LearnerEnvConfig` (task,
observation kind, cameras, image size, action settings, episode length) as JSON in every
``HelloReply`` (:func:`run_settings_json`). ``robot-rl actor`` asks for them before it builds
its env (a Hello without a layout, :func:`robot_rl.transport.run_info.ask_learner`) and builds
the learner's env (:func:`actor_settings`):

- a setting left off the actor's command line (:class:`ActorEnvFlags`, all None by default) is
  the learner's;
- a setting given and equal to the learner's (after the task's defaults are resolved: e.g.
  ``--gripper policy`` equals ``task`` for a task that lets the policy command the gripper) is
  fine;
- a setting given and different is refused, naming the setting and both values
  (:class:`SettingsConflictError`).

The actor keeps the learner's settings in its directory (``run_settings.json`` beside
``policy.json``, the learner's policy settings). A restarted actor waits
:data:`CACHED_WAIT_S` for the learner, then builds its env from the cached settings and acts
with its last weights until the learner is back, and says so in its startup line. A learner
that answers with other settings than the cached ones serves another run: the actor refuses to
mix them in one log and asks for another ``--run``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro
from tyro.conf import DisallowNone

from robot_rl.app.envs.collect import LearnerEnvConfig, ObsMode
from sim.backend import TASKS

RUN_SETTINGS_JSON = "run_settings.json"
"""The learner's run settings, cached in the actor's directory (from its last Hello)."""
POLICY_JSON = "policy.json"
"""The learner's policy settings, cached in the actor's directory (from its last Hello)."""
CACHED_WAIT_S = 5.0
"""An actor with cached settings waits this long for the learner before using them, seconds."""

_FROM_LEARNER = tyro.conf.arg(help_behavior_hint="(default: the learner's)")


@dataclass(frozen=True)
class ActorEnvFlags:
    """The run's env settings an actor may state; each one left out is the learner's, each one
    given must equal the learner's."""

    task: Annotated[DisallowNone[str | None], _FROM_LEARNER] = None
    """Task name; `robot-rl envs` lists them."""
    obs: Annotated[DisallowNone[ObsMode | None], _FROM_LEARNER] = None
    """state: the robot state + the task's object state; pixels: camera images + the robot
    state."""
    cameras: Annotated[DisallowNone[tuple[str, ...] | None], _FROM_LEARNER] = None
    """Cameras in the observation with --obs pixels."""
    image_size: Annotated[DisallowNone[int | None], _FROM_LEARNER] = None
    """Camera images are image_size x image_size pixels (--obs pixels)."""
    control_rotation: Annotated[DisallowNone[bool | None], _FROM_LEARNER] = None
    """7-dim action with rotation, or 4-dim [dx, dy, dz, gripper]."""
    max_episode_steps: Annotated[DisallowNone[int | None], _FROM_LEARNER] = None
    """Episode step limit."""
    gripper: Annotated[DisallowNone[Literal["task", "policy", "fixed"] | None], _FROM_LEARNER] = (
        None
    )
    """task: the task's choice; policy: the last action dimension commands the gripper; fixed:
    held at the task's fixed command and not in the policy's actions."""
    action_scale_m: Annotated[DisallowNone[float | None], _FROM_LEARNER] = None
    """TCP translation per step for an action of 1.0, metres."""
    task_reward: Annotated[DisallowNone[Literal["shaped", "sparse"] | None], _FROM_LEARNER] = None
    """shaped: the twin task's dense cost (privileged); sparse: 1 on success, else 0."""
    action_delay_ms: Annotated[DisallowNone[float | None], _FROM_LEARNER] = None
    """Direct twin: each action takes effect this long after it was sent, ms."""
    previous_action: Annotated[DisallowNone[bool | None], _FROM_LEARNER] = None
    """Observe the previous step's action (the state part prev_action)."""
    gripper_discretize: Annotated[DisallowNone[bool | None], _FROM_LEARNER] = None
    """The gripper output read as close / open / keep (dead band +-0.5)."""
    arm: Annotated[DisallowNone[str | None], _FROM_LEARNER] = None
    """The twin's arm kind (fr3, ur5e)."""
    env: Annotated[DisallowNone[str | None], _FROM_LEARNER] = None
    """A gymnasium env we did not write (`ID` or `module:ID`) instead of the twin's task."""
    env_state: Annotated[DisallowNone[tuple[str, ...] | None], _FROM_LEARNER] = None
    """--env: the observation parts that form the state vector, in order."""
    env_cameras: Annotated[DisallowNone[tuple[str, ...] | None], _FROM_LEARNER] = None
    """--env: the image parts used as cameras (`path` or `name=path`)."""
    success_key: Annotated[DisallowNone[str | None], _FROM_LEARNER] = None
    """--env: the info key read as success."""
    success_reward_at: Annotated[DisallowNone[float | None], _FROM_LEARNER] = None
    """--env without a success key: success is a reward at or above this."""
    env_kwargs: Annotated[DisallowNone[str | None], _FROM_LEARNER] = None
    """--env: keyword arguments of ``gym.make``, a JSON object."""
    env_python: Annotated[DisallowNone[str | None], _FROM_LEARNER] = None
    """--env: make the env in this other Python interpreter (an env whose pins conflict with
    ours); the learner's path unless given here (this machine's own wins)."""

    def __post_init__(self) -> None:
        LearnerEnvConfig(**self.given())  # the same checks as the learner's (image size, ...)

    def given(self) -> dict[str, Any]:
        """The settings given on the command line (name -> value)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }


class SettingsConflictError(ValueError):
    """A setting given on the actor's command line differs from the learner's."""


def run_settings_json(env: LearnerEnvConfig) -> str:
    """The run settings a learner tells its actors (canonical JSON of ``env``)."""
    return json.dumps(env.to_json(), sort_keys=True)


def parse_run_settings(text: str, source: str) -> LearnerEnvConfig:
    """Inverse of :func:`run_settings_json`; ``source`` names where ``text`` came from.

    Raises:
        ValueError: Not JSON, or not settings this version knows.
    """
    try:
        return LearnerEnvConfig.from_json(json.loads(text))
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"the run settings from {source} are not understood here ({e}); run the same "
            "robot_rl version on the learner and the actors"
        ) from e


def resolved(env: LearnerEnvConfig) -> dict[str, Any]:
    """Every setting of ``env`` with the task's defaults resolved (what the env is built with):
    the held gripper command (None: the policy's), the action scale, the episode limit, the
    action delay, the gripper's discretisation."""
    out = env.data_settings()
    info = TASKS.get(env.task) if env.env is None else None
    out["max_episode_steps"] = env.max_episode_steps or (info and info.max_episode_steps)
    out["action_delay_ms"] = env.action_delay_ms
    out["gripper_discretize"] = env.gripper_discretize
    return out


def describe(env: LearnerEnvConfig) -> str:
    """One line of ``env``'s settings (cameras and image size only for pixels, the action delay
    and the previous action only when there are)."""
    r = resolved(env)
    if env.env is not None:  # a foreign env: the twin's settings do not apply
        parts = [f"env={env.env}", f"obs={env.obs}", f"task_reward={env.task_reward}"]
        if env.obs == "pixels":
            parts.append(f"image_size={env.image_size}")
        if env.max_episode_steps:
            parts.append(f"max_episode_steps={env.max_episode_steps}")
        return " ".join(parts)
    parts = [f"task={env.task}", f"obs={env.obs}"]
    if env.obs == "pixels":
        parts += [f"cameras={','.join(env.cameras)}", f"image_size={env.image_size}"]
    parts += [
        f"control_rotation={env.control_rotation}",
        f"gripper={env.gripper}",
        f"action_scale_m={r['action_scale_m']}",
        f"max_episode_steps={r['max_episode_steps']}",
        f"task_reward={env.task_reward}",
    ]
    if env.action_delay_ms:
        parts.append(f"action_delay_ms={env.action_delay_ms:g}")
    if env.previous_action:
        parts.append("previous_action=True")
    if env.gripper_discretize:
        parts.append("gripper_discretize=True")
    return " ".join(parts)


LOCAL_SETTINGS = ("env_python",)
"""Env settings that say how this machine runs the env, not what the env is: the actor's own
value wins over the learner's."""


def resolve_env(
    flags: ActorEnvFlags, theirs: LearnerEnvConfig, cached_in: Path | None = None
) -> LearnerEnvConfig:
    """The env an actor builds: the learner's settings ``theirs``, if ``flags`` agree with them.

    Args:
        flags: What the actor's command line gave.
        theirs: The learner's settings (from its Hello, or cached).
        cached_in: Where ``theirs`` were cached, if the learner did not answer (for messages).

    Raises:
        SettingsConflictError: A given setting differs; the message names each one with both
            values and what to do.
    """
    given = flags.given()
    local = {k: given.pop(k) for k in LOCAL_SETTINGS if k in given}
    problems = [
        _conflict(name, mine, theirs, cached_in)
        for name, mine in given.items()
        if not _same(name, mine, theirs)
    ]
    if problems:
        raise SettingsConflictError("; ".join(problems))
    return dataclasses.replace(theirs, **local) if local else theirs


def _same(name: str, mine: Any, theirs: LearnerEnvConfig) -> bool:
    if getattr(theirs, name) == mine:
        return True
    try:
        as_mine = dataclasses.replace(theirs, **{name: mine})
    except ValueError:
        return False
    return resolved(as_mine)[name] == resolved(theirs)[name]


def _flag(name: str, value: Any) -> str:
    opt = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return opt if value else "--no-" + name.replace("_", "-")
    if isinstance(value, tuple):
        return " ".join((opt, *value))
    return f"{opt} {value}"


def _conflict(name: str, mine: Any, theirs: LearnerEnvConfig, cached_in: Path | None) -> str:
    value = getattr(theirs, name)
    if value is None:
        said = f"{resolved(theirs)[name]} (the task's default)"
    elif isinstance(value, tuple):
        said = " ".join(value) or "(none)"
    else:
        said = str(value)
    flag = _flag(name, mine)
    drop = flag if isinstance(mine, bool) else flag.split(" ")[0]
    if cached_in is None:
        return (
            f"{flag} on this actor, but the learner runs {name} {said}: drop {drop} or start "
            f"the learner with {flag}"
        )
    return (
        f"{flag} on this actor, but the learner's settings cached in {cached_in} (the learner "
        f"did not answer) say {name} {said}: drop {drop}, or use another --run for an actor of "
        "another run"
    )


@dataclass(frozen=True)
class ActorSettings:
    """What an actor builds from: the run's env settings and the learner's policy settings."""

    env: LearnerEnvConfig
    """The env settings (the learner's)."""
    policy: dict
    """The learner's policy settings (see ``robot_rl.app.training.distributed.policy_settings``)."""
    startup_line: str
    """Where they came from and what they are, for the actor's startup line."""
    from_learner: bool
    """Whether the learner answered (else: cached)."""


def actor_settings(
    run_dir: Path,
    flags: ActorEnvFlags,
    ask: Callable[[float], Any],
    learner: str,
    connect_timeout_s: float,
    cached_wait_s: float = CACHED_WAIT_S,
) -> ActorSettings:
    """Ask the learner for the run's settings (else take the cached ones) and check ``flags``.

    Args:
        run_dir: The actor's directory (the cache; created once the settings are known).
        flags: The settings given on the actor's command line.
        ask: ``ask(timeout_s)`` -> the learner's answer to a settings-only Hello
            (:class:`robot_rl.transport.run_info.LearnerInfo`), or None if it did not answer.
        learner: The learner's address, for messages.
        connect_timeout_s: Without cached settings, how long to wait for the learner, seconds.
        cached_wait_s: With cached settings, how long to wait for the learner, seconds.

    Raises:
        SettingsConflictError: A given setting differs from the learner's.
        ValueError: The learner serves another run than the cached one, or says no policy
            settings.
        TimeoutError: No learner answered and nothing is cached.
        robot_rl.transport.client.LearnerError: The learner refused this actor.
    """
    cache, policy_cache = run_dir / RUN_SETTINGS_JSON, run_dir / POLICY_JSON
    cached = cache.exists() and policy_cache.exists()
    wait_s = cached_wait_s if cached else connect_timeout_s
    info = ask(wait_s)
    if info is None:
        if not cached:
            raise TimeoutError(
                f"no learner answered at {learner} within {wait_s:g} s, and {run_dir} holds no "
                "run settings from an earlier connection: start `robot-rl learner` first (or "
                "check --learner, --token, TLS)"
            )
        env = resolve_env(flags, parse_run_settings(cache.read_text(), str(cache)), cache)
        line = (
            f"settings cached in {cache} (no learner answered at {learner} within {wait_s:g} s; "
            f"acting with the last weights until it is back): {describe(env)}"
        )
        return ActorSettings(env, json.loads(policy_cache.read_text()), line, False)
    if not info.policy_json:
        raise ValueError(
            f"the learner at {learner} does not say its policy settings; run the same robot_rl "
            "version on the learner and the actors"
        )
    if info.run_settings_json:
        theirs = parse_run_settings(info.run_settings_json, f"the learner at {learner}")
        _check_same_run(cache, theirs, learner)
        env = resolve_env(flags, theirs)
        what = "settings from the learner"
    else:  # a learner built without run settings (a library user's): this actor's own
        env = LearnerEnvConfig(**flags.given())
        what = "the learner does not say its env settings; this actor's own"
    from robot_rl.run.rundir import write_json_atomic

    run_dir.mkdir(parents=True, exist_ok=True)
    if info.run_settings_json:
        write_json_atomic(cache, json.loads(info.run_settings_json))
    write_json_atomic(policy_cache, json.loads(info.policy_json))
    line = f"{what} at {learner} (run {info.run_id}): {describe(env)}"
    return ActorSettings(env, json.loads(info.policy_json), line, True)


def _check_same_run(cache: Path, theirs: LearnerEnvConfig, learner: str) -> None:
    """ValueError if the actor's directory holds an actor of a run with other settings."""
    if not cache.exists():
        return
    before = parse_run_settings(cache.read_text(), str(cache))
    if before != theirs:
        raise ValueError(
            f"{cache.parent} holds an actor of another run ({describe(before)}) than the one "
            f"the learner at {learner} serves ({describe(theirs)}): start this actor with a new "
            "--run (the old one keeps its log)"
        )
