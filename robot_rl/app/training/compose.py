"""The one builder of a training run: agent, learned reward, demos and envs from a
:class:`~robot_rl.app.training.train_config.TrainCmdConfig`.

Every workflow that learns or acts builds through here, so a setting means the same thing in
each of them:

- ``robot-rl train`` (direct twin or ``--setup`` over ROS 2): :func:`build_agent`,
  :func:`build_envs` (which calls :func:`build_reward`), :func:`build_demos`;
- ``robot-rl learner``: :func:`build_agent`, :func:`build_demos` (through ``as_train``);
- ``robot-rl actor``: :func:`build_envs` (its agent's settings come from the learner);
- ``robot-rl eval``: :func:`sac_config` and :func:`agent_factory` for the stored settings.

The envs themselves (twin, wrappers, simulated human) come from :mod:`robot_rl.app.envs.build`; over
ROS 2 from :func:`robot_rl.app.training.train_ros.build_ros_training`.

From Python::

    from robot_rl.app.training.compose import build_agent, build_envs
    from robot_rl.app.training.train_config import TrainCmdConfig

    cmd = TrainCmdConfig(run=Path("runs/x"))
    agent = build_agent(cmd)  # agent.make(layout, action_dim) -> SACAgent
    envs = build_envs(cmd, agent.features)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policies.config import EncoderConfig, SACConfig
from robot_rl.app.training.train_config import TrainCmdConfig


def sac_config(cmd: TrainCmdConfig) -> SACConfig:
    """The agent's SACConfig: ``cmd.sac`` with --utd and the encoder choice applied, and
    ``critic_arch="auto"`` resolved for ``cmd.device`` (the run stores the resolved value)."""
    sac = cmd.sac.on_device(cmd.device)
    if cmd.utd is not None:
        sac = dataclasses.replace(sac, utd=cmd.utd)
    if cmd.env.obs == "pixels":
        enc: EncoderConfig = sac.encoder
        if cmd.encoder == "efficientnet":
            from policies.features import installed_weights_path

            weights = cmd.efficientnet_weights or installed_weights_path()
            enc = dataclasses.replace(enc, kind="efficientnet", weights_path=str(weights))
        else:
            enc = dataclasses.replace(enc, kind="conv")
        sac = dataclasses.replace(sac, encoder=enc)
    return sac


def agent_factory(sac: SACConfig, seed: int, device: str, features: Any = None):
    """``(layout, action_dim) -> SACAgent`` for :class:`robot_rl.learner.loop.Trainer`
    (``features``: the process's frozen image backbone,
    :func:`policies.features.frame_features_for`)."""

    def make(layout, action_dim: int):
        from policies.sac import SACAgent

        return SACAgent(layout, action_dim, sac, seed=seed, device=device, frame_features=features)

    return make


@dataclass(frozen=True)
class AgentParts:
    """A run's agent, as :func:`build_agent` makes it.

    Attributes:
        sac: ``cmd.sac`` with --utd and --encoder applied (what the run stores).
        features: The frozen image backbone (EfficientNet-Lite0 for ``--obs pixels``), or None.
            One per process: the agent, the demo loader and an in-process classifier share it.
        make: ``(layout, action_dim) -> SACAgent``.
    """

    sac: SACConfig
    features: Any
    make: Callable[[Any, int], Any]


def build_agent(cmd: TrainCmdConfig) -> AgentParts:
    """The agent of ``cmd`` (train, and the learner through ``as_train``)."""
    from policies.features import frame_features_for

    sac = sac_config(cmd)
    features = frame_features_for(sac.encoder, cmd.env.obs, cmd.device)
    return AgentParts(sac, features, agent_factory(sac, cmd.seed, cmd.device, features))


@dataclass(frozen=True)
class RewardParts:
    """The learned reward of ``--reward``, as :func:`build_reward` makes it.

    Attributes:
        settings: The ``--reward-*`` settings (``LearnedRewardSettings``), or None: the task's
            own reward.
        cameras: Cameras the classifier reads (built beside the observation's); () for the
            twin's truth.
        image_size: The classifier's frame size (height, width), or None (the twin's truth).
        hook: ``(env, cameras, task) -> LearnedReward(env)`` for the env builders, or None.
        verdicts: The person's success / failure teleop buttons (``--setup --human teleop``),
            attached once the teleop session exists; else None.
        camera_crops: The crop boxes the classifier's frames were labelled through (its
            card's), or None: not recorded.
    """

    settings: Any = None
    cameras: tuple[str, ...] = ()
    image_size: tuple[int, int] | None = None
    hook: Any = None
    verdicts: Any = None
    camera_crops: Any = None


def build_reward(cmd: TrainCmdConfig, features: Any = None) -> RewardParts:
    """The learned reward of ``cmd`` (``features``: the agent's backbone, which an in-process
    EfficientNet-Lite0 classifier shares: one backbone pass per frame for both).

    Raises:
        FileNotFoundError, ValueError: the classifier directory or its card is missing or bad.
    """
    settings = cmd.reward_settings()
    if settings is None:
        return RewardParts()
    from robot_rl.app.training.reward_env import (
        TeleopVerdicts,
        is_sim_truth,
        read_reward_card,
        reward_cameras,
        reward_hook,
    )

    card = None if is_sim_truth(settings) else read_reward_card(settings)  # read once
    size = None if card is None else tuple(card.image_size)
    verdicts = TeleopVerdicts() if cmd.setup is not None and cmd.human == "teleop" else None
    hook = reward_hook(settings, cmd.run, verdicts, features=features, card=card)
    crops = None if card is None else card.camera_crops
    return RewardParts(settings, reward_cameras(settings, card), size, hook, verdicts, crops)


def twin_setup(cmd: TrainCmdConfig, reward: RewardParts) -> Any:
    """The direct twin's :class:`~robot_rl.app.envs.build.EnvSetup` for ``cmd``, its cameras at the
    classifier's image size.

    Raises:
        ValueError: the classifier's frames are not square, or (``--obs pixels``) not the
            policy's ``--image-size``.
    """
    setup = cmd.env.env_setup()
    if reward.image_size is None:
        return setup
    size = reward.image_size
    if size[0] != size[1]:
        raise ValueError(f"--reward {cmd.reward} was trained on {size} images; need square ones")
    if cmd.env.obs == "pixels" and setup.image_size != size[0]:
        raise ValueError(
            f"--reward {cmd.reward} reads {size[0]}x{size[0]} frames but --image-size is "
            f"{setup.image_size}: train the classifier at the policy's image size"
        )
    return dataclasses.replace(setup, image_size=size[0])


@dataclass
class TrainEnvs:
    """The envs of a training run, as :func:`build_envs` composes them.

    Attributes:
        env: Training env (intervention wrapper outermost with a human).
        eval_env: Evaluation env (the direct twin's own instance, or behind ROS 2 the training
            env's robot without the human).
        intervention: The intervention wrapper, or None.
        late_rewards: The learned-reward wrapper (``--reward``), or None.
        closers: Things to ``close()`` when done.
        ros: The ROS 2 training graph (``--setup``), or None.
    """

    env: Any
    eval_env: Any
    intervention: Any
    late_rewards: Any
    closers: list[Any]
    ros: Any = None

    def close(self) -> None:
        for c in self.closers:
            c.close()


def build_envs(cmd: TrainCmdConfig, features: Any = None) -> TrainEnvs:
    """The training and evaluation envs of ``cmd`` (direct twin or ``--setup``; human and
    learned reward applied). Shared by ``train`` and ``actor``. ``features``: the policy's
    frozen backbone, shared with an in-process learned reward's classifier."""
    from robot_rl.app.envs.build import make_env_from_setup, with_sim_human

    reward = build_reward(cmd, features)
    ros = None
    if cmd.setup is not None:
        from robot_rl.app.training.train_ros import build_ros_training

        ros = build_ros_training(cmd, reward)
        env, eval_env, closers = ros.env, ros.eval_env, [ros]
    else:
        setup = twin_setup(cmd, reward)
        env, backend = make_env_from_setup(setup, reward.cameras, reward=reward.hook)
        eval_env, eval_backend = make_env_from_setup(setup)
        closers = [env, eval_env, backend, eval_backend]
    try:
        late_rewards = find_learned_reward(env) if reward.settings is not None else None
        intervention = None if ros is None else ros.intervention
        if cmd.env.env is not None and cmd.human != "none":
            env = intervention = foreign_human(cmd, env, closers)
        elif cmd.human == "sim" and ros is None:
            from robot_rl.wrappers import InterventionConfig

            env = intervention = with_sim_human(
                env,
                backend,
                cmd.human_config(),
                InterventionConfig(hold_steps=cmd.intervention_hold_steps),
                seed=cmd.seed,
            )
    except BaseException:
        for c in closers:
            c.close()
        raise
    return TrainEnvs(env, eval_env, intervention, late_rewards, closers, ros)


def foreign_human(cmd: TrainCmdConfig, env: Any, closers: list) -> Any:
    """``env`` (an ``--env``) with its human: a simulated one driving with ``--human-policy``,
    or a person at ``--teleop`` / ``--teleop-events`` read in this process (the device joins
    ``closers``); the outermost Intervention wrapper is returned."""
    from robot_rl.app.envs.foreign import with_device, with_foreign_human
    from robot_rl.wrappers import InterventionConfig

    icfg = InterventionConfig(hold_steps=cmd.intervention_hold_steps)
    if cmd.human == "sim":
        assert cmd.human_policy is not None  # TrainCmdConfig checked it
        return with_foreign_human(
            env, cmd.human_policy, cmd.human_config(), cmd.teleop_axes, icfg, seed=cmd.seed
        )
    from robot_rl.app.envs.devices import open_device

    device = open_device(cmd.teleop, cmd.teleop_events, cmd.teleop_hz)
    closers.append(device)
    return with_device(env, device, cmd.teleop_axes, icfg)


def find_learned_reward(env: Any) -> Any:
    """The LearnedReward wrapper inside ``env``'s wrapper stack."""
    from robot_rl.wrappers import LearnedReward

    e = env
    while not isinstance(e, LearnedReward):
        if not hasattr(e, "env"):
            raise RuntimeError("--reward: no LearnedReward wrapper in the training env")
        e = e.env
    return e


def build_demos(
    path: Path | None,
    layout: Any,
    action_dim: int,
    check: Any,
    features: Any = None,
    learned_reward: bool = False,
) -> Any:
    """The demo buffer at ``path`` (None: no demos), checked against the run's layout, action
    size and ``check`` (:func:`robot_rl.app.envs.collect.demo_settings_problem`, or None), its
    frames
    encoded with ``features``; with a learned reward its rewards relabelled with the
    classifier's binary cost (0 on success, else -1)."""
    if path is None:
        return None
    from robot_rl.replay.demos import load_checked_demos

    demos = load_checked_demos(path, layout, action_dim, check, features=features)
    if learned_reward:
        from robot_rl.app.training.reward_env import binary_cost

        demos.relabel_rewards(binary_cost)
    return demos
