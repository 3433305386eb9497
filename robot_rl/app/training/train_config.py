"""The settings of a training run (``robot-rl train``, and through ``as_train`` the learner's and
the actor's): :class:`TrainCmdConfig`, the agent :data:`TRAIN_SAC` chosen in stage 9, and the
JSON round trip a run directory's ``config.json`` stores them with.

Plain frozen dataclasses: build one in Python (``TrainCmdConfig(run=Path("runs/x"))``) or let
the CLI parse it; the ``tyro.conf`` markers are annotations only. What is built from one lives
in :mod:`robot_rl.app.training.compose`.
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

from policies.config import SACConfig
from robot_rl.app.envs.collect import ACTION_DELAY_OVER_ROS, LearnerEnvConfig
from robot_rl.app.envs.devices import DeviceKind
from robot_rl.learner.config import DEFAULT_RLIF_PENALTY, InterventionMode, TrainConfig
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
    critic_arch="auto",
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
  pay at 10 Hz (``--sac.num-critics 10`` on a GPU learner);
- SimBa's residual critic (2 blocks, 4x) on an accelerator, the MLP critic on the CPU
  (``critic_arch="auto"``, resolved from ``--device``; the run stores which). SimBa was better
  on Meta-World pick-place with fresh layouts on 3 of 3 seeds (best 0.97-1.0, final 0.83-0.97,
  where the MLP critic has 0.8-0.9 and 0.6-0.83: it mends most of the MLP's fall after success)
  and on push, and as good on the twin targets (pick_cube 90% at 4k, 8k, 4k against 6k, 8k,
  4k; peg_insert + human 6k, 6k, 4k against 6k, 4k, 6k); but on a CPU a cached-feature pixel
  update costs ~2.4x (7.8 vs 19 per second on a core) and a state update ~6.4x, below the 10
  updates/s a 10 Hz robot needs on the 2-core robot learner. ``--sac.critic-arch mlp`` or
  ``residual`` chooses one everywhere."""


@dataclass(frozen=True, kw_only=True)
class SimHumanFlags:
    """The simulated human's flags (``--human-*``, for ``--human sim``), shared by ``train``
    and ``actor`` (over ROS 2 they become ``sim.human_node``'s arguments)."""

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
    human_reaction_steps: int = _HUMAN.reaction_steps
    """--human sim: a takeover starts this many steps after the stall was seen (a person's
    reaction time; 2-3 at 10 Hz)."""
    human_action_noise: float = _HUMAN.action_noise
    """--human sim: Gaussian noise (std, action units) on the driven motion axes."""
    human_attention_share: float = _HUMAN.attention_share
    """--human sim: the attention budget, the most of the robot's steps the person drives over
    the run (1.0: no budget)."""
    human_trust_patience_steps: int = _HUMAN.trust_patience_steps
    """--human sim: earned autonomy, the extra patience (steps) a policy gets once it succeeded
    unaided in all of the last --human-trust-episodes episodes (scaled by the share; 0: off)."""
    human_trust_episodes: int = _HUMAN.trust_episodes
    """--human sim: the recent episodes that earn trust (--human-trust-patience-steps)."""
    human_policy: str | None = None
    """--env with --human sim: the scripted policy the simulated human drives with
    (module:function, as `collect --policy`: function(observation, info) -> action in the env's
    own units), through a device reading mapped by --teleop-axes."""
    teleop: DeviceKind | None = None
    """--env with --human teleop: the person's device (keyboard, gamepad, spacemouse), read in
    this process without ROS 2 (docs/your_env.md)."""
    teleop_events: Path | None = None
    """--env with --human teleop: replay this recorded teleop event file instead of a device (on
    the env's step clock)."""
    teleop_axes: str | None = None
    """--env with --human sim|teleop: which device axis drives each action dimension (x, y, z,
    rx, ry, rz, gripper, each may be negated, or 0; default by action size)."""
    teleop_hz: float = 10.0
    """--env with --human teleop: steps per second (a live device's pace; a replay's step
    clock)."""

    def check_human_flags(self, human: str, env: LearnerEnvConfig, setup: Path | None) -> None:
        """Refuse the human flags that do not fit ``--human`` / ``--env`` / ``--setup``."""
        device = self.teleop is not None or self.teleop_events is not None
        if env.env is None:
            given = [
                flag
                for flag, on in (
                    ("--human-policy", self.human_policy is not None),
                    ("--teleop", self.teleop is not None),
                    ("--teleop-events", self.teleop_events is not None),
                    ("--teleop-axes", self.teleop_axes is not None),
                )
                if on
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: for an env robot_rl did not write (--env); on the twin "
                    "--human sim drives with the task's expert and --human teleop reads the "
                    "setup's device (--setup)"
                )
            return
        if setup is not None:
            raise ValueError("--env trains in this process: drop --setup")
        if human == "sim" and self.human_policy is None:
            raise ValueError(
                "--human sim on an --env needs the policy the simulated human drives with: "
                "--human-policy module:function"
            )
        if human == "teleop" and not device:
            raise ValueError(
                "--human teleop on an --env reads a device here: add --teleop keyboard|gamepad|"
                "spacemouse or --teleop-events FILE"
            )
        if human != "sim" and self.human_policy is not None:
            raise ValueError("--human-policy is the simulated human's: add --human sim")
        if human != "teleop" and device:
            raise ValueError("--teleop / --teleop-events are a person's device: add --human teleop")
        if human == "none" and self.teleop_axes is not None:
            raise ValueError("--teleop-axes maps a human's device: add --human sim|teleop")
        if not self.teleop_hz > 0:
            raise ValueError(f"--teleop-hz must be > 0, got {self.teleop_hz}")
        if self.teleop_events is not None and not Path(self.teleop_events).is_file():
            raise ValueError(f"--teleop-events {self.teleop_events} is not a file")

    def human_config(self) -> HumanConfig:
        """The simulated human's settings (--human-*)."""
        return HumanConfig(
            rule=self.human_rule,
            patience_steps=self.human_patience_steps,
            min_progress=self.human_min_progress,
            takeover_steps=self.human_takeover_steps,
            max_interventions=self.human_max_interventions,
            reaction_steps=self.human_reaction_steps,
            action_noise=self.human_action_noise,
            attention_share=self.human_attention_share,
            trust_patience_steps=self.human_trust_patience_steps,
            trust_episodes=self.human_trust_episodes,
        )


