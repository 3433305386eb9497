"""The embedded trainer: one process acts, logs, learns, evaluates and checkpoints.

One iteration per env step::

    a = random (first random_steps, only without demos) or agent.act(obs, generator)
    env.step(a) -> log.append (run/log.zarr, source "online") and online_buffer.add
    agent.update(lambda: mixer.sample(batch_size, rng))   once learning_starts transitions exist
    every eval_every_steps (and at 0 and at the end): evaluate, checkpoint, plot

The agent sees the state vector normalised with statistics frozen when learning starts
(:mod:`robot_rl.learner.normalize`, saved in the checkpoint); logs and buffers keep raw values.
Env actions are the policy's [-1, 1] actions mapped onto the env's Box (:class:`ActionMap`);
logs and buffers keep the policy-space action.

Run directory::

    config.json           run settings (written once; eval reads it)
    log.zarr/             every online transition (durable; rebuilds the RAM buffer on resume)
    checkpoints/          see :mod:`robot_rl.learner.checkpoint`
    eval.jsonl            one JSON object per evaluation
    learning_curve.png    eval success rate and return vs env steps (rewritten at each eval)
    tb/                   tensorboard scalars

Resume (``resume=True``): the agent, update counter and RNG states come from the latest
checkpoint; the log is reopened with its unfinished episode completed as truncated, the RAM
buffer is rebuilt from it, and the env-step / episode counters are the log's online counts (the
data the buffer really holds, which may run past the checkpoint). Training resumes with a fresh
episode. Without ``resume`` an existing, non-empty run directory is refused.

Determinism: with the same seed and config, the first updates' losses are identical (the agent,
action sampling, batch sampling and env resets each take their own seeded generator).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robot_rl.core import keys
from robot_rl.learner.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.evaluate import ActionMap, evaluate
from robot_rl.learner.normalize import StateNormalizer
from robot_rl.learner.plots import write_learning_curve
from robot_rl.replay import EpisodeLog, Mixer, ObsAdapter, ReplayBuffer, rebuild_buffer

CONFIG_JSON = "config.json"
LOG_ZARR = "log.zarr"
EVAL_JSONL = "eval.jsonl"
CURVE_PNG = "learning_curve.png"
TB_DIR = "tb"
SOURCE_ONLINE = "online"


class RunExistsError(FileExistsError):
    """The run directory exists and ``resume`` was not requested."""


class NothingToResumeError(FileNotFoundError):
    """``resume`` was requested but the run directory holds no run."""


@dataclass(frozen=True)
class TrainResult:
    """What a finished :meth:`Trainer.run` reports."""

    run_dir: str
    env_steps: int
    updates: int
    episodes: int
    final_eval: dict
    learning_curve: str
    checkpoint: str


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return _jsonable(asdict(x))
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    return x


def read_run_config(run_dir: Path) -> dict:
    """The run's ``config.json`` (raises :class:`NothingToResumeError` if absent)."""
    path = Path(run_dir) / CONFIG_JSON
    if not path.exists():
        raise NothingToResumeError(f"{run_dir} is not a run directory (no {CONFIG_JSON})")
    return json.loads(path.read_text())


