"""SACConfig.policy_average: the agent acts with a Polyak average of the actor's weights."""

from __future__ import annotations

import numpy as np
import torch
from policy_helpers import numpy_obs, sampler, small_sac, state_layout

from policies.encoders import obs_to_torch
from policies.sac import SACAgent


def test_the_average_moves_by_its_fraction_of_the_live_actor_and_is_what_acts():
    layout = state_layout()
    agent = SACAgent(layout, 2, small_sac(policy_average=0.1), seed=0)
    before = [p.detach().clone() for p in agent.actor_average.parameters()]
    agent.update(sampler(layout, 2))
    live = list(agent.actor.parameters())
    for b, avg, new in zip(before, agent.actor_average.parameters(), live, strict=True):
        torch.testing.assert_close(avg, 0.9 * b + 0.1 * new, rtol=0, atol=1e-6)
    assert any(not torch.equal(b, p) for b, p in zip(before, live, strict=True))
    obs = numpy_obs(layout)
    z = agent.encoder(obs_to_torch(obs, agent.device))
    with torch.no_grad():
        want = agent.actor_average.mode(z)[0].clamp(-1, 1).numpy()
        live_mode = agent.actor.mode(z)[0].clamp(-1, 1).numpy()
    got = agent.act(obs, deterministic=True)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert not np.allclose(got, live_mode, atol=1e-6)  # the live actor has moved away
    # what a distributed actor receives is the average, under the actor's own name
    published = agent.acting_modules()["actor"]
    assert published is agent.actor_average


def test_off_by_default_and_the_average_is_saved_with_the_agent(tmp_path):
    layout = state_layout()
    assert SACAgent(layout, 2, small_sac(), seed=0).actor_average is None
    agent = SACAgent(layout, 2, small_sac(policy_average=0.05), seed=0)
    for _ in range(3):
        agent.update(sampler(layout, 2))
    agent.save(tmp_path)
    other = SACAgent(layout, 2, small_sac(policy_average=0.05), seed=1)
    other.load(tmp_path)
    obs = numpy_obs(layout)
    np.testing.assert_array_equal(
        agent.act(obs, deterministic=True), other.act(obs, deterministic=True)
    )
    pairs = zip(agent.actor_average.parameters(), other.actor_average.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
