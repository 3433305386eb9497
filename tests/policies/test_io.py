"""Weight I/O: safetensors + JSON only, exact round trip, optimiser state continues."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from policy_helpers import numpy_obs, pixel_layout, sampler, small_sac

from policies.bc import BCAgent
from policies.config import BCConfig, EncoderConfig
from policies.io import load_agent, save_agent
from policies.sac import SACAgent


def _no_pickle(directory) -> None:
    files = sorted(p.name for p in directory.iterdir())
    assert files == ["meta.json", "optim.safetensors", "weights.safetensors"]
    for name in ("weights.safetensors", "optim.safetensors"):  # 8-byte length + JSON header
        raw = (directory / name).read_bytes()
        n = int.from_bytes(raw[:8], "little")
        json.loads(raw[8 : 8 + n])
    json.loads((directory / "meta.json").read_text())


@pytest.mark.parametrize("hybrid", [False, True])
def test_sac_round_trip_identical_actions_and_continued_training(tmp_path, hybrid):
    layout = pixel_layout(size=16, state_dim=3)
    cfg = small_sac(hybrid_gripper=hybrid, utd=2)
    a = SACAgent(layout, 3, cfg, seed=0)
    for _ in range(3):
        a.update(sampler(layout, 3, seed=1))
    save_agent(a, tmp_path)
    _no_pickle(tmp_path)

    b = SACAgent(layout, 3, cfg, seed=123)  # different init and RNG
    load_agent(b, tmp_path)
    obs = numpy_obs(layout, seed=5)
    np.testing.assert_array_equal(a.act(obs, True), b.act(obs, True))
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    np.testing.assert_array_equal(a.act(obs, False, g1), b.act(obs, False, g2))
    assert b.num_updates == 3 and b.num_critic_updates == 6
    assert b.critic_opt.state_dict()["state"][0]["step"].item() == 6

    # identical next updates: same weights, optimiser moments, RNG state, counters
    ma = a.update(sampler(layout, 3, seed=7))
    mb = b.update(sampler(layout, 3, seed=7))
    assert ma == mb
    for k, v in a.trainable_state().items():
        assert torch.equal(v, b.trainable_state()[k]), k


def test_trainable_state_round_trip_between_agents():
    layout = pixel_layout(size=16)
    a = SACAgent(layout, 2, small_sac(), seed=0)
    a.update(sampler(layout, 2))
    b = SACAgent(layout, 2, small_sac(), seed=1)
    b.load_trainable_state(a.trainable_state())
    obs = numpy_obs(layout)
    np.testing.assert_array_equal(a.act(obs, True), b.act(obs, True))
    with pytest.raises(KeyError):
        b.load_trainable_state({"nope": torch.zeros(1)})


def test_load_refuses_a_different_agent_class(tmp_path):
    layout = pixel_layout(size=16)
    enc = EncoderConfig(feature_dim=8, conv_channels=(8,), conv_strides=(2,))
    bc = BCAgent(layout, 2, BCConfig(hidden_dims=(16,), encoder=enc), seed=0)
    save_agent(bc, tmp_path)
    with pytest.raises(ValueError, match="BCAgent"):
        load_agent(SACAgent(layout, 2, small_sac(), seed=0), tmp_path)


def test_bc_round_trip_with_pixels(tmp_path):
    layout = pixel_layout(size=16)
    enc = EncoderConfig(feature_dim=8, conv_channels=(8,), conv_strides=(2,))
    cfg = BCConfig(hidden_dims=(16,), encoder=enc, loss="nll")
    a = BCAgent(layout, 2, cfg, seed=0)
    for _ in range(3):
        a.update(sampler(layout, 2, seed=1))
    a.save(tmp_path)
    _no_pickle(tmp_path)
    b = BCAgent(layout, 2, cfg, seed=5)
    b.load(tmp_path)
    obs = numpy_obs(layout)
    np.testing.assert_array_equal(a.act(obs, True), b.act(obs, True))
    assert b.num_updates == 3
    assert a.update(sampler(layout, 2, seed=4)) == b.update(sampler(layout, 2, seed=4))
