"""SACAgent.rescale_state_inputs: a refitted state normaliser folded into the first layers, so
that every network computes what it did before the refit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from policy_helpers import pixel_layout, random_obs, small_sac, state_layout

from policies.sac import SACAgent


def _outputs(agent: SACAgent, obs: dict, action: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        z = agent.encoder(obs)
        out = [agent.actor.mode(z), agent.critic(z, action)]
        if agent.critic_target is not None:
            out.append(agent.critic_target(z, action))
        if agent.actor_average is not None:
            out.append(agent.actor_average.mode(z))
        return out


@pytest.mark.parametrize(
    "layout, state_mlp",
    [
        (state_layout(), ()),
        (state_layout(), (16,)),  # a state MLP reads it first
        (pixel_layout(), ()),  # the state is the first part of the features
        (state_layout(), "residual"),  # SimBa's critic: its input layer takes the fold
        (pixel_layout(), "crossq"),  # CrossQ's: its input renorm's running statistics take it
    ],
    ids=["state", "state-mlp", "pixels+state", "residual-critic", "crossq-critic"],
)
def test_every_network_computes_the_same_on_the_refitted_inputs(layout, state_mlp):
    arch = "residual" if state_mlp == "residual" else "mlp"
    crossq = state_mlp == "crossq"
    state_mlp = () if state_mlp in ("residual", "crossq") else state_mlp
    cfg = small_sac(policy_average=0.01, critic_arch=arch, crossq=crossq)
    cfg = dataclasses.replace(
        cfg, encoder=dataclasses.replace(cfg.encoder, state_hidden_dims=state_mlp)
    )
    agent = SACAgent(layout, 3, cfg, seed=0)
    gen = torch.Generator().manual_seed(0)
    obs = random_obs(layout, 16, gen)
    action = torch.rand(16, 3, generator=gen) * 2 - 1
    s_dim = layout.state_dim
    raw = obs["state"] * 3.0 + 1.0  # (B, S) raw states
    m0, s0 = np.full(s_dim, 1.0, np.float32), np.full(s_dim, 3.0, np.float32)
    rng = np.random.default_rng(1)
    m1 = (m0 + rng.normal(size=s_dim)).astype(np.float32)
    s1 = (s0 * rng.uniform(0.2, 5.0, size=s_dim)).astype(np.float32)

    def normed(m: np.ndarray, s: np.ndarray) -> dict:
        return {**obs, "state": (raw - torch.as_tensor(m)) / torch.as_tensor(s)}

    if crossq:  # running statistics away from their initial 0 and 1
        with torch.no_grad():
            agent.critic(agent.encoder(normed(m0, s0)) * 2.0 + 0.5, action, batch_stats=True)
    before = _outputs(agent, normed(m0, s0), action)
    agent.rescale_state_inputs(s1 / s0, (m1 - m0) / s0)
    after = _outputs(agent, normed(m1, s1), action)
    for b, a in zip(before, after, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    # and it did change the weights: the old inputs now give other outputs
    moved = _outputs(agent, normed(m0, s0), action)
    assert not torch.allclose(moved[0], before[0], atol=1e-3)
