"""The behaviour-cloning term of the SAC actor (``SACConfig.bc_weight``, ``bc_q_filter``): it
pulls the policy towards the actions of demonstration and intervened rows, and only those."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from policy_helpers import random_batch, small_sac, state_layout

from policies.sac import SACAgent

LAYOUT = state_layout()
ADIM = 3
DEMO_ACTION = torch.tensor([0.6, -0.4, 0.2])


def _batches(flag: str, n: int = 64):
    """Batches whose rows flagged ``flag`` ("is_demo", "intervened" or "none") carry
    DEMO_ACTION; the other rows random actions."""
    gen = torch.Generator().manual_seed(0)

    def sample():
        b = random_batch(LAYOUT, ADIM, n, gen)
        marked = torch.arange(n) < n // 2
        action = b.action.clone()
        action[marked] = DEMO_ACTION
        flags = {"is_demo": b.is_demo.clone(), "intervened": b.intervened.clone()}
        if flag != "none":
            flags[flag] = marked
        return dataclasses.replace(b, action=action, **flags)

    return sample


def _distance_after_training(bc_weight: float, flag: str, updates: int = 300) -> float:
    """Mean distance of the policy's deterministic action from DEMO_ACTION on fresh states."""
    agent = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=bc_weight, actor_lr=3e-3), seed=0)
    sample = _batches(flag)
    for _ in range(updates):
        agent.update(sample)
    obs = random_batch(LAYOUT, ADIM, 64, torch.Generator().manual_seed(9)).obs
    with torch.no_grad():
        mode = agent.actor.mode(agent.encoder(obs))
    return float((mode - DEMO_ACTION).norm(dim=-1).mean())


@pytest.mark.parametrize("flag", ["is_demo", "intervened"])
def test_bc_pulls_the_policy_to_demo_and_intervened_actions(flag):
    # (the critics, trained on random rewards, pull elsewhere: the weight sets the balance)
    light, strong = _distance_after_training(1.0, flag), _distance_after_training(10.0, flag)
    without = _distance_after_training(0.0, flag)
    assert strong < 0.1 and strong < light < 0.5 * without, (strong, light, without)


def test_bc_ignores_rows_no_demo_or_person_chose():
    # Same batches, nothing flagged: the term is zero, the update the same as without BC.
    assert _distance_after_training(1.0, "none", 50) == _distance_after_training(0.0, "none", 50)


def test_q_filter_clones_only_rows_the_critics_rate_at_least_as_high_as_the_policy():
    agent = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=1.0, bc_q_filter=True), seed=0)
    batch = _batches("is_demo")()
    z = agent.encoder(batch.obs).detach()
    with torch.no_grad():
        mode = agent.actor.mode(z)
        q_data = agent.critic(z, batch.action).squeeze(-1).mean(0)
        q_pi = agent.critic(z, mode).squeeze(-1).mean(0)
    keep = batch.is_demo & (q_data >= q_pi)
    assert 0 < int(keep.sum()) < int(batch.is_demo.sum())  # the filter drops some, keeps some
    err = ((mode - batch.action) ** 2).sum(-1)
    torch.testing.assert_close(agent._bc_loss(z, batch), err[keep].mean())
    unfiltered = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=1.0), seed=0)
    torch.testing.assert_close(unfiltered._bc_loss(z, batch), err[batch.is_demo].mean())


def test_a_negative_bc_weight_is_refused():
    with pytest.raises(ValueError, match="bc_weight must be >= 0"):
        small_sac(bc_weight=-0.1)
