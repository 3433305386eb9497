"""Contrastive VLM reward: projection math, calibration, tiny CLIP and SigLIP end to end."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import vlm_tiny

from rewards.vlm_contrastive import (
    ContrastiveVLMConfig,
    ContrastiveVLMReward,
    calibrated_probability,
    fit_calibration,
    goal_baseline_reward,
)
from robot_rl.core.protocols import RewardModel, RewardQuery

D = 12


def unit(v: torch.Tensor) -> torch.Tensor:
    return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)


@pytest.fixture
def embeddings() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(states (8, D), goal (D,), baseline (D,)), unit norm, float64 for exact comparisons."""
    gen = torch.Generator().manual_seed(0)
    s = unit(torch.randn(8, D, generator=gen, dtype=torch.float64))
    g = unit(torch.randn(D, generator=gen, dtype=torch.float64))
    b = unit(torch.randn(D, generator=gen, dtype=torch.float64))
    return s, g, b


def test_alpha_zero_is_the_plain_goal_similarity(embeddings) -> None:
    s, g, b = embeddings
    r = goal_baseline_reward(s, g, b, alpha=0.0)
    torch.testing.assert_close(r, (s @ g).float(), atol=1e-6, rtol=0)
    torch.testing.assert_close(r, (1 - 0.5 * (s - g).square().sum(-1)).float(), atol=1e-6, rtol=0)


def test_alpha_one_keeps_only_the_goal_baseline_direction(embeddings) -> None:
    s, g, b = embeddings
    d_hat = unit(g - b)
    expected = 1 - 0.5 * ((s - g) @ d_hat).square()
    torch.testing.assert_close(
        goal_baseline_reward(s, g, b, 1.0), expected.float(), atol=1e-6, rtol=0
    )


def test_intermediate_alpha_matches_the_paper_line_projection(embeddings) -> None:
    """Paper form ``1 - |a proj_L(s) + (1-a) s - g|^2 / 2`` with L the line through b and g."""
    s, g, b = embeddings
    d_hat = unit(g - b)
    proj_line = b + ((s - b) @ d_hat)[:, None] * d_hat  # (B, D) closest points on L
    for alpha in (0.25, 0.5, 0.9):
        expected = 1 - 0.5 * (alpha * proj_line + (1 - alpha) * s - g).square().sum(-1)
        r = goal_baseline_reward(s, g, b, alpha)
        torch.testing.assert_close(r, expected.float(), atol=1e-6, rtol=0)


def test_embeddings_are_normalised_inside(embeddings) -> None:
    s, g, b = embeddings
    torch.testing.assert_close(
        goal_baseline_reward(3.0 * s, 0.5 * g, 7.0 * b, 0.5), goal_baseline_reward(s, g, b, 0.5)
    )


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_moving_from_baseline_toward_goal_increases_reward(embeddings, alpha) -> None:
    """States on the arc from b to g (the move along d = g - b on the unit sphere)."""
    _, g, b = embeddings
    t = torch.linspace(0.0, 1.0, 11, dtype=torch.float64)[:, None]
    arc = unit((1 - t) * b + t * g)  # (11, D)
    r = goal_baseline_reward(arc, g, b, alpha)
    assert bool((r[1:] > r[:-1]).all()), r
    assert r[-1].item() == pytest.approx(1.0, abs=1e-6)  # the goal itself


def test_orthogonal_move_is_ignored_with_alpha_one(embeddings) -> None:
    s, g, b = embeddings
    d_hat = unit(g - b)
    along = (s @ d_hat)[:, None] * d_hat  # (B, D)
    ortho = s - along
    # Rotate the orthogonal part to another unit-sphere point with the same d-component.
    gen = torch.Generator().manual_seed(1)
    other = torch.randn(s.shape, generator=gen, dtype=torch.float64)
    other = other - (other @ d_hat)[:, None] * d_hat
    moved = along + unit(other) * torch.linalg.vector_norm(ortho, dim=-1, keepdim=True)
    assert torch.allclose(
        torch.linalg.vector_norm(moved, dim=-1), torch.ones(len(s), dtype=moved.dtype)
    )
    torch.testing.assert_close(
        goal_baseline_reward(moved, g, b, 1.0), goal_baseline_reward(s, g, b, 1.0)
    )
    assert not torch.allclose(
        goal_baseline_reward(moved, g, b, 0.0), goal_baseline_reward(s, g, b, 0.0)
    )


def test_projection_rejects_bad_input(embeddings) -> None:
    s, g, b = embeddings
    with pytest.raises(ValueError, match="alpha"):
        goal_baseline_reward(s, g, b, 1.5)
    with pytest.raises(ValueError, match="same direction"):
        goal_baseline_reward(s, g, 2.0 * g, 0.5)
    with pytest.raises(ValueError, match=r"\(B, D\)"):
        goal_baseline_reward(s[0], g, b, 0.5)


def test_calibration_is_monotone_and_fit_recovers_offset_and_scale() -> None:
    raw = np.linspace(-0.5, 0.5, 101)
    p = calibrated_probability(raw, offset=0.1, scale=0.05)
    assert np.all(np.diff(p) > 0) and p[np.argmin(np.abs(raw - 0.1))] == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.2, 0.4, 4000)
    y = rng.random(4000) < calibrated_probability(x, 0.1, 0.05)
    offset, scale = fit_calibration(x, y, l2=0.0)
    assert offset == pytest.approx(0.1, abs=0.01) and scale == pytest.approx(0.05, rel=0.15)
    with pytest.raises(ValueError, match="does not increase"):
        fit_calibration(x, ~y)
    with pytest.raises(ValueError, match="both"):
        fit_calibration(x, np.ones_like(y))


