"""``robot-rl learner`` and ``robot-rl actor``: training split across machines over gRPC.

On the GPU workstation::

    robot-rl learner --run runs/x --bind 127.0.0.1:50061 [--token T] [--demos demos.zarr]

On each robot PC (or next to it, for the twin)::

    robot-rl actor --learner HOST:50061 --run runs/x-left [--actor-id left] [--token T]
                   [--setup launch/sim.yaml --launch]

The learner owns the settings of the run: the env (``--task --obs --cameras ...``, the same
flags as ``train``), agent, demos, UTD, step budget. It tells each actor the env settings and
its policy settings at Hello, before the actor builds its env, so that an actor builds the same
env and acting networks (:mod:`robot_rl.app.training.run_settings`: an env flag given on the actor
must
equal the learner's; one left off is the learner's; an actor whose observation layout still
differs, e.g. a ``--setup`` with other cameras, is refused at Hello, naming the difference).
The actor owns how it reaches its env (direct twin, or a ``--setup`` behind ROS 2), its human
(``--human``), its log, its seed and its pacing (``--control-hz``). See
:mod:`robot_rl.learner.remote` and :mod:`robot_rl.actor.loop` for what each side does and keeps
on disk, and the README's "Distributed training" section. The learner's command is here, the
actor's in :mod:`robot_rl.app.training.actor_cmd`.

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
from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.app.training.run_settings import run_settings_json
from robot_rl.app.training.train_config import (
    TRAIN_SAC,
    EncoderName,
    TrainCmdConfig,
    check_gripper_settings,
    resumed_command,
    to_json,
)
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
        from robot_rl.app.training.train_ros import DEMO_CROPS_KEY, demo_crops

        if crops := demo_crops(cmd.demos):  # an actor on a --setup compares its cameras' crops
            out[DEMO_CROPS_KEY] = crops
    return json.dumps(out, sort_keys=True)


def run_learner(cmd: LearnerCmdConfig) -> dict:
    """Build the learner for ``cmd``, serve and learn until the step budget or a signal."""
    from robot_rl.app.training.compose import build_agent
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
            run_meta={"cli": _redacted(cmd), "task": cmd.env.name, "obs": cmd.env.obs},
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
    from robot_rl.app.envs.build import make_env_from_setup
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
    from robot_rl.app.envs.collect import demo_settings_problem
    from robot_rl.app.training.compose import build_demos

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
