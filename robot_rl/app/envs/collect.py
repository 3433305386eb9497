"""``robot-rl collect``: record demonstration episodes into a zarr dataset (source "demo").

The dataset holds observations in the LEARNER layout (``robot_rl.replay.ObsAdapter``) of the
env described by ``--task --obs --cameras --image-size --control-rotation``, and actions in the
policy's [-1, 1] space. Training needs the same layout: collect with the same ``--obs`` (and
camera / image / rotation settings) as you train with; ``robot-rl train`` checks it and says
what differs. The env settings are stored in the dataset's metadata.

Seeding: attempt ``i`` resets with ``seed + i`` (default seeds are disjoint from training and
evaluation seeds). With ``--only-success`` (default) failed attempts are not written, and up to
``3 * episodes`` attempts are made to get ``episodes`` successes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import tyro

from robot_rl.app.envs.build import EnvSetup, WrapperConfig, check_task
from robot_rl.app.envs.collect_teleop import step_record
from robot_rl.app.envs.devices import DeviceKind
from robot_rl.core import keys
from robot_rl.core.features import DEFAULT_IMAGE_SIZE
from sim.backend import TASKS
from sim.config import DEFAULT_ARM

ObsMode = Literal["state", "pixels"]


ACTION_DELAY_OVER_ROS = (
    "--action-delay-ms delays the direct twin's actions; over ROS 2 (--setup) the latency is the "
    "real one: drop --action-delay-ms"
)
"""The refusal of ``--action-delay-ms`` with ``--setup`` (train and eval)."""


def parse_env_kwargs(text: str | None) -> dict[str, Any]:
    """``--env-kwargs`` as a dict (None: no keyword arguments).

    Raises:
        ValueError: Not a JSON object (the message shows how to write one).
    """
    if text is None:
        return {}
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"--env-kwargs {text!r} is not JSON ({e}); write an object, e.g. "
            '--env-kwargs \'{"env_name": "push-v3"}\''
        ) from e
    if not isinstance(value, dict):
        raise ValueError(f"--env-kwargs {text!r} must be a JSON object of gym.make's arguments")
    return value


@dataclass(frozen=True)
class LearnerEnvConfig:
    """The twin env a learner trains on (shared by collect, train and eval)."""

    task: str = "pick_cube"
    """Task name; ``robot-rl envs`` lists them."""
    obs: ObsMode = "state"
    """state: the robot state + the task's object state (sim truth, e.g. the cube position;
    see ``robot-rl envs``), flattened; pixels: camera images + the robot state."""
    cameras: tuple[str, ...] = ("front", "wrist")
    """Cameras in the observation with --obs pixels (ignored for state)."""
    image_size: int = DEFAULT_IMAGE_SIZE
    """Camera images are image_size x image_size pixels (--obs pixels)."""
    control_rotation: bool = False
    """7-dim action with rotation, or 4-dim [dx, dy, dz, gripper] (default; easier to learn)."""
    max_episode_steps: int | None = None
    """Episode step limit (None: the task's default)."""
    gripper: Literal["task", "policy", "fixed"] = "task"
    """task: the task's choice (peg_insert holds the grasping gripper closed, the others let
    the policy command it); policy: the last action dimension commands the gripper; fixed:
    held at the task's fixed command (closed if it has none) and not in the policy's actions."""
    action_scale_m: float | None = None
    """TCP translation per step for an action of 1.0, metres (None: the task's default,
    `robot-rl envs` shows it)."""
    task_reward: Literal["shaped", "sparse"] = "shaped"
    """shaped: the twin task's dense cost (privileged: it reads sim state, e.g. the
    gripper-cube distance; a real robot has no such reward); sparse: 1 on a success step, else
    0 (the task's success test, what a classifier or a person's button gives on a robot)."""
    action_delay_ms: float = 0.0
    """Direct twin: each action takes effect this long after it was sent (below one control
    period; the previous target holds meanwhile), the latency a real arm acts with (over ROS 2
    on this machine: 70-140 ms from observation to command). 0: at once. Over ROS 2 (--setup)
    the latency is the real one: leave it 0."""
    previous_action: bool = False
    """Observe the previous step's action (the state part ``prev_action``): the target the arm
    still tracks while the next action is on its way, which no sensor shows. Demos must be
    collected with the same setting."""
    gripper_discretize: bool = False
    """Read the policy's gripper output as close (above 0.5), open (below -0.5) or keep the
    last command (in between), as HIL-SERL and SERL do. A policy unsure between open and closed
    then keeps its gripper as it is instead of half-closing it: a half-closed hand cannot
    straddle the object, and on a real Franka Hand every new target is a blocking move. Not a
    data setting: a teleop device's gripper commands are -1 or +1 either way."""
    arm: str = DEFAULT_ARM
    """The twin's arm kind: fr3 (the 7-DoF FR3-class arm, Cartesian impedance control) or ur5e
    (the 6-DoF UR5e-class arm, joint position control with IK at the bridge rate); the
    observation and actions are the same for every arm (docs/arms.md)."""
    env: str | None = None
    """A gymnasium env we did not write, `ID` or `module:ID` (the module imported first, so
    that it registers), instead of the twin's --task; `robot-rl envs --env ID` shows how it
    maps (docs/your_env.md)."""
    env_state: tuple[str, ...] | None = None
    """--env: the observation parts (key paths, e.g. `agent.qpos`) that form the state vector,
    in order (None: every numeric 0-D/1-D part; a goal env's observation and desired_goal)."""
    env_cameras: tuple[str, ...] | None = None
    """--env with --obs pixels: the image parts used as cameras, `path` or `name=path` (None:
    every (H, W, 3) uint8 part, named by its last key)."""
    success_key: str | None = None
    """--env: the info key read as success (None: is_success, else success)."""
    success_reward_at: float | None = None
    """--env without a success key: success is a reward at or above this."""
    env_kwargs: str | None = None
    """--env: keyword arguments of ``gym.make``, a JSON object (e.g. `{"env_name": "push-v3"}`
    for Meta-World's `Meta-World/MT1`)."""
    env_python: str | None = None
    """--env: run the env in this other Python interpreter (its venv needs numpy, gymnasium and
    the env, not robot_rl), for an env whose pins conflict with ours; None: in this process."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.action_delay_ms) and self.action_delay_ms >= 0):
            raise ValueError(f"action_delay_ms must be >= 0 ms, got {self.action_delay_ms}")
        if self.gripper_discretize and self.fixed_gripper() is not None:
            raise ValueError(
                f"--gripper-discretize needs a gripper the policy commands; with --task "
                f"{self.task} --gripper {self.gripper} the env holds it: drop --gripper-discretize"
            )
        if self.env is None and self.task in TASKS and not self.control_rotation:
            if TASKS[self.task].needs_rotation:
                raise ValueError(
                    f"--task {self.task} needs --control-rotation: it cannot be done without "
                    "turning the TCP (robot-rl envs describes the task)"
                )
        if self.obs == "pixels" and not self.cameras:
            raise ValueError("--obs pixels needs at least one camera in --cameras")
        if self.image_size < 16:
            raise ValueError(f"image_size {self.image_size} must be >= 16 pixels")
        if self.action_scale_m is not None and not 0.0 < self.action_scale_m <= 0.1:
            raise ValueError(
                f"action_scale_m {self.action_scale_m} must be in (0, 0.1] metres per step"
            )
        if self.env is not None:
            twin_only = {
                "--gripper-discretize": self.gripper_discretize,
                "--previous-action": self.previous_action,
                "--action-delay-ms": self.action_delay_ms > 0,
                "--action-scale-m": self.action_scale_m is not None,
                "--control-rotation": self.control_rotation,
                "--gripper": self.gripper != "task",
            }
            given = [flag for flag, on in twin_only.items() if on]
            if given:
                raise ValueError(f"{', '.join(given)}: the twin's settings; with --env drop them")
            parse_env_kwargs(self.env_kwargs)
        elif self.env_python is not None or self.env_kwargs is not None:
            raise ValueError("--env-python / --env-kwargs are an --env's: add --env ID")

    def fixed_gripper(self) -> float | None:
        """The gripper command the env holds (None: the policy commands the gripper)."""
        if self.gripper == "policy":
            return None
        task_choice = TASKS[self.task].fixed_gripper if self.task in TASKS else None
        if self.gripper == "fixed":
            return 1.0 if task_choice is None else task_choice
        return task_choice

    @property
    def name(self) -> str:
        """What this env is called in reports: the --env id, else the twin's task."""
        return self.env or self.task

    def foreign_setup(self):
        """The :class:`robot_rl.app.envs.foreign.ForeignSetup` of ``--env`` (None: the twin)."""
        if self.env is None:
            return None
        from robot_rl.app.envs.foreign import ForeignSetup
        from robot_rl.wrappers.foreign_env import ObsMapping

        mapping = ObsMapping(
            state=self.env_state,
            cameras=self.env_cameras,
            image_size=self.image_size,
            success_key=self.success_key,
            success_reward_at=self.success_reward_at,
        )
        return ForeignSetup(
            env=self.env,
            mapping=mapping,
            pixels=self.obs == "pixels",
            max_episode_steps=self.max_episode_steps,
            success_reward=self.task_reward == "sparse",
            python=self.env_python,
            make_kwargs=tuple(sorted(parse_env_kwargs(self.env_kwargs).items())),
        )

    def env_setup(self) -> EnvSetup:
        """The :class:`EnvSetup` of this env (FlattenState on; cameras only for pixels; the
        task's object state only for state; ``--env``: the foreign env instead)."""
        if self.env is not None:
            return EnvSetup(max_episode_steps=self.max_episode_steps, foreign=self.foreign_setup())
        check_task(self.task)
        return EnvSetup(
            task=self.task,
            cameras=tuple(self.cameras) if self.obs == "pixels" else (),
            image_size=self.image_size,
            max_episode_steps=self.max_episode_steps,
            control_rotation=self.control_rotation,
            action_scale_m=self.action_scale_m,
            action_delay_ms=self.action_delay_ms,
            wrappers=self.wrapper_config(),
            arm=self.arm,
        )

    def wrapper_config(self, success_reward: bool | None = None) -> WrapperConfig:
        """The wrappers that give this env its learner layout: FlattenState, the task's object
        state (state obs only), the held gripper, the previous action, gripper discretisation,
        and ``success_reward`` (None: on for ``task_reward == "sparse"``). With pixels the task
        need not be a twin task."""
        objects = TASKS[self.task].state_objects if self.obs == "state" else ()
        if success_reward is None:
            success_reward = self.task_reward == "sparse"
        return WrapperConfig(
            flatten_state=True,
            object_state=tuple(objects),
            fixed_gripper=self.fixed_gripper(),
            success_reward=success_reward,
            previous_action=self.previous_action,
            gripper_discretize=self.gripper_discretize,
        )

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def data_settings(self) -> dict:
        """The settings that shape stored data (all but the episode length and the action
        delay), with the task defaults resolved: the held gripper command (None: the policy's)
        and the action scale, so that "task" and the task's own value compare equal."""
        out = {
            k: v
            for k, v in self.to_json().items()
            if k not in ("max_episode_steps", "action_delay_ms", "gripper_discretize", "env_python")
        }
        if self.env is not None:  # the twin's task and settings do not shape this data
            for k in ("task", "arm", "gripper", "action_scale_m", "control_rotation"):
                out.pop(k, None)
            return out
        out["gripper"] = self.fixed_gripper() if self.task in TASKS else self.gripper
        out["action_scale_m"] = self.action_scale_m or (
            TASKS[self.task].action_scale_m if self.task in TASKS else None
        )
        return out

    @classmethod
    def from_json(cls, d: dict) -> LearnerEnvConfig:
        """Inverse of :meth:`to_json`. Datasets written before ``gripper`` and
        ``action_scale_m`` were settings had the policy command the gripper at 2 cm/step."""
        d = {"gripper": "policy", "action_scale_m": 0.02, **d}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def settings_difference(stored: dict | None, env: LearnerEnvConfig) -> str:
    """The data settings in which ``stored`` (a dataset's) and ``env`` differ, for messages."""
    try:
        have = LearnerEnvConfig.from_json(stored or {}).data_settings()
    except (TypeError, ValueError) as e:
        return f"the dataset's settings {stored} are not valid here: {e}"
    want = env.data_settings()
    diff = [
        f"{k}: {have.get(k)!r} in the data, {want[k]!r} here"
        for k in want
        if have.get(k) != want[k]
    ]
    return "; ".join(diff) or "none"


def same_data_settings(stored: dict | None, env: LearnerEnvConfig) -> bool:
    """Whether a dataset's stored env settings (None: unknown, accepted) match ``env``'s."""
    if stored is None:
        return True
    try:
        stored_cfg = LearnerEnvConfig.from_json(stored)
    except (TypeError, ValueError):
        return False  # unknown keys or invalid values: not the same settings
    return stored_cfg.data_settings() == env.data_settings()


def demo_settings_problem(env: LearnerEnvConfig):
    """For :func:`robot_rl.replay.demos.load_checked_demos`: what is wrong with a dataset's
    stored env settings for training with ``env`` (None: nothing)."""

    def problem(stored: dict | None) -> str | None:
        if same_data_settings(stored, env):
            return None
        return (
            "were collected with other env settings than training's "
            f"({settings_difference(stored, env)}); collect with the same --obs/--cameras/"
            "--image-size/--control-rotation/--task-reward/--previous-action or train with the "
            "demos' settings"
        )

    return problem


@dataclass(frozen=True)
class CollectConfig:
    """Record demonstrations into a zarr dataset."""

    env: Annotated[LearnerEnvConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=LearnerEnvConfig
    )
    """The env to record (must match training's)."""
    out: Path = Path("demos.zarr")
    """The zarr dataset to write."""
    policy: str = "scripted"
    """Who acts: scripted (the twin task's expert), random (uniform), zero, or module:function
    (a scripted policy for an --env: function(observation, info) -> action in the env's own
    units, on the env's own observation)."""
    episodes: int = 10
    """Number of episodes to write."""
    seed: int = 2_000_000
    """Attempt i resets with seed + i."""
    append: bool = False
    """Append to an existing dataset (same env settings) instead of refusing to overwrite it."""
    only_success: bool = True
    """Write only successful episodes (retrying up to 3 x episodes attempts)."""
    teleop: DeviceKind | None = None
    """--env: a person drives from this device, read here without ROS 2, instead of --policy
    (docs/your_env.md)."""
    teleop_events: Path | None = None
    """--env: replay this recorded teleop event file instead of a live device (on the env's
    step clock: the same episodes on any machine)."""
    teleop_axes: str | None = None
    """--env with --teleop: which device axis drives each action dimension, comma-separated
    (x, y, z, rx, ry, rz, gripper, each may be negated, or 0); default by action size: 2 x,y;
    3 x,y,z; 4 x,y,z,gripper; 6 x..rz; 7 x..rz,gripper."""
    teleop_hz: float = 10.0
    """--teleop: steps per second (a live device is paced at it; a replay's step clock)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        from robot_rl.app.envs.policies import check_policy_name

        check_policy_name(self.policy)
        if self.by_teleop:
            if self.policy != "scripted":
                raise ValueError(
                    f"--policy {self.policy} and a teleop device both choose the actions: drop one"
                )
            if self.env.env is None:
                raise ValueError(
                    "collect --teleop drives an env we did not write (--env ID); on the twin a "
                    "person records through ROS 2: robot-rl record --setup launch/sim.yaml"
                )
            if not self.teleop_hz > 0:
                raise ValueError(f"--teleop-hz must be > 0, got {self.teleop_hz}")
            if self.teleop_events is not None and not Path(self.teleop_events).is_file():
                raise ValueError(f"--teleop-events {self.teleop_events} is not a file")
        elif self.teleop_axes is not None:
            raise ValueError("--teleop-axes maps a teleop device: add --teleop or --teleop-events")

    @property
    def by_teleop(self) -> bool:
        """A person (a device, or a recorded one) drives."""
        return self.teleop is not None or self.teleop_events is not None


def run_collect(cfg: CollectConfig, progress: bool = True) -> dict:
    """Record ``cfg.episodes`` episodes into ``cfg.out``; return a JSON-able summary.

    Raises:
        FileExistsError: ``cfg.out`` exists and ``cfg.append`` is False.
        ValueError: appending to a dataset recorded with other env settings.
    """
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.policies import make_policy
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    out = Path(cfg.out)
    if out.exists() and not cfg.append:
        raise FileExistsError(
            f"{out} already exists; pass --append to add episodes to it, or choose another --out"
        )
    if cfg.by_teleop:
        return _collect_by_teleop(cfg, progress)
    env, backend = make_env_from_setup(cfg.env.env_setup())
    adapter = ObsAdapter(env.observation_space)
    amap = ActionMap(env.action_space)
    log = open_demo_log(cfg, adapter, amap, policy=cfg.policy)
    policy = make_policy(cfg.policy, env, backend)
    written, attempts, returns = 0, 0, []
    max_attempts = 3 * cfg.episodes if cfg.only_success else cfg.episodes
    try:
        while written < cfg.episodes and attempts < max_attempts:
            seed = cfg.seed + attempts
            attempts += 1
            steps, success, ret = _record_episode(env, policy, adapter, amap, seed)
            if cfg.only_success and not success:
                continue
            log.begin_episode("demo", policy_version=0, seed=seed)
            for s in steps:
                log.append(**s)
            log.end_episode(success=success, policy=cfg.policy)
            written += 1
            returns.append(ret)
            if progress:
                import sys

                print(
                    f"collect: episode {written}/{cfg.episodes} (seed {seed}, return "
                    f"{ret:.2f}, {len(steps)} steps)",
                    file=sys.stderr,
                )
        total_eps, total_steps = log.num_episodes, log.num_steps
    finally:
        log.close()
        env.close()
        backend.close()
    return {
        "out": str(out),
        "task": cfg.env.task if cfg.env.env is None else None,
        "env": cfg.env.env,
        "obs": cfg.env.obs,
        "policy": cfg.policy,
        "episodes_written": written,
        "attempts": attempts,
        "mean_return": float(np.mean(returns)) if returns else None,
        "dataset_episodes": int(total_eps),
        "dataset_steps": int(total_steps),
    }


def _collect_by_teleop(cfg: CollectConfig, progress: bool) -> dict:
    """``collect --env --teleop``: a person at a device drives (``collect_teleop``)."""
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect_teleop import record_by_teleop
    from robot_rl.app.envs.devices import open_device
    from robot_rl.core.teleop_axes import TeleopAxes
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    env, backend = make_env_from_setup(cfg.env.env_setup())
    device = log = None
    try:
        adapter = ObsAdapter(env.observation_space)
        amap = ActionMap(env.action_space)
        axes = TeleopAxes.parse(cfg.teleop_axes, amap.dim)
        extra = {"teleop_axes": axes.spec(), "control_hz": cfg.teleop_hz}
        log = open_demo_log(cfg, adapter, amap, policy="teleop", extra=extra)
        device = open_device(cfg.teleop, cfg.teleop_events, cfg.teleop_hz)
        summary = record_by_teleop(cfg, env, device, axes, adapter, amap, log, progress)
        total_eps, total_steps = log.num_episodes, log.num_steps
    finally:
        for c in (log, device, env, backend):
            if c is not None:
                c.close()
    return {
        "out": str(cfg.out),
        "task": None,
        "env": cfg.env.env,
        "obs": cfg.env.obs,
        "policy": "teleop",
        "teleop": device.teleop.kind,
        "teleop_axes": axes.spec(),
        **summary,
        "dataset_episodes": int(total_eps),
        "dataset_steps": int(total_steps),
    }


def open_demo_log(cfg: CollectConfig, adapter, amap, policy: str, extra: dict | None = None):
    """The demos store ``cfg.out``: created, or opened to append (``cfg.append``) when it was
    recorded with the same env settings.

    Raises:
        ValueError: appending to a dataset recorded with other env settings.
    """
    from robot_rl.replay import EpisodeLog

    out = Path(cfg.out)
    if out.exists():
        log = EpisodeLog.open(out, unfinished="drop", mode="a")
        stored = (getattr(log, "meta", None) or {}).get("env")
        if not same_data_settings(stored, cfg.env):
            log.close()
            raise ValueError(
                f"{out} was recorded with env settings {stored}, not {cfg.env.to_json()}; "
                "collect with the same settings or into another --out"
            )
        return log
    meta = {"kind": "demos", "env": cfg.env.to_json(), "policy": policy, **(extra or {})}
    return EpisodeLog.create(out, adapter.layout, amap.dim, meta)


def _record_episode(
    env, policy, adapter, amap, seed: int
) -> tuple[list[dict[str, Any]], bool, float]:
    """One episode as a list of ``EpisodeLog.append`` keyword dicts (policy-space actions)."""
    obs, info = env.reset(seed=seed)
    policy.reset(np.random.default_rng((seed, 1)))
    steps: list[dict[str, Any]] = []
    success, ret = False, 0.0
    o = adapter.to_learner(obs)
    while True:
        a_env = policy.act(obs, info)
        a = amap.to_policy(a_env)
        obs, reward, terminated, truncated, info = env.step(amap.to_env(a))
        stamps = obs.get(keys.STAMPS, {})
        stamp = float(np.asarray(stamps.get(keys.STAMP_STATE, 0.0)))
        o_next = adapter.to_learner(obs)
        steps.append(step_record(o, a, reward, terminated, truncated, False, stamp, o_next))
        o = o_next  # the next step's observation: mapped once
        ret += float(reward)
        success = success or bool(info.get(keys.INFO_SUCCESS, False))
        if terminated or truncated:
            return steps, success, ret
