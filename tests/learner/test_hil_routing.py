"""Routing of intervened transitions (hil-serl / rlif / online), live and rebuilt from the log on
resume, and the trainer with a simulated human on the twin: log fields, metadata, counters."""

from __future__ import annotations

import json

import numpy as np
import pytest
from learner_helpers import sac_factory, small_sac

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.loop import Trainer
from robot_rl.learner.routing import Router
from robot_rl.replay import EpisodeLog, ReplayBuffer
from robot_rl.run.effort import HumanEffort

LAYOUT = ObsLayout(state_dim=2, images={})
A = 2
PENALTY = -100.0


def _contents(buf: ReplayBuffer | None) -> list[tuple]:
    """Every sampleable transition, oldest first: (obs, action, reward, next_obs, term, interv).
    Reads the buffer's arrays directly (it has no iteration API)."""
    if buf is None:
        return []
    ts = (buf._first + np.arange(len(buf))) % buf.capacity
    st = buf._state
    out = []
    for t in ts:
        o = tuple(st[buf._obs_id[t] % buf.obs_capacity].round(6))
        n = tuple(st[buf._next_id[t] % buf.obs_capacity].round(6))
        out.append(
            (
                o,
                tuple(buf._action[t].round(6)),
                float(buf._reward[t]),
                n,
                bool(buf._terminated[t]),
                bool(buf._intervened[t]),
            )
        )
    return out


def _episode(k: int, flags: list[bool]) -> list[dict]:
    """Synthetic steps: obs state (k, t), action (t, 0), proposal (t, 1), reward -t / 10."""
    steps = []
    for t, f in enumerate(flags):
        pa = np.array([t, 1.0], np.float32)
        steps.append(
            dict(
                obs={keys.STATE: np.array([k, t], np.float32)},
                action=np.array([t, 0.0], np.float32) if f else pa,
                policy_action=pa,
                reward=-t / 10,
                next_obs={keys.STATE: np.array([k, t + 1], np.float32)},
                terminated=t == len(flags) - 1,
                intervened=f,
            )
        )
    return steps


EPISODES = [
    [False, True, True, False, True],  # onsets at 1 and 4
    [True, True, False],  # onset at 0 (the episode start)
    [False, False, False],
]


def _route_live(mode: str) -> Router:
    online = ReplayBuffer(100, LAYOUT, A)
    demo = ReplayBuffer(100, LAYOUT, A) if mode == "hil-serl" else None
    r = Router(mode, online, demo, PENALTY, HumanEffort(10.0))
    for k, flags in enumerate(EPISODES):
        r.begin_episode()
        for s in _episode(k, flags):
            r.add(
                s["obs"],
                s["action"],
                s["policy_action"],
                s["reward"],
                s["next_obs"],
                s["terminated"],
                s["intervened"],
            )
    r.begin_episode()  # closes the last episode's effort record
    return r


def test_online_mode_puts_everything_in_the_online_buffer_once():
    r = _route_live("online")
    assert len(r.online) == 11 and r.demo is None
    assert sum(c[5] for c in _contents(r.online)) == 5


def test_hil_serl_copies_intervened_transitions_to_the_demo_buffer():
    r = _route_live("hil-serl")
    assert len(r.online) == 11
    demo = _contents(r.demo)
    assert len(demo) == 5 and all(c[5] for c in demo)
    assert set(demo) <= set(_contents(r.online))
    # The human's action was stored, not the proposal.
    assert all(c[1][1] == 0.0 for c in demo)


def test_rlif_adds_a_terminal_penalty_transition_at_each_onset():
    r = _route_live("rlif")
    got = _contents(r.online)
    assert len(got) == 11 + 3  # three onsets: episode 0 steps 1 and 4, episode 1 step 0
    pen = [c for c in got if c[2] == PENALTY]
    assert [(c[0], c[3]) for c in pen] == [((0, 1), (0, 2)), ((0, 4), (0, 5)), ((1, 0), (1, 1))]
    # The refused proposal (second component 1), terminal, not flagged as intervened.
    assert all(c[1][1] == 1.0 and c[4] and not c[5] for c in pen)
    # Each penalty comes right before the human transition of the same step.
    i = got.index(pen[0])
    assert got[i + 1][0] == pen[0][0] and got[i + 1][5] and got[i + 1][2] != PENALTY


