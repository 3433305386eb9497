"""ReplayBuffer: next_obs by index across episode ends and ring wrap-around, single storage of
images, sampling shapes and dtypes; rebuild from the log."""

from __future__ import annotations

import numpy as np
import pytest
import replay_data as rd
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from robot_rl.core.batch import Batch
from robot_rl.replay import EpisodeLog, ReplayBuffer, load_demos, rebuild_buffer


def _fill(buf: ReplayBuffer, lengths, terminal_last: bool = True, ep0: int = 0) -> None:
    lay = buf.layout
    for i, n in enumerate(lengths):
        ep = ep0 + i
        for t in range(n):
            s = rd.step(lay, ep, t, n)
            buf.add(
                s["obs_learner"],
                s["action"],
                s["reward"],
                s["next_obs_learner"],
                terminated=terminal_last and t == n - 1,
                intervened=t % 2 == 1,
            )


def _assert_consistent(batch: Batch, lay, intervened_odd: bool = True) -> None:
    """Every sampled next_obs is the successor of its obs (state encodes (episode, t))."""
    s, ns = batch.obs["state"].numpy(), batch.next_obs["state"].numpy()
    a = batch.action.numpy()
    np.testing.assert_array_equal(s[:, 0], ns[:, 0])  # same episode
    np.testing.assert_array_equal(ns[:, 1], s[:, 1] + 1)  # next step
    np.testing.assert_array_equal(a[:, :2], s[:, :2])  # action stored with its own obs
    for i in range(len(s)):
        ep, t = int(s[i, 0]), int(s[i, 1])
        want = rd.obs(lay, ep, t + 1)["images"]
        for c in lay.images:
            np.testing.assert_array_equal(batch.next_obs["images"][c][i].numpy(), want[c])
        assert batch.intervened[i].item() == (intervened_odd and t % 2 == 1)


def test_sample_shapes_and_dtypes():
    lay = rd.layout(image_px=10)
    buf = ReplayBuffer(100, lay, rd.ACTION_DIM)
    _fill(buf, [6, 4])
    b = buf.sample(32, np.random.default_rng(0))
    assert b.obs["state"].shape == (32, rd.STATE_DIM) and b.obs["state"].dtype == torch.float32
    for c in lay.images:
        assert b.obs["images"][c].shape == (32, 10, 10, 3)
        assert b.obs["images"][c].dtype == torch.uint8
        assert b.next_obs["images"][c].dtype == torch.uint8
    assert b.action.shape == (32, rd.ACTION_DIM) and b.action.dtype == torch.float32
    assert b.reward.shape == (32,) and b.reward.dtype == torch.float32
    assert b.terminated.dtype == torch.float32 and b.intervened.dtype == torch.bool
    assert not b.is_demo.any()
    _assert_consistent(b, lay)
    # terminal flags sit exactly on the last step of each episode
    s = b.obs["state"].numpy()
    last = np.where(s[:, 0] == 0, 5, 3)
    np.testing.assert_array_equal(b.terminated.numpy(), (s[:, 1] == last).astype(np.float32))


def test_each_observation_is_stored_once():
    lay = rd.layout()
    buf = ReplayBuffer(1000, lay, rd.ACTION_DIM)
    _fill(buf, [10, 7, 5])
    assert len(buf) == 22
    assert buf.num_obs_rows == 22 + 3  # T + 1 rows per episode, not 2 T
    # One array per camera sized by observation rows; no separate next_obs storage.
    per_row = sum(int(np.prod(s.shape)) for s in lay.images.values()) + 4 * rd.STATE_DIM
    per_transition = 4 * rd.ACTION_DIM + 4 + 4 + 1 + 8 + 8  # action, r, term, interv, 2 ids
    assert buf.nbytes == buf.obs_capacity * per_row + buf.capacity * per_transition
    assert buf.obs_capacity < 1.2 * buf.capacity


def test_truncated_episodes_without_terminal_flag_still_split():
    lay = rd.layout(image_px=6)
    buf = ReplayBuffer(100, lay, rd.ACTION_DIM)
    _fill(buf, [4, 4, 4], terminal_last=False)  # time-limit ends: obs of a new episode differs
    assert buf.num_obs_rows == 15
    _assert_consistent(buf.sample(64, np.random.default_rng(1)), lay)


@pytest.mark.parametrize("obs_capacity", [None, 12, 100])
def test_wrap_around_never_returns_overwritten_next_obs(obs_capacity):
    lay = rd.layout(image_px=6)
    buf = ReplayBuffer(10, lay, rd.ACTION_DIM, obs_capacity=obs_capacity)
    rng = np.random.default_rng(2)
    lengths = [3, 5, 1, 4, 7, 2, 6, 3, 3, 9, 1, 1, 4]
    for k in range(len(lengths)):
        _fill(buf, [lengths[k]], ep0=k)
        assert 0 < len(buf) <= 10
        b = buf.sample(50, rng)
        _assert_consistent(b, lay)
        # only the newest transitions survive
        s = b.obs["state"].numpy()
        assert s[:, 0].min() >= max(0, k - 4)
    if obs_capacity == 100:  # rows to spare: exactly `capacity` transitions are kept
        assert len(buf) == 10


