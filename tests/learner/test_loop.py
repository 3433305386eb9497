"""The embedded trainer on a foreign gymnasium env: learning, determinism, run-directory rules,
checkpoint files (safetensors + JSON, no pickle), eval log, plot and tensorboard output."""

from __future__ import annotations

import json

import numpy as np
import pytest
from learner_helpers import PointEnv, sac_factory, small_sac

from robot_rl.learner.checkpoint import latest_checkpoint
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.loop import RunExistsError, Trainer
from robot_rl.run.evaluate import ActionMap


def _cfg(**kw) -> TrainConfig:
    base = dict(
        total_env_steps=300,
        batch_size=32,
        random_steps=100,
        learning_starts=64,
        eval_every_steps=150,
        eval_episodes=5,
        progress=False,
    )
    base.update(kw)
    return TrainConfig(**base)


def _trainer(run_dir, cfg, on_update=None, resume=False, seed=0):
    return Trainer(
        PointEnv(),
        PointEnv(),
        cfg,
        sac_factory(small_sac(), seed=seed),
        run_dir,
        resume=resume,
        on_update=on_update,
    )


def test_action_map_round_trip():
    import gymnasium as gym

    amap = ActionMap(gym.spaces.Box(np.float32([-2.0, 0.0]), np.float32([2.0, 1.0])))
    a = np.array([0.3, -0.5], np.float32)
    np.testing.assert_allclose(amap.to_policy(amap.to_env(a)), a, atol=1e-6)
    np.testing.assert_allclose(amap.to_env(np.array([-1.0, 1.0])), [-2.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        ActionMap(gym.spaces.Box(-np.inf, np.inf, (2,)))


def test_foreign_env_learns_and_writes_run_files(tmp_path):
    run = tmp_path / "run"
    res = _trainer(run, _cfg(total_env_steps=1000, eval_every_steps=500, batch_size=64)).run()
    assert res.env_steps == 1000 and res.updates > 900
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["env_steps"] for e in evals] == [0, 500, 1000]
    assert evals[-1]["success_rate"] >= 0.8, evals
    assert evals[-1]["mean_return"] > evals[0]["mean_return"]
    for e in evals:  # which of the fixed evaluation episodes were won, in seed order
        assert len(e["episode_success"]) == e["eval_episodes"]
        assert np.mean(e["episode_success"]) == e["success_rate"]
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any((run / "tb").iterdir())
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["action_dim"] == 1 and cfg["layout"]["state_dim"] == 2
    ckpt = latest_checkpoint(run)
    files = [p.name for p in ckpt.iterdir()]
    assert files and all(f.endswith((".safetensors", ".json")) for f in files), files
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["env_steps"] == 1000 and state["updates"] == res.updates


def test_nstep_returns_reach_the_agent_and_it_still_learns(tmp_path):
    """``SACConfig.n_step`` reaches the learner's sampler: its batches carry gamma ** k for
    k <= 3 (shorter at episode ends), the reward offset is added per step, and it learns."""
    run = tmp_path / "run"
    cfg = _cfg(total_env_steps=1000, eval_every_steps=500, batch_size=64, reward_offset=-0.5)
    trainer = Trainer(PointEnv(), PointEnv(), cfg, sac_factory(small_sac(n_step=3)), run)
    res = trainer.run()
    assert res.env_steps == 1000
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    assert evals[-1]["success_rate"] >= 0.8, evals
    b = trainer.core.sample()
    gamma = trainer.agent.cfg.gamma
    k = np.round(np.log(b.discount.numpy()) / np.log(gamma)).astype(int)
    assert set(k) <= {1, 2, 3} and 3 in set(k), sorted(set(k))
    # PointEnv rewards are in [-2.6, -0.1]: with the -0.5 offset a k-step sum is below -0.6 k
    geo = (1 - gamma**k) / (1 - gamma)
    assert (b.reward.numpy() <= -0.6 * geo + 1e-4).all()


def test_same_seed_same_losses(tmp_path):
    def losses(run_dir, seed):
        got = []
        cfg = _cfg(
            total_env_steps=100,
            random_steps=20,
            learning_starts=40,
            eval_every_steps=100,
            eval_episodes=1,
            seed=seed,
        )
        _trainer(run_dir, cfg, on_update=lambda i, m: got.append(m["critic_loss"]), seed=seed).run()
        return got

    a, b = losses(tmp_path / "a", 0), losses(tmp_path / "b", 0)
    c = losses(tmp_path / "c", 1)
    assert len(a) == 61 and a == b
    assert a != c


def test_refuses_existing_run_without_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "something").write_text("x")
    with pytest.raises(RunExistsError, match="--resume"):
        _trainer(run, _cfg())
    assert (run / "something").read_text() == "x"  # untouched


