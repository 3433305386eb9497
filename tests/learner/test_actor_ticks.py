"""The actor's tick accounting tells a wait from a computation.

An overrun of the actor's tick (acting, logging and pushing took longer than the budget) has
two causes with different fixes: the actor computed too long (a faster policy), or it waited
(for a CPU other processes hold, the GIL, a lock: less load beside it). The actor measures the
acting thread's CPU time over the same span as the wall time; these tests overrun the budget
both ways through the real distributed actor (gRPC on 127.0.0.1 to a real learner server) and
check the CPU share each reports. CPU time does not grow when the machine is loaded, so the
bounds hold on a busy CI machine too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from learner_helpers import PointEnv, sac_factory, served_learner, small_sac

BUDGET_S = 0.02
EXTRA_S = 0.05


def _actor_stats(tmp_path, act_extra, wrap=None) -> Any:
    from robot_rl.actor.links import RemoteLink
    from robot_rl.actor.loop import Actor, ActorConfig
    from robot_rl.actor.policy import ActingPolicy
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    class SlowPolicy(ActingPolicy):
        def act(self, obs_learner: Mapping[str, Any], deterministic: bool = False) -> np.ndarray:
            act_extra()
            return super().act(obs_learner, deterministic)

    env = PointEnv(10) if wrap is None else wrap(PointEnv(10))
    layout = ObsAdapter(env.observation_space).layout
    adim = ActionMap(env.action_space).dim
    with served_learner(tmp_path, layout, adim) as (client, _):
        policy = SlowPolicy(sac_factory(small_sac())(layout, adim), layout, True, seed=0)
        cfg = ActorConfig(total_env_steps=10, random_steps=0, tick_budget_s=BUDGET_S)
        return Actor(env, policy, tmp_path / "arm", RemoteLink(client), cfg).run()


def _wait() -> None:
    time.sleep(EXTRA_S)


def _compute() -> None:
    end = time.thread_time() + EXTRA_S
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("extra", [_wait, _compute], ids=["waiting", "computing"])
def test_an_overrun_says_whether_the_actor_waited_or_computed(tmp_path, extra) -> None:
    st = _actor_stats(tmp_path, extra)
    assert st.ticks == 10 and st.tick_overruns == 10  # every tick takes EXTRA_S > BUDGET_S
    assert st.overrun_work_s >= 10 * EXTRA_S
    # The policy's extra time is not the push.
    assert 0 <= st.overrun_push_s < st.overrun_work_s - 10 * EXTRA_S / 2
    cpu_per_tick = st.overrun_thread_cpu_s / st.tick_overruns
    if extra is _compute:
        assert cpu_per_tick >= EXTRA_S  # the spin is CPU time by construction
    else:
        # A sleep holds no CPU; the rest of a PointEnv tick is a few ms of Python at most.
        assert cpu_per_tick < EXTRA_S / 2, cpu_per_tick
        # ... and is not a wait for a CPU either: it shows as blocked (a lock, the GIL, IO)
        blocked = st.overrun_work_s - st.overrun_thread_cpu_s - st.overrun_cpu_wait_s
        assert blocked / st.tick_overruns >= EXTRA_S * 0.9, st


def test_an_overrun_says_when_the_actor_waited_for_a_cpu(tmp_path) -> None:
    """The acting thread and a busy process pinned to the same CPU: the policy's CPU-bound
    extra takes its CPU time plus the time the other process ran, and that wait is counted as
    one for a CPU (Linux's run delay), not as blocked."""
    import os
    import subprocess
    import sys

    from robot_rl.core.realtime import run_delay_s

    if run_delay_s() is None:
        pytest.skip("this kernel does not report schedstat run delays")
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(0, {cpu})  # this thread only (Linux: the calling thread)
        st = _actor_stats(tmp_path, _compute)
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert st.tick_overruns == 10
    # Fair sharing of one CPU with one busy process: ~EXTRA_S of waiting per EXTRA_S of spin
    assert st.overrun_cpu_wait_s / st.tick_overruns >= EXTRA_S / 4, st
    accounted = st.overrun_thread_cpu_s + st.overrun_cpu_wait_s
    assert accounted <= st.overrun_work_s * 1.01 + 0.005, st


def test_the_action_age_counts_the_policys_time(tmp_path) -> None:
    """``ActorStats.mean/max_action_age_s`` fold the env's ``info["action_age_s"]``: the age of
    the observation when its action was sent, so the actor's own time between the two (here a
    slow policy) is in it, as :class:`robot_rl.envs.robot_env.RobotEnv` reports it."""
    import gymnasium as gym

    from robot_rl.core import keys

    class Aged(gym.Wrapper):
        """Reports how long ago it returned the observation each action answers."""

        def reset(self, **kw):
            out = self.env.reset(**kw)
            self.t_obs = time.monotonic()
            return out

        def step(self, action):
            age = time.monotonic() - self.t_obs
            obs, r, term, trunc, info = self.env.step(action)
            self.t_obs = time.monotonic()
            return obs, r, term, trunc, {**info, keys.INFO_ACTION_AGE: age}

    st = _actor_stats(tmp_path, _wait, Aged)
    assert st.mean_action_age_s >= EXTRA_S and st.max_action_age_s >= st.mean_action_age_s
    # The slow policy is the actor's acting time (mean_act_s), within its work per step.
    assert EXTRA_S <= st.mean_act_s <= st.mean_tick_work_s <= st.max_tick_work_s
    st = _actor_stats(tmp_path / "b", lambda: None, Aged)
    assert st.mean_action_age_s < EXTRA_S  # a PointEnv tick with a small net: a few ms
    assert st.mean_act_s < EXTRA_S


def test_the_actor_never_waits_for_its_logs_flush(tmp_path, monkeypatch) -> None:
    """The actor starts its log's flush in a worker just before ``env.step`` and never waits
    for it: the write (zarr's compression and file writes: on a loaded 2-core machine a flush of
    two 128x128 cameras took most of a 100 ms tick) overlaps the wait for the robot and the
    next steps. Here every flush takes 0.3 s while the env steps in ~1 ms: the same flush is
    still running when later steps start (the actor appended and acted meanwhile), and at the
    end every step is durable."""
    import gymnasium as gym

    import robot_rl.replay.log as log_module
    from robot_rl.actor.links import RemoteLink
    from robot_rl.actor.loop import Actor, ActorConfig
    from robot_rl.actor.policy import ActingPolicy
    from robot_rl.replay import EpisodeLog, ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    real_write = log_module.write_rows

    def slow_write(arr, lo, hi, data, spare=False):
        if arr.path.endswith("reward"):  # once per flush
            time.sleep(0.3)
        return real_write(arr, lo, hi, data, spare=spare)

    monkeypatch.setattr(log_module, "write_rows", slow_write)
    seen = {"across_steps": 0, "steps": 0, "last": None}
    holder: dict[str, Any] = {}

    class Robot(gym.Wrapper):
        """Steps like a robot the actor waits for; notes which flush runs meanwhile."""

        def step(self, action):
            log = holder["actor"].log
            running = log._flushing if log.flushing else None
            if running is not None and running is seen["last"]:
                seen["across_steps"] += 1  # a flush outlived a whole actor step
            seen["last"] = running
            seen["steps"] += 1
            return self.env.step(action)

    env = Robot(PointEnv(10))
    layout = ObsAdapter(env.observation_space).layout
    adim = ActionMap(env.action_space).dim
    with served_learner(tmp_path, layout, adim) as (client, _):
        policy = ActingPolicy(sac_factory(small_sac())(layout, adim), layout, True, seed=0)
        cfg = ActorConfig(total_env_steps=30, random_steps=30)
        actor = holder["actor"] = Actor(env, policy, tmp_path / "arm", RemoteLink(client), cfg)
        st = actor.run()
    assert st.env_steps == seen["steps"] == 30 and seen["across_steps"] >= 3, seen
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr", mode="r") as log:
        assert sum(e.length for e in log.episodes) == 30  # nothing lost on the way


def test_an_overrun_counts_the_garbage_collections_in_it(tmp_path) -> None:
    """A full garbage collection holds the GIL throughout: the tick accounting counts the time
    collections ran in it (here the policy's own collection over ~300k objects), and the
    distributed actor freezes its setup's objects before acting so that collections scan
    less."""
    import gc

    from robot_rl.actor.realtime import freeze_setup_objects

    graph = [[i] for i in range(300_000)]  # tracked containers a full collection must scan
    collected: list[float] = []

    def collect() -> None:
        t = time.monotonic()
        gc.collect()
        collected.append(time.monotonic() - t)
        time.sleep(EXTRA_S)  # and overrun the budget in any case

    st = _actor_stats(tmp_path, collect)
    assert st.tick_overruns == 10 and len(collected) == 10
    assert st.overrun_gc_s >= 0.9 * sum(collected), (st.overrun_gc_s, sum(collected))
    assert st.overrun_gc_s <= st.overrun_work_s
    del graph
    before = gc.get_freeze_count()
    freeze_setup_objects()
    try:
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()  # the test process goes on collecting as before
