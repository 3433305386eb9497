"""Episode-level threshold calibration (rewards.calibration): the replay of the runtime k-of-n
rule agrees with the real detector, label noise inside a held success does not move the
threshold, and the threshold sits in the gap between what ended episodes early and what
confirmed them in time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.calibration import (
    confirmation_scores,
    episode_outcomes,
    threshold_for_episodes,
    threshold_for_precision,
)
from rewards.detector import DetectorConfig, SuccessDetector


@settings(max_examples=200, deadline=None)
@given(
    probs=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    kn=st.tuples(st.integers(1, 4), st.integers(0, 3)),
    threshold=st.floats(0.01, 0.99),
)
def test_confirmation_scores_replay_the_detector(probs, kn, threshold):
    k, n = kn[0], kn[0] + kn[1]
    det = SuccessDetector(DetectorConfig(threshold=threshold, k=k, n=n))
    first = next(
        (i for i, p in enumerate(probs) if det.update(p, step=i, episode=0).terminated), None
    )
    hits = np.flatnonzero(confirmation_scores(np.array(probs), k, n) >= threshold)
    assert first == (int(hits[0]) if hits.size else None)


def _episodes(*traces):
    """(probs, labels, episodes, steps) from (probs, first success index or None) per episode."""
    p, y, e, s = [], [], [], []
    for ep, (probs, first) in enumerate(traces):
        p += list(probs)
        y += [first is not None and i >= first for i in range(len(probs))]
        e += [ep] * len(probs)
        s += list(range(len(probs)))
    return np.array(p), np.array(y), np.array(e), np.array(s)


# Two held-out successes shaped like twin pick_cube's (a rise at the lift, a plateau), one of
# them with an unlabelled frame inside the held success (a dropped button frame) that scores
# 0.98; and one failure that approaches without lifting.
RISE = [0.01] * 10 + [0.1, 0.3, 0.7, 0.9] + [0.95] * 10
NOISY = [0.02] * 8 + [0.2, 0.6, 0.97] + [0.99] * 4 + [0.98] + [0.99] * 7
FAIL = [0.01] * 10 + [0.2, 0.35, 0.3, 0.1] + [0.05] * 10


def test_a_dropped_label_frame_inside_a_success_does_not_move_the_threshold():
    probs, labels, eps, steps = _episodes((RISE, 12), (NOISY, 9), (FAIL, None))
    labels[eps == 1] &= ~(steps[eps == 1] == 15)  # the frame the button dropped
    # The frame rule takes the smallest threshold with 0.99 precision: above the dropped
    # frame's 0.98, which misses the success that plateaus at 0.95.
    frame = threshold_for_precision(probs, labels, 0.99).threshold
    assert frame > 0.98
    at_frame = episode_outcomes(probs, labels, eps, steps, frame, 2, 3)
    assert at_frame["detected"] == 1 and at_frame["missed"] == 1

    choice = threshold_for_episodes(probs, labels, eps, steps, k=2, n=3, max_latency=10)
    assert choice.separable and choice.hits == 2 and choice.false_successes == 0
    # 2 of 3: the failure's second-highest score in any 3 frames is 0.3; the lower of the
    # successes' best on-time scores is RISE's 0.95 -> the middle of the gap.
    assert choice.negative_bound == pytest.approx(0.3)
    assert choice.positive_bound == pytest.approx(0.95)
    assert choice.threshold == pytest.approx(0.625)
    out = episode_outcomes(probs, labels, eps, steps, choice.threshold, 2, 3)
    assert out["detected"] == 2 and out["false_successes"] == 0 and out["missed"] == 0
    assert out["episode_recall"] == 1.0 and out["mean_latency_steps"] == pytest.approx(1.5)


def test_a_score_that_would_end_an_episode_early_bounds_the_threshold_from_below():
    early = [0.01] * 5 + [0.8, 0.85, 0.1] + [0.02] * 4 + [0.9] * 10  # a false spike, then success
    probs, labels, eps, steps = _episodes((RISE, 12), (early, 12))
    choice = threshold_for_episodes(probs, labels, eps, steps, k=2, n=3, max_latency=10)
    assert choice.negative_bound == pytest.approx(0.8)
    assert choice.threshold > 0.8 and choice.false_successes == 0 and choice.hits == 2
    # 1 of 1 would have been fooled at any threshold up to 0.85.
    loose = threshold_for_episodes(probs, labels, eps, steps, k=1, n=1, max_latency=10)
    assert loose.negative_bound == pytest.approx(0.85) and loose.threshold > 0.85


def test_a_success_confirmed_too_late_counts_as_missed():
    slow = [0.01] * 10 + [0.3] * 12 + [0.99] * 5  # success labelled at 10, clear only at 22
    probs, labels, eps, steps = _episodes((RISE, 12), (slow, 10), (FAIL, None))
    choice = threshold_for_episodes(probs, labels, eps, steps, k=2, n=3, max_latency=5)
    assert choice.hits == 1 and choice.positive_episodes == 2
    assert choice.threshold > 0.35  # the late episode does not drag it down to 0.3


def test_inseparable_episodes_put_precision_first():
    probs, labels, eps, steps = _episodes(([0.9] * 10, None), ([0.01] * 3 + [0.5] * 7, 3))
    choice = threshold_for_episodes(probs, labels, eps, steps, k=2, n=3, max_latency=10)
    assert not choice.separable and choice.hits == 0 and choice.false_successes == 0
    assert 0.9 < choice.threshold <= 0.999


@pytest.mark.parametrize(
    "args, match",
    [
        (dict(probs=[0.1, np.nan], labels=[0, 1]), "finite"),
        (dict(probs=[0.1, 0.2], labels=[0, 2]), "0/1"),
        (dict(probs=[0.1, 0.2], labels=[0]), "equal length"),
        (dict(probs=[0.1, 0.2], labels=[0, 1], max_latency=-1), "max_latency"),
        (dict(probs=[0.1, 0.2], labels=[0, 1], k=3, n=2), "k <= n"),
    ],
)
def test_bad_input_says_what_to_fix(args, match):
    p = np.array(args["probs"])
    kw = dict(
        labels=np.array(args["labels"]),
        episodes=np.zeros(len(p), int),
        steps=np.arange(len(p)),
        k=args.get("k", 1),
        n=args.get("n", 1),
        max_latency=args.get("max_latency", 5),
    )
    if len(kw["labels"]) != len(p):
        kw["episodes"], kw["steps"] = kw["episodes"][:1], kw["steps"][:1]
    with pytest.raises(ValueError, match=match):
        threshold_for_episodes(p, **kw)
