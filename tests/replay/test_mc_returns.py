"""Monte-Carlo returns-to-go from the replay (``Mixer(returns=True)``, Cal-QL's floor): each
sampled row's ``mc_return`` is checked against the return computed by hand from its episode,
for terminated, time-limited and still-open episodes, logged episodes, a reward offset, a
relabel and a resized copy; and the SAC critic's conservative term stops at the floor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robot_rl.core.batch import ObsLayout
from robot_rl.replay import Mixer, ReplayBuffer

LAYOUT = ObsLayout(2, {})
GAMMA = 0.9


def _obs(ep: int, t: int) -> dict:
    return {"state": np.array([ep, t], np.float32)}


def _reward(ep: int, t: int) -> float:
    return float(1 + ep * 10 + t)


def _add(buf: ReplayBuffer, ep: int, length: int, terminated: bool) -> None:
    for t in range(length):
        last = t == length - 1
        buf.add(
            _obs(ep, t),
            np.zeros(2, np.float32),
            _reward(ep, t),
            _obs(ep, t + 1),
            terminated and last,
        )


def _by_hand(ep: int, t: int, length: int, offset: float = 0.0) -> float:
    return sum(GAMMA**k * (_reward(ep, u) + offset) for k, u in enumerate(range(t, length)))


def _rows(buf: ReplayBuffer, offset: float = 0.0) -> dict[tuple[int, int], float]:
    """Every held transition's sampled mc_return, by (episode, step)."""
    mixer = Mixer(buf, None, gamma=GAMMA, reward_offset=offset, returns=True)
    b = mixer.sample(400, np.random.default_rng(0))
    out = {}
    for i in range(400):
        ep, t = (int(v) for v in b.obs["state"][i])
        out[(ep, t)] = b.mc_return[i].item()
    return out


def test_returns_to_go_match_the_episodes_by_hand():
    buf = ReplayBuffer(100, LAYOUT, 2)
    buf.track_returns(GAMMA)
    _add(buf, 0, 4, terminated=True)  # ends by the task
    _add(buf, 1, 3, terminated=False)  # cut by a time limit: ends when episode 2 begins
    _add(buf, 2, 2, terminated=False)  # still running
    rows = _rows(buf)
    assert len(rows) == 9
    for t in range(4):
        assert rows[(0, t)] == pytest.approx(_by_hand(0, t, 4), rel=1e-6)
    for t in range(3):
        assert rows[(1, t)] == pytest.approx(_by_hand(1, t, 3), rel=1e-6)
    assert np.isnan(rows[(2, 0)]) and np.isnan(rows[(2, 1)])  # unknown yet: no floor
    _add(buf, 3, 1, terminated=True)  # episode 2 ends (time limit) as 3 begins
    rows = _rows(buf)
    assert rows[(2, 0)] == pytest.approx(_by_hand(2, 0, 2), rel=1e-6)
    assert rows[(3, 0)] == pytest.approx(_reward(3, 0))


def test_the_offset_is_added_to_every_step_the_return_sums():
    buf = ReplayBuffer(100, LAYOUT, 2)
    _add(buf, 0, 5, terminated=True)
    _add(buf, 1, 3, terminated=True)
    rows = _rows(buf, offset=-1.0)  # the mixer turns tracking on for its gamma
    for ep, length in ((0, 5), (1, 3)):
        for t in range(length):
            want = _by_hand(ep, t, length, offset=-1.0)
            assert rows[(ep, t)] == pytest.approx(want, rel=1e-6)


def test_logged_episodes_relabels_and_copies_keep_the_returns():
    buf = ReplayBuffer(100, LAYOUT, 2)
    for ep, length in ((0, 4), (1, 6)):
        ts = range(length)
        buf.add_episode(
            {
                "obs": {"state": np.stack([_obs(ep, t)["state"] for t in ts])},
                "next_obs": {"state": np.stack([_obs(ep, t + 1)["state"] for t in ts])},
                "action": np.zeros((length, 2), np.float32),
                "reward": np.array([_reward(ep, t) for t in ts], np.float32),
                "terminated": np.array([t == length - 1 for t in ts]),
                "intervened": np.zeros(length, bool),
            }
        )
    rows = _rows(buf)
    assert rows[(1, 2)] == pytest.approx(_by_hand(1, 2, 6), rel=1e-6)
    buf.relabel_rewards(lambda r, term: np.where(term > 0, 1.0, 0.0).astype(np.float32))
    rows = _rows(buf)
    assert rows[(0, 1)] == pytest.approx(GAMMA**2, rel=1e-6)  # success 2 steps later
    bigger = buf.resized(300)
    assert _rows(bigger) == rows


def test_a_stream_cut_by_the_ring_keeps_its_surviving_suffix():
    buf = ReplayBuffer(5, LAYOUT, 2, obs_capacity=20)
    buf.track_returns(GAMMA)
    _add(buf, 0, 8, terminated=True)  # only the last 5 steps stay
    rows = _rows(buf)
    assert set(rows) == {(0, t) for t in range(3, 8)}
    for t in range(3, 8):
        assert rows[(0, t)] == pytest.approx(_by_hand(0, t, 8), rel=1e-6)


def test_without_tracking_the_mixer_refuses_nothing_and_samples_no_returns():
    buf = ReplayBuffer(10, LAYOUT, 2)
    _add(buf, 0, 3, terminated=True)
    b = Mixer(buf, None).sample(4, np.random.default_rng(0))
    assert b.mc_return is None
    out = buf.empty_arrays(2, returns=True)
    with pytest.raises(ValueError, match="track_returns"):
        buf.sample_into(out, 0, 2, np.random.default_rng(0))


def test_calql_stops_the_conservative_term_at_the_floor():
    """With the floor above every Q the conservative term has no gradient through Q at the
    policy's actions (all floored); far below, the loss is plain CQL's."""
    from policies.config import SACConfig
    from policies.sac import SACAgent

    buf = ReplayBuffer(50, LAYOUT, 2)
    _add(buf, 0, 8, terminated=True)
    b = Mixer(buf, None, gamma=0.99, returns=True).sample(8, np.random.default_rng(0))
    cfg = SACConfig(hidden_dims=(16,), cql_weight=1.0)
    plain = SACAgent(LAYOUT, 2, cfg, seed=0)
    cal = SACAgent(LAYOUT, 2, SACConfig(hidden_dims=(16,), cql_weight=1.0, calql=True), seed=0)
    low = b.__class__(**{**b.__dict__, "mc_return": torch.full((8,), -100.0)})
    loss_plain, _, _ = plain.critic_loss(low)
    loss_low, _, m_low = cal.critic_loss(low)
    assert m_low["calql_floored"] == 0.0
    assert loss_low.item() == pytest.approx(loss_plain.item(), rel=1e-6)
    high = b.__class__(**{**b.__dict__, "mc_return": torch.full((8,), 100.0)})
    loss_high, _, m_high = cal.critic_loss(high)
    assert m_high["calql_floored"] == 1.0
    assert loss_high.item() > loss_low.item() + 50  # the floor, not Q, sets the term
    with pytest.raises(ValueError, match="mc_return"):
        cal.critic_loss(b.__class__(**{**b.__dict__, "mc_return": None}))
    with pytest.raises(ValueError, match="cql_weight"):
        SACConfig(calql=True)