@dataclass(frozen=True, kw_only=True)
class RewardFlags:
    """The learned-reward flags (``--reward*``), shared by ``train`` and ``actor``."""

    reward: Path | None = None
    """Learned reward: a classifier directory from `robot-rl reward train`, used instead of the
    twin's dense reward (see robot_rl.app.training.reward_env; evaluation still uses the truth);
    `sim`:
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
    reward_gate: tuple[str, ...] | None = None
    """--reward: state gates every firing frame must pass, e.g. `gripper_pos>=0.45` (0 open, 1
    closed); they replace the card's (`reward train --gates`). None: the card's."""
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
        from robot_rl.app.training.reward_env import LearnedRewardSettings

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
            gates=self.reward_gate,
            encoder_weights=self.reward_encoder_weights or self.efficientnet_weights,
        )


@dataclass(frozen=True)
class TrainCmdConfig(RewardFlags, SimHumanFlags):
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
    normalize_state: bool = True
    """Normalise the state vector (statistics fitted when learning starts; see
    TrainConfig.normalize_state)."""
    normalize_refit: bool = False
    """Refit the state normaliser whenever the data has doubled since the last fit (see
    TrainConfig.normalize_refit)."""
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
        self.check_human_flags(self.human, self.env, self.setup)
        if self.setup is None and self.human == "teleop" and self.env.env is None:
            raise ValueError("--human teleop reads a person's device over ROS 2: add --setup")
        if self.setup is None and self.launch:
            raise ValueError("--launch starts the nodes of a setup: add --setup launch/sim.yaml")
        if self.setup is not None and self.env.action_delay_ms:
            raise ValueError(ACTION_DELAY_OVER_ROS)
        self.check_reward_flags()
        check_gripper_settings(self.sac, self.env)
        if self.realtime_factor < 0 or self.teleop_wait_s <= 0:
            raise ValueError(
                f"realtime_factor must be >= 0 and teleop_wait_s > 0, got "
                f"{self.realtime_factor} and {self.teleop_wait_s}"
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
            normalize_state=self.normalize_state,
            normalize_refit=self.normalize_refit,
            progress=self.progress,
            intervention_mode=self.intervention_mode,
            rlif_penalty=self.rlif_penalty,
        )


def check_gripper_settings(sac: SACConfig, env: LearnerEnvConfig) -> None:
    """``--sac.hybrid-gripper`` acts -1 / 0 / +1 meaning open / keep / close; the env reads 0
    as keep only under ``--gripper-discretize`` (else as a half-closed target)."""
    if sac.hybrid_gripper and not env.gripper_discretize:
        raise ValueError(
            "--sac.hybrid-gripper's 'stay' action (0) is a half-closed gripper target unless the "
            "env keeps the last command: add --gripper-discretize"
        )


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


def resumed_command(cmd: Any, keep: Iterable[str], made_by: str) -> Any:
    """For --resume: the command config (of ``cmd``'s type) stored in the run's config.json,
    with this call's values of the options in ``keep``."""
    from robot_rl.run.rundir import read_run_config

    stored = read_run_config(cmd.run).get("cli")
    if stored is None:
        raise ValueError(f"{cmd.run}/config.json has no CLI settings; it was not made by {made_by}")
    base = from_json(type(cmd), {**stored, "run": str(cmd.run), "resume": True})
    return dataclasses.replace(base, **{k: getattr(cmd, k) for k in keep})