def test_add_episode_matches_add():
    lay = rd.layout(image_px=6)
    a = ReplayBuffer(20, lay, rd.ACTION_DIM)
    _fill(a, [5, 8, 12])
    b = ReplayBuffer(20, lay, rd.ACTION_DIM)
    for ep, n in enumerate([5, 8, 12]):
        b.add_episode(_episode_arrays(lay, ep, n))
    assert len(a) == len(b) == 20
    ba, bb = a.sample(40, np.random.default_rng(3)), b.sample(40, np.random.default_rng(3))
    for x, y in [
        (ba.obs["state"], bb.obs["state"]),
        (ba.next_obs["images"]["front"], bb.next_obs["images"]["front"]),
    ]:
        assert torch.equal(x, y)


def _episode_arrays(lay, ep: int, n: int) -> dict:
    steps = [rd.step(lay, ep, t, n) for t in range(n)]
    rows = [rd.obs(lay, ep, t) for t in range(n + 1)]
    st = np.stack([r["state"] for r in rows])
    ims = {c: np.stack([r["images"][c] for r in rows]) for c in lay.images}
    return {
        "obs": {"state": st[:-1], "images": {c: v[:-1] for c, v in ims.items()}},
        "next_obs": {"state": st[1:], "images": {c: v[1:] for c, v in ims.items()}},
        "action": np.stack([s["action"] for s in steps]),
        "reward": np.array([s["reward"] for s in steps], np.float32),
        "terminated": np.array([s["terminated"] for s in steps]),
        "intervened": np.array([t % 2 == 1 for t in range(n)]),
    }


def test_rebuild_from_log_gives_same_contents(tmp_path):
    lay = rd.layout(image_px=8)
    lengths = [6, 3, 9, 4]
    path = tmp_path / "log.zarr"
    live = ReplayBuffer(15, lay, rd.ACTION_DIM)
    with EpisodeLog.create(path, lay, rd.ACTION_DIM) as log:
        for ep, n in enumerate(lengths):
            log.begin_episode("online", seed=ep)
            for t in range(n):
                s = rd.step(lay, ep, t, n)
                log.append(**s)
                live.add(
                    s["obs_learner"], s["action"], s["reward"], s["next_obs_learner"],
                    s["terminated"], s["intervened"],
                )  # fmt: skip
            log.end_episode(True)
    rebuilt = ReplayBuffer(15, lay, rd.ACTION_DIM)
    with EpisodeLog.open(path) as log:
        rebuild_buffer(log, rebuilt)
    # capacity 15, 17 obs rows: the last 1 + 9 + 4 transitions (the 17 newest rows) survive
    assert len(rebuilt) == len(live) == 14
    ga, gb = np.random.default_rng(4), np.random.default_rng(4)
    for _ in range(3):
        a, b = live.sample(32, ga), rebuilt.sample(32, gb)
        for x, y in [
            (a.obs["state"], b.obs["state"]),
            (a.next_obs["images"]["wrist"], b.next_obs["images"]["wrist"]),
            (a.reward, b.reward),
            (a.terminated, b.terminated),
            (a.action, b.action),
        ]:
            assert torch.equal(x, y)
    demos = load_demos(path)
    assert len(demos) == sum(lengths)
    _assert_consistent(demos.sample(64, np.random.default_rng(5)), lay, intervened_odd=False)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    capacity=st.integers(1, 20),
    extra_rows=st.integers(1, 25),
    terminal_last=st.booleans(),
)
def test_ring_property(lengths, capacity, extra_rows, terminal_last):
    """Any episode lengths and sizes: only the newest transitions are sampleable, each with
    its own next_obs; with enough rows exactly ``capacity`` of them are kept."""
    lay = rd.layout(image_px=2, cams=("c",))
    buf = ReplayBuffer(capacity, lay, rd.ACTION_DIM, obs_capacity=capacity + extra_rows)
    order: dict[tuple[int, int], int] = {}
    rng = np.random.default_rng(0)
    for ep, n in enumerate(lengths):
        for t in range(n):
            order[(ep, t)] = len(order)
        _fill(buf, [n], terminal_last=terminal_last, ep0=ep)
        total = len(order)
        assert 0 < len(buf) <= min(capacity, total)
        if extra_rows > ep + 1:  # room for one extra row per episode held
            assert len(buf) == min(capacity, total)
        b = buf.sample(64, rng)
        _assert_consistent(b, lay)
        s = b.obs["state"].numpy()
        ranks = [order[(int(e), int(t))] for e, t in s[:, :2]]
        assert min(ranks) >= total - len(buf)
