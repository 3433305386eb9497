"""The distributed learner: replay and updates here, acting on remote actors over gRPC.

``robot-rl learner`` runs this on the GPU workstation; ``robot-rl actor`` (:mod:`robot_rl.actor`)
on each robot PC. The learner serves :class:`robot_rl.transport.server.LearnerServer`: actors
push their logged transitions, which :class:`robot_rl.transport.log_sink.LogSink` stores
durably (one log per actor) before acknowledging; the accepted rows are then routed into the RAM
buffers as the embedded trainer routes its own steps (:class:`robot_rl.learner.routing.Router`,
one per actor, so interventions work the same), and the learner updates the agent::

    rows arrive -> buffers (on this thread)          env_steps += N, update budget += N
    while budget: agent.update(mixer.sample)          one update per received env step (UTD as
                                                      embedded), once learning_starts is reached
    every publish_every_updates: publish the policy snapshot (robot_rl.actor.policy) as the next
        weights version
    every eval_every_steps received steps: evaluate on the local eval env (if any), checkpoint,
        plot
    at total_env_steps: STOP to every actor, final evaluation and checkpoint, keep serving
        stop_grace_s so that actors hear it and drain their logs

Weights versions increase over the whole run, restarts included (``weights_version.json``): an
actor ignores a version it already has.

Resume after a crash (``resume=True``): the agent, counters and normaliser come from the last
checkpoint; the actor logs are reopened (an episode cut by the crash is kept as truncated), the
RAM buffers are rebuilt from them, and each actor is told at its next Hello what the learner
holds, so it resends the rest and nothing acknowledged is lost or duplicated.

Run directory::

    config.json           settings (the CLI's, to resume)
    actors/<id>/log.zarr  every transition of each actor (durable; rebuilds the buffers)
    checkpoints/          see robot_rl.learner.checkpoint
    eval.jsonl            one JSON object per evaluation (with per-actor counts)
    learning_curve.png    eval success rate and return vs received env steps
    actors.json           per-actor stats (rewritten every stats_every_s)
    server.json           the address actually bound (port 0 picks one)
    weights_version.json  the last published weights version
    control               write PAUSE / RESUME / STOP here (``echo PAUSE > runs/x/control``)
    tb/                   tensorboard: learner/*, eval/*, actors/<id>/*
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.actor.policy import policy_snapshot
from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.learner.checkpoint import TrainerState
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.core import LearnerCore
from robot_rl.learner.routing import Router
from robot_rl.replay import ObsAdapter, ReplayBuffer
from robot_rl.run.rundir import (
    CURVE_PNG,
    TB_DIR,
    prepare_run_dir,
    take_control_command,
    write_json_atomic,
)
from robot_rl.transport.codec import (
    EPISODE,
    FEATURES_KEY,
    NEXT_OBS_PREFIX,
    OBS_PREFIX,
    shipped_features,
)
from robot_rl.transport.log_sink import LogSink, row_obs, warm_features, warm_rows
from robot_rl.transport.server import LearnerServer, LearnerServerConfig

log = logging.getLogger(__name__)

ACTORS_DIR = "actors"
ACTORS_JSON = "actors.json"
SERVER_JSON = "server.json"
VERSION_JSON = "weights_version.json"


@dataclass(frozen=True)
class RemoteConfig:
    """What the distributed learner adds to :class:`TrainConfig`."""

    publish_every_updates: int = 20
    """Publish new weights every this many updates (and when learning starts)."""
    stats_every_s: float = 2.0
    """Send stats to the actors and rewrite actors.json this often, seconds."""
    stop_grace_s: float = 5.0
    """After STOP, keep serving this long so that actors hear it and drain their logs, seconds."""
    idle_wait_s: float = 0.05
    """With nothing to update, wait this long for rows, seconds."""
    max_actors: int = 8
    """Actors served at once."""
    actor_features: bool = True
    """With a frozen backbone (pixels), ask the actors for the features they computed to act
    (``next_obs/features/<cam>`` with their transitions, :mod:`robot_rl.transport.codec`), so
    that the learner runs the backbone only on what no policy saw (an episode's first frames).
    Off: the learner encodes every arriving frame itself."""

    def __post_init__(self) -> None:
        if self.publish_every_updates < 1:
            raise ValueError(
                f"publish_every_updates must be >= 1, got {self.publish_every_updates}"
            )
        if min(self.stats_every_s, self.idle_wait_s) <= 0 or self.stop_grace_s < 0:
            raise ValueError("stats_every_s and idle_wait_s must be > 0, stop_grace_s >= 0")


class RemoteLearner:
    """The distributed learner (see the module docstring).

    Args:
        cfg: Loop settings (``total_env_steps`` counts transitions received from all actors).
        make_agent: ``(layout, action_dim) -> agent`` (e.g. a ``policies.sac.SACAgent``).
        layout: Observation layout actors must send.
        action_dim: Policy action size A.
        run_dir: The run directory (see the module docstring).
        server_cfg: Address and security (its ``run_id`` and ``policy_json`` are filled in).
        remote: Publishing, stats and shutdown settings.
        policy_json: The policy settings actors build their acting networks from (JSON).
        demos: Demo buffer (policy-space actions, same layout), or None.
        resume: Continue the run in ``run_dir``.
        run_meta: JSON-able settings for ``config.json``.
        eval_env: A local env to evaluate on (e.g. the twin), or None (no evaluation here: the
            curve then comes from the actors' episode returns in tensorboard).
        device: Torch device of the RAM buffers.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        make_agent: Callable[[ObsLayout, int], Any],
        layout: ObsLayout,
        action_dim: int,
        run_dir: Path,
        server_cfg: LearnerServerConfig,
        remote: RemoteConfig,
        policy_json: str,
        demos: ReplayBuffer | None = None,
        resume: bool = False,
        run_meta: Mapping[str, Any] | None = None,
        eval_env: gym.Env | None = None,
        device: str = "cpu",
    ) -> None:
        self.cfg, self.remote, self.layout, self.action_dim = cfg, remote, layout, int(action_dim)
        self.run_dir = Path(run_dir)
        self.eval_env = eval_env
        self._eval_adapter = None if eval_env is None else ObsAdapter(eval_env.observation_space)
        if self._eval_adapter is not None and self._eval_adapter.layout != layout:
            raise ValueError("eval_env's observation layout differs from the learner's")
        prepare_run_dir(self.run_dir, resume, cfg, layout, action_dim, run_meta, ACTORS_DIR)
        self.resume = resume
        # any actor may have a human: hil-serl always gets room for intervened transitions
        self.core = LearnerCore(
            cfg, make_agent, layout, self.action_dim, self.run_dir, demos, device, True
        )
        self._rows: queue.SimpleQueue[tuple[str, dict[str, np.ndarray]]] = queue.SimpleQueue()
        self._routers: dict[str, tuple[Router, int]] = {}  # actor -> (router, its last episode)
        # actor -> the features it sent of its last row's next_obs (None: it sent none)
        self._next_features: dict[str, dict[str, np.ndarray] | None] = {}
        self.rows_with_actor_features = 0
        """Rows whose next_obs features came from their actor (no backbone pass here)."""
        self.budget = 0  # updates owed to received env steps
        self.version = self._read_version()
        self.server_cfg = dataclasses.replace(
            server_cfg,
            run_id=self.run_dir.name,
            policy_json=_with_features(policy_json, self.core.online, remote.actor_features),
            max_actors=remote.max_actors,
        )
        self.sink: LogSink | None = None
        self.server: LearnerServer | None = None
        self._stop_reason = ""

    @property
    def state(self) -> TrainerState:
        return self.core.state

    # -- setup -------------------------------------------------------------------------------

    def open(self) -> LearnerServer:
        """Restore (resume), rebuild the buffers from the actor logs, start serving."""
        if self.resume:
            self.core.restore({}, {})
        self.sink = LogSink(
            self.run_dir / ACTORS_DIR, self.layout, self.action_dim, on_rows=self._on_rows
        )
        steps = 0
        for actor_id in self.sink.actors():
            router = self.core.router()
            router.rebuild(self.sink.log_of(actor_id), ("online",))
            steps += self.sink.acked_through(actor_id) + 1
            self._routers[actor_id] = (router, -1)
        self.state.env_steps = steps
        self.server = LearnerServer(self.sink, self.layout, self.action_dim, self.server_cfg)
        write_json_atomic(
            self.run_dir / SERVER_JSON, {"address": self.server.address, "pid": os.getpid()}
        )
        self._publish()
        return self.server

    # -- the loop ----------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> dict:
        """Learn until ``total_env_steps`` transitions arrived (or ``should_stop()``).

        Returns:
            A JSON-able summary (env steps, updates, per-actor stats, last evaluation).
        """
        from torch.utils.tensorboard import SummaryWriter

        from robot_rl.learner.progress import Progress

        cfg, st = self.cfg, self.state
        if self.server is None:
            self.open()
        tb = self._tb = SummaryWriter(str(self.run_dir / TB_DIR))
        bar = Progress(cfg.total_env_steps, cfg.progress)
        next_stats = 0.0
        next_eval = (st.env_steps // cfg.eval_every_steps + 1) * cfg.eval_every_steps
        try:
            if not self.core.evals:
                self._evaluate_and_checkpoint(bar)
            while True:
                if should_stop():
                    self._stop_reason = "signal"
                self._control_file()
                got = self._drain_rows(wait_s=0.0 if self.budget > 0 else self.remote.idle_wait_s)
                if got:
                    bar.advance_to(min(st.env_steps, cfg.total_env_steps))
                if st.env_steps >= cfg.total_env_steps and not self._stop_reason:
                    self._stop_reason = "steps"
                if self._stop_reason:
                    break
                if self.budget > 0 and self.core.ready:
                    self._update(tb)
                now = time.monotonic()
                if now >= next_stats:
                    self._stats(tb)
                    next_stats = now + self.remote.stats_every_s
                if st.env_steps >= next_eval:
                    self._evaluate_and_checkpoint(bar)
                    next_eval = (st.env_steps // cfg.eval_every_steps + 1) * cfg.eval_every_steps
            self.server.control("STOP", f"learner: {self._stop_reason}")  # type: ignore[union-attr]
            self._linger()
            if self._stop_reason == "steps":
                self._pay_owed_updates(tb, bar, should_stop)
            self._evaluate_and_checkpoint(bar)
        finally:
            bar.close()
            self._stats(tb)
            tb.close()
            self.close()
        last = self.core.evals[-1] if self.core.evals else {}
        return {
            "run_dir": str(self.run_dir),
            "env_steps": st.env_steps,
            "updates": st.updates,
            "replay_size": len(self.core.online),
            "demo_buffer_size": 0 if self.core.demo_buffer is None else len(self.core.demo_buffer),
            "weights_version": self.version,
            "stopped_by": self._stop_reason,
            "final_eval": last,
            "learning_curve": str(self.run_dir / CURVE_PNG),
            "actors": _read_json(self.run_dir / ACTORS_JSON, {}),
            "backbone": self._backbone_counts(),
            "human_effort": self.core.human_effort().summary(),
        }

    def _backbone_counts(self) -> dict[str, int] | None:
        """Frames the learner's backbone ran on, memo hits, and rows whose features an actor
        sent (None without a frozen backbone)."""
        feats = self.core.online.features
        if feats is None:
            return None
        return {
            "frames_encoded": int(getattr(feats, "frames_encoded", 0)),
            "memo_hits": int(getattr(feats, "memo_hits", 0)),
            "rows_with_actor_features": self.rows_with_actor_features,
        }

    def close(self) -> None:
        """Stop serving and close the actor logs (idempotent)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.sink is not None:
            self.sink.close()
            self.sink = None

    def _pay_owed_updates(self, tb: Any, bar: Any, should_stop: Callable[[], bool]) -> None:
        """Run the updates still owed to received steps (one per env step, as embedded), so that
        a learner slower than its actors ends at the same update count as the embedded loop.
        A signal (``should_stop``) cuts it short."""
        if self.budget <= 0 or not self.core.ready:
            return
        owed = self.budget
        log.warning(
            "learner: %d updates owed to received steps; running them (Ctrl-C skips them and "
            "still checkpoints)", owed,
        )  # fmt: skip
        done = bar.count("owed updates", owed)
        while self.budget > 0 and not should_stop():
            self._update(tb)
            done(owed - self.budget)
        self._publish()

    def _linger(self) -> None:
        """Keep taking rows for stop_grace_s after STOP (actors drain their logs), or until every
        actor that said Hello holds nothing unacknowledged for a quiet second."""
        deadline = time.monotonic() + self.remote.stop_grace_s
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            if self._drain_rows(wait_s=0.1, max_batches=1 << 30):
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 1.0:
                break

    # -- rows in -----------------------------------------------------------------------------

    def _on_rows(self, actor_id: str, steps: dict[str, np.ndarray]) -> None:
        """LogSink hook (a server thread): the rows are durable; hand them to the loop."""
        self._rows.put((actor_id, steps))

    def _drain_rows(self, wait_s: float, max_batches: int = 4) -> int:
        """Move up to ``max_batches`` received batches into the buffers (waiting up to
        ``wait_s`` for the first); returns how many rows. Bounded, so that fast actors cannot
        starve the updates."""
        n = 0
        for k in range(max_batches):
            try:
                if k == 0 and wait_s > 0:
                    actor_id, steps = self._rows.get(timeout=wait_s)
                else:
                    actor_id, steps = self._rows.get_nowait()
            except queue.Empty:
                break
            n += self._route(actor_id, steps)
        return n

    def _route(self, actor_id: str, steps: Mapping[str, np.ndarray]) -> int:
        router, last_ep = self._routers.get(actor_id, (None, -1))
        if router is None:
            router = self.core.router()
        lay = self.layout
        eps = steps[EPISODE].tolist()
        feats = self.core.online.features
        shipped = shipped_features(steps, lay.images) if feats is not None else None
        chunk = warm_rows(feats, lay) if shipped is None else 0
        prev = self._next_features.get(actor_id) if shipped is not None else None
        for r, ep in enumerate(eps):
            if feats is not None and chunk and r % chunk == 0:  # next rows' frames, one pass
                warm_features(feats, steps, lay, slice(r, r + chunk))
            if ep != last_ep:
                router.begin_episode()
                last_ep, prev = ep, None  # an episode's first obs: encoded here
            obs, nxt = row_obs(steps, OBS_PREFIX, r, lay), row_obs(steps, NEXT_OBS_PREFIX, r, lay)
            if shipped is not None:  # the actor's features of the frames it acted on
                if prev is not None:
                    obs[keys.FEATURES] = prev  # = the previous row's next_obs
                nxt[keys.FEATURES] = prev = {c: f[r] for c, f in shipped.items()}
            router.add(
                obs,
                steps["action"][r],
                steps["policy_action"][r],
                float(steps["reward"][r]),
                nxt,
                bool(steps["terminated"][r]),
                bool(steps["intervened"][r]),
            )
        self._next_features[actor_id] = prev
        if shipped is not None:
            self.rows_with_actor_features += len(eps)
        self._routers[actor_id] = (router, last_ep)
        n = len(eps)
        self.state.env_steps += n
        if self.core.ready:
            self.budget += n
        return n

    # -- learning ----------------------------------------------------------------------------

    def _update(self, tb: Any) -> None:
        cfg, st = self.cfg, self.state
        metrics, fitted_now = self.core.update()
        self.budget -= 1
        if st.updates % cfg.log_every_steps == 0:
            for k, v in metrics.items():
                tb.add_scalar(f"learner/{k}", float(v), st.env_steps)
            tb.add_scalar("learner/updates", st.updates, st.env_steps)
            tb.add_scalar("learner/update_backlog", self.budget, st.env_steps)
        if fitted_now or st.updates % self.remote.publish_every_updates == 0:
            self._publish()

    def _publish(self) -> None:
        core = self.core
        snap = policy_snapshot(core.agent, self.layout, core.norm, self.cfg.normalize_state)
        self.version += 1
        self.server.publish_weights(self.version, snap)  # type: ignore[union-attr]
        write_json_atomic(self.run_dir / VERSION_JSON, {"version": self.version})

    def _read_version(self) -> int:
        return int(_read_json(self.run_dir / VERSION_JSON, {"version": 0})["version"])

    def to_agent_obs(self, obs: Mapping) -> Mapping:
        return self.core.norm_obs(self._eval_adapter.to_learner(obs))  # type: ignore[union-attr]

    # -- control, stats, evaluation ----------------------------------------------------------

    def _control_file(self) -> None:
        """Forward a PAUSE / RESUME / STOP written to run/control to every actor."""
        command = take_control_command(self.run_dir)
        if command == "STOP":
            self._stop_reason = "control"  # env_steps stays what arrived (curve, checkpoint)
        elif command is not None:
            self.server.control(command, "learner: control file")  # type: ignore[union-attr]

    def _stats(self, tb: Any) -> None:
        if self.server is None:
            return
        stats = self.server.publish_stats(self.state.updates, len(self.core.online), self.budget)
        actors = {}
        for a in stats.actors:
            row = {
                "transitions": a.transitions,
                "duplicates_dropped": a.duplicates_dropped,
                "batches_rejected": a.batches_rejected,
                "episodes": a.episodes,
                "last_episode_return": None
                if np.isnan(a.last_episode_return)
                else (a.last_episode_return),
                "acked_through_seq": a.acked_through_seq,
            }
            actors[a.actor_id] = row
            for k, v in row.items():
                if v is not None:
                    tb.add_scalar(f"actors/{a.actor_id}/{k}", float(v), self.state.env_steps)
        write_json_atomic(self.run_dir / ACTORS_JSON, actors)

    def _evaluate_and_checkpoint(self, bar: Any) -> None:
        row: dict[str, Any] = {
            "weights_version": self.version,
            "actors": {a: self.sink.acked_through(a) + 1 for a in self.sink.actors()},  # type: ignore[union-attr]
        }
        self.core.evaluate_and_checkpoint(
            row, self.eval_env, self.to_agent_obs, self._tb, bar, {}, {}
        )


def _with_features(policy_json: str, online: ReplayBuffer, accept: bool) -> str:
    """The policy settings, with the feature shape per camera the actors may send
    (:data:`~robot_rl.transport.codec.FEATURES_KEY`) when ``accept`` and the buffer stores a
    frozen backbone's features."""
    feats, lay = online.features, online.layout
    if not (accept and policy_json and feats is not None and lay.images):
        return policy_json
    doc = json.loads(policy_json)
    doc[FEATURES_KEY] = {
        c: list(feats.feature_shape(tuple(spec.shape[:2]))) for c, spec in lay.images.items()
    }
    return json.dumps(doc, sort_keys=True)


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return default
