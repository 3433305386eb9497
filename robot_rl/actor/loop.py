"""The actor loop: acts on its env, logs every step durably, hands the steps to a learner.

One loop for both modes; only the link to the learner differs (:class:`ActorLink`):

- embedded (``robot-rl train``, :class:`robot_rl.learner.loop.Trainer`): the learner is in this
  process; each written step goes straight into its replay buffers and it updates after every
  env step (exact UTD, deterministic);
- distributed (``robot-rl actor``, :class:`robot_rl.actor.links.RemoteLink`): the log is the
  outbox, streamed over gRPC to ``robot-rl learner``, which stores, routes and learns there.

One iteration per env step::

    a = uniform random (first random_steps) or policy.act(obs)
    env.step(a) -> the step (with the executed action if a human took over) is queued
    (robot_rl.run.held: a step whose learned reward has not arrived waits, with everything
    after it), then written to the log (run/log.zarr, source "online") and, embedded, to the
    learner's buffers
    link.after_step(done)   embedded: one update, evaluations; distributed: push the log's
                            durable rows, never waiting
    between episodes (and every weights_every_steps): load the newest weights, if any

Distributed, a transition is sent only once it is flushed (``EpisodeLog`` flushes every few
steps and at each episode end) and is resent from the log after any reconnect until the learner
acknowledges it, so an actor or a learner crash loses nothing the learner acknowledged and the
learner drops what it already holds. While the learner is away the actor keeps acting with its
last weights.

Staleness bound: before each episode the actor holds (the robot still) while the learner owes
more than ``max_learner_backlog`` updates to the data it received (its periodic stats say how
many), so that a learner starved of CPU does not leave its actors collecting with ever staler
weights (``backlog_holds``, ``backlog_held_s``).

Run control from the learner: ``PAUSE`` ends the current episode at once (the robot holds
still between episodes) and waits; ``RESUME`` goes on; ``STOP`` ends the episode and the run.
An episode cut this way (or by ``total_env_steps``, or a signal) keeps its last row as written
(neither terminated nor truncated: the learner bootstraps from its next observation, as from
any cut); its log metadata says ``ended_by`` (and ``cut_by_budget`` when the step budget cut
it). At the end the actor waits up to ``late_reward_drain_s`` for learned rewards still due,
then lets the link finish (distributed: wait up to ``drain_timeout_s`` for the learner to
acknowledge the rest of the log; embedded: the final evaluation).

Stale sensors (a robot state or camera frame older than its limit, e.g. a camera stalling under
load for a moment): the episode ends where it is (``ended_by: stale_sensor`` with the error in
its metadata, its last row as written), the actor waits ``sensor_retry_s`` and resets; the
count is ``sensor_faults``. A reset the arm's driver refuses for an error of its own (a servo
that did not answer; :class:`~robot_rl.core.types.ArmFaultError`, not an e-stop) is waited out
the same way (``arm_faults``): the bridge's ``auto_recover`` or a person's ``clear_error`` ends
it. When no step has succeeded for ``sensor_fault_timeout_s`` (the sensor or its node is gone,
the arm's error stays) the error ends the run.

Ticks: the time each iteration spends outside ``env.step`` (acting, logging, pushing, loading
weights; embedded, also the update) is measured; an iteration over ``tick_budget_s`` is an
overrun (counted, logged at warning level, reported). The acting thread's CPU time over the same
span is measured too (``time.thread_time``): an overrun with little CPU time was spent waiting
(for the CPU, the GIL held by another thread, a lock), not computing, so the fix is less load
beside the actor rather than a faster policy (``overrun_work_s`` and ``overrun_thread_cpu_s``
total both over the overruns). Of the wait, the time the thread was ready but had no CPU (Linux
schedstat's run delay, ``core.realtime.run_delay_s``) is ``overrun_cpu_wait_s``; the rest it was
blocked (the GIL, a lock, IO), and of that ``overrun_gc_s`` is Python's garbage collector in any
thread (a full collection holds the GIL throughout: the actor freezes the objects of its setup,
``gc.freeze``, so that collections scan only what it made since). The env's own fixed-rate clock
(RobotEnv in real time) counts its overruns separately. Two things are kept out of the ticks:
the log's flush runs in a worker thread, started when due just before ``env.step`` waits for the
robot and never waited for: the next steps are appended meanwhile, and a flush still running
when the next is due is left to finish (a flush of 10 steps of two 128x128 cameras took ~80-180
ms of wall time on a loaded 2-core machine, nearly all of it in zarr's threads: every 10th step
overran the 100 ms budget; joined after ``env.step`` it still made half the overrun time). And
the work of a step that ends its episode (the episode's end written and flushed, the counters
saved): no action waits for it, a reset comes next.

The actor's directory (embedded: the run directory)::

    log.zarr/          every transition it produced (durable; the outbox)
    actor.json         counters, rewritten at every episode end
    policy.json        distributed: the learner's policy settings (from its Hello)
    run_settings.json  distributed: the run's env settings (from its Hello)
    weights.safetensors distributed: the last weights loaded (a restart acts with them while
                       the learner is away)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from robot_rl.actor.stats import ActorStats, RunningStat, record_tick
from robot_rl.core import keys
from robot_rl.core.clock import RateClock, obs_stamp
from robot_rl.core.intervention import InterventionSource
from robot_rl.core.learned_reward import LateRewardSource
from robot_rl.core.realtime import gc_seconds, run_delay_s
from robot_rl.core.types import ArmFaultError, RobotFaultError
from robot_rl.replay import EpisodeLog, ObsAdapter
from robot_rl.run.evaluate import ActionMap
from robot_rl.run.held import EpisodeWriter, Held, HeldSteps
from robot_rl.run.rundir import LOG_ZARR, SOURCE_ONLINE, write_json_atomic
from robot_rl.run.traps import RewardTrapCheck

log = logging.getLogger(__name__)

ACTOR_JSON = "actor.json"
WEIGHTS_FILE = "weights.safetensors"


def _clocks() -> tuple[float, float, float | None, float]:
    """(wall, the acting thread's CPU, its wait for a CPU (None: not reported), garbage
    collection of any thread), seconds, for a tick's accounting."""
    return time.monotonic(), time.thread_time(), run_delay_s(), gc_seconds()


