"""SAC update math: loss isolation, Polyak targets, REDQ subset min, temperature, UTD."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from policy_helpers import pixel_layout, sampler, small_sac, state_layout

from policies.sac import SACAgent


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in module.parameters() if p.requires_grad]


def _all_zero(grads) -> bool:
    return all(g is None or torch.count_nonzero(g) == 0 for g in grads)


@pytest.mark.parametrize("layout", [state_layout(), pixel_layout()], ids=["state", "pixels"])
def test_actor_loss_leaves_critic_and_encoder_gradients_at_zero(layout):
    agent = SACAgent(layout, 3, small_sac(), seed=0)
    _, z, _ = agent.critic_loss(sampler(layout, 3)())
    for m in agent.modules().values():
        m.zero_grad(set_to_none=True)
    loss, _ = agent.actor_loss(z)
    loss.backward()
    assert _all_zero(_grads(agent.critic))
    assert _all_zero(_grads(agent.encoder))
    assert not _all_zero(_grads(agent.actor))


@pytest.mark.parametrize("layout", [state_layout(), pixel_layout()], ids=["state", "pixels"])
def test_critic_loss_leaves_actor_gradients_at_zero(layout):
    agent = SACAgent(layout, 3, small_sac(), seed=0)
    loss, _, _ = agent.critic_loss(sampler(layout, 3)())
    loss.backward()
    assert _all_zero(_grads(agent.actor))
    assert not _all_zero(_grads(agent.critic))
    if layout.images:  # the conv encoder is trained by the critic loss
        assert not _all_zero(_grads(agent.encoder.images))


def test_polyak_update_is_exact():
    agent = SACAgent(state_layout(), 2, small_sac(tau=0.1), seed=0)
    with torch.no_grad():
        for p in agent.critic.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    online = [p.detach().clone() for p in agent.critic.parameters()]
    target = [p.detach().clone() for p in agent.critic_target.parameters()]
    agent.polyak_update()
    for o, t, new in zip(online, target, agent.critic_target.parameters(), strict=True):
        torch.testing.assert_close(new, 0.1 * o + 0.9 * t, rtol=0, atol=1e-6)
    assert not torch.equal(target[0], next(agent.critic_target.parameters()))


def _constant_targets(agent: SACAgent, values: list[float]) -> None:
    """Make target critic i output the constant values[i]."""
    with torch.no_grad():
        agent.critic_target.out.weight.zero_()
        agent.critic_target.out.bias.copy_(torch.tensor(values).view(-1, 1, 1))


@pytest.mark.parametrize("num_min_qs", [1, 2, 3, 5])
def test_target_is_min_over_random_subset_of_num_min_qs(num_min_qs):
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    cfg = small_sac(num_critics=5, num_min_qs=num_min_qs, gamma=1.0, backup_entropy=False)
    agent = SACAgent(state_layout(), 2, cfg, seed=0)
    _constant_targets(agent, values)
    sample = sampler(state_layout(), 2)

    def batch():
        b = sample()
        return type(b)(**{**b.__dict__, "reward": b.reward * 0, "terminated": b.terminated * 0})

    seen = {round(agent.critic_loss(batch())[2]["target_q_mean"], 4) for _ in range(60)}
    # min of a size-k subset of {1..5} can be any of 1..(5-k+1), and (with 60 draws) is
    possible = {float(v) for v in range(1, 5 - num_min_qs + 2)}
    assert seen == possible


def test_temperature_moves_toward_target_entropy():
    layout = state_layout()
    up = SACAgent(layout, 2, small_sac(target_entropy=50.0), seed=0)  # unreachably high
    down = SACAgent(layout, 2, small_sac(target_entropy=-50.0), seed=0)  # unreachably low
    for _ in range(5):
        up.update(sampler(layout, 2))
        down.update(sampler(layout, 2))
    assert up.alpha.item() > 1.0 > down.alpha.item()


def test_temperature_loss_sign():
    agent = SACAgent(state_layout(), 2, small_sac(target_entropy=-1.0), seed=0)
    low_entropy_logp = torch.full((8,), 3.0)  # entropy -3 < target -1 -> raise alpha
    agent.temperature_loss(low_entropy_logp).backward()
    assert agent.log_alpha.grad.item() < 0  # gradient descent increases log_alpha


def test_utd_draws_one_fresh_batch_per_critic_update():
    layout = state_layout()
    calls = []
    inner = sampler(layout, 2)

    def sample():
        calls.append(1)
        return inner()

    agent = SACAgent(layout, 2, small_sac(utd=4), seed=0)
    metrics = agent.update(sample)
    assert len(calls) == 4
    assert agent.num_critic_updates == 4 and agent.num_updates == 1
    for k in ("critic_loss", "actor_loss", "temperature", "entropy", "q_mean"):
        assert np.isfinite(metrics[k])


def test_grad_clip_and_ensemble_of_ten_run():
    layout = state_layout()
    cfg = small_sac(num_critics=10, num_min_qs=2, grad_clip_norm=1.0, backup_entropy=False)
    agent = SACAgent(layout, 2, cfg, seed=0)
    out = agent.update(sampler(layout, 2))
    assert np.isfinite(out["critic_loss"])
    q = agent.critic(torch.zeros(5, agent.encoder.out_dim), torch.zeros(5, 2))
    assert q.shape == (10, 5, 1)


def test_ensemble_members_are_independent():
    """Member i's output depends only on member i's weights (vectorised ensemble)."""
    agent = SACAgent(state_layout(), 2, small_sac(num_critics=3), seed=0)
    z, a = torch.randn(4, agent.encoder.out_dim), torch.randn(4, 2)
    before = agent.critic(z, a).detach()
    with torch.no_grad():
        agent.critic.linears[0].weight[1].add_(1.0)
    after = agent.critic(z, a).detach()
    assert torch.equal(before[0], after[0]) and torch.equal(before[2], after[2])
    assert not torch.equal(before[1], after[1])


def test_agent_never_touches_the_global_torch_rng():
    layout = pixel_layout()
    before = torch.get_rng_state()
    agent = SACAgent(layout, 3, small_sac(hybrid_gripper=True), seed=0)
    agent.update(sampler(layout, 3))
    from policy_helpers import numpy_obs

    agent.act(numpy_obs(layout), deterministic=False)
    assert torch.equal(before, torch.get_rng_state())


def test_same_seed_same_agent():
    layout = pixel_layout()
    a, b = (SACAgent(layout, 3, small_sac(), seed=4) for _ in range(2))
    assert a.update(sampler(layout, 3)) == b.update(sampler(layout, 3))


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"num_min_qs": 3, "num_critics": 2}, "num_min_qs"),
        ({"utd": 0}, "utd"),
        ({"critic_loss": "huber"}, "critic_loss"),
        ({"hl_v_min": 1.0, "hl_v_max": 0.0}, "hl_v_min"),
    ],
)
def test_config_validation_says_what_to_change(kw, match):
    from policies.config import SACConfig

    with pytest.raises(ValueError, match=match):
        SACConfig(**kw)


def test_hybrid_gripper_toggle_penalty_reads_the_raw_gripper_through_the_normaliser():
    """The learner normalises states; the toggle penalty must still read the gripper as closed
    where the raw gripper_pos is above 0.5 (holding a cube: ~0.6, below a mean of 0.8)."""
    import dataclasses

    from policy_helpers import random_batch

    from robot_rl.core import keys
    from robot_rl.run.normalize import StateNormalizer

    layout = state_layout(4)
    agent = SACAgent(layout, 3, small_sac(hybrid_gripper=True, gripper_toggle_penalty=0.5), seed=0)
    with torch.no_grad():  # both gripper critics output 0: the loss is the penalty squared
        for net in (agent.gripper_critic, agent.gripper_target):
            for p in net.parameters():
                p.zero_()
    mean, std = np.array([0.0, 0.0, 0.0, 0.8]), np.array([1.0, 1.0, 1.0, 0.1])
    norm = StateNormalizer(mean, std)
    agent.set_state_normalization(mean, std)

    def penalty(raw_gripper: float, command: float) -> float:
        b = random_batch(layout, 3, 1, torch.Generator().manual_seed(0))
        state = torch.tensor([[0.0, 0.0, 0.0, raw_gripper]])
        act = torch.tensor([[0.0, 0.0, command]])
        b = norm.batch(dataclasses.replace(b, obs={keys.STATE: state}, action=act))
        z = agent.encoder(b.obs)
        loss = agent._gripper_loss(b, z, z, torch.zeros(1), torch.ones(1))
        return float(loss.detach().sqrt())

    assert penalty(0.6, +1.0) == pytest.approx(0.0)  # closed on the cube, keeps closing
    assert penalty(0.6, -1.0) == pytest.approx(0.5)  # closed, opens: a toggle
    assert penalty(0.1, +1.0) == pytest.approx(0.5)  # open, closes: a toggle
    assert penalty(0.1, 0.0) == pytest.approx(0.0)  # keeps