# -- end to end on tiny dual encoders saved to a local directory ----------------------------


@pytest.fixture(scope="module")
def encoder_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("encoders")
    return {
        "clip": vlm_tiny.build_clip(root / "clip"),
        "siglip": vlm_tiny.build_siglip(root / "siglip"),
    }


def make_config(model_dir: Path, **overrides) -> ContrastiveVLMConfig:
    fields = dict(
        model_dir=str(model_dir),
        goal_prompt="a robot gripper holding the red cube",
        baseline_prompt="a robot gripper",
        cameras=("front", "wrist"),
        alpha=0.5,
        prob_offset=0.7,
        prob_scale=0.05,
    )
    return ContrastiveVLMConfig(**{**fields, **overrides})


def make_query(seed: int, batch: int = 3) -> RewardQuery:
    rng = np.random.default_rng(seed)
    return RewardQuery(
        images={
            "front": rng.integers(0, 256, (batch, 24, 32, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (batch, 40, 40, 3), dtype=np.uint8),
        }
    )


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_runs_end_to_end_from_a_local_dir_and_is_deterministic(encoder_dirs, kind) -> None:
    model = ContrastiveVLMReward(make_config(encoder_dirs[kind]))
    assert isinstance(model, RewardModel)
    query = make_query(0)
    result = model.predict(query)
    assert result.success_prob.shape == (3,) and result.success_prob.dtype == np.float32
    assert np.all((result.success_prob >= 0) & (result.success_prob <= 1))
    np.testing.assert_array_equal(result.reward, result.success_prob - np.float32(1))
    assert (result.model_id, result.model_version) == (model.model_id, model.model_version)
    again = ContrastiveVLMReward(make_config(encoder_dirs[kind]))
    np.testing.assert_array_equal(again.predict(query).success_prob, result.success_prob)
    assert again.model_version == model.model_version
    raw = model.raw_reward(query)
    np.testing.assert_allclose(
        result.success_prob, calibrated_probability(raw, 0.7, 0.05), rtol=0, atol=1e-7
    )
    assert not np.allclose(model.raw_reward(make_query(1)), raw)  # the pixels matter


def test_cameras_are_combined_by_the_mean(encoder_dirs) -> None:
    query = make_query(2)
    both = ContrastiveVLMReward(make_config(encoder_dirs["clip"])).raw_reward(query)
    front = ContrastiveVLMReward(make_config(encoder_dirs["clip"], cameras=("front",)))
    wrist = ContrastiveVLMReward(make_config(encoder_dirs["clip"], cameras=("wrist",)))
    np.testing.assert_allclose(
        both, (front.raw_reward(query) + wrist.raw_reward(query)) / 2, atol=1e-6
    )


def test_alpha_zero_equals_clip_cosine_similarity(encoder_dirs) -> None:
    """Independent check through CLIPModel.forward: logits_per_image / logit_scale = cosine."""
    import transformers

    path = encoder_dirs["clip"]
    model = ContrastiveVLMReward(make_config(path, alpha=0.0, cameras=("front",)))
    query = make_query(3)
    clip = transformers.CLIPModel.from_pretrained(path, local_files_only=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    processor = transformers.AutoImageProcessor.from_pretrained(path, local_files_only=True)
    text = tokenizer(["a robot gripper holding the red cube"], return_tensors="pt")
    pixels = processor(images=list(query.images["front"]), return_tensors="pt")
    with torch.inference_mode():
        out = clip(input_ids=text["input_ids"], pixel_values=pixels["pixel_values"])
        cosine = (out.logits_per_image[:, 0] / clip.logit_scale.exp()).numpy()
    np.testing.assert_allclose(model.raw_reward(query), cosine, atol=1e-5)


def test_version_tracks_weights_and_prompts(encoder_dirs, tmp_path) -> None:
    base = ContrastiveVLMReward(make_config(encoder_dirs["clip"]))
    other_prompt = ContrastiveVLMReward(make_config(encoder_dirs["clip"], goal_prompt="a red cube"))
    other_weights = ContrastiveVLMReward(
        make_config(vlm_tiny.build_clip(tmp_path / "clip2", seed=1))
    )
    pinned = ContrastiveVLMReward(make_config(encoder_dirs["clip"], version="v7"))
    versions = {base.model_version, other_prompt.model_version, other_weights.model_version}
    assert len(versions) == 3
    assert pinned.model_version.startswith("v7-")


def test_bad_configs_and_queries_get_clear_errors(encoder_dirs, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ContrastiveVLMReward(make_config(tmp_path / "missing"))
    pickled = tmp_path / "pickled"
    shutil.copytree(encoder_dirs["clip"], pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors"):
        ContrastiveVLMReward(make_config(pickled))
    with pytest.raises(ValueError, match="alpha"):
        make_config(encoder_dirs["clip"], alpha=-0.1)
    with pytest.raises(ValueError, match="differ"):
        make_config(encoder_dirs["clip"], baseline_prompt="a robot gripper holding the red cube")
    with pytest.raises(ValueError, match="tuple"):
        make_config(encoder_dirs["clip"], cameras=["front"])
    model = ContrastiveVLMReward(make_config(encoder_dirs["clip"]))
    query = make_query(0)
    with pytest.raises(KeyError, match="wrist"):
        model.predict(RewardQuery(images={"front": query.images["front"]}))
    bad = dataclasses.replace(query, images={**query.images, "wrist": query.images["wrist"][:2]})
    with pytest.raises(ValueError, match="batch size"):
        model.predict(bad)
    floats = {**query.images, "front": query.images["front"].astype(np.float32)}
    with pytest.raises(ValueError, match="uint8"):
        model.predict(RewardQuery(images=floats))
