"""The actor side: policy snapshots (what the learner sends) and the actor loop's run control,
against a real LearnerServer + LogSink on 127.0.0.1 and the twin."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from polling import poll_until

from policies.config import SACConfig
from policies.sac import SACAgent
from robot_rl.actor.links import RemoteLink
from robot_rl.actor.loop import Actor, ActorConfig
from robot_rl.actor.policy import ActingPolicy, policy_snapshot
from robot_rl.app.envs.build import make_env_from_setup
from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.core.batch import ObsLayout
from robot_rl.core.types import ArmFaultError, StaleSensorError
from robot_rl.replay import EpisodeLog, ObsAdapter
from robot_rl.run.evaluate import ActionMap
from robot_rl.run.normalize import StateNormalizer
from robot_rl.transport.client import LearnerClient, LearnerClientConfig
from robot_rl.transport.codec import PayloadError, layout_fingerprint
from robot_rl.transport.log_sink import LogSink
from robot_rl.transport.server import LearnerServer, LearnerServerConfig

LAYOUT = ObsLayout(state_dim=6, images={})
SAC = SACConfig(hidden_dims=(32, 32))


def _obs(rng: np.random.Generator) -> dict:
    return {"state": rng.normal(size=6).astype(np.float32)}


def test_a_snapshot_makes_the_actor_act_as_the_learner():
    learner = SACAgent(LAYOUT, 3, SAC, seed=1)
    norm = StateNormalizer(np.full(6, 0.5), np.full(6, 2.0))
    policy = ActingPolicy(SACAgent(LAYOUT, 3, SAC, seed=2), LAYOUT, True, seed=0)
    rng = np.random.default_rng(0)
    o = _obs(rng)
    before = policy.act(o, deterministic=True)
    policy.load(7, policy_snapshot(learner, LAYOUT, norm, True))
    assert policy.version == 7
    np.testing.assert_allclose(policy.act(o, deterministic=True), learner.act(norm.obs(o), True))
    assert not np.allclose(before, policy.act(o, deterministic=True))
    # critics never travel: only what act() reads
    assert not any(k.startswith("critic") for k in policy_snapshot(learner, LAYOUT, norm, True))


def test_an_unfitted_normaliser_means_raw_state():
    learner = SACAgent(LAYOUT, 3, SAC, seed=1)
    policy = ActingPolicy(SACAgent(LAYOUT, 3, SAC, seed=2), LAYOUT, True, seed=0)
    policy.load(1, policy_snapshot(learner, LAYOUT, None, True))
    assert policy.norm is None
    o = _obs(np.random.default_rng(1))
    np.testing.assert_allclose(policy.act(o, deterministic=True), learner.act(o, True))


def test_a_snapshot_of_another_policy_is_refused_and_nothing_changes():
    other = SACAgent(LAYOUT, 3, SACConfig(hidden_dims=(16, 16)), seed=1)
    policy = ActingPolicy(SACAgent(LAYOUT, 3, SAC, seed=2), LAYOUT, True, seed=0)
    o = _obs(np.random.default_rng(2))
    before = policy.act(o, deterministic=True)
    with pytest.raises(PayloadError, match="policy has"):
        policy.load(3, policy_snapshot(other, LAYOUT, None, True))
    assert policy.version == 0
    np.testing.assert_array_equal(policy.act(o, deterministic=True), before)
    wrong_norm = policy_snapshot(SACAgent(LAYOUT, 3, SAC, seed=3), LAYOUT, None, True)
    wrong_norm["obs_norm.fitted"] = torch.tensor(1, dtype=torch.uint8)
    wrong_norm["obs_norm.mean"] = torch.zeros(5)
    with pytest.raises(PayloadError, match="obs_norm"):
        policy.load(4, wrong_norm)
    assert policy.version == 0


def test_snapshot_survives_a_restart_on_disk(tmp_path):
    learner = SACAgent(LAYOUT, 3, SAC, seed=1)
    norm = StateNormalizer(np.zeros(6), np.full(6, 3.0))
    a = ActingPolicy(SACAgent(LAYOUT, 3, SAC, seed=2), LAYOUT, True, seed=0)
    a.load(5, policy_snapshot(learner, LAYOUT, norm, True))
    a.save(tmp_path / "w.safetensors")
    b = ActingPolicy(SACAgent(LAYOUT, 3, SAC, seed=9), LAYOUT, True, seed=0)
    assert b.restore(tmp_path / "w.safetensors") and b.version == 5
    o = _obs(np.random.default_rng(3))
    np.testing.assert_array_equal(b.act(o, True), a.act(o, True))
    assert not ActingPolicy(learner, LAYOUT, True, 0).restore(tmp_path / "missing.safetensors")


@dataclass
class _Rig:
    """An actor on the reach twin streaming to a learner server in this process."""

    actor: Actor
    server: LearnerServer
    client: LearnerClient
    sink: LogSink
    policy: ActingPolicy


@contextlib.contextmanager
def _reach_actor(
    run: Path, cfg: ActorConfig, wrap: Callable[[gym.Env], gym.Env] | None = None
) -> Iterator[_Rig]:
    """An actor (``cfg``) on the reach twin (behind ``wrap``, if given), its log in ``run``,
    streaming to a LearnerServer + LogSink next to it; everything closed at the end."""
    env, backend = make_env_from_setup(LearnerEnvConfig(task="reach", obs="state").env_setup())
    layout = ObsAdapter(env.observation_space).layout
    adim = ActionMap(env.action_space).dim
    sink = LogSink(run.parent / "learner", layout, adim)
    server = LearnerServer(sink, layout, adim, LearnerServerConfig())
    client = LearnerClient(
        LearnerClientConfig(target=server.address, actor_id="arm"),
        layout_fingerprint(layout, adim),
    )
    policy = ActingPolicy(SACAgent(layout, adim, SAC, seed=0), layout, True, seed=0)
    try:
        acting_env = wrap(env) if wrap is not None else env
        actor = Actor(acting_env, policy, run, RemoteLink(client), cfg)
        yield _Rig(actor, server, client, sink, policy)
    finally:
        client.close()
        server.stop()
        sink.close()
        env.close()
        backend.close()


def _run_in_thread(actor: Actor) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(stats=actor.run()), daemon=True)
    return thread, out


def test_actor_pauses_between_episodes_resumes_and_stops_on_the_learners_word(tmp_path):
    with _reach_actor(tmp_path / "arm", ActorConfig(control_hz=100.0)) as rig:
        actor, server = rig.actor, rig.server
        thread, out = _run_in_thread(actor)
        layout = actor.adapter.layout
        learner = SACAgent(layout, rig.policy.agent.action_dim, SAC, seed=5)
        server.publish_weights(1, policy_snapshot(learner, layout, None, True))
        thread.start()
        assert poll_until(lambda: actor.stats.env_steps >= 30, 60)
        server.control("PAUSE", "test")
        assert poll_until(lambda: actor.stats.paused_s > 0.3, 30)
        paused_at = actor.stats.env_steps
        assert poll_until(lambda: actor.stats.paused_s > 0.8, 30)
        assert actor.stats.env_steps == paused_at  # held still while paused
        server.control("RESUME")
        assert poll_until(lambda: actor.stats.env_steps >= paused_at + 20, 60)
        assert rig.policy.version == 1  # loaded between episodes (at the latest after the pause)
        server.control("STOP", "test over")
        thread.join(60)
        assert not thread.is_alive()
        st = out["stats"]
        assert st.stopped_by == "learner"
        assert st.acked_through == st.logged_transitions - 1 == rig.sink.acked_through("arm")
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr", mode="r") as elog:
        ended_by = [e.extra.get("ended_by") for e in elog.episodes]
    assert "pause" in ended_by  # the pause closed the running episode
    assert all(e.extra.get("ended_by") != "pause" or e.length > 0 for e in elog.episodes)


def test_actor_holds_between_episodes_while_the_learner_owes_too_many_updates(tmp_path):
    cfg = ActorConfig(control_hz=200.0, max_learner_backlog=100)
    with _reach_actor(tmp_path / "arm", cfg) as rig:
        actor, server, client = rig.actor, rig.server, rig.client
        thread, out = _run_in_thread(actor)
        assert client.wait_connected(30)
        server.publish_stats(updates=0, replay_size=0, update_backlog=101)
        assert poll_until(lambda: client.learner_stats() is not None, 30)
        thread.start()
        # the learner is behind before the first episode: nothing is acted
        assert poll_until(lambda: actor.stats.backlog_held_s > 0.5, 30)
        assert actor.stats.env_steps == 0 and actor.stats.backlog_holds == 1
        server.publish_stats(updates=101, replay_size=0, update_backlog=100)  # at the bound: go
        assert poll_until(lambda: actor.stats.env_steps >= 10, 60)
        # behind again mid-episode: the episode runs to its end, then the actor holds
        server.publish_stats(updates=101, replay_size=0, update_backlog=5000)
        assert poll_until(lambda: actor.stats.backlog_holds == 2, 120)
        held_at = actor.stats.env_steps
        held_s = actor.stats.backlog_held_s
        assert poll_until(lambda: actor.stats.backlog_held_s > held_s + 0.5, 30)
        assert actor.stats.env_steps == held_at  # held still
        server.publish_stats(updates=6000, replay_size=0, update_backlog=0)
        assert poll_until(lambda: actor.stats.env_steps > held_at, 60)
        server.control("STOP", "test over")
        thread.join(60)
        assert not thread.is_alive()
        assert out["stats"].stopped_by == "learner"
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr", mode="r") as elog:
        ended = [e.extra.get("ended_by") for e in elog.episodes]
    # every episode ran to the env's end but the one the STOP cut: the holds cut none
    assert set(ended[:-1]) <= {None} and ended[-1] in (None, "learner"), ended


def test_an_actor_without_a_bound_never_holds(tmp_path):
    cfg = ActorConfig(control_hz=200.0, max_learner_backlog=None, total_env_steps=30)
    with _reach_actor(tmp_path / "arm", cfg) as rig:
        assert rig.client.wait_connected(30)
        rig.server.publish_stats(updates=0, replay_size=0, update_backlog=10**6)
        assert poll_until(lambda: rig.client.learner_stats() is not None, 30)
        st = rig.actor.run()
    assert st.env_steps == 30 and st.backlog_holds == 0 and st.stopped_by == "steps"


class _StallingSensors(gym.Wrapper):
    """Raises what RobotEnv raises when a sensor is stale (a real stall is in
    tests/drivers/test_soak.py: the twin node stopped) on the steps in ``stale`` (env step
    numbers, counted over resets) or, with ``forever_from``, on every step and reset after it;
    refuses the resets numbered in ``refused`` (0: the first) as RosRobot does when the arm's
    driver reports an error of its own (a real one: tests/drivers/test_so101_arm_fault.py)."""

    def __init__(
        self,
        env: gym.Env,
        stale: set[int],
        forever_from: int | None = None,
        refused: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(env)
        self.stale, self.forever_from, self.n = stale, forever_from, 0
        self.refused, self.resets = refused, 0

    def _check(self) -> None:
        if self.n in self.stale or (self.forever_from is not None and self.n >= self.forever_from):
            raise StaleSensorError(f"/arm/joint_states is 1.0 s old (step {self.n})")

    def reset(self, **kw):
        self.resets += 1
        if self.resets - 1 in self.refused:
            raise ArmFaultError("/arm/reset refused: reset failed: cannot reset: backend error: "
                                "servo 1 (shoulder_pan) did not answer SYNC_READ")  # fmt: skip
        if self.forever_from is not None and self.n >= self.forever_from:
            self._check()
        return self.env.reset(**kw)

    def step(self, action):
        self.n += 1
        self._check()
        return self.env.step(action)


@contextlib.contextmanager
def _stalling_actor(run: Path, cfg: ActorConfig, **stall) -> Iterator[Actor]:
    """An actor on the reach twin behind :class:`_StallingSensors` (``stall``)."""
    with _reach_actor(run, cfg, lambda env: _StallingSensors(env, **stall)) as rig:
        yield rig.actor


def test_a_stale_sensor_ends_the_episode_and_the_actor_goes_on(tmp_path):
    cfg = ActorConfig(total_env_steps=60, sensor_retry_s=0.01)
    with _stalling_actor(tmp_path / "arm", cfg, stale={5, 30, 31}) as actor:
        st = actor.run()
    assert st.sensor_faults == 3 and st.stopped_by == "steps" and st.env_steps == 60
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr", mode="r") as elog:
        eps = list(elog.episodes)
    stale = [e for e in eps if e.extra.get("ended_by") == "stale_sensor"]
    # steps 5 and 30 each cut an episode that had steps; 31 failed the first step of the next
    # one, which therefore logged nothing (no empty episode)
    assert [e.length for e in stale] == [4, 24], [(e.length, e.extra) for e in eps]
    assert all("joint_states" in e.extra["error"] for e in stale)
    assert sum(e.length for e in eps) == 60 and all(e.length > 0 for e in eps)


def test_a_reset_refused_for_an_arm_fault_is_waited_out_and_the_actor_goes_on(tmp_path):
    cfg = ActorConfig(total_env_steps=60, sensor_retry_s=0.01)
    with _stalling_actor(tmp_path / "arm", cfg, stale=set(), refused={0, 2, 3}) as actor:
        st = actor.run()
    assert st.arm_faults == 3 and st.sensor_faults == 0
    assert st.stopped_by == "steps" and st.env_steps == 60
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr", mode="r") as elog:
        eps = list(elog.episodes)
    assert sum(e.length for e in eps) == 60 and all(e.length > 0 for e in eps)


def test_an_arm_fault_that_stays_ends_the_run_with_its_error(tmp_path):
    cfg = ActorConfig(total_env_steps=60, sensor_fault_timeout_s=0.3, sensor_retry_s=0.05)
    with _stalling_actor(tmp_path / "arm", cfg, stale=set(), refused=set(range(1000))) as actor:
        with pytest.raises(ArmFaultError, match="shoulder_pan"):
            actor.run()
    assert actor.stats.arm_faults >= 2 and actor.stats.env_steps == 0


def test_a_sensor_that_stays_stale_ends_the_run_with_its_error(tmp_path):
    cfg = ActorConfig(sensor_fault_timeout_s=0.3, sensor_retry_s=0.05)
    with _stalling_actor(tmp_path / "arm", cfg, stale=set(), forever_from=10) as actor:
        with pytest.raises(StaleSensorError, match="joint_states"):
            actor.run()
    assert actor.stats.sensor_faults >= 2  # retried (every 0.05 s) before giving up
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr", mode="r") as elog:
        assert sum(e.length for e in elog.episodes) == 9  # every good step kept