def test_resume_missing_run_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        _trainer(tmp_path / "nope", _cfg(), resume=True)


def test_resume_after_finish_extends(tmp_path):
    run = tmp_path / "run"
    first = _trainer(run, _cfg(total_env_steps=200, eval_every_steps=100, eval_episodes=2)).run()
    t = _trainer(run, _cfg(total_env_steps=300, eval_every_steps=100, eval_episodes=2), resume=True)
    t.open()
    assert t.state.env_steps == 200 and t.state.updates == first.updates
    assert len(t.online) == 200
    res = t.run()
    assert res.env_steps == 300 and res.updates == first.updates + 100


def test_control_file_stops_the_embedded_run_early_with_a_final_checkpoint(tmp_path):
    run = tmp_path / "run"

    def stop_at(i, m):
        if i == 20:  # a person writes STOP mid-run, as for a distributed learner
            (run / "control").write_text("STOP\n")

    res = _trainer(run, _cfg(total_env_steps=1000, eval_every_steps=500), stop_at).run()
    # update 1 follows env step 64 (learning_starts), update 20 step 83: no step after the STOP
    assert res.env_steps == 83 and res.updates == 20
    assert not (run / "control").exists()  # consumed
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    assert [e["env_steps"] for e in evals] == [0, res.env_steps]  # a final evaluation
    state = json.loads((latest_checkpoint(run) / "trainer_state.json").read_text())
    assert state["env_steps"] == res.env_steps
    from robot_rl.replay import EpisodeLog

    with EpisodeLog.open(run / "log.zarr", mode="r") as elog:
        assert sum(e.length for e in elog.episodes) == res.env_steps
        assert elog.episodes[-1].extra.get("ended_by") == "learner"


def test_control_file_still_being_written_is_not_consumed(tmp_path):
    """`echo STOP > control` creates the file before it writes: a poll in between sees an empty
    file. It must leave it for the next poll, not consume it (the STOP would be lost)."""
    from robot_rl.run.rundir import take_control_command

    control = tmp_path / "control"
    control.write_text("")
    assert take_control_command(tmp_path) is None
    assert control.exists()  # left for the writer
    control.write_text("STOP\n")
    assert take_control_command(tmp_path) == "STOP"
    assert not control.exists()
    control.write_text("DANCE\n")
    assert take_control_command(tmp_path) is None
    assert not control.exists()  # a finished unknown word is consumed (and logged)


def test_a_checkpoint_never_counts_steps_the_log_could_still_lose(tmp_path, monkeypatch):
    """Resume takes its counters from the log, so at every checkpoint the log on disk (what a
    SIGKILL would leave) must hold at least the steps the checkpoint counts. Evaluations at 73
    and 146 steps fall between the log's flushes (every 10 steps)."""
    import robot_rl.learner.core as learner_core
    from robot_rl.replay import EpisodeLog
    from robot_rl.run.rundir import LOG_ZARR

    on_disk = []
    save = learner_core.save_checkpoint

    def checked_save(run_dir, agent, state):
        with EpisodeLog.open(run_dir / LOG_ZARR, unfinished="truncate", mode="r") as log:
            steps = sum(m.length for m in log.episodes if m.source == "online")
        on_disk.append((state.env_steps, steps))
        return save(run_dir, agent, state)

    monkeypatch.setattr(learner_core, "save_checkpoint", checked_save)
    _trainer(tmp_path / "run", _cfg(total_env_steps=146, eval_every_steps=73)).run()
    assert [counted for counted, _ in on_disk] == [0, 73, 146]
    assert all(steps >= counted for counted, steps in on_disk), on_disk