def _write_log(path, with_meta: bool) -> EpisodeLog:
    log = EpisodeLog.create(path, LAYOUT, A, {"source": "online"})
    for k, flags in enumerate(EPISODES):
        log.begin_episode("online", policy_version=0, seed=k)
        for t, s in enumerate(_episode(k, flags)):
            log.append(
                obs_learner=s["obs"],
                action=s["action"],
                policy_action=s["policy_action"],
                reward=s["reward"],
                terminated=s["terminated"],
                truncated=False,
                intervened=s["intervened"],
                policy_version=0,
                stamp_s=float(t),
                next_obs_learner=s["next_obs"],
            )
        f = np.array(flags)
        onsets = int((f & ~np.concatenate([[False], f[:-1]])).sum())
        meta = {"interventions": onsets, "intervened_steps": int(f.sum())} if with_meta else {}
        log.end_episode(success=False, **meta)
    return log


@pytest.mark.parametrize("mode", ["hil-serl", "rlif", "online"])
@pytest.mark.parametrize("with_meta", [True, False])
def test_rebuild_from_the_log_routes_like_the_live_run(tmp_path, mode, with_meta):
    live = _route_live(mode)
    log = _write_log(tmp_path / "log.zarr", with_meta)
    online = ReplayBuffer(100, LAYOUT, A)
    demo = ReplayBuffer(100, LAYOUT, A) if mode == "hil-serl" else None
    effort = HumanEffort(10.0)
    got = Router(mode, online, demo, PENALTY, effort).rebuild(log, ("online",))
    log.close()
    assert (got.transitions, got.interventions, got.intervened_steps) == (11, 3, 5)
    # The human's effort, episode by episode, as the live run recorded it.
    assert effort.episodes == live.effort.episodes
    assert [e.corrections for e in effort.episodes] == [2, 1, 0]
    assert sorted(_contents(online)) == sorted(_contents(live.online))
    assert _contents(demo) == _contents(live.demo)


def test_demo_buffer_resized_keeps_transitions_and_sampling():
    buf = _route_live("online").online
    big = buf.resized(500)
    assert big.capacity == 500 and _contents(big) == _contents(buf)
    a = buf.sample_arrays(32, np.random.default_rng(5))
    b = big.sample_arrays(32, np.random.default_rng(5))
    for k in ("action", "reward", "terminated", "intervened"):
        np.testing.assert_array_equal(a[k], b[k])
    np.testing.assert_array_equal(a["obs"][keys.STATE], b["obs"][keys.STATE])
    with pytest.raises(ValueError, match="capacity"):
        buf.resized(5)


# -- the trainer with a simulated human on the twin ------------------------------------------


@pytest.fixture(scope="module")
def twin():
    from robot_rl.app.envs.build import make_env_from_setup, with_sim_human
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.wrappers import InterventionConfig
    from sim.human import HumanConfig

    setup = LearnerEnvConfig(task="reach", max_episode_steps=30).env_setup()
    env, backend = make_env_from_setup(setup)
    eval_env, eval_backend = make_env_from_setup(setup)
    human = HumanConfig(patience_steps=3, takeover_steps=2, max_interventions=3)
    wrapped = with_sim_human(env, backend, human, InterventionConfig(hold_steps=1), seed=0)
    yield wrapped, eval_env
    for c in (env, eval_env, backend, eval_backend):
        c.close()


def _cfg(mode: str, steps: int) -> TrainConfig:
    return TrainConfig(
        total_env_steps=steps,
        batch_size=16,
        random_steps=steps,
        learning_starts=32,
        eval_every_steps=steps,
        eval_episodes=1,
        progress=False,
        intervention_mode=mode,
    )


