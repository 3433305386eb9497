"""Transformers encoders for the reward classifier: tiny DINOv2 / SigLIP / CLIP, real end to end.

Real components: tiny randomly initialised transformers models saved with ``save_pretrained``
to temporary directories (``vlm_tiny``), twin frames rendered by MuJoCo into a zarr frame
store, and ``robot-rl reward train`` / ``eval`` through the CLI's own functions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import vlm_tiny

from rewards.classifier import load_classifier, read_card
from rewards.hf_encoder import IMAGENET, describe_hf_encoder, load_hf_encoder
from rewards.train import evaluate
from robot_rl.app.rewards.reward import RewardEvalConfig, make_encoder, run_reward_eval
from robot_rl.replay.frames import FrameLog

MEAN, STD = (0.1, 0.2, 0.3), (0.5, 0.6, 0.7)
"""A normalisation no model family uses by default: proves the preprocessor config is read."""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {
        "dinov2": vlm_tiny.build_dinov2(root / "dinov2", image_mean=MEAN, image_std=STD),
        "dinov2_other": vlm_tiny.build_dinov2(root / "dinov2_other", seed=1),
        "siglip": vlm_tiny.build_siglip(root / "siglip"),
        "siglip_vision": vlm_tiny.build_siglip_vision(root / "siglip_vision"),
        "clip": vlm_tiny.build_clip(root / "clip"),
    }


def frames_u8(n: int = 5, size: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def reference_input(images: np.ndarray, mean, std, size_px: int = 32) -> torch.Tensor:
    """What the encoder should feed the network: [0, 1], normalised, resized whole."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    x = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    return torch.nn.functional.interpolate(
        x, size=(size_px, size_px), mode="bilinear", align_corners=False, antialias=True
    )


