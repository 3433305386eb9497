"""``robot-rl eval``: evaluate a run's latest (or best) checkpoint with the deterministic policy.

Rebuilds the env and agent from the run's ``config.json`` (written by ``robot-rl train``), loads
the latest checkpoint (``--checkpoint best``: the one with the best periodic evaluation, see
:mod:`robot_rl.learner.checkpoint`) and runs ``--episodes`` episodes (episode i resets with
``seed + i``; the default seeds are disjoint from training's and from the periodic
evaluations'). ``--video`` records the first ``--video-episodes`` episodes from
``--video-cameras`` (rendered out of band; they never enter the observation).

``--setup`` evaluates on a robot setup over ROS 2 instead (its nodes must run, e.g. under
``robot-rl up``): the same env the actor drives, in real time, with no person at the teleop. On
a setup whose task success cannot be read (hardware, or the twin with ``privileged: false``)
``--reward <classifier>`` says when an episode succeeded, as it did for the actor; the twin's
own episode scores (``sim.ros_node --score-log``) are the truth to check it against. A stale
sensor ends the episode it happens in, which is then run again with the same seed (at most
:data:`SENSOR_RETRIES` times; ``sensor_faults`` counts them); so does a reset the arm's driver
refused for an error of its own (a servo that did not answer), after :data:`FAULT_WAIT_S`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SENSOR_RETRIES = 3
"""Times one episode of ``eval --setup`` is run again after a stale sensor ended it."""
FAULT_WAIT_S = 1.0
"""The wait before an episode is run again after a fault (a driver's recovery takes ticks)."""
EVAL_SETUP_DIR = "eval_setup"
"""``eval --setup --reward``: the classifier's confirmations (frames and scores) are kept in
``<run>/eval_setup/reward_triggers/``, apart from the actor's."""


@dataclass(frozen=True)
class EvalCmdConfig:
    """Evaluate a trained run."""

    run: Path
    """Run directory written by robot-rl train."""
    checkpoint: Literal["latest", "best"] = "latest"
    """latest: the last checkpoint (what a resume continues from); best: the one whose
    periodic evaluation scored highest (success rate, then return), kept when later ones are
    worse."""
    episodes: int = 50
    """Number of episodes."""
    seed: int = 3_000_000
    """Episode i resets with seed + i."""
    json: bool = False
    """Print exactly one JSON object on stdout."""
    video: Path | None = None
    """Write an mp4 of the first video_episodes episodes here."""
    video_episodes: int = 3
    """How many episodes (from the first) go into the video."""
    video_cameras: tuple[str, ...] = ("front", "wrist")
    """Cameras shown side by side in the video."""
    video_size: int = 256
    """Video camera images are video_size x video_size pixels (rendered out of band, so
    independent of the policy's --image-size)."""
    setup: Path | None = None
    """Evaluate on this robot setup over ROS 2, in real time (its nodes must run, e.g. under
    `robot-rl up`), instead of on the direct twin."""
    reward: Path | None = None
    """With --setup: the success classifier (a `reward train` directory) that says when an
    episode succeeded, where the setup's task success cannot be read (hardware, or
    privileged: false)."""
    domain_id: int | None = None
    """With --setup: ROS_DOMAIN_ID of the setup's graph (default: $ROS_DOMAIN_ID)."""
    num_threads: int = 1
    """torch threads of the policy (and an in-process classifier). One, like the actor: beside
    the robot's nodes on a 2-core PC, two threads of the pixel backbone waited for each other
    and for the nodes, and the observation an action answered was twice as old (146 ms against
    71 ms over ROS 2, the final pick_cube policy of a rehearsal)."""
    action_delay_ms: float | None = None
    """Direct twin: each action takes effect this long after it was sent (None: the run's own
    --action-delay-ms). What a latency costs a policy: evaluate it at 0 and at the robot's."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.video is not None and self.video.suffix.lower() != ".mp4":
            raise ValueError(f"video {self.video} must end in .mp4")
        if self.video is not None and not self.video_cameras:
            raise ValueError("video needs at least one camera in video_cameras")
        if not 16 <= self.video_size <= 480:
            raise ValueError(f"video_size {self.video_size} must be in [16, 480] pixels")
        if self.setup is not None and self.video is not None:
            raise ValueError(
                "--video renders the direct twin's cameras; with --setup there is none: drop "
                "--video (record's --video-dir writes a setup camera's episodes)"
            )
        if self.action_delay_ms is not None and self.setup is not None:
            from robot_rl.app.envs.collect import ACTION_DELAY_OVER_ROS

            raise ValueError(ACTION_DELAY_OVER_ROS)
        if self.reward is not None and self.setup is None:
            raise ValueError(
                "--reward needs --setup: the direct twin judges success itself; pass --setup "
                "<setup.yaml> to evaluate on a robot with the classifier"
            )


def run_eval(cfg: EvalCmdConfig) -> dict:
    """Evaluate ``cfg.run``'s latest complete checkpoint (a damaged one is skipped with a
    warning; ``checkpoints_skipped`` in the result says which), or its best one with
    ``checkpoint="best"``; return the JSON-able result.

    Raises:
        FileNotFoundError: not a run directory, or no checkpoint yet.
        CheckpointError: checkpoints exist but none is complete.
    """
    import torch

    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.training.compose import agent_factory, sac_config
    from robot_rl.app.training.train_config import TrainCmdConfig, from_json
    from robot_rl.learner.checkpoint import checkpoint_candidates
    from robot_rl.learner.loop import read_run_config
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import evaluate

    torch.set_num_threads(cfg.num_threads)
    stored = dict(read_run_config(cfg.run).get("cli") or {})
    if not stored:
        raise FileNotFoundError(f"{cfg.run}/config.json has no CLI settings (not made by train)")
    cmd = from_json(TrainCmdConfig, {**stored, "run": str(cfg.run), "resume": False, "demos": None})
    sac = sac_config(cmd)
    if not checkpoint_candidates(cfg.run):
        raise FileNotFoundError(f"{cfg.run} has no checkpoint yet (checkpoints/latest.json)")
    if cfg.setup is not None:
        return _eval_on_setup(cfg, cmd, sac)
    env_cfg = cmd.env
    if cfg.action_delay_ms is not None:
        env_cfg = dataclasses.replace(env_cfg, action_delay_ms=cfg.action_delay_ms)
    env, backend = make_env_from_setup(env_cfg.env_setup())
    try:
        adapter = ObsAdapter(env.observation_space)
        agent = agent_factory(sac, cmd.seed, cmd.device)(adapter.layout, env.action_space.shape[0])
        restored = _restore(cfg, agent)
    except BaseException:
        env.close()
        backend.close()
        raise
    assert restored is not None  # there are candidates: a checkpoint or a CheckpointError
    writer, hook, oob = None, None, []
    if cfg.video is not None:
        from robot_rl.app.envs.video import VideoWriter
        from sim.camera import SimCamera

        try:
            vcams = [
                SimCamera(backend.world, n, cfg.video_size, cfg.video_size)
                for n in cfg.video_cameras
            ]
        except KeyError as e:
            env.close()
            backend.close()
            raise ValueError(f"unknown video camera {e}; the twin has front and wrist") from e
        oob = vcams
        for c in oob:
            c.connect()
        writer = VideoWriter(cfg.video, fps=cmd.env.env_setup().control_hz)

        def hook(ep: int, step: int, ret: float, success: bool) -> None:
            if ep < cfg.video_episodes:
                tag = "  SUCCESS" if success else ""
                text = f"{cmd.env.task} ep {ep} step {step} R {ret:.1f}{tag}"
                writer.add([c.read().image for c in vcams], text)

    to_agent = _to_agent(adapter, restored.state)
    try:
        res = evaluate(env, agent, to_agent, cfg.episodes, cfg.seed, on_step=hook)
    finally:
        if writer is not None:
            writer.close()
        for c in oob:
            c.disconnect()
        env.close()
        backend.close()
    out = _result_head(cfg, cmd, restored)
    out.update(res.summary())
    out["video"] = str(cfg.video) if cfg.video is not None else None
    return out


def _eval_on_setup(cfg: EvalCmdConfig, cmd: Any, sac: Any) -> dict:
    """``run_eval`` with ``--setup`` (see the module docstring)."""
    from policies.features import frame_features_for
    from robot_rl.app.training.compose import agent_factory, build_envs
    from robot_rl.core.types import RobotFaultError
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import EvalResult, evaluate

    ecmd = dataclasses.replace(
        cmd,
        run=cfg.run / EVAL_SETUP_DIR,  # the classifier's confirmations go here
        setup=cfg.setup,
        reward=cfg.reward,
        human="none",
        launch=False,
        domain_id=cfg.domain_id,
    )
    # one frozen backbone: the policy and an in-process classifier read the same pass
    features = frame_features_for(sac.encoder, cmd.env.obs, cmd.device)
    envs = build_envs(ecmd, features)
    try:
        env = envs.env
        adapter = ObsAdapter(env.observation_space)
        agent = agent_factory(sac, cmd.seed, cmd.device, features)(
            adapter.layout, env.action_space.shape[0]
        )
        restored = _restore(cfg, agent)
        assert restored is not None
        to_agent = _to_agent(adapter, restored.state)

        episodes, faults = [], 0
        for i in range(cfg.episodes):
            for attempt in range(SENSOR_RETRIES + 1):
                try:
                    episodes += evaluate(env, agent, to_agent, 1, cfg.seed + i).episodes
                    break
                except RobotFaultError as e:
                    faults += 1
                    if attempt == SENSOR_RETRIES:
                        raise RuntimeError(
                            f"episode {i} (seed {cfg.seed + i}) ended on a stale sensor or arm "
                            f"fault {SENSOR_RETRIES + 1} times; the last: {e}"
                        ) from e
                    time.sleep(FAULT_WAIT_S)
    finally:
        envs.close()
    out = _result_head(cfg, cmd, restored)
    out |= {
        "setup": str(cfg.setup),
        "reward": None if cfg.reward is None else str(cfg.reward),
        "success_from": "classifier" if cfg.reward is not None else "task",
        "sensor_faults": faults,
    }
    out.update(EvalResult(tuple(episodes)).summary())
    out["video"] = None
    return out


def _restore(cfg: EvalCmdConfig, agent: Any) -> Any:
    """The run's latest checkpoint into ``agent`` (damaged ones skipped with a warning), or
    its best with ``--checkpoint best``."""
    from robot_rl.learner.checkpoint import load_best_checkpoint, load_latest_checkpoint

    load = load_best_checkpoint if cfg.checkpoint == "best" else load_latest_checkpoint
    return load(cfg.run, agent)


def _to_agent(adapter: Any, state: Any) -> Any:
    """Env observation -> what the agent reads: the learner layout, the state normalised as
    the run normalised it."""
    if state.state_norm is None:
        return adapter.to_learner
    from robot_rl.run.normalize import StateNormalizer

    norm = StateNormalizer.from_json(state.state_norm)
    return lambda obs: norm.obs(adapter.to_learner(obs))


def _result_head(cfg: EvalCmdConfig, cmd: Any, restored: Any) -> dict:
    """What an evaluation result says of the run and the checkpoint it evaluated."""
    return {
        "task": cmd.env.name,
        "obs": cmd.env.obs,
        "run": str(cfg.run),
        "checkpoint": str(restored.path),
        "checkpoint_choice": cfg.checkpoint,
        "checkpoints_skipped": list(restored.skipped),
        "env_steps": restored.state.env_steps,
        "updates": restored.state.updates,
    }
