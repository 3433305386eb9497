"""``robot-rl rollout``: run episodes with a scripted, random or zero policy; report success.

Seeding: episode ``i`` resets the env with ``seed + i``; the policy's Generator for that episode
is seeded from ``(seed + i, 1)`` so it is reproducible but not the env's stream. An episode
counts as a success if the task reported success at any step (with the default
``terminate_on_success`` the episode ends there).

ROS 2: ``--setup launch/sim.yaml`` runs the same episodes through RobotEnv over ROS 2
(:mod:`robot_rl.app.nodes.ros_env`) against the nodes of that setup: already running under
``robot-rl up``, or started here with ``--launch``. Task, cameras, image size and control rate
then come from the setup file. With ``--launch``, a required node that dies ends the run with
:class:`robot_rl.app.nodes.supervision.NodeDiedError` (node, exit status, log; exit code 3).

Video: ``--video out.mp4`` records the first ``--video-episodes`` episodes from
``--video-cameras`` (built in the twin for the video even when the policy's observation is
state-only; they are rendered out of band and never enter the observation).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
import tyro

from robot_rl.app.envs.build import EnvSetup
from robot_rl.app.envs.policies import Policy, PolicyName, make_policy
from robot_rl.app.nodes.supervision import dead_node_wins
from robot_rl.core import keys


@dataclass(frozen=True)
class RolloutConfig:
    """Run episodes in the twin and report the success rate."""

    env: Annotated[EnvSetup, tyro.conf.OmitArgPrefixes] = field(default_factory=EnvSetup)
    """The env to build."""
    setup: Path | None = None
    """Run over ROS 2 against this setup (launch/*.yaml) instead of the in-process twin."""
    launch: bool = False
    """With --setup: start the setup's nodes here (else they must run, e.g. `robot-rl up`)."""
    log_dir: Path | None = None
    """With --launch: node logs of what is started here (default runs/up/<setup>-<time>)."""
    gym_env: Annotated[str | None, tyro.conf.arg(name="env")] = None
    """A gymnasium env we did not write, `ID` or `module:ID`, instead of the twin's --task
    (its observation mapped automatically: `robot-rl envs --env ID` shows how)."""
    policy: PolicyName = "scripted"
    """scripted (the task's expert), random (uniform in the action space), zero (no motion), or
    module:function with --env (a scripted policy written for that env: function(observation,
    info) -> action in the env's own units)."""
    episodes: int = 10
    """Number of episodes."""
    seed: int = 0
    """Episode i uses seed + i."""
    video: Path | None = None
    """Write an mp4 of the first video_episodes episodes here."""
    video_episodes: int = 5
    """How many episodes (from the first) go into the video."""
    video_cameras: tuple[str, ...] = ("front", "wrist")
    """Cameras shown side by side in the video."""
    json: bool = False
    """Print exactly one JSON object on stdout (progress still goes to stderr)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        from robot_rl.app.envs.policies import check_policy_name

        check_policy_name(self.policy)
        if self.gym_env is not None and (self.setup is not None or self.video is not None):
            raise ValueError("--env runs the env in process without video: drop --setup/--video")
        if self.video_episodes < 1:
            raise ValueError(f"video_episodes must be >= 1, got {self.video_episodes}")
        if self.video is not None and self.video.suffix.lower() != ".mp4":
            raise ValueError(f"video {self.video} must end in .mp4")
        if self.video is not None and not self.video_cameras:
            raise ValueError("video needs at least one camera in video_cameras")
        if self.launch and self.setup is None:
            raise ValueError("--launch needs --setup launch/<setup>.yaml")
        if self.log_dir is not None and not self.launch:
            raise ValueError("--log-dir names the logs of nodes started here: add --launch")


@dataclass(frozen=True)
class EpisodeStats:
    """Outcome of one episode."""

    episode: int
    seed: int
    episode_return: float
    length: int
    success: bool
    failure: bool
    truncated: bool


def build(cfg: RolloutConfig) -> tuple[gym.Env, Any]:
    """Build ``(env, backend)`` for ``cfg`` (cameras for the video included).

    Raises:
        robot_rl.app.envs.build.UnknownTaskError: unknown task (the message lists known ones).
        ValueError: inconsistent options (the message says what to change).
    """
    from robot_rl.app.envs.build import make_env_from_setup

    if cfg.setup is not None:
        from robot_rl.app.nodes.ros_env import make_ros_env

        env, backend = make_ros_env(
            cfg.setup,
            control_rotation=cfg.env.control_rotation,
            max_episode_steps=cfg.env.max_episode_steps,
            wrappers=cfg.env.wrappers,
            launch=cfg.launch,
            log_dir=cfg.log_dir,
        )
        names = {cam.name for cam in backend.cameras}
        missing = [c for c in cfg.video_cameras if cfg.video and c not in names]
        if missing:
            backend.close()
            raise ValueError(f"video cameras {missing} are not in the setup {cfg.setup}")
        return env, backend
    if cfg.gym_env is not None:
        from robot_rl.app.envs.collect import LearnerEnvConfig

        lenv = LearnerEnvConfig(env=cfg.gym_env, max_episode_steps=cfg.env.max_episode_steps)
        return make_env_from_setup(lenv.env_setup())
    video_cams = cfg.video_cameras if cfg.video is not None else ()
    return make_env_from_setup(cfg.env, extra_cameras=video_cams)


def run_rollout(
    cfg: RolloutConfig, progress: bool = True, built: tuple[gym.Env, Any] | None = None
) -> dict:
    """Run ``cfg.episodes`` episodes and return the JSON-able result (closes the env).

    Args:
        cfg: What to run.
        progress: Show a progress bar on stderr.
        built: ``(env, backend)`` from :func:`build` (None: built here).
    """
    env, backend = built if built is not None else build(cfg)
    video_cams = cfg.video_cameras if cfg.video is not None else ()
    cams = {c.name: c for c in backend.cameras}
    video_cam_objs = [cams[n] for n in video_cams]
    obs_cams = cfg.env.cameras if cfg.setup is None else tuple(cams)
    out_of_band = [c for c in video_cam_objs if c.name not in obs_cams]
    task = (cfg.gym_env or cfg.env.task) if cfg.setup is None else backend.setup.task
    policy = make_policy(cfg.policy, env, backend)
    writer = None
    if cfg.video is not None:
        from robot_rl.app.envs.video import VideoWriter

        writer = VideoWriter(cfg.video, fps=cfg.env.control_hz)
        for cam in out_of_band:
            cam.connect()
    stats: list[EpisodeStats] = []
    t0 = time.perf_counter()
    steps = 0
    bar = _Progress(cfg.episodes, enabled=progress)
    try:
        # --launch: a required node that died is the cause of what fails (the video cameras'
        # stale frames included), not the stale data it left behind.
        with dead_node_wins(getattr(backend, "supervisor", None)):
            for i in range(cfg.episodes):
                record = writer if writer is not None and i < cfg.video_episodes else None
                ep = _run_episode(env, policy, i, cfg.seed + i, record, video_cam_objs, task)
                stats.append(ep)
                steps += ep.length
                bar.update(stats)
    finally:
        bar.close()
        if writer is not None:
            writer.close()
            for cam in out_of_band:
                cam.disconnect()
        env.close()
        backend.close()
    wall_s = time.perf_counter() - t0
    result = _summary(cfg, stats, steps, wall_s, writer.frames if writer else 0)
    if cfg.setup is not None:
        s = backend.setup
        result.update(setup=str(cfg.setup), task=s.task, control_hz=s.control_hz, sim_hz=None)
        result["cameras"] = [c.name for c in s.cameras]
    return result


def _run_episode(
    env: gym.Env,
    policy: Policy,
    index: int,
    seed: int,
    writer,
    video_cams: list,
    task: str,
) -> EpisodeStats:
    obs, info = env.reset(seed=seed)
    policy.reset(np.random.default_rng((seed, 1)))
    ret, length, success, failure, truncated = 0.0, 0, False, False, False
    if writer is not None:
        writer.add([c.read().image for c in video_cams], f"{task} ep {index} step 0")
    while True:
        action = policy.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        ret += float(reward)
        length += 1
        success = success or bool(info.get(keys.INFO_SUCCESS, False))
        failure = failure or bool(info.get(keys.INFO_FAILURE, False))
        if writer is not None:
            tag = "  SUCCESS" if success else ("  FAILURE" if failure else "")
            text = f"{task} ep {index} step {length} R {ret:.1f}{tag}"
            writer.add([c.read().image for c in video_cams], text)
        if terminated or truncated:
            break
    return EpisodeStats(index, seed, ret, length, success, failure, bool(truncated))


def _summary(
    cfg: RolloutConfig, stats: list[EpisodeStats], steps: int, wall_s: float, frames: int
) -> dict:
    returns = np.array([s.episode_return for s in stats])
    lengths = np.array([s.length for s in stats])
    return {
        "task": cfg.gym_env or cfg.env.task,
        "policy": cfg.policy,
        "episodes": len(stats),
        "seed": cfg.seed,
        "success_rate": float(np.mean([s.success for s in stats])),
        "failure_rate": float(np.mean([s.failure for s in stats])),
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "mean_length": float(lengths.mean()),
        "total_steps": int(steps),
        "wall_time_s": float(wall_s),
        "env_steps_per_s": float(steps / wall_s) if wall_s > 0 else None,
        "video": str(cfg.video) if cfg.video is not None else None,
        "video_frames": int(frames),
        "cameras": list(cfg.env.cameras),
        "control_hz": cfg.env.control_hz,
        "sim_hz": cfg.env.sim_hz,
        "control_rotation": cfg.env.control_rotation,
        "per_episode": [
            {
                "episode": s.episode,
                "seed": s.seed,
                "return": s.episode_return,
                "length": s.length,
                "success": s.success,
                "failure": s.failure,
                "truncated": s.truncated,
            }
            for s in stats
        ],
        "wrappers": asdict(cfg.env.wrappers),
    }


class _Progress:
    """A rich progress bar on stderr whose description shows the live success rate."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._task = self._bar.add_task("episodes", total=total)
        self._bar.start()

    def update(self, stats: list[EpisodeStats]) -> None:
        if self._bar is None:
            return
        wins = sum(s.success for s in stats)
        desc = f"success {wins}/{len(stats)} ({100.0 * wins / len(stats):.0f}%)"
        self._bar.update(self._task, advance=1, description=desc)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