def _minus(a: tuple, *bs: tuple) -> tuple:
    """``a - b - ...`` per clock (None stays None): ``_minus(_clocks(), start)`` is a span."""
    out = list(a)
    for b in bs:
        out = [None if x is None or y is None else x - y for x, y in zip(out, b, strict=True)]
    return tuple(out)


LOG_FLUSH = {"flush_every_steps": 3, "flush_interval_s": 1.0}
"""The actor log's flush cadence: a flush runs in a worker while the actor goes on, so a step
becomes durable (and is sent) a flush later. On a loaded 2-core machine one costs ~35 ms plus
~7 ms per step of two 128x128 cameras: 3 steps ~55 ms (10 steps: ~105 ms)."""


class Policy(Protocol):
    """What the actor acts with (:class:`robot_rl.actor.policy.ActingPolicy`, or embedded the
    learner's own agent)."""

    @property
    def version(self) -> int: ...

    def act(self, obs_learner: Mapping[str, Any]) -> np.ndarray: ...

    def load(self, version: int, snapshot: Mapping[str, Any]) -> None: ...

    def save(self, path: Path) -> None: ...


class ActorLink(Protocol):
    """The actor's side of the transport: the only part the two modes do not share."""

    def attach(self, log: EpisodeLog, stats: ActorStats) -> Any:
        """Called once the log is open; returns the router (``begin_episode``, ``add``) written
        steps go to in this process (embedded: the learner's), or None (the learner routes
        them on its side)."""
        ...

    @property
    def run_state(self) -> str: ...

    @property
    def fatal_error(self) -> Exception | None: ...

    def after_step(self, done: bool) -> None: ...

    def idle(self) -> None: ...

    def latest_weights(self) -> tuple[int, dict[str, Any]] | None: ...

    @property
    def learner_backlog(self) -> int:
        """Updates the learner owes to the data it received (embedded: always 0)."""
        ...

    def finish(self, ok: bool) -> None: ...


