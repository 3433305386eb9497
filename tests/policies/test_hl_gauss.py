"""HL-Gauss categorical critic loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from policy_helpers import sampler, small_sac, state_layout

from policies.networks import HLGauss
from policies.sac import SACAgent


@pytest.mark.parametrize("y", [-7.3, -0.05, 0.0, 2.5, 9.1])
def test_target_distribution_mean_equals_scalar_target(y):
    hl = HLGauss(-10.0, 10.0, 51, sigma=None, device="cpu")
    probs = hl.target_probs(torch.tensor([y]))
    assert probs.shape == (1, 51)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1))
    mean = float((probs * hl.centres).sum())
    assert abs(mean - y) < (20.0 / 51) / 4  # well within one bin


def test_loss_is_minimised_at_the_target_value():
    hl = HLGauss(-5.0, 5.0, 41, sigma=0.3, device="cpu")
    logits = torch.zeros(41, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=0.1)
    target = torch.tensor(1.7)
    for _ in range(400):
        opt.zero_grad()
        hl.loss(logits, target).backward()
        opt.step()
    assert abs(hl.value(logits).item() - 1.7) < 0.05
    # the optimum's loss is lower than that of logits centred elsewhere
    other = torch.log(hl.target_probs(torch.tensor(-1.0)) + 1e-8)
    assert hl.loss(logits, target) < hl.loss(other, target)


def test_sac_with_hl_gauss_critic_updates():
    layout = state_layout()
    cfg = small_sac(critic_loss="hl_gauss", hl_num_bins=21, hl_v_min=-5.0, hl_v_max=5.0)
    agent = SACAgent(layout, 2, cfg, seed=0)
    assert agent.critic(torch.zeros(3, agent.encoder.out_dim), torch.zeros(3, 2)).shape == (
        2,
        3,
        21,
    )
    for _ in range(3):
        m = agent.update(sampler(layout, 2))
    assert np.isfinite(m["critic_loss"]) and -5.0 <= m["q_mean"] <= 5.0
