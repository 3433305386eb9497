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


def _actor_stats(tmp_path, act_extra) -> Any:
    from robot_rl.actor.links import RemoteLink
    from robot_rl.actor.loop import Actor, ActorConfig
    from robot_rl.actor.policy import ActingPolicy
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    class SlowPolicy(ActingPolicy):
        def act(self, obs_learner: Mapping[str, Any], deterministic: bool = False) -> np.ndarray:
            act_extra()
            return super().act(obs_learner, deterministic)

    env = PointEnv(10)
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
    cpu_per_tick = st.overrun_thread_cpu_s / st.tick_overruns
    if extra is _compute:
        assert cpu_per_tick >= EXTRA_S  # the spin is CPU time by construction
    else:
        # A sleep holds no CPU; the rest of a PointEnv tick is a few ms of Python at most.
        assert cpu_per_tick < EXTRA_S / 2, cpu_per_tick
