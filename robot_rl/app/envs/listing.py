"""``robot-rl envs``: list the registered tasks with their observation and action specs; with
``--env ID``, how a gymnasium env we did not write maps to the learner
(:mod:`robot_rl.app.envs.foreign`).

Each task's env is built (not reset) with the given options (defaults: state-only, 7-dim
action) so the specs printed are exactly what a policy sees.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from robot_rl.core.specs import ArraySpec, describe, from_space
from sim.config import DEFAULT_ARM


@dataclass(frozen=True)
class EnvsConfig:
    """List tasks and their observation / action specs."""

    cameras: tuple[str, ...] = ()
    """Cameras in the observation (subset of front, wrist); empty for state-only."""
    image_size: int = 128
    """Camera images are image_size x image_size pixels."""
    control_rotation: bool = True
    """7-dim action with rotation; --no-control-rotation for the 4-dim [dx, dy, dz, gripper]."""
    arm: str = DEFAULT_ARM
    """The twin's arm kind (fr3, ur5e, so101): the tasks it does, with their safety box and
    action scale in its size (docs/arms.md)."""
    env: str | None = None
    """A gymnasium env we did not write, ``ID`` or ``module:ID`` (the module imported first, so
    that it registers): print how its observation, actions and success map to the learner's
    (and what is left out, with why) instead of the twin's tasks."""
    env_state: tuple[str, ...] | None = None
    """--env: the observation parts (key paths, e.g. `agent.qpos`) that form the state vector,
    in order (None: every numeric 0-D/1-D part; a goal env's observation and desired_goal)."""
    env_cameras: tuple[str, ...] | None = None
    """--env: the image parts used as cameras, `path` or `name=path` (None: every (H, W, 3)
    uint8 part, named by its last key)."""
    success_key: str | None = None
    """--env: the info key read as success (None: is_success, else success)."""
    success_reward_at: float | None = None
    """--env without a success key: success is a reward at or above this."""
    env_kwargs: str | None = None
    """--env: keyword arguments of ``gym.make``, a JSON object."""
    env_python: str | None = None
    """--env: make the env in this other Python interpreter (its venv needs numpy, gymnasium and
    the env, not robot_rl), for an env whose pins conflict with ours."""
    json: bool = False
    """Print exactly one JSON object on stdout."""

    def foreign_setup(self):
        """The :class:`robot_rl.app.envs.foreign.ForeignSetup` of ``--env`` (cameras shown)."""
        from robot_rl.app.envs.collect import LearnerEnvConfig

        return LearnerEnvConfig(
            env=self.env,
            obs="pixels",
            image_size=self.image_size,
            env_state=self.env_state,
            env_cameras=self.env_cameras,
            success_key=self.success_key,
            success_reward_at=self.success_reward_at,
            env_python=self.env_python,
            env_kwargs=self.env_kwargs,
        ).foreign_setup()


REWARDS = {
    "shaped": (
        "privileged: a dense cost in [-1, 0) computed from sim state (distances, heights) that a "
        "real robot does not have; 0 on success, -100 on failure where the task can fail (the "
        "default, --task-reward "
        "shaped)"
    ),
    "sparse": (
        "1 on a success step, else 0 (the task's success test: what a success classifier or a "
        "person's button gives on a robot; --task-reward sparse)"
    ),
}
"""The rewards a twin task offers (``robot-rl train --task-reward``)."""


def spec_to_json(spec) -> dict:
    """A spec tree as plain JSON (shape, dtype, low, high per array)."""
    if isinstance(spec, ArraySpec):
        return {"shape": list(spec.shape), "dtype": spec.dtype, "low": spec.low, "high": spec.high}
    return {k: spec_to_json(v) for k, v in spec.items()}


def list_envs(cfg: EnvsConfig) -> dict:
    """``{"tasks": [...]}``: per task its description, episode limit, default safety limits,
    observation / action / privileged specs."""
    from robot_rl.app.envs.build import EnvSetup, make_env_from_setup, task_names
    from sim.backend import ARM_TASKS, task_info
    from sim.twin_arms import TWIN_ARMS

    if cfg.env is not None:
        from robot_rl.app.envs.foreign import describe_foreign_env

        return describe_foreign_env(cfg.foreign_setup())

    if cfg.arm not in TWIN_ARMS:
        raise ValueError(f"--arm {cfg.arm!r}: the twin has {sorted(TWIN_ARMS)}")
    tasks = []
    for name in ARM_TASKS.get(cfg.arm, task_names()):
        setup = EnvSetup(
            task=name,
            cameras=cfg.cameras,
            image_size=cfg.image_size,
            control_rotation=cfg.control_rotation,
            arm=cfg.arm,
        )
        env, backend = make_env_from_setup(setup)
        try:
            info = task_info(name, cfg.arm)
            obs_spec = from_space(env.observation_space)
            act_spec = from_space(env.action_space)
            tasks.append(
                {
                    "name": name,
                    "description": info.description,
                    "max_episode_steps": info.max_episode_steps,
                    "default_safety": dataclasses.asdict(info.default_safety),
                    "observation_spec": spec_to_json(obs_spec),
                    "action_spec": spec_to_json(act_spec),
                    "action_layout": (
                        "[dx, dy, dz, rx, ry, rz, gripper]"
                        if cfg.control_rotation
                        else "[dx, dy, dz, gripper]"
                    ),
                    "privileged_spec": spec_to_json(dict(backend.task.privileged_spec)),
                    "state_objects": list(info.state_objects),
                    "rewards": dict(REWARDS),
                    "action_scale_m": info.action_scale_m,
                    "learner_fixed_gripper": info.fixed_gripper,
                    "observation": describe(obs_spec),
                    "action": describe(act_spec),
                }
            )
        finally:
            env.close()
            backend.close()
    return {"arm": cfg.arm, "tasks": tasks}
