"""The learner half, shared by the embedded trainer and the distributed learner.

:class:`LearnerCore` owns what learns: the agent, the online and demo buffers (and their
:class:`robot_rl.replay.Mixer`), the state normaliser (fitted once, when learning starts), the
update (one ``agent.update`` on a mixed, reward-offset, normalised batch), the evaluation rows
(``eval.jsonl``, ``learning_curve.png``), checkpoints and their restore. Transitions reach its
buffers through :meth:`LearnerCore.router` (one :class:`robot_rl.learner.routing.Router` per
actor stream):

- embedded (:class:`robot_rl.learner.loop.Trainer`): the actor loop writes each step into the
  router in the same process, and the trainer updates once per env step;
- distributed (:class:`robot_rl.learner.remote.RemoteLearner`): rows arrive over gRPC, are
  stored per actor, and are routed the same way; one update per received env step.

Only the transport differs; the actor loop (:class:`robot_rl.actor.loop.Actor`) is shared too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.batch import ObsLayout
from robot_rl.learner.checkpoint import (
    TrainerState,
    load_latest_checkpoint,
    mark_best,
    read_best,
    save_checkpoint,
)
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.malloc import keep_freed_memory
from robot_rl.learner.plots import write_learning_curve
from robot_rl.learner.routing import Router
from robot_rl.replay import Mixer, ReplayBuffer
from robot_rl.run.effort import HumanEffort
from robot_rl.run.evaluate import evaluate
from robot_rl.run.normalize import StateNormalizer
from robot_rl.run.rundir import CURVE_PNG, EFFORT_JSON, EVAL_JSONL, write_json_atomic


class LearnerCore:
    """Agent, buffers, normaliser, updates, evaluation rows and checkpoints (module docstring).

    Args:
        cfg: Loop settings (batch size, demo fraction, learning starts, intervention mode...).
        make_agent: ``(layout, action_dim) -> agent`` (e.g. a ``policies.sac.SACAgent``).
        layout: Observation layout of the transitions.
        action_dim: Policy action size A.
        run_dir: Where ``eval.jsonl``, the curve and the checkpoints go.
        demos: Demo buffer (policy-space actions, same layout), or None.
        device: Torch device of the RAM buffers.
        intervention_room: With ``intervention_mode="hil-serl"``, give the demo buffer room for
            ``buffer_capacity`` intervened transitions (an empty one without demos).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        make_agent: Callable[[ObsLayout, int], Any],
        layout: ObsLayout,
        action_dim: int,
        run_dir: Path,
        demos: ReplayBuffer | None,
        device: str,
        intervention_room: bool,
    ) -> None:
        self.cfg, self.layout, self.action_dim = cfg, layout, int(action_dim)
        self.run_dir = Path(run_dir)
        torch.set_num_threads(cfg.num_threads)
        keep_freed_memory()  # robot_rl.learner.malloc: no page faults per update
        self.agent = make_agent(layout, self.action_dim)
        self.state = TrainerState()
        self.sample_rng = np.random.default_rng((cfg.seed, 1))  # STYLE.md #11: its own stream
        # a frozen image backbone: the buffers hold its features, computed once per frame
        feats = getattr(self.agent, "frame_features", None) if layout.images else None
        self.online = ReplayBuffer(
            cfg.buffer_capacity, layout, self.action_dim, device, features=feats
        )
        if demos is not None and (demos.layout, demos.action_dim) != (layout, self.action_dim):
            raise ValueError(
                f"the demos' layout {demos.layout} (action size {demos.action_dim}) differs from "
                f"the env's {layout} ({self.action_dim}): record the demos with the env's settings"
            )
        if demos is not None and feats is not None and demos.feature_keys is None:
            demos = demos.with_features(feats)  # loaded with frames: encode them once, here
        if demos is not None and demos.feature_keys != self.online.feature_keys:
            raise ValueError(
                f"the demo buffer holds {demos.feature_keys or 'frames'}, the agent reads "
                f"{self.online.feature_keys or 'frames'}: load the demos with the agent's "
                "frame_features (robot_rl.replay.load_demos(..., features=...))"
            )
        self.demos = demos if demos is not None and len(demos) > 0 else None
        self.demo_buffer = self.demos  # what the mixer samples as "demo": demos (+ interventions)
        if cfg.intervention_mode == "hil-serl" and intervention_room:
            extra = cfg.buffer_capacity
            self.demo_buffer = (
                self.demos.resized(len(self.demos) + extra)
                if self.demos is not None
                else ReplayBuffer(extra, layout, self.action_dim, device, features=feats)
            )
        agent_cfg = getattr(self.agent, "cfg", None)  # n-step returns: the agent's setting
        self.gamma = float(getattr(agent_cfg, "gamma", 0.99))
        """The agent's discount (0.99 for an agent without one): the replay's n-step sums and
        the reward-trap check use it."""
        self.mixer = Mixer(
            self.online,
            self.demo_buffer,
            cfg.demo_fraction,
            n_step=int(getattr(agent_cfg, "n_step", 1)),
            gamma=self.gamma,
            reward_offset=cfg.reward_offset,
            returns=bool(getattr(agent_cfg, "calql", False)),  # Cal-QL's Monte-Carlo floor
        )
        self.norm: StateNormalizer | None = None
        self.evals: list[dict] = []
        self.restored_from: Path | None = None  # the checkpoint restore() loaded
        self.efforts: list[HumanEffort] = []  # one per router (stream of episodes)

    def router(self) -> Router:
        """A new router into these buffers (one per stream of consecutive episodes), recording
        its episodes' human effort."""
        cfg = self.cfg
        effort = HumanEffort(cfg.control_hz)
        self.efforts.append(effort)
        return Router(
            cfg.intervention_mode, self.online, self.demo_buffer, cfg.rlif_penalty, effort
        )

    def human_effort(self) -> HumanEffort:
        """The run's human effort: every stream's finished episodes (several actors: one
        stream after another, each in its own order)."""
        out = HumanEffort(self.cfg.control_hz)
        for e in self.efforts:
            out.episodes.extend(e.episodes)
        return out

    # -- learning ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Enough data to learn (``learning_starts`` transitions in the buffers)."""
        return len(self.mixer) >= max(self.cfg.learning_starts, 1)

    def update(self) -> tuple[dict, bool]:
        """One agent update (fitting the normaliser first if it is due).

        Returns:
            (the update's metrics, whether the normaliser was fitted now).
        """
        fitted = self.fit_normalizer()
        metrics = self.agent.update(self.sample)
        self.state.updates += 1
        return metrics, fitted

    def sample(self) -> Any:
        """A mixed batch (the mixer adds the reward offset to every step, and sums n-step
        returns when the agent asks for them), state normalised (what ``agent.update`` calls)."""
        b = self.mixer.sample(self.cfg.batch_size, self.sample_rng)
        return self.norm.batch(b) if self.norm is not None else b

    def fit_normalizer(self) -> bool:
        """Fit the state normaliser once, and with ``normalize_refit`` again whenever the data
        has doubled since (no-op if disabled or there is no state); True if (re)fitted now."""
        if not self.cfg.normalize_state or self.layout.state_dim == 0:
            return False
        n = len(self.online) + (0 if self.demo_buffer is None else len(self.demo_buffer))
        if self.norm is not None:
            fitted_on = int((self.state.state_norm or {}).get("fitted_on", 0))
            if not (self.cfg.normalize_refit and fitted_on > 0 and n >= 2 * fitted_on):
                return False
        old, self.norm = self.norm, StateNormalizer.fit_buffers([self.online, self.demo_buffer])
        if old is not None and hasattr(self.agent, "rescale_state_inputs"):
            # the networks keep computing what they did on every state neither map clips
            self.agent.rescale_state_inputs(
                self.norm.std / old.std, (self.norm.mean - old.mean) / old.std
            )
        self.state.state_norm = {**self.norm.to_json(), "fitted_on": n}
        self._tell_agent_norm()
        return True

    def _tell_agent_norm(self) -> None:
        """The agent's reads of raw state values (the hybrid gripper's closed test) follow the
        normaliser."""
        if self.norm is not None and hasattr(self.agent, "set_state_normalization"):
            self.agent.set_state_normalization(self.norm.mean, self.norm.std)

    def norm_obs(self, o: Mapping) -> Mapping:
        """A learner-layout observation as the agent reads it (state normalised once fitted)."""
        return self.norm.obs(o) if self.norm is not None else o

    # -- checkpoints and evaluation ----------------------------------------------------------

    def restore(
        self, np_rngs: dict[str, np.random.Generator], torch_rngs: dict[str, torch.Generator]
    ) -> bool:
        """Load the newest complete checkpoint (agent, counters, normaliser, the given RNGs'
        states; a damaged one is skipped with a warning, see :mod:`robot_rl.learner.checkpoint`)
        and the evaluation rows; False if the run has no checkpoint yet."""
        evals = self.run_dir / EVAL_JSONL
        if evals.exists():
            self.evals = [json.loads(s) for s in evals.read_text().splitlines() if s.strip()]
        restored = load_latest_checkpoint(self.run_dir, self.agent)  # falls back past damage
        if restored is None:
            return False
        self.restored_from = restored.path
        self.state = restored.state
        self.state.restore({"sample": self.sample_rng, **np_rngs}, torch_rngs)
        if self.state.state_norm is not None:
            self.norm = StateNormalizer.from_json(self.state.state_norm)
            self._tell_agent_norm()
        return True

    def evaluate_and_checkpoint(
        self,
        row: dict[str, Any],
        eval_env: Any,
        to_agent_obs: Callable[[Mapping], Mapping],
        tb: Any,
        bar: Any,
        np_rngs: dict[str, np.random.Generator],
        torch_rngs: dict[str, torch.Generator],
    ) -> None:
        """Evaluate on ``eval_env`` (None: no evaluation), append ``row`` (+ the results) to
        ``eval.jsonl``, redraw the curve, checkpoint. Once per env step count."""
        cfg, st = self.cfg, self.state
        if self.evals and self.evals[-1]["env_steps"] == st.env_steps:
            return  # already evaluated at this step (e.g. total a multiple of eval_every)
        row = {"env_steps": st.env_steps, "updates": st.updates, **row}
        if eval_env is not None and cfg.eval_episodes > 0:
            t0 = time.perf_counter()
            res = evaluate(eval_env, self.agent, to_agent_obs, cfg.eval_episodes, cfg.eval_seed)
            row.update(
                success_rate=res.success_rate,
                mean_return=res.mean_return,
                mean_length=res.mean_length,
                eval_episodes=cfg.eval_episodes,
                eval_wall_s=time.perf_counter() - t0,
                # episode i resets with eval_seed + i at every evaluation: which episodes
                # (initial states, goals) a policy wins or loses, evaluation after evaluation
                episode_success=[int(e.success) for e in res.episodes],
            )
            tb.add_scalar("eval/success_rate", res.success_rate, st.env_steps)
            tb.add_scalar("eval/mean_return", res.mean_return, st.env_steps)
            tb.flush()
            bar.eval(res.success_rate)
        self.evals.append(row)
        with open(self.run_dir / EVAL_JSONL, "a") as f:
            f.write(json.dumps(row) + "\n")
        effort = self.human_effort()
        if effort.episodes:
            doc = {**effort.summary(), "over_time": effort.over_time()}
            write_json_atomic(self.run_dir / EFFORT_JSON, doc)
        st.evals += 1
        st.capture({"sample": self.sample_rng, **np_rngs}, torch_rngs)
        ckpt = save_checkpoint(self.run_dir, self.agent, st)
        if mark_best(self.run_dir, ckpt, row):
            tb.add_scalar("eval/best_success_rate", row["success_rate"], st.env_steps)
        rated = [e for e in self.evals if "success_rate" in e]
        if rated:
            # The star marks the checkpoint best.json names (one ranking: mark_best's).
            best = read_best(self.run_dir)
            at = [i for i, e in enumerate(rated) if best and e["env_steps"] == best["env_steps"]]
            write_learning_curve(
                self.run_dir / CURVE_PNG,
                [e["env_steps"] for e in rated],
                [e["success_rate"] for e in rated],
                [e["mean_return"] for e in rated],
                title=str(self.run_dir.name),
                best_index=at[-1] if at else None,
                effort=effort if any(e.corrections for e in effort.episodes) else None,
            )