def test_dinov2_feature_is_cls_and_patch_mean_with_the_saved_normalisation(models):
    import transformers

    enc = load_hf_encoder(models["dinov2"])
    spec = describe_hf_encoder(models["dinov2"])
    assert spec.mean == MEAN and spec.std == STD
    assert spec.normalisation_source == "preprocessor_config.json"
    assert spec.image_size_px == (32, 32) and spec.image_size_source == "preprocessor crop_size"
    assert enc.name == spec.name and enc.name.startswith("hf:dinov2:")
    images = frames_u8()
    feats = enc(images)
    assert feats.shape == (5, 32) and feats.dtype == torch.float32  # [CLS (16), patch mean (16)]
    net = transformers.Dinov2Model.from_pretrained(models["dinov2"], local_files_only=True).eval()
    with torch.no_grad():
        hidden = net(pixel_values=reference_input(images, MEAN, STD)).last_hidden_state
    expected = torch.cat([hidden[:, 0], hidden[:, 1:].mean(1)], dim=1)
    torch.testing.assert_close(feats, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # the ImageNet default would give other features: the file was read
        other = net(pixel_values=reference_input(images, *IMAGENET)).last_hidden_state
    assert not torch.allclose(feats[:, :16], other[:, 0], atol=1e-3)


@pytest.mark.parametrize("kind", ["siglip", "clip"])
def test_dual_encoders_give_their_vision_towers_pooled_output(models, kind):
    import transformers

    enc = load_hf_encoder(models[kind])
    spec = describe_hf_encoder(models[kind])
    assert enc.name.startswith(f"hf:{kind}:") and spec.pooling == "pooler_or_token_mean"
    images = frames_u8(3)
    full = transformers.AutoModel.from_pretrained(models[kind], local_files_only=True).eval()
    with torch.no_grad():
        x = reference_input(images, spec.mean, spec.std)
        expected = full.vision_model(pixel_values=x).pooler_output
    torch.testing.assert_close(enc(images), expected, atol=1e-5, rtol=1e-5)
    assert enc.feature_dim == 16


def test_a_vision_tower_saved_alone_falls_back_to_its_family_normalisation(models):
    spec = describe_hf_encoder(models["siglip_vision"])
    assert spec.mean == (0.5, 0.5, 0.5) and spec.std == (0.5, 0.5, 0.5)
    assert "SigLIP" in spec.normalisation_source and "default" in spec.normalisation_source
    assert spec.image_size_px == (32, 32) and spec.image_size_source == "config image_size"
    assert load_hf_encoder(models["siglip_vision"])(frames_u8(2)).shape == (2, 16)


def test_the_backbone_is_frozen(models):
    enc = load_hf_encoder(models["dinov2"])
    backbone = enc.backbone
    assert not backbone.training and not backbone.model.training
    assert all(not p.requires_grad for p in backbone.parameters())
    backbone.train()  # asking for train mode does not turn dropout on
    assert not backbone.training and not any(m.training for m in backbone.modules())
    images = frames_u8(4)
    a, b = enc(images), enc(images)
    assert not a.requires_grad
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_pickled_weights_missing_dirs_and_incomplete_checkpoints_are_refused(models, tmp_path):
    from safetensors.torch import load_file, save_file

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(models["dinov2"] / "config.json", pickled)
    state = load_file(str(models["dinov2"] / "model.safetensors"))
    torch.save(state, pickled / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickled weights"):
        load_hf_encoder(pickled)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf_encoder(tmp_path / "nowhere")
    partial = tmp_path / "partial"
    shutil.copytree(models["dinov2"], partial)
    dropped = next(k for k in state if "encoder.layer.0.attention" in k)
    save_file({k: v for k, v in state.items() if k != dropped}, str(partial / "model.safetensors"))
    with pytest.raises(ValueError, match="lacks weights"):
        load_hf_encoder(partial)


def test_the_name_pins_weights_and_preprocessing(models, tmp_path):
    name = load_hf_encoder(models["dinov2"]).name
    assert make_encoder(name, models["dinov2"]).name == name  # the card's name reloads
    with pytest.raises(ValueError, match="trained on hf:dinov2:"):
        make_encoder(name, models["dinov2_other"])  # other weights
    moved = tmp_path / "moved"
    shutil.copytree(models["dinov2"], moved)
    assert make_encoder(name, moved).name == name  # the path is not part of the name
    pp = json.loads((moved / "preprocessor_config.json").read_text())
    (moved / "preprocessor_config.json").write_text(json.dumps({**pp, "image_std": [0.2] * 3}))
    with pytest.raises(ValueError, match="holds encoder hf:dinov2:"):
        make_encoder(name, moved)  # same weights, other normalisation
    with pytest.raises(ValueError, match="--encoder-weights DIR"):
        make_encoder(name, None)
    with pytest.raises(ValueError, match="--encoder-weights DIR"):
        make_encoder("hf", None)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_encoder(name, tmp_path / "nowhere")


def test_rewards_imports_without_transformers():
    code = "import sys; sys.modules['transformers'] = None; import rewards, rewards.hf_encoder"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def twin_frames(tmp_path_factory) -> Path:
    from robot_rl.app.rewards.reward_frames import RewardFramesConfig, run_reward_frames

    out = tmp_path_factory.mktemp("frames") / "pick_cube.zarr"
    cfg = RewardFramesConfig(
        out=out,
        episodes=12,
        cameras=("front",),
        image_size=64,
        max_steps=30,
        after_success_steps=4,
    )
    result = run_reward_frames(cfg, progress=False)
    assert result["positives"] > 0 and result["negatives"] > 0
    return out


def test_reward_train_and_eval_with_a_dinov2_directory(models, twin_frames, tmp_path, capsys):
    """`reward train --encoder hf --encoder-weights DIR` saves a card naming the encoder;
    `reward eval` and load_classifier rebuild it from DIR and reproduce the training-time
    validation probabilities; another DIR or none is refused."""
    from robot_rl.cli.main import main

    out = tmp_path / "rm"
    code = main(
        [
            "reward", "train", "--frames", str(twin_frames), "--out", str(out),
            "--encoder", "hf", "--encoder-weights", str(models["dinov2"]),
            "--max-epochs", "4", "--steps-per-epoch", "5", "--batch-size", "32",
            "--augment-copies", "1", "--json",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    result = json.loads(captured.out)
    name = load_hf_encoder(models["dinov2"]).name
    card = read_card(out)
    assert card.encoder == result["encoder"] == name and card.feature_dim == 32
    spec = card.train_config["encoder_spec"]
    assert spec["name"] == name and spec["model_dir"] == str(models["dinov2"].resolve())
    assert f"encoder {name}" in captured.err and "preprocessor_config.json" in captured.err

    # Reload: the validation frames get the probabilities the training run scored them with.
    model = load_classifier(out, lambda n: make_encoder(n, models["dinov2"]))
    assert model.model_id.startswith(f"classifier/{name}/")
    with FrameLog.open(twin_frames) as store:
        frames = store.read()
    val = np.isin(frames["episode"], card.split["val"])
    probs = model.probs({"front": frames["obs"]["images"]["front"][val]})
    again = load_classifier(out, lambda n: make_encoder(n, models["dinov2"]))
    np.testing.assert_array_equal(
        again.probs({"front": frames["obs"]["images"]["front"][val]}), probs
    )
    m = evaluate(
        probs, frames["label"][val], frames["episode"][val], frames["step"][val], card.threshold
    )
    for key in ("precision", "recall", "pr_auc", "false_positives", "frames"):
        assert m[key] == pytest.approx(card.metrics["val"][key], abs=1e-9), key

    metrics = run_reward_eval(RewardEvalConfig(model=out, encoder_weights=models["dinov2"]))
    assert metrics["model_id"] == model.model_id and metrics["held_out"] == "test split"
    assert metrics["episodes"] == len(card.split["test"]) and 0 <= metrics["recall"] <= 1
    with pytest.raises(ValueError, match="--encoder-weights DIR"):
        run_reward_eval(RewardEvalConfig(model=out))
    code = main(
        ["reward", "eval", "--model", str(out), "--encoder-weights", str(models["dinov2_other"])]
    )
    assert code == 2 and "trained on hf:dinov2:" in capsys.readouterr().err

    # `robot-rl train --reward` rebuilds the same encoder from --reward-encoder-weights.
    run = tmp_path / "run"
    code = main(
        [
            "train", "--run", str(run), "--reward", str(out), "--reward-encoder-weights",
            str(models["dinov2"]), "--steps", "30", "--eval-every-steps", "30",
            "--eval-episodes", "1", "--no-progress", "--json",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    trained = json.loads(captured.out)
    assert trained["reward_model_id"] == model.model_id
    assert trained["reward_stats"]["labels"] == trained["reward_stats"]["steps"] == 30
