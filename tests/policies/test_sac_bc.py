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


def _batches(flag: str, n: int = 64, reward_scale: float = 1.0):
    """Batches whose rows flagged ``flag`` ("is_demo", "intervened" or "none") carry
    DEMO_ACTION; the other rows random actions; rewards random times ``reward_scale``."""
    gen = torch.Generator().manual_seed(0)

    def sample():
        b = random_batch(LAYOUT, ADIM, n, gen)
        marked = torch.arange(n) < n // 2
        action = b.action.clone()
        action[marked] = DEMO_ACTION
        flags = {"is_demo": b.is_demo.clone(), "intervened": b.intervened.clone()}
        if flag != "none":
            flags[flag] = marked
        reward = b.reward * reward_scale
        return dataclasses.replace(b, action=action, reward=reward, **flags)

    return sample


def _distance_after_training(
    bc_weight: float, flag: str, updates: int = 300, reward_scale: float = 1.0, **sac
) -> float:
    """Mean distance of the policy's deterministic action from DEMO_ACTION on fresh states."""
    agent = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=bc_weight, actor_lr=3e-3, **sac), seed=0)
    sample = _batches(flag, reward_scale=reward_scale)
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


def test_bc_normalize_keeps_cloning_when_returns_are_large():
    # Rewards x100 make |Q| large: the Q term's gradient drowns a fixed-weight BC term, unless
    # the Q term is divided by the batch's mean |Q| (TD3+BC).
    drowned = _distance_after_training(1.0, "is_demo", reward_scale=100.0)
    normalized = _distance_after_training(1.0, "is_demo", reward_scale=100.0, bc_normalize=True)
    assert normalized < 0.5 * drowned, (normalized, drowned)


def test_bc_normalize_leaves_small_returns_alone():
    # |Q| < 1 (rewards in [0, 0.01], 50 updates): the divisor is clamped to 1.
    plain = _distance_after_training(1.0, "is_demo", 50, reward_scale=0.01)
    normalized = _distance_after_training(1.0, "is_demo", 50, reward_scale=0.01, bc_normalize=True)
    assert normalized == plain


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
    torch.testing.assert_close(agent._bc_loss(z, batch, mode), err[keep].mean())
    unfiltered = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=1.0), seed=0)
    torch.testing.assert_close(unfiltered._bc_loss(z, batch, mode), err[batch.is_demo].mean())


def test_sample_and_mode_is_sample_and_mode_from_one_pass():
    agent = SACAgent(LAYOUT, ADIM, small_sac(), seed=0)
    z = agent.encoder(_batches("is_demo")().obs).detach()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a, logp = agent.actor.sample(z, g1)
    a2, logp2, mode = agent.actor.sample_and_mode(z, g2)
    torch.testing.assert_close(a2, a, rtol=0, atol=0)
    torch.testing.assert_close(logp2, logp, rtol=0, atol=0)
    torch.testing.assert_close(mode, agent.actor.mode(z), rtol=0, atol=0)


def test_the_q_filters_pass_rate_is_reported():
    agent = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=1.0, bc_q_filter=True), seed=0)
    m = agent.update(_batches("is_demo"))
    assert 0.0 <= m["bc_q_filter_kept"] <= 1.0
    plain = SACAgent(LAYOUT, ADIM, small_sac(bc_weight=1.0), seed=0)
    assert "bc_q_filter_kept" not in plain.update(_batches("is_demo"))


def test_the_temperature_stays_above_its_floor():
    # Random rewards, target entropy far below the policy's: alpha falls at every step.
    cfg = dict(init_temperature=0.01, temperature_lr=0.1, target_entropy=-50.0)
    free = SACAgent(LAYOUT, ADIM, small_sac(**cfg), seed=0)
    floored = SACAgent(LAYOUT, ADIM, small_sac(min_temperature=0.005, **cfg), seed=0)
    sample = _batches("none")
    for _ in range(50):
        free.update(sample)
        assert floored.update(sample)["temperature"] >= 0.005 * (1 - 1e-6)
    assert float(free.alpha.detach()) < 0.005  # without the floor it would have gone below
    with pytest.raises(ValueError, match="min_temperature must be in"):
        small_sac(min_temperature=0.1, init_temperature=0.01)


def test_a_negative_bc_weight_is_refused():
    with pytest.raises(ValueError, match="bc_weight must be >= 0"):
        small_sac(bc_weight=-0.1)


def _policy_over_data_gap(cql_weight: float, updates: int = 200) -> tuple[float, dict]:
    """Mean Q at the policy's sampled actions minus mean Q at the batch's actions, on fresh
    batches, after training on batches whose first half took DEMO_ACTION."""
    agent = SACAgent(LAYOUT, ADIM, small_sac(cql_weight=cql_weight), seed=0)
    sample = _batches("is_demo")
    for _ in range(updates):
        metrics = agent.update(sample)
    b = _batches("is_demo")()
    with torch.no_grad():
        z = agent.encoder(b.obs)
        a_pi, _ = agent.actor.sample(z, torch.Generator().manual_seed(1))
        q_pi = agent.critic(z, a_pi).mean()
        q_data = agent.critic(z, b.action).mean()
    return float(q_pi - q_data), metrics


def test_cql_stops_the_critics_rating_the_policys_actions_above_the_datas():
    # The conservative term pushes Q down at the policy's actions and up at the data's, so the
    # critics rate the policy's (untried) actions below the data's by a clear margin.
    plain, _ = _policy_over_data_gap(0.0)
    conservative, metrics = _policy_over_data_gap(1.0)
    assert conservative < plain - 0.1, (plain, conservative)
    assert "cql_gap" in metrics


def test_cql_weight_is_checked():
    with pytest.raises(ValueError, match="cql_weight"):
        small_sac(cql_weight=-1.0)
