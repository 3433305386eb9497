"""The composition root: build an env from a task name and configs.

Only :mod:`robot_rl.app` and ``robot_rl.cli`` import the concrete backends (``sim`` here,
``drivers`` in :mod:`robot_rl.app.nodes.ros_env`). Everything downstream sees the env through
gymnasium and robot_rl's Protocols.

Composition order (innermost first)::

    make_sim_backend(task) -> RobotEnv(robot, cameras, task, clock)
      -> ObjectState                                  (declared sim object state -> obs)
      -> GripperDiscretize -> RelativeFrame          (action / frame wrappers)
      -> FixedGripper -> PreviousAction               (the policy's previous action -> obs)
      -> ImageCropResize -> [LearnedReward]           (learned reward: see make_env)
      -> FlattenState -> TimeLimit                    (observation / episode wrappers)
      -> Intervention                                 (training with --human: outermost;
                                                       see with_sim_human)

Action wrappers sit next to the base env so that their inverses map a base-frame action (a
scripted expert's, later a human's) into the policy's action space in one pass.

Importing this module imports MuJoCo: set ``MUJOCO_GL`` first (``robot_rl.cli.main`` does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
import tyro

from robot_rl.core.config import EnvConfig
from robot_rl.core.protocols import Camera, Task
from robot_rl.core.safety import SafetyConfig
from robot_rl.core.specs import ArraySpec
from robot_rl.envs import RobotEnv
from sim.backend import TASKS, SimBackend, make_sim_backend, task_info
from sim.config import DEFAULT_ARM, RandomizationConfig, SimConfig
from sim.human import HumanConfig, SimHumanTeleop, SimulatedHuman
from sim.twin_arms import TwinArm

RewardHook = Callable[[gym.Env, Mapping[str, Camera], Task], gym.Env]
"""``(env, out-of-band cameras, the twin's task) -> env wrapped in a learned reward`` (see
:func:`make_env`; the task serves ``--reward sim``, the twin's truth)."""


class UnknownTaskError(ValueError):
    """The task name is not in the registry; the message lists the known tasks."""


@dataclass(frozen=True)
class WrapperConfig:
    """Which wrappers to stack on the base env (all off: the raw :class:`RobotEnv`)."""

    relative_frame: bool = False
    """Observe the TCP pose relative to the episode start and act in the TCP frame."""
    gripper_discretize: bool = False
    """Turn the gripper action into close (> threshold) / open (< -threshold) / keep."""
    gripper_threshold: float = 0.5
    """Dead band of the discretised gripper action, in (0, 1)."""
    fixed_gripper: float | None = None
    """Hold the gripper at this command in [-1, 1] (+1 closed) and drop the gripper dimension
    from the policy's actions (FixedGripper); None: the policy commands the gripper."""
    crop: tuple[int, int, int, int] | None = None
    """Crop every camera image to (top, left, height, width) pixels before resizing."""
    resize: tuple[int, int] | None = None
    """Resize every camera image to (height, width) pixels (INTER_AREA)."""
    flatten_state: bool = False
    """Concatenate the named state parts into one float32 vector (obs["state"] is a Box)."""
    time_limit_steps: int | None = None
    """Truncate episodes after this many steps (None: only the env's max_episode_steps)."""
    object_state: tuple[str, ...] = ()
    """Entries of the task's privileged sim state to observe as state parts (ObjectState),
    e.g. ("cube_pos", "tcp_to_cube"); the task's privileged_spec lists what exists."""
    success_reward: bool = False
    """Replace the task's shaped reward with the binary success reward (SuccessReward: 1 on
    a success step, else 0), the reward a real robot has."""
    previous_action: bool = False
    """Observe the previous step's action as the state part ``prev_action`` (PreviousAction):
    the target the arm still tracks while the next action is on its way."""

    def __post_init__(self) -> None:
        if not 0.0 < self.gripper_threshold < 1.0:
            raise ValueError(f"gripper_threshold {self.gripper_threshold} must be in (0, 1)")
        if self.fixed_gripper is not None:
            if not -1.0 <= self.fixed_gripper <= 1.0:
                raise ValueError(f"fixed_gripper {self.fixed_gripper} must be in [-1, 1] or None")
            if self.gripper_discretize:
                raise ValueError(
                    "fixed_gripper and gripper_discretize exclude each other: a fixed gripper "
                    "has no action dimension to discretise"
                )
        if self.crop is not None and (
            min(self.crop[:2]) < 0 or min(self.crop[2:]) < 1 or len(self.crop) != 4
        ):
            raise ValueError(
                f"crop {self.crop} must be (top >= 0, left >= 0, height >= 1, width >= 1)"
            )
        if self.resize is not None and min(self.resize) < 1:
            raise ValueError(f"resize {self.resize} must be (height >= 1, width >= 1)")
        if self.time_limit_steps is not None and self.time_limit_steps < 1:
            raise ValueError(f"time_limit_steps must be >= 1 or None, got {self.time_limit_steps}")


@dataclass(frozen=True)
class EnvSetup:
    """Everything needed to build one twin env from the command line."""

    task: str = "pick_cube"
    """Task name; ``robot-rl envs`` lists them."""
    cameras: tuple[str, ...] = ()
    """Cameras in the observation (subset of front, wrist); empty for state-only."""
    image_size: int = 128
    """Rendered camera images are image_size x image_size pixels."""
    control_hz: float = 10.0
    """Control rate: one env step per control period."""
    sim_hz: float = 500.0
    """Physics and impedance-controller rate; must be a whole multiple of control_hz."""
    max_episode_steps: int | None = None
    """Episode step limit (None: the task's default)."""
    control_rotation: bool = True
    """7-dim action (with rotation) or 4-dim [dx, dy, dz, gripper] (fixed orientation)."""
    action_scale_m: float | None = None
    """TCP translation per step for an action of 1.0, metres (None: the task's default)."""
    wrappers: WrapperConfig = field(default_factory=WrapperConfig)
    """Wrappers stacked on the base env."""
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    """Domain randomisation of the twin at every reset (object pose on; friction, light,
    colours and camera pose off by default)."""
    action_delay_ms: float = 0.0
    """Each action takes effect this long after it was sent (below one control period; the
    previous target holds meanwhile), a real arm's latency on the direct twin. 0: at once."""
    arm: str = DEFAULT_ARM
    """The twin's arm kind: fr3 (7-DoF, impedance control), ur5e (6-DoF, joint position
    control with IK at the bridge rate) or so101 (5-DoF hobby servos and a jaw; the tasks at
    0.4 of their size); docs/arms.md."""
    foreign: Annotated[Any, tyro.conf.Suppress] = None
    """A gymnasium env we did not write (:class:`robot_rl.app.envs.foreign.ForeignSetup`)
    instead of the twin's task: the twin's settings above do not apply."""

    def __post_init__(self) -> None:
        if self.image_size < 16:
            raise ValueError(f"image_size {self.image_size} must be >= 16 pixels")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ValueError(
                f"max_episode_steps must be >= 1 or None (task default), got "
                f"{self.max_episode_steps}"
            )


def task_names() -> tuple[str, ...]:
    """Names of the registered tasks, sorted."""
    return tuple(sorted(TASKS))


def check_task(task: str) -> None:
    """Raise :class:`UnknownTaskError` (listing the known tasks) if ``task`` is unknown."""
    if task not in TASKS:
        raise UnknownTaskError(
            f"unknown task {task!r}; known tasks: {', '.join(task_names())} "
            "(run `robot-rl envs` for descriptions)"
        )


def configs_for(setup: EnvSetup, extra_cameras: Sequence[str] = ()) -> tuple[EnvConfig, SimConfig]:
    """The :class:`EnvConfig` and :class:`SimConfig` described by ``setup``.

    Args:
        setup: CLI-level description of the env.
        extra_cameras: Cameras to build in the twin in addition to ``setup.cameras`` (rendered
            only on demand, e.g. for a video; they do not enter the observation).
    """
    check_task(setup.task)
    info = task_info(setup.task, setup.arm)
    steps = setup.max_episode_steps or info.max_episode_steps
    env_cfg = EnvConfig(
        control_hz=setup.control_hz,
        max_episode_steps=steps,
        control_rotation=setup.control_rotation,
        action_scale_m=setup.action_scale_m or info.action_scale_m,
    )
    cams = tuple(setup.cameras) + tuple(c for c in extra_cameras if c not in setup.cameras)
    sim_cfg = SimConfig(
        sim_hz=setup.sim_hz,
        cameras=cams,
        image_height=setup.image_size,
        image_width=setup.image_size,
        randomization=setup.randomization,
        action_delay_s=setup.action_delay_ms / 1000.0,
        arm=setup.arm,
    )
    return env_cfg, sim_cfg


def twin_joint_ik(arm: TwinArm) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The differential IK a joint-controlled twin arm runs at its bridge rate: the generic
    ROS 2 backend's (:func:`drivers.ik.joint_goal_solver`) on the arm's kinematics file, so
    that the twin exercises the IK a real arm in joint mode runs."""
    from drivers.ik import joint_goal_solver

    return joint_goal_solver(arm.kinematics, arm.arm, arm.bridge_hz)


def make_env(
    task: str,
    env_cfg: EnvConfig,
    sim_cfg: SimConfig,
    wrappers: WrapperConfig | None = None,
    safety: SafetyConfig | None = None,
    obs_cameras: Sequence[str] | None = None,
    reward: RewardHook | None = None,
) -> tuple[gym.Env, SimBackend]:
    """Compose the twin backend, :class:`RobotEnv` and the wrappers.

    Args:
        task: Registered task name (see :data:`sim.backend.TASKS`).
        env_cfg: Env settings (control rate, action layout, episode length).
        sim_cfg: Twin settings; every camera in ``sim_cfg.cameras`` is built.
        wrappers: Wrappers to stack (None: none).
        safety: Safety limits overriding the task default (None: the task default).
        obs_cameras: Cameras whose frames enter the observation (None: all of
            ``sim_cfg.cameras``). The others stay in ``backend.cameras`` for out-of-band
            rendering (videos); the caller connects and reads them.
        reward: Wraps the env in a learned reward (:class:`robot_rl.wrappers.LearnedReward`)
            inside the state-flattening wrappers, so that its detector's gates read named state
            parts; called with the env so far, the out-of-band cameras (connected here) and
            the twin's task.

    Returns:
        ``(env, backend)``: the wrapped env and the backend it drives.

    Raises:
        UnknownTaskError: ``task`` is not registered.
    """
    check_task(task)
    backend = make_sim_backend(task, sim_cfg, env_cfg, safety=safety, joint_ik=twin_joint_ik)
    names = tuple(sim_cfg.cameras if obs_cameras is None else obs_cameras)
    unknown = [n for n in names if n not in sim_cfg.cameras]
    if unknown:
        raise ValueError(f"obs_cameras {unknown} are not built; add them to sim_cfg.cameras")
    cameras = [c for c in backend.cameras if c.name in names]
    env: gym.Env = RobotEnv(backend.robot, cameras, backend.task, backend.clock, env_cfg)
    try:
        out_of_band = {c.name: c for c in backend.cameras if c.name not in names}
        if reward is not None:
            for cam in out_of_band.values():
                cam.connect()
        env = apply_wrappers(
            env,
            wrappers or WrapperConfig(),
            has_images=bool(cameras),
            object_specs=backend.task.privileged_spec,
            reward=None if reward is None else (lambda e: reward(e, out_of_band, backend.task)),
        )
    except BaseException:
        backend.close()
        raise
    return env, backend


def make_env_from_setup(
    setup: EnvSetup,
    extra_cameras: Sequence[str] = (),
    safety: SafetyConfig | None = None,
    reward: RewardHook | None = None,
) -> tuple[gym.Env, SimBackend]:
    """:func:`make_env` for a CLI-level :class:`EnvSetup` (see :func:`configs_for`).

    With ``reward`` the twin no longer ends episodes on its own success
    (``terminate_on_success=False``): the learned reward's detector does.
    """
    if setup.foreign is not None:
        from robot_rl.app.envs.foreign import make_foreign_env

        if reward is not None or extra_cameras:
            raise ValueError(
                "a learned reward and out-of-band cameras (videos) need the twin; with --env the "
                "env's own success and reward are used"
            )
        return make_foreign_env(setup.foreign)
    env_cfg, sim_cfg = configs_for(setup, extra_cameras)
    if reward is not None:
        env_cfg = dataclasses.replace(env_cfg, terminate_on_success=False)
    return make_env(
        setup.task,
        env_cfg,
        sim_cfg,
        setup.wrappers,
        safety=safety,
        obs_cameras=setup.cameras,
        reward=reward,
    )


def apply_wrappers(
    env: gym.Env,
    cfg: WrapperConfig,
    has_images: bool,
    object_specs: Mapping[str, ArraySpec] | None = None,
    reward: Callable[[gym.Env], gym.Env] | None = None,
) -> gym.Env:
    """Stack the wrappers selected in ``cfg`` on ``env`` (see the module docstring's order).

    ``object_specs``: the specs of what ``info["privileged"]`` holds (the twin task's
    ``privileged_spec``), from which ``cfg.object_state`` picks. ``reward``: wraps the env in
    its learned reward after the image wrappers and before FlattenState.
    """
    if cfg == WrapperConfig():
        return env if reward is None else reward(env)
    try:
        from robot_rl import wrappers as w  # lazy: the no-wrapper path needs no OpenCV
    except ImportError as e:
        raise ValueError(
            f"the wrappers need an optional dependency ({e}); "
            "install it with: pip install opencv-python-headless"
        ) from e

    if cfg.success_reward:
        if reward is not None:
            raise ValueError(
                "the sparse task reward and a learned reward (--reward) both replace the task's "
                "reward: choose one"
            )
        env = w.SuccessReward(env)
    if cfg.object_state:
        specs = dict(object_specs or {})
        unknown = [n for n in cfg.object_state if n not in specs]
        if unknown:
            raise ValueError(
                f"object_state {unknown} is not available; this task provides "
                f"{sorted(specs) or 'no object state'}"
            )
        env = w.ObjectState(env, {n: specs[n] for n in cfg.object_state})
    if cfg.gripper_discretize:
        env = w.GripperDiscretize(env, threshold=cfg.gripper_threshold)
    if cfg.relative_frame:
        env = w.RelativeFrame(env)
    if cfg.fixed_gripper is not None:  # outside RelativeFrame, which expects the gripper last
        env = w.FixedGripper(env, cfg.fixed_gripper)
    if cfg.previous_action:  # outside the action wrappers: the policy's own action
        env = w.PreviousAction(env)
    if (cfg.crop is not None or cfg.resize is not None) and has_images:
        env = w.ImageCropResize(env, crop=cfg.crop, size=cfg.resize)
    if reward is not None:
        env = reward(env)
    if cfg.flatten_state:
        env = w.FlattenState(env)
    if cfg.time_limit_steps is not None:
        env = w.TimeLimit(env, cfg.time_limit_steps)
    return env


def with_sim_human(
    env: gym.Env,
    backend: SimBackend,
    human: HumanConfig,
    cfg: Any = None,
    seed: int = 0,
) -> gym.Env:
    """``env`` with a simulated human able to take over: the task's scripted expert as a
    :class:`sim.human.SimulatedHuman` behind a :class:`sim.human.SimHumanTeleop`, read by an
    outermost :class:`robot_rl.wrappers.Intervention` (returned; it is also the trainer's
    ``intervention``).

    Args:
        env: The wrapped twin env from :func:`make_env`.
        backend: Its backend (provides the expert).
        human: When the human takes over.
        cfg: ``robot_rl.wrappers.InterventionConfig`` (None: defaults).
        seed: Seeds the human's per-episode randomness (with each reset seed).
    """
    from robot_rl.wrappers import Intervention

    teleop = SimHumanTeleop(SimulatedHuman(backend.make_expert(), human), seed=seed)
    return Intervention(env, teleop, cfg)


def base_to_policy_action(env: gym.Env) -> Callable[[np.ndarray], np.ndarray]:
    """A function mapping a base-env action (an expert's, a human's) into ``env``'s action space.

    Applies the ``inverse_action`` of every action wrapper in ``env``'s stack, innermost first,
    at the wrappers' current state (e.g. :class:`RelativeFrame` uses the last observed TCP
    rotation), so call it right before ``env.step``. Identity without action wrappers. The
    result is float32 and may leave [-1, 1] (see :class:`RelativeFrame`); stepping it through
    ``env`` reproduces the base action up to the base env's clipping.
    """
    inverses = []
    e = env
    while isinstance(e, gym.Wrapper):
        if callable(getattr(type(e), "inverse_action", None)):
            inverses.append(e.inverse_action)
        e = e.env
    inverses.reverse()  # innermost first

    def to_policy(a_base: np.ndarray) -> np.ndarray:
        a = np.asarray(a_base, dtype=np.float64)
        for inv in inverses:
            a = inv(a)
        return np.asarray(a, dtype=np.float32)

    return to_policy