@pytest.mark.parametrize("mode", ["hil-serl", "rlif", "online"])
def test_trainer_logs_routes_and_resumes_interventions(tmp_path, twin, mode):
    env, eval_env = twin
    run = tmp_path / "run"
    agent = sac_factory(small_sac())
    t = Trainer(env, eval_env, _cfg(mode, 90), agent, run, intervention=env)
    result = t.run()
    n_int, n_steps = t.interventions_total, t.intervened_steps_total
    assert n_int >= 3 and n_steps >= n_int  # random actions stall; the human steps in

    log = EpisodeLog.open(run / "log.zarr")
    eps = [log.read_episode(m.index) for m in log.episodes]
    flags = np.concatenate([e["intervened"] for e in eps])
    assert flags.sum() == n_steps and len(flags) == 90
    act = np.concatenate([e["action"] for e in eps])
    prop = np.concatenate([e["policy_action"] for e in eps])
    assert np.array_equal(act[~flags], prop[~flags])  # the policy's own steps
    assert not np.allclose(act[flags], prop[flags])  # the human's, with the proposal kept
    assert sum(m.extra["interventions"] for m in log.episodes) == n_int
    assert all(0.0 <= m.extra["intervention_rate"] <= 1.0 for m in log.episodes)
    # The human-effort figures come from the logged flags: the live record of every episode
    # that finished before the budget ended the run is the log's.
    logged = HumanEffort.from_log(log, 10.0).episodes
    live = t.core.human_effort().episodes
    assert live == logged[: len(live)] and len(live) >= len(logged) - 1
    assert sum(e.corrections for e in logged) == n_int
    log.close()
    saved = json.loads((run / "human_effort.json").read_text())
    assert saved["corrections"] == sum(e.corrections for e in live)
    assert result.human_effort == t.core.human_effort().summary()
    row = json.loads((run / "eval.jsonl").read_text().splitlines()[-1])
    assert (row["interventions"], row["intervened_steps"]) == (n_int, n_steps)

    expect_online = 90 + (n_int if mode == "rlif" else 0)
    assert len(t.online) == expect_online
    assert len(t.demo_buffer or []) == (n_steps if mode == "hil-serl" else 0)
    live_online, live_demo = _contents(t.online), _contents(t.demo_buffer)

    resumed = Trainer(env, eval_env, _cfg(mode, 120), agent, run, resume=True, intervention=env)
    resumed.open()
    assert (resumed.interventions_total, resumed.intervened_steps_total) == (n_int, n_steps)
    assert resumed.core.human_effort().episodes == logged  # rebuilt from the log
    assert sorted(_contents(resumed.online)) == sorted(live_online)
    assert _contents(resumed.demo_buffer) == live_demo
    resumed.log.close()


def test_train_flags_wire_the_human_and_the_mode(tmp_path):
    import tyro

    from robot_rl.app.training.train import TrainCmdConfig

    args = ["--run", str(tmp_path / "r"), "--human", "sim", "--intervention-mode", "rlif"]
    args += ["--human-patience-steps", "7", "--rlif-penalty", "-50"]
    cmd = tyro.cli(TrainCmdConfig, args=args)
    assert cmd.human == "sim" and cmd.human_config().patience_steps == 7
    cfg = cmd.train_config()
    assert (cfg.intervention_mode, cfg.rlif_penalty) == ("rlif", -50.0)
    with pytest.raises(ValueError, match="patience_steps"):
        TrainCmdConfig(run=tmp_path / "r", human_patience_steps=0)
    # the distributed actor takes the same --human-* flags, and over ROS 2 they reach the
    # simulated human's node
    from robot_rl.app.training.actor_cmd import ActorCmdConfig
    from robot_rl.app.training.train_ros import human_node_args

    actor = tyro.cli(ActorCmdConfig, args=["--run", str(tmp_path / "a"), "--human", "sim",
                                           "--human-patience-steps", "30"])  # fmt: skip
    node = human_node_args(actor.as_train())
    assert node[node.index("--patience-steps") + 1] == "30"
    with pytest.raises(ValueError, match="patience_steps"):
        ActorCmdConfig(run=tmp_path / "a", human_patience_steps=0)
    with pytest.raises(ValueError, match="intervention_mode"):
        TrainConfig(intervention_mode="sometimes")
    with pytest.raises(ValueError, match="rlif_penalty"):
        TrainConfig(rlif_penalty=float("nan"))