class Trainer:
    """The embedded training loop (see the module docstring).

    Args:
        env: Training env: any gymnasium env with a Dict observation (state vector and/or
            images, see :class:`robot_rl.replay.ObsAdapter`) and a finite Box action space.
        eval_env: A separate env instance for evaluation (same spaces).
        cfg: Loop settings.
        make_agent: ``(layout, action_dim) -> agent`` with ``act``, ``update`` and the
            ``policies.io`` save/load support (e.g. a ``policies.sac.SACAgent``).
        run_dir: The run directory (see the module docstring).
        demos: Demo buffer in the same learner layout (policy-space actions), or None.
        resume: Continue the run in ``run_dir`` instead of starting a new one.
        run_meta: JSON-able settings stored in ``config.json`` (e.g. the CLI's config, so that
            ``robot-rl eval`` can rebuild the env and agent).
        device: Torch device of the RAM buffers (the agent chooses its own).
        on_update: Optional hook ``(update_index, metrics)`` after every learner update.
    """

    def __init__(
        self,
        env: gym.Env,
        eval_env: gym.Env,
        cfg: TrainConfig,
        make_agent: Callable[[Any, int], Any],
        run_dir: Path,
        demos: ReplayBuffer | None = None,
        resume: bool = False,
        run_meta: Mapping[str, Any] | None = None,
        device: str = "cpu",
        on_update: Callable[[int, dict], None] | None = None,
    ) -> None:
        self.env, self.eval_env, self.cfg = env, eval_env, cfg
        self.run_dir = Path(run_dir)
        self.adapter = ObsAdapter(env.observation_space)
        self.layout = self.adapter.layout
        self.amap = ActionMap(env.action_space)
        self.action_dim = self.amap.dim
        self.demos = demos if demos is not None and len(demos) > 0 else None
        self.resume = resume
        self.device = device
        self.on_update = on_update
        self._check_run_dir(run_meta)
        torch.set_num_threads(cfg.num_threads)
        self.agent = make_agent(self.layout, self.action_dim)
        self.state = TrainerState()
        # Independent, seeded streams (STYLE.md #11): sampling, random actions, policy noise.
        self.sample_rng = np.random.default_rng((cfg.seed, 1))
        self.random_rng = np.random.default_rng((cfg.seed, 2))
        self.act_gen = torch.Generator().manual_seed(cfg.seed + 3)
        self.online = ReplayBuffer(cfg.buffer_capacity, self.layout, self.action_dim, device)
        self.mixer = Mixer(self.online, self.demos, cfg.demo_fraction)
        self._evals: list[dict] = []
        self.log: EpisodeLog | None = None
        self.norm: StateNormalizer | None = None

    # -- run directory -----------------------------------------------------------------------

    def _check_run_dir(self, run_meta: Mapping[str, Any] | None) -> None:
        d = self.run_dir
        if self.resume:
            cfg = read_run_config(d)
            if (d / LOG_ZARR).exists() is False:
                raise NothingToResumeError(f"{d} has no {LOG_ZARR}; start a new run without resume")
            if cfg.get("action_dim") != self.action_dim or cfg.get("layout") != _jsonable(
                self.layout
            ):
                raise ValueError(
                    f"the env's observation layout / action size differ from the run in {d}; "
                    "resume with the same task and observation settings"
                )
            return
        if d.exists() and any(d.iterdir()):
            raise RunExistsError(
                f"run directory {d} already exists; pass --resume to continue it, or choose "
                "another --run"
            )
        d.mkdir(parents=True, exist_ok=True)
        config = {
            "train": _jsonable(self.cfg),
            "layout": _jsonable(self.layout),
            "action_dim": self.action_dim,
            **_jsonable(dict(run_meta or {})),
        }
        (d / CONFIG_JSON).write_text(json.dumps(config, indent=1))

    def open(self) -> EpisodeLog:
        """Open (or create) the run's log; on resume restore the agent, counters, RNGs and the
        RAM buffer. :meth:`run` calls it when needed; call it first to inspect the restored
        state."""
        self.log = self._open_log()
        if self.resume:
            self._restore(self.log)
        return self.log

    def _open_log(self) -> EpisodeLog:
        path = self.run_dir / LOG_ZARR
        if self.resume:
            return EpisodeLog.open(path, unfinished="truncate", mode="a")
        meta = {"source": SOURCE_ONLINE, "seed": self.cfg.seed}
        return EpisodeLog.create(path, self.layout, self.action_dim, meta)

    def _restore(self, log: EpisodeLog) -> None:
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is not None:
            self.state = load_checkpoint(ckpt, self.agent)
            self.state.restore(self._np_rngs(), self._torch_rngs())
            if self.state.state_norm is not None:
                self.norm = StateNormalizer.from_json(self.state.state_norm)
        online = [m for m in log.episodes if m.source == SOURCE_ONLINE]
        rebuild_buffer(log, self.online, sources=(SOURCE_ONLINE,))
        self.state.env_steps = int(sum(m.length for m in online))
        self.state.episodes = len(online)
        evals_path = self.run_dir / EVAL_JSONL
        if evals_path.exists():
            lines = evals_path.read_text().splitlines()
            self._evals = [json.loads(s) for s in lines if s.strip()]

    def _np_rngs(self) -> dict[str, np.random.Generator]:
        return {"sample": self.sample_rng, "random": self.random_rng}

    def _torch_rngs(self) -> dict[str, torch.Generator]:
        return {"act": self.act_gen}

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train until ``cfg.total_env_steps`` env steps; return the final evaluation."""
        from torch.utils.tensorboard import SummaryWriter

        cfg = self.cfg
        if self.log is None:
            self.open()
        log, st = self.log, self.state
        tb = SummaryWriter(str(self.run_dir / TB_DIR))
        bar = _Progress(cfg.total_env_steps, cfg.progress)
        try:
            random_steps = 0 if self.demos is not None else cfg.random_steps
            if not self.resume or st.evals == 0:
                self._evaluate_and_checkpoint(tb, bar)
            bar.advance_to(st.env_steps)
            obs, ep_ret, ep_len, ep_seed = self._new_episode()
            metrics: dict = {}
            while st.env_steps < cfg.total_env_steps:
                o = self.adapter.to_learner(obs)
                if st.env_steps < random_steps:
                    a = self.random_rng.uniform(-1.0, 1.0, self.action_dim).astype(np.float32)
                else:
                    a = self.agent.act(self._norm(o), deterministic=False, generator=self.act_gen)
                a = np.asarray(a, dtype=np.float32)
                if ep_len == 0:  # begin lazily: a budget-ended run leaves no empty episode
                    log.begin_episode(SOURCE_ONLINE, policy_version=st.updates, seed=ep_seed)
                obs, reward, terminated, truncated, info = self.env.step(self.amap.to_env(a))
                no = self.adapter.to_learner(obs)
                log.append(
                    obs_learner=o,
                    action=a,
                    policy_action=a,
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    intervened=False,
                    policy_version=st.updates,
                    stamp_s=_stamp(obs),
                    next_obs_learner=no,
                )
                self.online.add(o, a, float(reward), no, bool(terminated), False)
                st.env_steps += 1
                ep_ret += float(reward)
                ep_len += 1
                self._ep_success = self._ep_success or bool(info.get(keys.INFO_SUCCESS, False))
                if terminated or truncated:
                    log.end_episode(success=self._ep_success)
                    tb.add_scalar("train/episode_return", ep_ret, st.env_steps)
                    tb.add_scalar("train/episode_success", float(self._ep_success), st.env_steps)
                    bar.episode(ep_ret, self._ep_success)
                    obs, ep_ret, ep_len, ep_seed = self._new_episode()
                n_data = len(self.online) + (len(self.demos) if self.demos is not None else 0)
                if n_data >= max(cfg.learning_starts, 1):
                    self._fit_normalizer()
                    metrics = self.agent.update(self._sample)
                    st.updates += 1
                    if self.on_update is not None:
                        self.on_update(st.updates, metrics)
                if metrics and st.env_steps % cfg.log_every_steps == 0:
                    for k, v in metrics.items():
                        tb.add_scalar(f"learner/{k}", float(v), st.env_steps)
                    tb.add_scalar("learner/updates", st.updates, st.env_steps)
                bar.advance_to(st.env_steps)
                if st.env_steps % cfg.eval_every_steps == 0 or st.env_steps == cfg.total_env_steps:
                    self._evaluate_and_checkpoint(tb, bar)
            if ep_len > 0:  # the env-step budget ended mid-episode: close it
                log.end_episode(success=self._ep_success, cut_by_budget=True)
        finally:
            bar.close()
            tb.close()
            log.close()
            self.log = None
        last = self._evals[-1] if self._evals else {}
        ckpt = latest_checkpoint(self.run_dir)
        return TrainResult(
            run_dir=str(self.run_dir),
            env_steps=st.env_steps,
            updates=st.updates,
            episodes=st.episodes,
            final_eval=last,
            learning_curve=str(self.run_dir / CURVE_PNG),
            checkpoint=str(ckpt) if ckpt else "",
        )

    def _norm(self, o: Mapping) -> Mapping:
        return self.norm.obs(o) if self.norm is not None else o

    def _sample(self) -> Any:
        b = self.mixer.sample(self.cfg.batch_size, self.sample_rng)
        if self.cfg.reward_offset != 0.0:
            b = dataclasses.replace(b, reward=b.reward + self.cfg.reward_offset)
        return self.norm.batch(b) if self.norm is not None else b

    def to_agent_obs(self, obs: Mapping) -> Mapping:
        """Env observation -> what the agent reads (learner layout, state normalised)."""
        return self._norm(self.adapter.to_learner(obs))

    def _fit_normalizer(self) -> None:
        """Fit the state normaliser once (no-op if fitted, disabled or there is no state)."""
        if self.norm is None and self.cfg.normalize_state and self.layout.state_dim > 0:
            self.norm = StateNormalizer.fit_buffers([self.online, self.demos])
            self.state.state_norm = self.norm.to_json()

    def _new_episode(self) -> tuple[Any, float, int, int]:
        """Reset the training env; returns (obs, return 0, length 0, reset seed)."""
        st = self.state
        seed = self.cfg.seed + st.episodes
        obs, _ = self.env.reset(seed=seed)
        st.episodes += 1
        self._ep_success = False
        return obs, 0.0, 0, seed

    def _evaluate_and_checkpoint(self, tb: Any, bar: _Progress) -> None:
        cfg, st = self.cfg, self.state
        if self._evals and self._evals[-1]["env_steps"] == st.env_steps:
            return  # already evaluated at this step (e.g. total a multiple of eval_every)
        t0 = time.perf_counter()
        res = evaluate(
            self.eval_env, self.agent, self.to_agent_obs, cfg.eval_episodes, cfg.eval_seed
        )
        row = {
            "env_steps": st.env_steps,
            "updates": st.updates,
            "episodes": st.episodes,
            "success_rate": res.success_rate,
            "mean_return": res.mean_return,
            "mean_length": res.mean_length,
            "eval_episodes": cfg.eval_episodes,
            "eval_wall_s": time.perf_counter() - t0,
        }
        self._evals.append(row)
        with open(self.run_dir / EVAL_JSONL, "a") as f:
            f.write(json.dumps(row) + "\n")
        tb.add_scalar("eval/success_rate", res.success_rate, st.env_steps)
        tb.add_scalar("eval/mean_return", res.mean_return, st.env_steps)
        tb.flush()
        write_learning_curve(
            self.run_dir / CURVE_PNG,
            [e["env_steps"] for e in self._evals],
            [e["success_rate"] for e in self._evals],
            [e["mean_return"] for e in self._evals],
            title=str(self.run_dir.name),
        )
        bar.eval(res.success_rate)
        st.evals += 1
        st.capture(self._np_rngs(), self._torch_rngs())
        save_checkpoint(self.run_dir, self.agent, st)


def _stamp(obs: Mapping) -> float:
    """The robot-state stamp of a robot_rl observation, else the host's monotonic clock."""
    stamps = obs.get(keys.STAMPS) if isinstance(obs, Mapping) else None
    if isinstance(stamps, Mapping) and keys.STAMP_STATE in stamps:
        return float(np.asarray(stamps[keys.STAMP_STATE]))
    return time.monotonic()


class _Progress:
    """A rich progress bar (env steps) with the live training success / return and last eval."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        self._recent: list[tuple[float, bool]] = []
        self._eval = float("nan")
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._task = self._bar.add_task("env steps", total=total)
        self._bar.start()

    def _describe(self) -> None:
        if self._bar is None:
            return
        if self._recent:
            sr = np.mean([s for _, s in self._recent])
            ret = np.mean([r for r, _ in self._recent])
            desc = f"train success {sr:.0%} return {ret:.1f} | eval success {self._eval:.0%}"
        else:
            desc = f"eval success {self._eval:.0%}"
        self._bar.update(self._task, description=desc)

    def episode(self, ret: float, success: bool) -> None:
        self._recent = (self._recent + [(ret, success)])[-20:]
        self._describe()

    def eval(self, success_rate: float) -> None:
        self._eval = success_rate
        self._describe()

    def advance_to(self, steps: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=steps)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
