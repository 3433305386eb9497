"""Mixer: exact demo fraction per batch, fallbacks when a buffer is empty."""

from __future__ import annotations

import numpy as np
import pytest
import replay_data as rd

from robot_rl.replay import Mixer, ReplayBuffer


def _buffer(ep0: int, n_eps: int, length: int = 5) -> ReplayBuffer:
    lay = rd.layout(image_px=6)
    buf = ReplayBuffer(200, lay, rd.ACTION_DIM)
    for ep in range(ep0, ep0 + n_eps):
        for t in range(length):
            s = rd.step(lay, ep, t, length)
            buf.add(
                s["obs_learner"], s["action"], s["reward"], s["next_obs_learner"], s["terminated"]
            )
    return buf


@pytest.mark.parametrize("batch_size", [1, 7, 64, 255, 256])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_exact_demo_fraction(batch_size, fraction):
    online, demo = _buffer(0, 3), _buffer(100, 2)  # demo episodes are numbered >= 100
    mixer = Mixer(online, demo, fraction)
    rng = np.random.default_rng(0)
    for _ in range(3):
        b = mixer.sample(batch_size, rng)
        n_demo = round(batch_size * fraction)
        assert mixer.num_demo(batch_size) == n_demo
        assert int(b.is_demo.sum()) == n_demo
        from_demo = b.obs["state"][:, 0].numpy() >= 100
        np.testing.assert_array_equal(from_demo, b.is_demo.numpy())
        assert b.action.shape == (batch_size, rd.ACTION_DIM)
        assert b.next_obs["images"]["front"].shape[0] == batch_size


def test_no_demo_buffer_means_all_online():
    online = _buffer(0, 2)
    for demo in (None, ReplayBuffer(10, online.layout, rd.ACTION_DIM)):
        b = Mixer(online, demo, 0.5).sample(32, np.random.default_rng(1))
        assert not b.is_demo.any()


def test_empty_online_means_all_demo():
    demo = _buffer(100, 2)
    online = ReplayBuffer(10, demo.layout, rd.ACTION_DIM)
    b = Mixer(online, demo, 0.5).sample(32, np.random.default_rng(2))
    assert b.is_demo.all()


def test_both_empty_and_bad_arguments():
    lay = rd.layout(image_px=6)
    empty = ReplayBuffer(10, lay, rd.ACTION_DIM)
    with pytest.raises(ValueError, match="both empty"):
        Mixer(empty, None).sample(4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="demo_fraction"):
        Mixer(empty, None, 1.5)
    with pytest.raises(ValueError, match="layout"):
        Mixer(empty, ReplayBuffer(10, rd.layout(image_px=8), rd.ACTION_DIM))
