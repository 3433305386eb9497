"""The actor's counters (:class:`ActorStats`, written to ``actor.json``) and the accounting of
its ticks and sensor ages (see :mod:`robot_rl.actor.loop`'s docstring, "Ticks")."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)


@dataclass
class ActorStats:
    """What an actor did (this process; ``env_steps``/``episodes`` count over restarts)."""

    env_steps: int = 0
    episodes: int = 0
    ticks: int = 0
    tick_overruns: int = 0
    max_tick_work_s: float = 0.0
    overrun_work_s: float = 0.0
    """Wall time of the overrun ticks' actor work, summed, seconds."""
    overrun_thread_cpu_s: float = 0.0
    """CPU time of the acting thread in the same spans, summed, seconds (see the module
    docstring: far below ``overrun_work_s`` means the overruns were waits)."""
    overrun_cpu_wait_s: float | None = 0.0
    """Of ``overrun_work_s``: the acting thread ready to run but without a CPU (Linux's run
    delay). What is neither this nor ``overrun_thread_cpu_s`` it was blocked: the GIL held by
    another thread of the actor, a lock, IO. None where the kernel does not report it."""
    overrun_gc_s: float = 0.0
    """Of ``overrun_work_s``: Python's garbage collector running, in any thread of the actor
    (it holds the GIL throughout, so the acting thread is blocked or collecting itself)."""
    overrun_push_s: float = 0.0
    """Of ``overrun_work_s``: handing the logged steps to the link (reading them back from the
    log, queueing them for the learner; embedded: the update)."""
    mean_obs_age_s: float = 0.0
    """Mean age of the observation's oldest sensor reading when the env assembled it (env
    clock; ``info["obs_age_s"]``), over the steps of this process."""
    max_obs_age_s: float = 0.0
    mean_action_age_s: float = 0.0
    """Mean age of that observation when its action was sent (``info["action_age_s"]``: the
    observation's age plus the actor's work on it: reward, policy, log); over a real arm this
    is the latency the policy acts with."""
    max_action_age_s: float = 0.0
    mean_act_s: float = 0.0
    """Mean wall time from the observation's arrival at the actor to its action (the policy's
    features and head), seconds: the actor's own part of the action age."""
    mean_tick_work_s: float = 0.0
    """Mean wall time of a step's actor work outside ``env.step`` (acting, logging, pushing),
    seconds; ``max_tick_work_s`` is its maximum."""
    late_ticks: int = 0
    interventions: int = 0
    intervened_steps: int = 0
    weights_loaded: int = 0
    weights_version: int = 0
    weights_refused: int = 0
    pushed_batches: int = 0
    push_refused: int = 0
    feature_rows: int = 0
    """Rows pushed with the backbone features of their next_obs (the learner runs no backbone
    on them; see :class:`robot_rl.actor.links.RemoteLink`)."""
    featureless_rows: int = 0
    """Rows pushed without them (frames the policy did not act on: random steps, a resend)."""
    paused_s: float = 0.0
    backlog_holds: int = 0
    backlog_held_s: float = 0.0
    acked_through: int = -1
    logged_transitions: int = 0
    dropped_steps: int = 0
    sensor_faults: int = 0
    arm_faults: int = 0
    """Resets the arm's driver refused for an error of its own (waited out like a stale sensor)."""
    stopped_by: str = ""
    last_returns: list[float] = field(default_factory=list)


@dataclass
class RunningStat:
    """Mean and maximum of the values seen so far (None and NaN are skipped)."""

    count: int = 0
    mean: float = 0.0
    max: float = 0.0

    def add(self, value: float | None) -> None:
        if value is None or not np.isfinite(value):
            return
        self.count += 1
        self.mean += (float(value) - self.mean) / self.count
        self.max = max(self.max, float(value))


def record_tick(
    st: ActorStats,
    budget_s: float | None,
    work_s: float,
    cpu_s: float,
    push_s: float,
    cpu_wait_s: float | None = None,
    gc_s: float = 0.0,
) -> None:
    """Count one tick of ``work_s`` actor work (``cpu_s`` of it on the acting thread,
    ``cpu_wait_s`` waiting for a CPU (None: not reported), ``gc_s`` in a garbage collection; of
    it ``push_s`` pushing); over ``budget_s`` it is an overrun, logged at warning level."""
    st.ticks += 1
    st.mean_tick_work_s += (work_s - st.mean_tick_work_s) / st.ticks
    st.max_tick_work_s = max(st.max_tick_work_s, work_s)
    if budget_s is not None and work_s > budget_s:
        st.tick_overruns += 1
        st.overrun_work_s += work_s
        st.overrun_thread_cpu_s += cpu_s
        st.overrun_push_s += push_s
        if cpu_wait_s is None or st.overrun_cpu_wait_s is None:
            st.overrun_cpu_wait_s = None
        else:
            st.overrun_cpu_wait_s += cpu_wait_s
        st.overrun_gc_s += gc_s
        waited = "not reported" if cpu_wait_s is None else f"{cpu_wait_s:.3f} s"
        log.warning(
            "tick overrun: %.3f s of actor work (%.3f s on its CPU, %s waiting for one, "
            "%.3f s collecting garbage, %.3f s pushing; budget %.3f s) at env step %d",
            work_s, cpu_s, waited, gc_s, push_s, budget_s, st.env_steps,
        )  # fmt: skip
