"""n-step returns from the replay (``Mixer(n_step=k)``): each sampled row is checked against the
return computed by hand from the episode it came from, at episode ends, terminations, the
newest transition, gaps between interventions, ring wrap-around and with a reward offset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.core.batch import ObsLayout
from robot_rl.replay import Mixer, ReplayBuffer

LAYOUT = ObsLayout(2, {})


def _obs(ep: int, t: int) -> dict:
    return {"state": np.array([ep, t], np.float32)}


def _reward(ep: int, t: int) -> float:
    return float(1 + ep * 10 + t)  # every step's reward differs, so a wrong sum shows


def _add(buf: ReplayBuffer, ep: int, ts, terminal: int | None) -> None:
    """Add steps ``ts`` of episode ``ep`` (terminated at step ``terminal``, if any)."""
    for t in ts:
        a = np.array([ep, t], np.float32)
        buf.add(_obs(ep, t), a, _reward(ep, t), _obs(ep, t + 1), t == terminal)


def _expected(row_ep: int, row_t: int, steps: dict, n: int, gamma: float, offset: float):
    """(reward, next t, terminated, discount) by hand; ``steps[ep]`` = (stored ts, terminal)."""
    ts, terminal = steps[row_ep]
    total, disc, t = 0.0, 1.0, row_t
    for k in range(n):
        total += disc * (_reward(row_ep, t) + offset)
        disc *= gamma
        if k == n - 1 or t == terminal or t + 1 not in ts:
            break
        t += 1
    return total, t + 1, float(t == terminal), disc


def _check(batch, steps: dict, n: int, gamma: float, offset: float = 0.0) -> set:
    seen = set()
    for i in range(batch.reward.shape[0]):
        ep, t = (int(v) for v in batch.obs["state"][i])
        r, t_next, term, disc = _expected(ep, t, steps, n, gamma, offset)
        assert batch.reward[i].item() == pytest.approx(r, rel=1e-6), (ep, t)
        assert batch.next_obs["state"][i].tolist() == [ep, t_next], (ep, t)
        assert batch.terminated[i].item() == term, (ep, t)
        assert batch.discount[i].item() == pytest.approx(disc, rel=1e-6), (ep, t)
        assert batch.action[i].tolist() == [ep, t]  # the first step's action
        seen.add((ep, t_next - t))
    return seen


@pytest.mark.parametrize("n", [2, 3, 5])
def test_nstep_rows_match_the_return_by_hand(n):
    gamma, offset = 0.9, -1.0
    buf = ReplayBuffer(200, LAYOUT, 2)
    # ep 0 terminates at t=6; ep 1 is cut by a time limit after 4 steps (no termination);
    # ep 2 is still running: its newest transition ends the stream
    steps = {0: (range(7), 6), 1: (range(4), None), 2: (range(3), None)}
    for ep, (ts, terminal) in steps.items():
        _add(buf, ep, ts, terminal)
    batch = Mixer(buf, None, n_step=n, gamma=gamma, reward_offset=offset).sample(
        512, np.random.default_rng(0)
    )
    seen = _check(batch, steps, n, gamma, offset)
    assert {k for _, k in seen} == set(range(1, n + 1))  # full and shortened sums both drawn


def test_nstep_stops_at_gaps_between_interventions_and_survives_wraparound():
    """The demo buffer gets intervention segments one step at a time; a sum never jumps a gap.
    A small ring evicts old transitions while sampling keeps to the ones still held."""
    gamma, n = 0.5, 4
    demo = ReplayBuffer(12, LAYOUT, 2)
    _add(demo, 5, range(0, 3), None)  # intervention at t = 0..2
    _add(demo, 5, range(6, 8), None)  # another at t = 6..7 (the gap: 3..5)
    _add(demo, 6, range(0, 10), 9)  # a whole demo, terminated; wraps the 12-slot ring
    steps = {5: (set(range(0, 3)) | set(range(6, 8)), None), 6: (set(range(10)), 9)}
    online = ReplayBuffer(50, LAYOUT, 2)
    _add(online, 7, range(5), None)
    steps[7] = (set(range(5)), None)
    mixer = Mixer(online, demo, 0.5, n_step=n, gamma=gamma)
    rng = np.random.default_rng(1)
    for _ in range(20):
        batch = mixer.sample(64, rng)
        _check(batch, steps, n, gamma)
        assert batch.is_demo[:32].all() and not batch.is_demo[32:].any()
    assert len(demo) == 12  # the oldest (ep 5's first steps) were evicted


def test_one_step_batches_are_unchanged_and_carry_no_discount():
    buf = ReplayBuffer(50, LAYOUT, 2)
    _add(buf, 0, range(5), 4)
    b = Mixer(buf, None, reward_offset=0.5).sample(16, np.random.default_rng(0))
    assert b.discount is None
    for i in range(16):
        ep, t = (int(v) for v in b.obs["state"][i])
        assert b.reward[i].item() == _reward(ep, t) + 0.5
        assert b.next_obs["state"][i].tolist() == [ep, t + 1]


def test_sac_bootstraps_with_the_batch_discount():
    """The critic target uses gamma ** k from the batch: a terminal-free batch whose discount
    is 0 gives y = r exactly (as if terminated), and discount None uses the agent's gamma."""
    from policies.config import SACConfig
    from policies.sac import SACAgent

    agent = SACAgent(LAYOUT, 2, SACConfig(hidden_dims=(16,), n_step=3), seed=0)
    buf = ReplayBuffer(50, LAYOUT, 2)
    _add(buf, 0, range(8), None)
    b = Mixer(buf, None, n_step=3, gamma=0.99).sample(8, np.random.default_rng(0))
    zero = b.__class__(**{**b.__dict__, "discount": torch.zeros(8)})
    _, _, m = agent.critic_loss(zero)
    assert m["target_q_mean"] == pytest.approx(b.reward.mean().item(), rel=1e-5)
    _, _, m1 = agent.critic_loss(b)
    assert m1["target_q_mean"] != pytest.approx(b.reward.mean().item(), rel=1e-3)


def test_bad_nstep_settings_are_refused():
    buf = ReplayBuffer(10, LAYOUT, 2)
    with pytest.raises(ValueError, match="n_step"):
        Mixer(buf, None, n_step=0)
    with pytest.raises(ValueError, match="n_step"):
        from policies.config import SACConfig

        SACConfig(n_step=0)
