"""The distributed actor: acts on its env, logs every step durably, streams the log to a learner.

One iteration per env step::

    a = uniform random (first random_steps) or policy.act(obs)
    env.step(a) -> log.append (its own run/log.zarr, source "online": the outbox)
    push the log's durable rows from client.next_seq on (never waits: LearnerClient.push)
    between episodes (and every weights_every_steps): load the newest weights, if any

The log is the outbox (:class:`robot_rl.transport.outbox.LogOutbox`): a transition is sent
only once it is flushed (``EpisodeLog`` flushes every few steps and at each episode end) and
is resent from the log after any reconnect until the learner acknowledges it, so an actor or a
learner crash loses nothing the learner acknowledged and the learner drops what it already
holds. While the learner is away the actor keeps acting with its last weights.

Run control from the learner: ``PAUSE`` ends the current episode at once (the robot holds
still between episodes) and waits; ``RESUME`` goes on; ``STOP`` ends the episode and the run.
An episode cut this way keeps its last row as sent (neither terminated nor truncated: the
learner bootstraps from its next observation, as from any cut; the episode's log metadata says
``ended_by``). The actor also stops after ``total_env_steps`` (if set), then waits up to
``drain_timeout_s`` for the learner to acknowledge the rest of its log.

Ticks: the time each iteration spends outside ``env.step`` (acting, logging, pushing, loading
weights) is measured; an iteration over ``tick_budget_s`` is an overrun (counted, logged at
warning level, reported). The env's own fixed-rate clock (RobotEnv in real time) counts its
overruns separately.

The actor's directory::

    log.zarr/          every transition it produced (durable; the outbox)
    policy.json        the learner's policy settings (from its Hello), for a restart without it
    weights.safetensors the last weights loaded (a restart acts with them while the learner is
                       away)
    actor.json         counters, rewritten at every episode end
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robot_rl.actor.policy import ActingPolicy
from robot_rl.core.clock import RateClock
from robot_rl.core.intervention import InterventionSource
from robot_rl.learner.evaluate import ActionMap, obs_stamp, success_of
from robot_rl.learner.rundir import write_json_atomic
from robot_rl.replay import EpisodeLog, ObsAdapter
from robot_rl.transport.outbox import LogOutbox

log = logging.getLogger(__name__)

ACTOR_JSON = "actor.json"
WEIGHTS_FILE = "weights.safetensors"
SOURCE_ONLINE = "online"


class LearnerLink(Protocol):
    """What the actor needs of its connection (``robot_rl.transport.client.LearnerClient``)."""

    @property
    def next_seq(self) -> int | None: ...

    @property
    def acked_through(self) -> int: ...

    @property
    def run_state(self) -> str: ...

    @property
    def fatal_error(self) -> Exception | None: ...

    def push(self, first_seq: int, steps: Mapping[str, np.ndarray]) -> bool: ...

    def latest_weights(self) -> tuple[int, dict[str, Any]] | None: ...

    def wait_acked(self, seq: int, timeout_s: float | None = None) -> bool: ...


@dataclass(frozen=True)
class ActorConfig:
    """How a distributed actor runs."""

    total_env_steps: int | None = None
    """Stop after this many env steps of this actor (over restarts); None: until STOP."""
    seed: int = 0
    """Seed of the exploration noise and of the reset sequence (episode i resets with seed + i)."""
    random_steps: int = 0
    """Uniform random actions for this actor's first steps (over restarts), as ``train``
    without demos."""
    weights_every_steps: int = 0
    """Also load new weights mid-episode every this many steps (0: only between episodes)."""
    push_batch_steps: int = 64
    """Most transitions per pushed batch."""
    tick_budget_s: float = 0.1
    """Actor work per step (outside env.step) above this is a tick overrun, seconds."""
    control_hz: float | None = None
    """Pace the loop at this rate on the wall clock (an unpaced twin acting like a robot at its
    control rate; ticks that start late are counted as ``late_ticks``). None: as fast as the env
    steps (a real robot, or a realtime twin, paces itself)."""
    drain_timeout_s: float = 30.0
    """At the end, wait this long for the learner to acknowledge the rest of the log, seconds."""
    pause_poll_s: float = 0.05
    """While paused, check the run state this often, seconds."""

    def __post_init__(self) -> None:
        if self.total_env_steps is not None and self.total_env_steps < 1:
            raise ValueError(f"total_env_steps must be >= 1 or None, got {self.total_env_steps}")
        if self.random_steps < 0 or self.weights_every_steps < 0:
            raise ValueError("random_steps and weights_every_steps must be >= 0")
        if self.push_batch_steps < 1:
            raise ValueError(f"push_batch_steps must be >= 1, got {self.push_batch_steps}")
        if self.control_hz is not None and self.control_hz <= 0:
            raise ValueError(f"control_hz must be > 0 or None, got {self.control_hz}")
        if min(self.tick_budget_s, self.pause_poll_s) <= 0 or self.drain_timeout_s < 0:
            raise ValueError("tick_budget_s and pause_poll_s must be > 0, drain_timeout_s >= 0")


@dataclass
class ActorStats:
    """What an actor did (this process; ``env_steps``/``episodes`` count over restarts)."""

    env_steps: int = 0
    episodes: int = 0
    ticks: int = 0
    tick_overruns: int = 0
    max_tick_work_s: float = 0.0
    late_ticks: int = 0
    weights_loaded: int = 0
    weights_version: int = 0
    weights_refused: int = 0
    pushed_batches: int = 0
    push_refused: int = 0
    paused_s: float = 0.0
    acked_through: int = -1
    logged_transitions: int = 0
    stopped_by: str = ""
    last_returns: list[float] = field(default_factory=list)


class Actor:
    """The distributed actor loop (see the module docstring).

    Args:
        env: Its env (Dict observation, finite Box action space).
        policy: The acting policy (:class:`ActingPolicy`).
        run_dir: The actor's directory (see the module docstring); its log is reopened if
            present (a restart), else created.
        link: The connection to the learner (``LearnerClient``).
        cfg: Settings.
        intervention: The env's intervention wrapper, or None (see
            :class:`robot_rl.learner.loop.Trainer`): an intervened step is logged with the
            executed action, the policy's proposal and ``intervened=True``.
        on_episode: Optional ``(stats, episode_return, success)`` hook after every episode
            (progress display).
    """

    def __init__(
        self,
        env: gym.Env,
        policy: ActingPolicy,
        run_dir: Path,
        link: LearnerLink,
        cfg: ActorConfig,
        intervention: InterventionSource | None = None,
        on_episode: Callable[[ActorStats, float, bool], None] | None = None,
    ) -> None:
        self.env, self.policy, self.link, self.cfg = env, policy, link, cfg
        self.run_dir = Path(run_dir)
        self.adapter = ObsAdapter(env.observation_space)
        self.amap = ActionMap(env.action_space)
        self.intervention = intervention
        self.on_episode = on_episode
        self.random_rng = np.random.default_rng((cfg.seed, 2))
        self.stats = ActorStats()
        self.log = self._open_log()
        self.outbox = LogOutbox(self.log)
        online = [e for e in self.log.episodes if e.source == SOURCE_ONLINE]
        self.stats.env_steps = int(sum(e.length for e in online))
        self.stats.episodes = len(online)
        self._stop_request = ""
        self.pace = RateClock(cfg.control_hz) if cfg.control_hz is not None else None

    def request_stop(self, reason: str = "signal") -> None:
        """End the current episode and the run at the next step (e.g. from a signal handler)."""
        self._stop_request = reason

    def _open_log(self) -> EpisodeLog:
        path = self.run_dir / "log.zarr"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if path.exists():
            elog = EpisodeLog.open(path, unfinished="truncate", mode="a")
            if elog.layout != self.adapter.layout or elog.action_dim != self.amap.dim:
                elog.close()
                raise ValueError(
                    f"{path} holds another observation layout / action size than this env; "
                    "use another --run for this actor"
                )
            return elog
        meta = {"source": SOURCE_ONLINE, "seed": self.cfg.seed, "role": "actor"}
        return EpisodeLog.create(path, self.adapter.layout, self.amap.dim, meta)

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> ActorStats:
        """Act until STOP (or ``total_env_steps``); returns the counters."""
        st, cfg = self.stats, self.cfg
        obs: Any = None
        ep_return, ep_len, ep_infos = 0.0, 0, []
        try:
            while True:
                state = self.link.run_state
                if self._stop_request:
                    st.stopped_by = self._stop_request
                    break
                if self.link.fatal_error is not None:
                    st.stopped_by = "refused"
                    log.error("the learner refused this actor: %s", self.link.fatal_error)
                    break
                if state == "stopped":
                    st.stopped_by = "learner"
                    break
                if cfg.total_env_steps is not None and st.env_steps >= cfg.total_env_steps:
                    st.stopped_by = "steps"
                    break
                if state == "paused":
                    if obs is not None:  # hold still between episodes while paused
                        self._end_episode(ep_return, ep_infos, {"ended_by": "pause"})
                        obs = None
                    t0 = time.monotonic()
                    self._pump()
                    time.sleep(cfg.pause_poll_s)
                    st.paused_s += time.monotonic() - t0
                    continue
                if obs is None:
                    self._maybe_load_weights()
                    obs, ep_return, ep_len, ep_infos = self._new_episode(), 0.0, 0, []
                elif cfg.weights_every_steps and ep_len % cfg.weights_every_steps == 0:
                    self._maybe_load_weights()
                obs, reward, done, info = self._step(obs)
                ep_return += reward
                ep_len += 1
                ep_infos.append(info)
                if done:
                    self._end_episode(ep_return, ep_infos, {})
                    obs = None
        finally:
            if obs is not None:
                self._end_episode(ep_return, ep_infos, {"ended_by": st.stopped_by or "error"})
            self._drain()
            self.log.close()
            self._write_stats()
        return st

    def _step(self, obs: Any) -> tuple[Any, float, bool, Mapping]:
        """One env step, logged and pushed; returns (next obs, reward, done, info)."""
        st, cfg = self.stats, self.cfg
        t0 = time.monotonic()
        o = self.adapter.to_learner(obs)
        if st.env_steps < cfg.random_steps:
            a = self.random_rng.uniform(-1.0, 1.0, self.amap.dim).astype(np.float32)
        else:
            a = self.policy.act(o)
        t_env = time.monotonic()
        obs, reward, terminated, truncated, info = self.env.step(self.amap.to_env(a))
        env_s = time.monotonic() - t_env
        a_exec, intervened = self._executed(a)
        self.log.append(
            o, a_exec, a, float(reward), bool(terminated), bool(truncated), intervened,
            self.policy.version, obs_stamp(obs), self.adapter.to_learner(obs),
        )  # fmt: skip
        st.env_steps += 1
        self._pump()
        self._tick(time.monotonic() - t0 - env_s)
        if self.pace is not None:
            self.pace.tick()
            st.late_ticks = self.pace.overruns
        return obs, float(reward), bool(terminated or truncated), info

    def _tick(self, work_s: float) -> None:
        st = self.stats
        st.ticks += 1
        st.max_tick_work_s = max(st.max_tick_work_s, work_s)
        if work_s > self.cfg.tick_budget_s:
            st.tick_overruns += 1
            log.warning(
                "tick overrun: %.3f s of actor work (budget %.3f s) at env step %d",
                work_s, self.cfg.tick_budget_s, st.env_steps,
            )  # fmt: skip

    def _executed(self, a: np.ndarray) -> tuple[np.ndarray, bool]:
        if self.intervention is None:
            return a, False
        rec = self.intervention.last_step
        if rec is None or not rec.intervened:
            return a, False
        return self.amap.to_policy(rec.action), True

    def _new_episode(self) -> Any:
        st = self.stats
        seed = self.cfg.seed + st.episodes
        obs, _ = self.env.reset(seed=seed)
        self.log.begin_episode(SOURCE_ONLINE, policy_version=self.policy.version, seed=seed)
        st.episodes += 1
        return obs

    def _end_episode(self, ep_return: float, infos: list, meta: dict) -> None:
        success = success_of(infos) if infos else False
        if self.intervention is not None:
            meta = {**meta, **self.intervention.episode_stats.as_dict()}
        self.log.end_episode(success, episode_return=ep_return, **meta)
        st = self.stats
        st.last_returns = [*st.last_returns[-9:], float(ep_return)]
        self._pump()
        self._write_stats()
        if self.on_episode is not None:
            self.on_episode(st, ep_return, success)

    # -- transport ---------------------------------------------------------------------------

    def _pump(self) -> None:
        """Push the log's durable rows from the learner's next_seq on, without waiting."""
        st = self.stats
        end = self.outbox.end_seq
        st.logged_transitions = end
        while (s := self.link.next_seq) is not None and s < end:
            stop = min(s + self.cfg.push_batch_steps, end)
            if not self.link.push(s, self.outbox.read(s, stop)):
                st.push_refused += 1
                break
            st.pushed_batches += 1
        st.acked_through = self.link.acked_through

    def _maybe_load_weights(self) -> None:
        got = self.link.latest_weights()
        if got is None or got[0] <= self.policy.version:
            return
        version, snapshot = got
        from robot_rl.transport.codec import PayloadError

        try:
            self.policy.load(version, snapshot)
        except PayloadError as e:
            self.stats.weights_refused += 1
            log.warning("weights version %d refused: %s; acting with the previous ones", version, e)
            return
        self.policy.save(self.run_dir / WEIGHTS_FILE)
        self.stats.weights_loaded += 1
        self.stats.weights_version = version

    def _drain(self) -> None:
        """Push what is left and wait (bounded) for the learner to acknowledge it."""
        self.log.flush()
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        end = self.outbox.end_seq
        while time.monotonic() < deadline and self.link.acked_through < end - 1:
            self._pump()
            self.link.wait_acked(end - 1, timeout_s=0.2)
        self.stats.acked_through = self.link.acked_through
        self.stats.logged_transitions = end

    def _write_stats(self) -> None:
        write_json_atomic(self.run_dir / ACTOR_JSON, asdict(self.stats))