@dataclass(frozen=True)
class ActorConfig:
    """How an actor runs."""

    total_env_steps: int | None = None
    """Stop after this many env steps of this actor (over restarts); None: until STOP."""
    seed: int = 0
    """Seed of the exploration noise and of the reset sequence (episode i resets with seed + i)."""
    random_steps: int = 0
    """Uniform random actions for this actor's first steps (over restarts), as ``train``
    without demos."""
    weights_every_steps: int = 0
    """Also load new weights mid-episode every this many steps (0: only between episodes)."""
    tick_budget_s: float | None = 0.1
    """Actor work per step (outside env.step) above this is a tick overrun, seconds (None: not
    counted; the embedded trainer updates inside the tick)."""
    control_hz: float | None = None
    """Pace the loop at this rate on the wall clock (an unpaced twin acting like a robot at its
    control rate; ticks that start late are counted as ``late_ticks``). None: as fast as the env
    steps (a real robot, or a realtime twin, paces itself)."""
    max_learner_backlog: int | None = 1000
    """Before each episode, hold (the robot still, as between episodes) while the learner owes
    more than this many updates to the data it received, so that a learner starved of CPU
    (or slower than its actors) does not leave them collecting with ever staler weights; the
    episodes then come from a policy at most this many updates (plus one episode) behind the
    data. Read from the learner's periodic stats; never while the learner is away. None: never
    hold (the learner pays what it owes at the end)."""
    pause_poll_s: float = 0.05
    """While paused (or held for the learner), check the run state this often, seconds."""
    late_reward_drain_s: float = 30.0
    """At the end, wait this long for learned rewards still due, seconds."""
    sensor_fault_timeout_s: float = 30.0
    """A stale sensor (robot state or camera frame older than its limit) ends the episode where it
    is and the actor resets and goes on, retrying every ``sensor_retry_s``; when no step has
    succeeded for this long, the error ends the run, seconds (0: the first one ends it)."""
    sensor_retry_s: float = 0.5
    """After a stale sensor, wait this long before the next reset, seconds."""
    log_flush_every_steps: int = LOG_FLUSH["flush_every_steps"]
    """Flush the log after this many steps (or ``LOG_FLUSH``'s 1 s, whichever first). A
    distributed actor sends a step only once it is flushed: 3 keeps the learner close. The
    embedded trainer routes steps to its buffers directly and flushes for durability only, so
    it uses 100 (every second, in effect): each flush costs zarr's IO threads CPU and the GIL,
    and every 3 steps made a 1500-step ``train`` 1.30x slower than every 100 (58.3 s against
    45.0 s on this 2-core machine)."""

    def __post_init__(self) -> None:
        if self.total_env_steps is not None and self.total_env_steps < 1:
            raise ValueError(f"total_env_steps must be >= 1 or None, got {self.total_env_steps}")
        if self.random_steps < 0 or self.weights_every_steps < 0:
            raise ValueError("random_steps and weights_every_steps must be >= 0")
        if self.control_hz is not None and self.control_hz <= 0:
            raise ValueError(f"control_hz must be > 0 or None, got {self.control_hz}")
        if self.tick_budget_s is not None and self.tick_budget_s <= 0:
            raise ValueError(f"tick_budget_s must be > 0 or None, got {self.tick_budget_s}")
        if self.pause_poll_s <= 0 or self.late_reward_drain_s < 0:
            raise ValueError("pause_poll_s must be > 0, late_reward_drain_s >= 0")
        if self.sensor_fault_timeout_s < 0 or self.sensor_retry_s < 0:
            raise ValueError("sensor_fault_timeout_s and sensor_retry_s must be >= 0")
        if self.log_flush_every_steps < 1:
            raise ValueError(
                f"log_flush_every_steps must be >= 1, got {self.log_flush_every_steps}"
            )
        if self.max_learner_backlog is not None and self.max_learner_backlog < 0:
            raise ValueError(
                f"max_learner_backlog must be >= 0 or None, got {self.max_learner_backlog}"
            )


def check_sources(intervention: Any, late_rewards: Any) -> None:
    """TypeError unless ``intervention`` / ``late_rewards`` are None or the env's intervention
    / learned-reward wrappers (what the actor loop reads after each step)."""
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


