"""Tiny learning checks: SAC and BC fit a 1-step continuous bandit from synthetic batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from policy_helpers import small_sac, state_layout

from policies.bc import BCAgent
from policies.config import BCConfig
from policies.sac import SACAgent
from robot_rl.core import keys
from robot_rl.core.batch import Batch

A_STAR = torch.tensor([0.5, -0.3])


def bandit_sampler(batch: int, seed: int, expert: bool = False):
    """1-step bandit: reward = -||a - a*||^2, terminated = 1, uniform random (or expert) actions."""
    gen = torch.Generator().manual_seed(seed)

    def sample() -> Batch:
        obs = {keys.STATE: torch.rand(batch, 2, generator=gen)}
        if expert:
            action = A_STAR.expand(batch, 2) + 0.05 * torch.randn(batch, 2, generator=gen)
        else:
            action = torch.rand(batch, 2, generator=gen) * 2 - 1
        reward = -((action - A_STAR) ** 2).sum(-1)
        return Batch(
            obs=obs,
            action=action,
            reward=reward,
            next_obs=obs,
            terminated=torch.ones(batch),
            intervened=torch.zeros(batch, dtype=torch.bool),
            is_demo=torch.zeros(batch, dtype=torch.bool),
        )

    return sample


@pytest.mark.parametrize("num_critics,utd", [(2, 1), (10, 2)])
def test_sac_fits_a_one_step_bandit(num_critics, utd):
    cfg = small_sac(
        hidden_dims=(64, 64),
        num_critics=num_critics,
        utd=utd,
        actor_lr=1e-3,
        critic_lr=1e-3,
        init_temperature=0.05,
    )
    _solves_the_bandit(SACAgent(state_layout(2), 2, cfg, seed=0))


def _solves_the_bandit(agent: SACAgent) -> None:
    """300 updates on the bandit; then the deterministic action is within 0.15 of a*."""
    sample = bandit_sampler(64, seed=1)
    for _ in range(300):
        m = agent.update(sample)
    obs = {keys.STATE: np.array([0.3, 0.7], np.float32)}
    a = agent.act(obs, deterministic=True)
    assert np.linalg.norm(a - A_STAR.numpy()) < 0.15, (a, m)


@pytest.mark.parametrize("loss", ["mse", "nll"])
def test_bc_fits_expert_actions(loss):
    agent = BCAgent(state_layout(2), 2, BCConfig(hidden_dims=(64,), loss=loss, lr=3e-3), seed=0)
    sample = bandit_sampler(64, seed=2, expert=True)
    first = agent.update(sample)["bc_loss"]
    for _ in range(200):
        last = agent.update(sample)["bc_loss"]
    assert last < first
    a = agent.act({keys.STATE: np.array([0.1, 0.9], np.float32)}, deterministic=True)
    assert np.linalg.norm(a - A_STAR.numpy()) < 0.1, a
    s = agent.act({keys.STATE: np.array([0.1, 0.9], np.float32)}, deterministic=False)
    assert s.shape == (2,) and np.all(np.abs(s) <= 1.0)


def test_the_residual_critic_learns_the_bandit_and_selects_members():
    """critic_arch="residual" (SimBa's critic): the same bandit is solved; member subsets and
    parameter detaching behave as the MLP ensemble's; a bad arch is refused."""
    from policies.config import SACConfig

    cfg = small_sac(
        hidden_dims=(64,), critic_arch="residual", critic_blocks=2, critic_expand=2,
        num_critics=4, actor_lr=1e-3, critic_lr=1e-3, init_temperature=0.05,
    )  # fmt: skip
    agent = SACAgent(state_layout(2), 2, cfg, seed=0)
    critic = agent.critic
    assert critic.arch == "residual" and len(critic.blocks) == 2
    assert critic.blocks[0].up.weight.shape == (4, 64, 128)  # (N, width, expand * width)
    f, a = torch.randn(5, agent.encoder.out_dim), torch.randn(5, 2)
    full = critic(f, a)
    sub = critic(f, a, members=torch.tensor([3, 1]))
    torch.testing.assert_close(sub, full[[3, 1]])
    f.requires_grad_(True)
    critic(f, a, detach_params=True).sum().backward()  # gradients reach the inputs only
    assert f.grad is not None and all(p.grad is None for p in critic.parameters())
    _solves_the_bandit(agent)
    with pytest.raises(ValueError, match="critic_arch"):
        SACConfig(critic_arch="transformer")


def test_the_auto_critic_is_simba_on_an_accelerator_and_the_mlp_on_the_cpu():
    """critic_arch="auto" (robot-rl train's default) resolves from the agent's device: the
    residual critic on CUDA / MPS, the MLP on the CPU and with crossq; an agent on the CPU
    builds (and reports in its config) the MLP; explicit values stay as they are."""
    from policies.config import SACConfig

    auto = SACConfig(critic_arch="auto")
    assert auto.on_device("cuda").critic_arch == "residual"
    assert auto.on_device("cuda:1").critic_arch == "residual"
    assert auto.on_device("mps").critic_arch == "residual"
    assert auto.on_device("cpu").critic_arch == "mlp"
    assert SACConfig(critic_arch="auto", crossq=True).on_device("cuda").critic_arch == "mlp"
    for arch in ("mlp", "residual"):
        assert SACConfig(critic_arch=arch).on_device("cuda").critic_arch == arch
        assert SACConfig(critic_arch=arch).on_device("cpu").critic_arch == arch
    with pytest.raises(ValueError, match="crossq"):
        SACConfig(critic_arch="residual", crossq=True)
    agent = SACAgent(state_layout(2), 2, small_sac(critic_arch="auto"), seed=0, device="cpu")
    assert agent.cfg.critic_arch == "mlp" and agent.critic.arch == "mlp"


def test_crossq_learns_the_bandit_without_a_target_network(tmp_path):
    """crossq=True: no target network anywhere (modules, checkpoints); the bandit is solved;
    the running statistics moved once per critic update and survive a save/load."""
    cfg = small_sac(
        hidden_dims=(64, 64), crossq=True, crossq_momentum=0.1, actor_lr=1e-3, critic_lr=1e-3,
        init_temperature=0.05,
    )  # fmt: skip
    agent = SACAgent(state_layout(2), 2, cfg, seed=0)
    assert agent.critic_target is None and "critic_target" not in agent.modules()
    assert len(agent.critic.renorms) == 3 and not len(agent.critic.norms)  # no LayerNorm
    _solves_the_bandit(agent)
    first = agent.critic.renorms[0]
    assert int(first.passes) == agent.num_critic_updates == 300
    assert not torch.allclose(first.running_mean, torch.zeros_like(first.running_mean))
    agent.save(tmp_path)
    other = SACAgent(state_layout(2), 2, cfg, seed=7)
    other.load(tmp_path)
    f, a = torch.randn(5, agent.encoder.out_dim), torch.randn(5, 2)
    torch.testing.assert_close(other.critic(f, a), agent.critic(f, a))


def test_crossq_target_comes_from_one_pass_with_shared_statistics():
    """The critic loss normalises (s, a) and (s', a') together: the current rows' Q changes with
    the next observations (it would not with a target network); the actor's loss and acting
    read the running statistics and leave them as they were."""
    import copy

    cfg = small_sac(hidden_dims=(32, 32), crossq=True, gamma=0.9)
    agent = SACAgent(state_layout(2), 2, cfg, seed=0)
    batch = bandit_sampler(32, seed=3)()
    batch = dataclasses.replace(batch, terminated=torch.zeros(32))
    far = dataclasses.replace(batch, next_obs={keys.STATE: batch.obs[keys.STATE] + 5.0})
    q = [copy.deepcopy(agent).critic_loss(b)[2]["q_mean"] for b in (batch, far)]
    assert abs(q[0] - q[1]) > 1e-3, q
    plain = SACAgent(state_layout(2), 2, small_sac(hidden_dims=(32, 32), gamma=0.9), seed=0)
    q = [copy.deepcopy(plain).critic_loss(b)[2]["q_mean"] for b in (batch, far)]
    assert q[0] == q[1]  # with a target network the current rows' Q ignores s'
    buffers = {k: v.clone() for k, v in agent.critic.state_dict().items() if "running" in k}
    _, z, _ = agent.critic_loss(batch)
    moved = agent.critic.state_dict()
    assert all(not torch.equal(moved[k], v) for k, v in buffers.items())
    buffers = {k: moved[k].clone() for k in buffers}
    agent.actor_loss(z, batch)
    agent.act({keys.STATE: np.array([0.3, 0.7], np.float32)}, deterministic=False)
    assert all(torch.equal(agent.critic.state_dict()[k], v) for k, v in buffers.items())


def test_crossq_settings_are_checked():
    from policies.config import SACConfig

    with pytest.raises(ValueError, match="crossq"):
        SACConfig(crossq=True, critic_arch="residual")
    with pytest.raises(ValueError, match="adam_beta1"):
        SACConfig(adam_beta1=1.0)
    with pytest.raises(ValueError, match="critic_hidden_dims"):
        SACConfig(critic_hidden_dims=())
    agent = SACAgent(state_layout(2), 2, small_sac(critic_hidden_dims=(48,)), seed=0)
    assert agent.critic.out.weight.shape == (2, 48, 1)  # the actor keeps hidden_dims
    assert agent.actor.net[0].out_features == 32


def _churn_on(agent: SACAgent, probe: Batch, updates: int, sample) -> tuple[float, float]:
    """Mean |change| per update of Q and of the deterministic action on a fixed probe batch."""
    a_probe = probe.action
    dq, da = [], []
    for _ in range(updates):
        with torch.no_grad():
            q0 = agent.critic(agent.encoder(probe.obs), a_probe)
            m0 = agent.actor.mode(agent.encoder(probe.obs))
        agent.update(sample)
        with torch.no_grad():
            dq.append((agent.critic(agent.encoder(probe.obs), a_probe) - q0).abs().mean())
            da.append((agent.actor.mode(agent.encoder(probe.obs)) - m0).abs().mean())
    return float(torch.stack(dq).mean()), float(torch.stack(da).mean())


def test_churn_reduction_solves_the_bandit_and_holds_what_one_update_moves():
    """churn_value / churn_policy (CHAIN): the bandit is still solved; an update moves Q and
    the greedy action on states outside its batch less than without; the references are not
    saved, and after a load the first update has none to hold to."""
    cfg = small_sac(
        hidden_dims=(64, 64), actor_lr=1e-3, critic_lr=1e-3, init_temperature=0.05,
        churn_value=0.1, churn_policy=0.1,
    )  # fmt: skip
    _solves_the_bandit(SACAgent(state_layout(2), 2, cfg, seed=0))
    probe = bandit_sampler(256, seed=9)()
    churn = {}
    for name, weights in (("off", (0.0, 0.0)), ("on", (30.0, 30.0))):
        c = dataclasses.replace(cfg, churn_value=weights[0], churn_policy=weights[1])
        agent = SACAgent(state_layout(2), 2, c, seed=0)
        sample = bandit_sampler(64, seed=1)
        for _ in range(50):
            m = agent.update(sample)
        churn[name] = _churn_on(agent, probe, 30, sample)
    # Adam scales steps to the gradient's size: the pull back shrinks a step's reach on other
    # states (here by ~35% for Q, ~60% for the action at weight 30), it cannot stop it
    assert churn["on"][0] < 0.8 * churn["off"][0], churn  # Q
    assert churn["on"][1] < 0.7 * churn["off"][1], churn  # the greedy action
    assert m["churn_value"] >= 0.0 and m["churn_policy"] >= 0.0  # logged while on
    plain = SACAgent(state_layout(2), 2, small_sac(hidden_dims=(64, 64)), seed=0)
    assert agent.trainable_state().keys() == plain.trainable_state().keys()  # refs not saved
    agent.load_trainable_state(agent.trainable_state())
    m = agent.update(sample)
    assert "churn_value" not in m and "churn_policy" not in m  # no reference yet
    assert "churn_value" in agent.update(sample)
    with pytest.raises(ValueError, match="churn_value"):
        small_sac(churn_value=-1.0)


def test_bfloat16_residual_blocks_match_float32_and_learn_the_bandit():
    """critic_block_precision="bfloat16": the blocks' products in bfloat16 give the float32
    critic's Q and gradients to bfloat16's precision, the gradients land on float32 weights,
    and the agent solves the bandit; a bad precision is refused."""
    from policies.config import SACConfig

    kw = dict(hidden_dims=(64,), critic_arch="residual", critic_blocks=2, critic_expand=4,
              num_critics=2, actor_lr=1e-3, critic_lr=1e-3, init_temperature=0.05)  # fmt: skip
    bf = SACAgent(state_layout(2), 2, small_sac(critic_block_precision="bfloat16", **kw), seed=0)
    fp = SACAgent(state_layout(2), 2, small_sac(**kw), seed=0)  # the same initial weights
    f, a = torch.randn(256, bf.encoder.out_dim), torch.randn(256, 2)
    q_bf, q_fp = bf.critic(f, a), fp.critic(f, a)
    assert q_bf.dtype == torch.float32 and not torch.equal(q_bf, q_fp)  # it did run in bf16
    torch.testing.assert_close(q_bf, q_fp, rtol=0.05, atol=0.02)
    q_bf.square().mean().backward()
    q_fp.square().mean().backward()
    pairs = zip(bf.critic.named_parameters(), fp.critic.parameters(), strict=True)
    for (name, p_bf), p_fp in pairs:
        assert p_bf.dtype == torch.float32 and p_bf.grad.dtype == torch.float32, name
        cos = F.cosine_similarity(p_bf.grad.flatten(), p_fp.grad.flatten(), dim=0)
        assert cos > 0.99, (name, float(cos))
    bf.critic.zero_grad()
    _solves_the_bandit(bf)
    with pytest.raises(ValueError, match="critic_block_precision"):
        SACConfig(critic_block_precision="float16")  # type: ignore[arg-type]
