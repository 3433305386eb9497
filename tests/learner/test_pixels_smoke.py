"""The image pipeline through the loop: the twin with two 32x32 cameras, conv encoder, a few
updates, checkpoint, and `robot-rl eval` on the result."""

from __future__ import annotations

import dataclasses

from learner_helpers import small_sac

from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
from robot_rl.app.training.evaluate import EvalCmdConfig, run_eval
from robot_rl.app.training.train import TrainCmdConfig, run_train
from robot_rl.learner.checkpoint import latest_checkpoint


def test_pixels_through_the_loop(tmp_path):
    env = LearnerEnvConfig(
        task="reach", obs="pixels", cameras=("front", "wrist"), image_size=32, max_episode_steps=4
    )
    demos = tmp_path / "demos.zarr"
    run_collect(CollectConfig(env=env, out=demos, episodes=1, only_success=False), progress=False)
    run = tmp_path / "run"
    res = run_train(
        TrainCmdConfig(
            run=run,
            env=env,
            demos=demos,
            steps=6,
            batch_size=4,
            learning_starts=2,
            eval_every_steps=6,
            eval_episodes=1,
            progress=False,
            encoder="conv",
            sac=small_sac(),
        )
    )
    assert res["env_steps"] == 6 and res["updates"] >= 4
    assert latest_checkpoint(run) is not None
    out = run_eval(EvalCmdConfig(run=run, episodes=1))
    assert out["episodes"] == 1 and 0.0 <= out["success_rate"] <= 1.0
    assert out["obs"] == "pixels"
    assert dataclasses.is_dataclass(env)
