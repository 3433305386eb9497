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

Human interventions (``intervention``: the env's outermost
:class:`robot_rl.wrappers.Intervention`, seen through
:class:`robot_rl.core.intervention.InterventionSource`): after every step the loop reads the
wrapper's record; an intervened step is logged with the executed (human) action, the policy's
proposal in ``policy_action`` and ``intervened=True``, and routed by
``TrainConfig.intervention_mode`` (:mod:`robot_rl.learner.routing`; the resume rebuild routes
the log the same way). Per episode the takeovers, intervened steps and rate go to tensorboard
(``train/interventions``, ``train/intervened_steps``, ``train/intervention_rate``), the
progress bar and the episode's log metadata; every ``eval.jsonl`` row carries the run's
cumulative ``interventions`` and ``intervened_steps``.

Learned rewards (``late_rewards``: the env's :class:`robot_rl.wrappers.LearnedReward`): a step
whose reward has not arrived is held, with everything after it, until its label comes
(:mod:`robot_rl.learner.held`); the learner keeps updating on what the buffers hold. Episode
metadata records ``reward_model_id``; the wrapper's counters (labels, late labels, failures,
confirmations and false ones against the twin's truth) go to tensorboard as ``reward/*``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robot_rl.core import keys
from robot_rl.core.intervention import InterventionSource
from robot_rl.core.learned_reward import LateRewardSource
from robot_rl.learner.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.evaluate import ActionMap, evaluate, obs_stamp
from robot_rl.learner.held import EpisodeWriter, Held, HeldSteps
from robot_rl.learner.normalize import StateNormalizer
from robot_rl.learner.plots import write_learning_curve
from robot_rl.learner.progress import Progress
from robot_rl.learner.routing import Router
from robot_rl.learner.rundir import (
    CONFIG_JSON,
    CURVE_PNG,
    EVAL_JSONL,
    LOG_ZARR,
    SOURCE_ONLINE,
    TB_DIR,
    NothingToResumeError,
    RunExistsError,
    prepare_run_dir,
    read_run_config,
)
from robot_rl.replay import EpisodeLog, Mixer, ObsAdapter, ReplayBuffer

__all__ = [
    "CONFIG_JSON",
    "NothingToResumeError",
    "RunExistsError",
    "TrainResult",
    "Trainer",
    "read_run_config",
]


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


class Trainer:
    """The embedded training loop (see the module docstring).

    Args:
        env: Training env: any gymnasium env with a Dict observation (state vector and/or
            images, see :class:`robot_rl.replay.ObsAdapter`) and a finite Box action space.
        eval_env: A separate env instance for evaluation (same spaces), or the training env's
            own robot (e.g. the env below the intervention wrapper) with
            ``eval_between_episodes``.
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
        intervention: The env's intervention wrapper (usually ``env`` itself, outermost), or
            None without a teleop. With ``intervention_mode="hil-serl"`` (and on resume) the
            demo buffer gets room for ``buffer_capacity`` intervened transitions (an empty one
            is created without demos).
        eval_between_episodes: ``eval_env`` drives the training env's robot: an evaluation
            that falls due mid-episode waits until the training episode ends (and the final
            one until the budget-cut episode is closed), so evaluation never resets the robot
            under a running training episode.
        late_rewards: The env's learned-reward wrapper
            (:class:`robot_rl.wrappers.LearnedReward`) when its rewards may arrive late: a
            pending step is held (:mod:`robot_rl.learner.held`) until its label comes, and
            steps whose label failed are dropped (``held.dropped``, tensorboard
            ``reward/dropped_steps``). At
            the end of the run the loop waits up to ``late_reward_drain_s`` for the rest.
        late_reward_drain_s: See ``late_rewards``, seconds.
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
        intervention: InterventionSource | None = None,
        eval_between_episodes: bool = False,
        late_rewards: LateRewardSource | None = None,
        late_reward_drain_s: float = 30.0,
    ) -> None:
        if intervention is not None and not isinstance(intervention, InterventionSource):
            raise TypeError(
                f"intervention must expose last_step and episode_stats (an Intervention "
                f"wrapper), got {type(intervention).__name__}"
            )
        if late_rewards is not None and not isinstance(late_rewards, LateRewardSource):
            raise TypeError(
                f"late_rewards must expose last_step, poll, drain and stats (a LearnedReward "
                f"wrapper), got {type(late_rewards).__name__}"
            )
        self.env, self.eval_env, self.cfg = env, eval_env, cfg
        self.late_rewards = late_rewards
        self.late_reward_drain_s = float(late_reward_drain_s)
        self.run_dir = Path(run_dir)
        self.adapter = ObsAdapter(env.observation_space)
        self.layout = self.adapter.layout
        self.amap = ActionMap(env.action_space)
        self.action_dim = self.amap.dim
        self.demos = demos if demos is not None and len(demos) > 0 else None
        self.resume = resume
        self.device = device
        self.on_update = on_update
        self.eval_between_episodes = eval_between_episodes
        prepare_run_dir(self.run_dir, resume, cfg, self.layout, self.action_dim, run_meta)
        torch.set_num_threads(cfg.num_threads)
        self.agent = make_agent(self.layout, self.action_dim)
        self.state = TrainerState()
        # Independent, seeded streams (STYLE.md #11): sampling, random actions, policy noise.
        self.sample_rng = np.random.default_rng((cfg.seed, 1))
        self.random_rng = np.random.default_rng((cfg.seed, 2))
        self.act_gen = torch.Generator().manual_seed(cfg.seed + 3)
        self.online = ReplayBuffer(cfg.buffer_capacity, self.layout, self.action_dim, device)
        self.intervention = intervention
        self.demo_buffer = self.demos  # what the mixer samples as "demo": demos (+ interventions)
        if cfg.intervention_mode == "hil-serl" and (intervention is not None or resume):
            if self.demos is not None:
                self.demo_buffer = self.demos.resized(len(self.demos) + cfg.buffer_capacity)
            else:
                self.demo_buffer = ReplayBuffer(
                    cfg.buffer_capacity, self.layout, self.action_dim, device
                )
        self.mixer = Mixer(self.online, self.demo_buffer, cfg.demo_fraction)
        self.router = Router(cfg.intervention_mode, self.online, self.demo_buffer, cfg.rlif_penalty)
        model_id = None if late_rewards is None else late_rewards.model_id
        self.writer = EpisodeWriter(self.router, self._report_episode, model_id)
        self.held = HeldSteps(self.writer.write, on_drop=self.writer.drop)
        self.interventions_total = 0  # takeovers over the run (resume: counted from the log)
        self.intervened_steps_total = 0
        self._evals: list[dict] = []
        self.log: EpisodeLog | None = None
        self.norm: StateNormalizer | None = None

    # -- run directory -----------------------------------------------------------------------

    def open(self) -> EpisodeLog:
        """Open (or create) the run's log; on resume restore the agent, counters, RNGs and the
        RAM buffer. :meth:`run` calls it when needed; call it first to inspect the restored
        state."""
        self.log = self.writer.log = self._open_log()
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
        got = self.router.rebuild(log, (SOURCE_ONLINE,), read_unknown=self.intervention is not None)
        self.interventions_total = got.interventions
        self.intervened_steps_total = got.intervened_steps
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
        tb = self._tb = SummaryWriter(str(self.run_dir / TB_DIR))
        bar = self._bar = Progress(cfg.total_env_steps, cfg.progress)
        try:
            random_steps = 0 if self.demos is not None else cfg.random_steps
            if not self.resume or st.evals == 0:
                self._evaluate_and_checkpoint(tb, bar)
            bar.advance_to(st.env_steps)
            obs, ep_len, ep_seed = self._new_episode()
            metrics: dict = {}
            eval_due = False
            while st.env_steps < cfg.total_env_steps:
                o = self.adapter.to_learner(obs)
                if st.env_steps < random_steps:
                    a = self.random_rng.uniform(-1.0, 1.0, self.action_dim).astype(np.float32)
                else:
                    a = self.agent.act(self._norm(o), deterministic=False, generator=self.act_gen)
                a = np.asarray(a, dtype=np.float32)
                if ep_len == 0:  # begin lazily: a budget-ended run leaves no empty episode
                    begin = {"source": SOURCE_ONLINE, "version": st.updates, "seed": ep_seed}
                    self.held.push(Held("begin", begin))
                obs, reward, terminated, truncated, info = self.env.step(self.amap.to_env(a))
                a_exec, intervened = self._executed(a)
                step = {
                    "obs_learner": o,
                    "action": a_exec,
                    "policy_action": a,
                    "terminated": bool(terminated),
                    "truncated": bool(truncated),
                    "intervened": intervened,
                    "policy_version": st.updates,
                    "stamp_s": obs_stamp(obs),
                    "next_obs_learner": self.adapter.to_learner(obs),
                }
                self.held.push(Held("step", step, self._pending_key(), float(reward)))
                st.env_steps += 1
                ep_len += 1
                self._ep_success = self._ep_success or bool(info.get(keys.INFO_SUCCESS, False))
                done = bool(terminated or truncated)
                if done:
                    meta = self._intervention_meta()
                    self.held.push(Held("end", {"success": self._ep_success, "meta": meta}))
                if self.late_rewards is not None:
                    self.held.label(self.late_rewards.poll())
                n_data = len(self.mixer)
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
                    eval_due = True
                if eval_due and (done or not self.eval_between_episodes):
                    self._evaluate_and_checkpoint(tb, bar)
                    eval_due = False
                if done:
                    obs, ep_len, ep_seed = self._new_episode()
            if ep_len > 0:  # the env-step budget ended mid-episode: close it
                meta = {"cut_by_budget": True, **self._intervention_meta()}
                self.held.push(Held("end", {"success": self._ep_success, "meta": meta}))
            if self.late_rewards is not None:
                self.held.label(self.late_rewards.drain(self.late_reward_drain_s))
            self.held.give_up()
            if eval_due:  # deferred (eval_between_episodes) past the budget-cut episode
                self._evaluate_and_checkpoint(tb, bar)
        finally:
            bar.close()
            tb.close()
            log.close()
            self.log = self.writer.log = None
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

    def _executed(self, a: np.ndarray) -> tuple[np.ndarray, bool]:
        """(executed action in policy space, intervened) of the step just taken with ``a``."""
        if self.intervention is None:
            return a, False
        rec = self.intervention.last_step
        if rec is None:
            raise RuntimeError(
                "the intervention wrapper has no record of the step just taken; hand the "
                "Trainer the Intervention wrapper that is (or is inside) its env"
            )
        self.interventions_total += int(rec.onset)
        self.intervened_steps_total += int(rec.intervened)
        if not rec.intervened:
            return a, False
        return self.amap.to_policy(rec.action), True

    def _intervention_meta(self) -> dict:
        """The episode's intervention counters for the log metadata ({} without a teleop)."""
        if self.intervention is None:
            return {}
        return self.intervention.episode_stats.as_dict()

    def _pending_key(self) -> tuple[int, int] | None:
        """(episode, step) of the step just taken if its learned reward is still pending."""
        if self.late_rewards is None:
            return None
        rec = self.late_rewards.last_step
        return (rec.episode, rec.step) if rec is not None and rec.pending else None

    def _report_episode(self, success: bool, meta: Mapping[str, Any], ep_ret: float) -> None:
        """Tensorboard and progress for an env episode whose steps were written."""
        st, tb = self.state, self._tb
        tb.add_scalar("train/episode_return", ep_ret, st.env_steps)
        tb.add_scalar("train/episode_success", float(success), st.env_steps)
        for k, v in meta.items():
            tb.add_scalar(f"train/{k}", float(v), st.env_steps)
        if self.late_rewards is not None:
            for k, v in self.late_rewards.stats().items():
                tb.add_scalar(f"reward/{k}", float(v), st.env_steps)
            tb.add_scalar("reward/dropped_steps", self.held.dropped, st.env_steps)
        self._bar.episode(ep_ret, success, meta.get("intervention_rate"))

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
            self.norm = StateNormalizer.fit_buffers([self.online, self.demo_buffer])
            self.state.state_norm = self.norm.to_json()

    def _new_episode(self) -> tuple[Any, int, int]:
        """Reset the training env; returns (obs, length 0, reset seed)."""
        st = self.state
        seed = self.cfg.seed + st.episodes
        obs, _ = self.env.reset(seed=seed)
        st.episodes += 1
        self._ep_success = False
        return obs, 0, seed

    def _evaluate_and_checkpoint(self, tb: Any, bar: Progress) -> None:
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
            "interventions": self.interventions_total,
            "intervened_steps": self.intervened_steps_total,
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
