"""The embedded trainer: one process acts, logs, learns, evaluates and checkpoints.

It is the distributed pair in one process, with an in-process link instead of gRPC: the actor
loop (:class:`robot_rl.actor.loop.Actor`: acting, intervention and late-reward handling, the
log) and the learner half (:class:`robot_rl.learner.core.LearnerCore`: buffers, normaliser,
updates, evaluation rows, checkpoints) are the ones ``robot-rl actor`` and ``robot-rl learner``
run. One iteration per env step::

    a = random (first random_steps, only without demos) or agent.act(obs, generator)
    env.step(a) -> log.append (run/log.zarr, source "online") and the buffers (Router, directly)
    agent.update(lambda: mixer.sample(batch_size, rng))   once learning_starts transitions exist
    every eval_every_steps (and at 0 and at the end): evaluate, checkpoint, plot

The agent sees the state vector normalised with statistics fitted when learning starts (and,
with ``normalize_refit``, refitted as the data doubles; :mod:`robot_rl.run.normalize`, saved in
the checkpoint); logs and buffers keep raw values.
Env actions are the policy's [-1, 1] actions mapped onto the env's Box (:class:`ActionMap`);
logs and buffers keep the policy-space action.

Run directory::

    config.json           run settings (written once; eval reads it)
    log.zarr/             every online transition (durable; rebuilds the RAM buffer on resume)
    checkpoints/          see :mod:`robot_rl.learner.checkpoint`
    eval.jsonl            one JSON object per evaluation
    learning_curve.png    eval success rate and return vs env steps (rewritten at each eval)
    tb/                   tensorboard scalars
    control               write PAUSE / RESUME / STOP here to pause, resume or end the run early
    actor.json            the actor loop's counters (ticks, interventions, dropped steps)

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
(:mod:`robot_rl.run.held`); the learner keeps updating on what the buffers hold. Episode
metadata records ``reward_model_id``; the wrapper's counters (labels, late labels, failures,
confirmations and false ones against the twin's truth) go to tensorboard as ``reward/*``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robot_rl.actor.loop import Actor, ActorConfig, check_sources
from robot_rl.actor.stats import ActorStats
from robot_rl.core.intervention import InterventionSource
from robot_rl.core.learned_reward import LateRewardSource
from robot_rl.learner.checkpoint import latest_checkpoint, read_best
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.core import LearnerCore
from robot_rl.learner.progress import Progress
from robot_rl.replay import EpisodeLog, ObsAdapter, ReplayBuffer
from robot_rl.run.evaluate import ActionMap
from robot_rl.run.rundir import (
    CONFIG_JSON,
    CURVE_PNG,
    SOURCE_ONLINE,
    TB_DIR,
    NothingToResumeError,
    RunExistsError,
    prepare_run_dir,
    read_run_config,
    take_control_command,
)
from robot_rl.run.traps import RewardTrapCheck

__all__ = [
    "CONFIG_JSON",
    "NothingToResumeError",
    "RunExistsError",
    "TrainResult",
    "Trainer",
    "read_run_config",
]


EMBEDDED_LOG_FLUSH_STEPS = 100
"""The embedded trainer flushes its log every second or 100 steps (durability only: its steps
reach the buffers directly), not every 3 as a distributed actor must (``ActorConfig
.log_flush_every_steps`` says what that cost)."""


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
    best_eval: dict | None = None
    """The best checkpoint's record (``checkpoints/best.json``: dir, env_steps, success_rate,
    mean_return), or None without an evaluation."""
    reward_warnings: list[dict] = dataclasses.field(default_factory=list)
    """Reward traps detected in the run's episodes (:mod:`robot_rl.run.traps`)."""
    human_effort: dict | None = None
    """The human's effort over the run (:meth:`robot_rl.run.effort.HumanEffort.summary`)."""


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
            pending step is held (:mod:`robot_rl.run.held`) until its label comes, and
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
        check_sources(intervention, late_rewards)  # now, not when open() builds the actor
        self.env, self.eval_env, self.cfg = env, eval_env, cfg
        self.intervention, self.late_rewards = intervention, late_rewards
        self.late_reward_drain_s = float(late_reward_drain_s)
        self.run_dir = Path(run_dir)
        self.adapter = ObsAdapter(env.observation_space)
        self.layout = self.adapter.layout
        self.action_dim = ActionMap(env.action_space).dim
        self.resume = resume
        self.on_update = on_update
        self.eval_between_episodes = eval_between_episodes
        prepare_run_dir(self.run_dir, resume, cfg, self.layout, self.action_dim, run_meta)
        room = intervention is not None or resume
        self.core = LearnerCore(
            cfg, make_agent, self.layout, self.action_dim, self.run_dir, demos, device, room
        )
        self.router = self.core.router()
        self.traps = RewardTrapCheck(self.core.gamma, cfg.reward_offset)
        """The reward-trap check (:mod:`robot_rl.run.traps`); ``traps.warnings`` lists what
        it found (also in the result, tensorboard text and the log). The actor runs it on every
        episode it writes."""
        self._traps_reported = 0
        self.act_gen = torch.Generator().manual_seed(cfg.seed + 3)  # policy noise
        self.actor: Actor | None = None
        self._open = False  # the actor's log is open (open() until run() ends)
        self._eval_due = False
        self._metrics: dict = {}
        self._tb: Any = None
        self._bar: Any = None

    # the learner half, as attributes (tests and the CLI read them)
    @property
    def agent(self) -> Any:
        return self.core.agent

    @property
    def state(self) -> Any:
        return self.core.state

    @property
    def online(self) -> ReplayBuffer:
        return self.core.online

    @property
    def demos(self) -> ReplayBuffer | None:
        return self.core.demos

    @property
    def demo_buffer(self) -> ReplayBuffer | None:
        return self.core.demo_buffer

    @property
    def mixer(self) -> Any:
        return self.core.mixer

    @property
    def norm(self) -> Any:
        return self.core.norm

    @property
    def log(self) -> EpisodeLog | None:
        """The run's log while open (:meth:`open` until :meth:`run` ends), else None."""
        return self.actor.log if self._open and self.actor is not None else None

    @property
    def held(self) -> Any:
        assert self.actor is not None, "open() first"
        return self.actor.held

    @property
    def interventions_total(self) -> int:
        """Takeovers over the run (resume: counted from the log)."""
        return 0 if self.actor is None else self.actor.stats.interventions

    @property
    def intervened_steps_total(self) -> int:
        return 0 if self.actor is None else self.actor.stats.intervened_steps

    # -- run directory -----------------------------------------------------------------------

    def open(self) -> EpisodeLog:
        """Open (or create) the run's log; on resume restore the agent, counters, RNGs and the
        RAM buffer. :meth:`run` calls it when needed; call it first to inspect the restored
        state."""
        cfg = self.cfg
        acfg = ActorConfig(
            total_env_steps=cfg.total_env_steps,
            seed=cfg.seed,
            random_steps=0 if self.core.demos is not None else cfg.random_steps,
            tick_budget_s=None,  # the update runs inside the tick, by design
            log_flush_every_steps=EMBEDDED_LOG_FLUSH_STEPS,
            late_reward_drain_s=self.late_reward_drain_s,
        )
        policy = _AgentPolicy(self.core, self.act_gen)
        self.actor = Actor(
            self.env, policy, self.run_dir, _InProcessLink(self), acfg,
            intervention=self.intervention, late_rewards=self.late_rewards,
            on_episode=self._report_episode, traps=self.traps,
        )  # fmt: skip
        self._open = True
        if self.resume:
            self._restore(self.actor)
        return self.actor.log

    def _restore(self, actor: Actor) -> None:
        self.core.restore(self._np_rngs(), self._torch_rngs())
        got = self.router.rebuild(
            actor.log, (SOURCE_ONLINE,), read_unknown=self.intervention is not None
        )
        actor.stats.interventions = got.interventions
        actor.stats.intervened_steps = got.intervened_steps
        self._sync()

    def _np_rngs(self) -> dict[str, np.random.Generator]:
        assert self.actor is not None
        return {"random": self.actor.random_rng}

    def _torch_rngs(self) -> dict[str, torch.Generator]:
        return {"act": self.act_gen}

    def _sync(self) -> None:
        """The learner's env-step and episode counters are the actor's (one process)."""
        a, st = self.actor.stats, self.core.state  # type: ignore[union-attr]
        st.env_steps, st.episodes = a.env_steps, a.episodes

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train until ``cfg.total_env_steps`` env steps; return the final evaluation."""
        from torch.utils.tensorboard import SummaryWriter

        cfg = self.cfg
        if not self._open:
            self.open()
        actor, st = self.actor, self.core.state
        assert actor is not None
        self._tb = SummaryWriter(str(self.run_dir / TB_DIR))
        self._bar = Progress(cfg.total_env_steps, cfg.progress)
        try:
            if not self.resume or st.evals == 0:
                self._evaluate_and_checkpoint()
            self._bar.advance_to(st.env_steps)
            actor.run()  # steps, learns (_learn) and ends with the final evaluation (_finish)
        finally:
            self._open = False
            self._bar.close()
            self._tb.close()
        self._sync()
        last = self.core.evals[-1] if self.core.evals else {}
        ckpt = latest_checkpoint(self.run_dir)
        return TrainResult(
            run_dir=str(self.run_dir),
            env_steps=st.env_steps,
            updates=st.updates,
            episodes=st.episodes,
            final_eval=last,
            learning_curve=str(self.run_dir / CURVE_PNG),
            checkpoint=str(ckpt) if ckpt else "",
            best_eval=read_best(self.run_dir),
            reward_warnings=[w.as_dict() for w in self.traps.warnings],
            human_effort=self.core.human_effort().summary(),
        )

    def _learn(self, done: bool) -> None:
        """In-process link: learn after every env step (exact UTD), evaluate when due."""
        cfg, core, st, tb = self.cfg, self.core, self.core.state, self._tb
        self._sync()
        if core.ready:
            self._metrics, _ = core.update()
            if self.on_update is not None:
                self.on_update(st.updates, self._metrics)
        if self._metrics and st.env_steps % cfg.log_every_steps == 0:
            for k, v in self._metrics.items():
                tb.add_scalar(f"learner/{k}", float(v), st.env_steps)
            tb.add_scalar("learner/updates", st.updates, st.env_steps)
        self._bar.advance_to(st.env_steps)
        if st.env_steps % cfg.eval_every_steps == 0 or st.env_steps == cfg.total_env_steps:
            self._eval_due = True
        if self._eval_due and (done or not self.eval_between_episodes):
            self._evaluate_and_checkpoint()

    def _finish(self, ok: bool) -> None:
        """In-process link: the final evaluation, unless done at this step already (deferred
        past the budget-cut episode, or a STOP from the control file)."""
        if ok:
            self._sync()
            self._evaluate_and_checkpoint()

    def _report_episode(self, st: ActorStats, ep_ret: float, success: bool, meta: dict) -> None:
        """Tensorboard and progress for an env episode whose steps were written."""
        tb, step = self._tb, st.env_steps
        tb.add_scalar("train/episode_return", ep_ret, step)
        tb.add_scalar("train/episode_success", float(success), step)
        for k, v in meta.items():
            if isinstance(v, (bool, int, float)):
                tb.add_scalar(f"train/{k}", float(v), step)
        if self.late_rewards is not None:
            for k, v in self.late_rewards.stats().items():
                tb.add_scalar(f"reward/{k}", float(v), step)
            tb.add_scalar("reward/dropped_steps", self.held.dropped, step)
        self._bar.episode(ep_ret, success, meta.get("intervention_rate"))
        for trap in self.traps.warnings[self._traps_reported :]:  # (the actor's check logged it)
            tb.add_text("warnings/reward_trap", trap.message, step)
        self._traps_reported = len(self.traps.warnings)

    def to_agent_obs(self, obs: Mapping) -> Mapping:
        """Env observation -> what the agent reads (learner layout, state normalised)."""
        return self.core.norm_obs(self.adapter.to_learner(obs))

    def _evaluate_and_checkpoint(self) -> None:
        self._eval_due = False
        # Flush the log first: a checkpoint must never count steps that a crash would still
        # lose (resume takes its counters from the log, which may run past the checkpoint but
        # not lag behind it; held steps waiting for a late reward are not written yet).
        self.actor.log.flush()  # type: ignore[union-attr]
        a = self.actor.stats  # type: ignore[union-attr]
        row = {
            "episodes": self.core.state.episodes,
            "interventions": a.interventions,
            "intervened_steps": a.intervened_steps,
        }
        self.core.evaluate_and_checkpoint(
            row, self.eval_env, self.to_agent_obs, self._tb, self._bar,
            self._np_rngs(), self._torch_rngs(),
        )  # fmt: skip


class _AgentPolicy:
    """The embedded actor acts with the learner's own agent: no snapshot, always current."""

    def __init__(self, core: LearnerCore, generator: torch.Generator) -> None:
        self.core, self.generator = core, generator

    @property
    def version(self) -> int:
        return self.core.state.updates

    def act(self, obs_learner: Mapping[str, Any]) -> np.ndarray:
        o = self.core.norm_obs(obs_learner)
        return self.core.agent.act(o, deterministic=False, generator=self.generator)

    def load(self, version: int, snapshot: Mapping[str, Any]) -> None:
        raise RuntimeError("the embedded actor acts with the learner's agent; nothing to load")

    def save(self, path: Path) -> None:
        raise RuntimeError("the embedded actor acts with the learner's agent; nothing to save")


class _InProcessLink:
    """The embedded transport: written steps go straight into the learner's buffers (its
    Router), and the learner updates after every env step. Run control comes from the run's
    control file (PAUSE / RESUME / STOP, as the distributed learner forwards it); there are no
    weights to load."""

    fatal_error = None

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self._state = "running"

    @property
    def run_state(self) -> str:
        command = take_control_command(self.trainer.run_dir)
        if command is not None:
            self._state = {"PAUSE": "paused", "RESUME": "running", "STOP": "stopped"}[command]
        return self._state

    def attach(self, log: EpisodeLog, stats: ActorStats) -> Any:
        return self.trainer.router

    def after_step(self, done: bool) -> None:
        self.trainer._learn(done)

    def idle(self) -> None:
        pass

    def latest_weights(self) -> None:
        return None

    learner_backlog = 0  # the learner updates after every env step, in this process

    def finish(self, ok: bool) -> None:
        self.trainer._finish(ok)