class Actor:
    """The actor loop (see the module docstring).

    Args:
        env: Its env (Dict observation, finite Box action space).
        policy: What it acts with (:class:`Policy`).
        run_dir: Its directory (see the module docstring); the log is reopened if present (a
            restart: an episode cut by a crash is kept as truncated), else created.
        link: The link to the learner (:class:`ActorLink`).
        cfg: Settings.
        intervention: The env's intervention wrapper (:class:`robot_rl.wrappers.Intervention`),
            or None: an intervened step is logged with the executed (human) action, the policy's
            proposal in ``policy_action`` and ``intervened=True``.
        late_rewards: The env's learned-reward wrapper when its rewards may arrive late (see
            :mod:`robot_rl.run.held`), or None.
        on_episode: Optional ``(stats, episode_return, success, meta)`` hook after every
            written episode (progress display, tensorboard).
        log_meta: Extra metadata of a new log.
        traps: Judges every written episode for the reward traps
            (:class:`robot_rl.run.traps.RewardTrapCheck`, with the learner's discount and
            reward offset; it warns in the log), or None. ``traps.warnings`` lists what it found.
    """

    def __init__(
        self,
        env: gym.Env,
        policy: Policy,
        run_dir: Path,
        link: ActorLink,
        cfg: ActorConfig,
        intervention: InterventionSource | None = None,
        late_rewards: LateRewardSource | None = None,
        on_episode: Callable[[ActorStats, float, bool, dict], None] | None = None,
        log_meta: Mapping[str, Any] | None = None,
        traps: RewardTrapCheck | None = None,
    ) -> None:
        check_sources(intervention, late_rewards)
        self.env, self.policy, self.link, self.cfg = env, policy, link, cfg
        self.run_dir = Path(run_dir)
        self.adapter = ObsAdapter(env.observation_space)
        self.amap = ActionMap(env.action_space)
        self.intervention, self.late_rewards = intervention, late_rewards
        self.on_episode = on_episode
        self.traps = traps
        self.random_rng = np.random.default_rng((cfg.seed, 2))  # STYLE.md #11: its own stream
        self.stats = ActorStats()
        self._obs_age = RunningStat()  # ActorStats.mean/max_obs_age_s
        self._action_age = RunningStat()  # ActorStats.mean/max_action_age_s
        self._act = RunningStat()  # ActorStats.mean_act_s
        self.log = self._open_log(dict(log_meta or {}))
        online = [e for e in self.log.episodes if e.source == SOURCE_ONLINE]
        self.stats.env_steps = int(sum(e.length for e in online))
        self.stats.episodes = len(online)
        model_id = None if late_rewards is None else late_rewards.model_id
        self.writer = EpisodeWriter(link.attach(self.log, self.stats), self._written, model_id)
        self.writer.log = self.log
        self.held = HeldSteps(self.writer.write, on_drop=self.writer.drop)
        self._stop_request = ""
        self._held_for_backlog = False  # holding before an episode for the learner to catch up
        self._ep_len, self._ep_seed, self._ep_success = 0, 0, False
        self._fault_since: float | None = None  # first stale sensor since the last good step
        self.pace = RateClock(cfg.control_hz) if cfg.control_hz is not None else None

    def request_stop(self, reason: str = "signal") -> None:
        """End the current episode and the run at the next step (e.g. from a signal handler)."""
        self._stop_request = reason

    def _open_log(self, meta: dict[str, Any]) -> EpisodeLog:
        path = self.run_dir / LOG_ZARR
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if path.exists():
            elog = EpisodeLog.open(
                path, unfinished="truncate", mode="a", auto_flush=False, **self._flush_cadence()
            )
            if elog.layout != self.adapter.layout or elog.action_dim != self.amap.dim:
                elog.close()
                raise ValueError(
                    f"{path} holds another observation layout / action size than this env; "
                    "use another --run for this actor"
                )
            return elog
        meta = {"source": SOURCE_ONLINE, "seed": self.cfg.seed, **meta}
        return EpisodeLog.create(
            path, self.adapter.layout, self.amap.dim, meta, auto_flush=False,
            **self._flush_cadence(),
        )  # fmt: skip

    def _flush_cadence(self) -> dict[str, float]:
        return {**LOG_FLUSH, "flush_every_steps": self.cfg.log_flush_every_steps}

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> ActorStats:
        """Act until STOP, ``total_env_steps`` or :meth:`request_stop`; returns the counters."""
        st, cfg = self.stats, self.cfg
        obs: Any = None
        ok = False
        try:
            while not (reason := self._stop_reason()):
                if self.link.run_state == "paused":
                    if obs is not None:  # hold still between episodes while paused
                        self._end_episode({"ended_by": "pause"})
                        obs = None
                    st.paused_s += self._idle()
                    continue
                if obs is None and self._learner_behind():
                    st.backlog_held_s += self._idle()
                    continue
                self._held_for_backlog = False
                try:
                    if obs is None:
                        self._maybe_load_weights()
                        obs = self._new_episode()
                    elif cfg.weights_every_steps and self._ep_len % cfg.weights_every_steps == 0:
                        self._maybe_load_weights()
                    obs, done = self._step(obs)
                except RobotFaultError as e:
                    self._robot_fault(e)
                    obs = None  # the next observation comes from a reset
                    continue
                self._fault_since = None
                if done:
                    obs = None
            st.stopped_by = reason
            ok = True
        finally:
            if obs is not None:
                meta: dict[str, Any] = {"ended_by": st.stopped_by or "error"}
                if st.stopped_by == "steps":
                    meta["cut_by_budget"] = True
                self._end_episode(meta)
            if ok and self.late_rewards is not None:
                self.held.label(self.late_rewards.drain(cfg.late_reward_drain_s))
            self.held.give_up()
            st.dropped_steps = self.held.dropped
            try:
                self.link.finish(ok)
            finally:
                self.log.close()
                self._write_stats()
        return st

    def _learner_behind(self) -> bool:
        """Whether to hold before the next episode: the learner owes more updates than
        ``max_learner_backlog`` (one count and one log line per hold)."""
        bound = self.cfg.max_learner_backlog
        if bound is None:
            return False
        owed = self.link.learner_backlog
        if owed <= bound:
            return False
        if not self._held_for_backlog:
            self._held_for_backlog = True
            self.stats.backlog_holds += 1
            log.info("holding before the next episode: the learner owes %d updates (> %d)",
                     owed, bound)  # fmt: skip
        return True

    def _stop_reason(self) -> str:
        """Why the run ends now ("" to go on)."""
        st, cfg = self.stats, self.cfg
        if self._stop_request:
            return self._stop_request
        if self.link.fatal_error is not None:
            log.error("the learner refused this actor: %s", self.link.fatal_error)
            return "refused"
        if self.link.run_state == "stopped":
            return "learner"
        if cfg.total_env_steps is not None and st.env_steps >= cfg.total_env_steps:
            return "steps"
        return ""

    def _step(self, obs: Any) -> tuple[Any, bool]:
        """One env step, queued for the log (and the learner); returns (next obs, done)."""
        st, cfg = self.stats, self.cfg
        s0 = _clocks()
        o = self.adapter.to_learner(obs)
        if st.env_steps < cfg.random_steps:
            a = self.random_rng.uniform(-1.0, 1.0, self.amap.dim).astype(np.float32)
        else:
            a = np.asarray(self.policy.act(o), dtype=np.float32)
        version = self.policy.version
        s_env = _clocks()
        act_s = s_env[0] - s0[0]
        if self.log.flush_due():  # written in a worker while the env waits (module doc)
            self.log.flush_in_background()
        try:
            obs, reward, terminated, truncated, info = self.env.step(self.amap.to_env(a))
        finally:
            in_env = _minus(_clocks(), s_env)
        if self._ep_len == 0:  # begin lazily: a run stopped after a reset (or a step that
            # raised) logs no empty episode
            begin = {"source": SOURCE_ONLINE, "version": version, "seed": self._ep_seed}
            self.held.push(Held("begin", begin))
        a_exec, intervened = self._executed(a)
        step = {
            "obs_learner": o,
            "action": a_exec,
            "policy_action": a,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "intervened": intervened,
            "policy_version": version,
            "stamp_s": obs_stamp(obs),
            "next_obs_learner": self.adapter.to_learner(obs),
        }
        self.held.push(Held("step", step, self._pending_key(), float(reward)))
        st.env_steps += 1
        self._ep_len += 1
        self._ep_success = self._ep_success or bool(info.get(keys.INFO_SUCCESS, False))
        self._obs_age.add(info.get(keys.INFO_OBS_AGE))
        self._action_age.add(info.get(keys.INFO_ACTION_AGE))
        st.mean_obs_age_s, st.max_obs_age_s = self._obs_age.mean, self._obs_age.max
        st.mean_action_age_s, st.max_action_age_s = self._action_age.mean, self._action_age.max
        self._act.add(act_s)
        st.mean_act_s = self._act.mean
        done = bool(terminated or truncated)
        in_end = (0.0, 0.0, 0.0, 0.0)
        if done:  # no action waits for the episode's end (a reset comes next): not tick work
            s_end = _clocks()
            self._end_episode({})
            in_end = _minus(_clocks(), s_end)
        if self.late_rewards is not None:
            self.held.label(self.late_rewards.poll())
        t_push = time.monotonic()
        self.link.after_step(done)
        push_s = time.monotonic() - t_push
        work_s, cpu_s, cpu_wait_s, gc_s = _minus(_clocks(), s0, in_env, in_end)
        record_tick(st, cfg.tick_budget_s, work_s, cpu_s, push_s, cpu_wait_s, gc_s)
        if self.pace is not None:
            self.pace.tick()
            st.late_ticks = self.pace.overruns
        return obs, done

    def _robot_fault(self, err: RobotFaultError) -> None:
        """A stale sensor, or a reset the arm's driver refused for an error of its own: end the
        episode where it is (its last logged step stays as written, like any cut) and wait
        before the loop resets; re-raise once no step has succeeded for
        ``sensor_fault_timeout_s``."""
        st, cfg = self.stats, self.cfg
        now = time.monotonic()
        if self._fault_since is None:
            self._fault_since = now
        arm = isinstance(err, ArmFaultError)
        what = "arm fault" if arm else "stale sensor"
        st.arm_faults += int(arm)
        st.sensor_faults += int(not arm)
        if now - self._fault_since >= cfg.sensor_fault_timeout_s:
            log.error("no step for %.1f s (%s): the run ends", now - self._fault_since, what)
            raise err
        log.warning(
            "%s at env step %d: %s; the episode ends here and the next one starts once it has "
            "cleared (giving up after %.0f s without a step)",
            what, st.env_steps, err, cfg.sensor_fault_timeout_s,
        )  # fmt: skip
        self._end_episode({"ended_by": what.replace(" ", "_"), "error": str(err)[:500]})
        time.sleep(cfg.sensor_retry_s)

    def _idle(self) -> float:
        """One poll period without acting (the link keeps pushing and reading control);
        returns the seconds it took."""
        t0 = time.monotonic()
        self.link.idle()
        time.sleep(self.cfg.pause_poll_s)
        return time.monotonic() - t0

    def _executed(self, a: np.ndarray) -> tuple[np.ndarray, bool]:
        """(executed action in policy space, intervened) of the step just taken with ``a``."""
        if self.intervention is None:
            return a, False
        rec = self.intervention.last_step
        if rec is None:
            raise RuntimeError(
                "the intervention wrapper has no record of the step just taken; hand the "
                "actor the Intervention wrapper that is (or is inside) its env"
            )
        self.stats.interventions += int(rec.onset)
        self.stats.intervened_steps += int(rec.intervened)
        if not rec.intervened:
            return a, False
        return self.amap.to_policy(rec.action), True

    def _pending_key(self) -> tuple[int, int] | None:
        """(episode, step) of the step just taken if its learned reward is still pending."""
        if self.late_rewards is None:
            return None
        rec = self.late_rewards.last_step
        return (rec.episode, rec.step) if rec is not None and rec.pending else None

    def _new_episode(self) -> Any:
        st = self.stats
        self._ep_seed = self.cfg.seed + st.episodes
        obs, _ = self.env.reset(seed=self._ep_seed)
        st.episodes += 1
        self._ep_len, self._ep_success = 0, False
        return obs

    def _end_episode(self, meta: dict) -> None:
        """Queue the env episode's end (nothing if it has no step yet)."""
        if self._ep_len == 0:
            return
        if self.intervention is not None:
            meta = {**meta, **self.intervention.episode_stats.as_dict()}
        self.held.push(Held("end", {"success": self._ep_success, "meta": meta}))
        self._ep_len = 0

    def _written(self, success: bool, meta: dict[str, Any], ep_return: float) -> None:
        """EpisodeWriter hook: an env episode's steps are all in the log."""
        st = self.stats
        st.last_returns = [*st.last_returns[-9:], float(ep_return)]
        st.dropped_steps = self.held.dropped
        self._write_stats()
        if self.traps is not None:
            w = self.writer
            self.traps.episode(w.episode_rewards, w.episode_terminated, success, st.env_steps)
        if self.on_episode is not None:
            self.on_episode(st, ep_return, success, meta)

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

    def _write_stats(self) -> None:
        write_json_atomic(self.run_dir / ACTOR_JSON, asdict(self.stats))
