"""Calibration on held-out scores (pure numpy): PR curve, PR-AUC, threshold for a precision.

Used by reward-classifier training (:mod:`rewards.train`) to choose the success threshold and by
the success detector (:mod:`rewards.detector`). No sklearn dependency; the PR curve has one
point per distinct score (thresholds ascending), and average precision is defined as sklearn's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _check_scores(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 1 or y.ndim != 1 or p.shape != y.shape:
        raise ValueError(
            f"probs {p.shape} and labels {y.shape} must be 1-D and of equal length (one label per "
            "held-out score)"
        )
    if p.size == 0:
        raise ValueError("no held-out scores: pass at least one (prob, label) pair")
    bad = np.flatnonzero(~np.isfinite(p))
    if bad.size:
        raise ValueError(f"probs has NaN/inf at indices {bad[:10].tolist()}; fix the scorer")
    if p.min() < 0.0 or p.max() > 1.0:
        raise ValueError(f"probs must lie in [0, 1], got range [{p.min()}, {p.max()}]")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0/1 or bool (1 = success); found other values")
    y = y.astype(bool)
    if not y.any():
        raise ValueError("labels have no positives: precision/recall need held-out successes")
    return p, y


def precision_recall_curve(
    probs: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision and recall of the rule ``prob >= t`` for every distinct score ``t``.

    Unlike scikit-learn, no (precision=1, recall=0) end point is appended.

    Args:
        probs: (N,) scores in [0, 1].
        labels: (N,) 0/1 or bool, 1 = success. At least one positive.

    Returns:
        (precision, recall, thresholds), each (D,) for the D distinct scores, thresholds
        ascending.

    Raises:
        ValueError: On NaN/inf or out-of-range scores, mismatched lengths, non-binary labels or
            no positives.
    """
    p, y = _check_scores(probs, labels)
    order = np.argsort(-p, kind="stable")
    p_desc, y_desc = p[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(p_desc) != 0), p.size - 1]  # end of each tie group
    tp = np.cumsum(y_desc)[last]
    flagged = last + 1
    precision = tp / flagged
    recall = tp / y.sum()
    return precision[::-1], recall[::-1], p_desc[last][::-1]


def pr_auc(probs: np.ndarray, labels: np.ndarray) -> float:
    """Average precision: ``sum_i (R_i - R_{i-1}) P_i`` over thresholds from high to low.

    Same definition as scikit-learn's ``average_precision_score`` (no interpolation).
    """
    precision, recall, _ = precision_recall_curve(probs, labels)
    p_desc, r_desc = precision[::-1], recall[::-1]
    return float(np.sum(np.diff(r_desc, prepend=0.0) * p_desc))


@dataclass(frozen=True)
class ThresholdChoice:
    """A threshold picked on held-out scores, with its measured quality there.

    Attributes:
        threshold: Fire when ``prob >= threshold``.
        precision: Held-out precision at this threshold.
        recall: Held-out recall at this threshold.
        support: Number of held-out positives (successes).
        num_flagged: Number of held-out scores at or above the threshold.
    """

    threshold: float
    precision: float
    recall: float
    support: int
    num_flagged: int


def threshold_for_precision(
    probs: np.ndarray, labels: np.ndarray, target_precision: float
) -> ThresholdChoice:
    """The smallest threshold whose held-out precision is >= ``target_precision``.

    Precision is not monotone in the threshold, but recall is: the smallest threshold that
    reaches the target has the highest recall among those that do.

    Raises:
        ValueError: If no threshold reaches the target (the message gives the best precision
            reachable), ``target_precision`` is not in (0, 1], or the scores are bad (see
            :func:`precision_recall_curve`).
    """
    if not 0.0 < target_precision <= 1.0:  # also rejects NaN
        raise ValueError(f"target_precision must be in (0, 1], got {target_precision}")
    precision, recall, thresholds = precision_recall_curve(probs, labels)
    ok = np.flatnonzero(precision >= target_precision)
    if ok.size == 0:
        best = int(np.argmax(precision))
        raise ValueError(
            f"no threshold reaches precision {target_precision}: the best reachable on these "
            f"{len(np.asarray(probs))} held-out scores is {precision[best]:.4f} (threshold "
            f"{thresholds[best]:.4f}, recall {recall[best]:.4f}); lower target_precision or "
            "improve the classifier"
        )
    i = int(ok[0])
    support = int(np.asarray(labels).astype(bool).sum())
    num_flagged = int(round(recall[i] * support / precision[i]))
    return ThresholdChoice(
        float(thresholds[i]), float(precision[i]), float(recall[i]), support, num_flagged
    )


# --- Episode-level calibration -------------------------------------------------------------------
#
# What a reward classifier's threshold decides on the robot is not a frame's label but when an
# episode ends: the runtime rule (rewards.detector.SuccessDetector) confirms success once k of
# the last n frames pass the threshold, and the episode ends there. A frame-level precision
# target is a poor proxy for that with a few labelled episodes: one unlabelled frame inside a
# held success (a button press that dropped a frame) scoring 0.98 sets the threshold at 0.98,
# and every held-out episode that plateaus at 0.9 is then never confirmed. These functions
# replay the confirmation rule over whole episodes instead.


def confirmation_scores(probs: np.ndarray, k: int, n: int) -> np.ndarray:
    """Per step, the ``k``-th largest of the last ``n`` probabilities (0 before ``k`` frames).

    "``k`` of the last ``n`` frames have ``prob >= t``" holds at step ``i`` exactly when
    ``scores[i] >= t``, so an episode's first confirmation at threshold ``t`` is the first step
    whose score reaches ``t``.
    """
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (k of the last n frames), got k={k} n={n}")
    p = np.asarray(probs, dtype=np.float64)
    out = np.zeros(p.shape, dtype=np.float64)
    for i in range(k - 1, p.size):
        window = p[max(0, i - n + 1) : i + 1]
        out[i] = np.partition(window, window.size - k)[window.size - k]
    return out


def _episode_traces(
    probs: np.ndarray, labels: np.ndarray, episodes: np.ndarray, steps: np.ndarray
) -> list[tuple[np.ndarray, int | None]]:
    """(probs in step order, index of the first positive label or None) per episode."""
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(labels)
    e, s = np.asarray(episodes), np.asarray(steps)
    if p.ndim != 1 or p.size == 0 or not (y.shape == e.shape == s.shape == p.shape):
        raise ValueError(
            f"probs {p.shape}, labels {y.shape}, episodes {e.shape} and steps {s.shape} must be "
            "1-D, non-empty and of equal length (one entry per held-out frame)"
        )
    if not np.isfinite(p).all() or p.min() < 0.0 or p.max() > 1.0:
        raise ValueError("probs must be finite and lie in [0, 1]; fix the scorer")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0/1 or bool (1 = success); found other values")
    y = y.astype(bool)
    out = []
    for ep in np.unique(e):
        m = e == ep
        order = np.argsort(s[m], kind="stable")
        pe, ye = p[m][order], y[m][order]
        out.append((pe, int(np.argmax(ye)) if ye.any() else None))
    return out


@dataclass(frozen=True)
class EpisodeThresholdChoice:
    """A threshold chosen by replaying the k-of-n confirmation over held-out episodes.

    Attributes:
        threshold: Fire when ``prob >= threshold``.
        episodes: Held-out episodes.
        positive_episodes: Of those, episodes with a labelled success.
        hits: Positive episodes confirmed at or after their first success frame and within
            ``max_latency`` steps of it.
        false_successes: Episodes confirmed before their first success frame (anywhere if they
            have none): the wrong rewards this threshold would have given.
        negative_bound: The highest confirmation score before success over all episodes: any
            threshold above it gives no false success on these episodes.
        positive_bound: The lowest score that still confirms every hit in time.
        separable: Whether some threshold confirms at least one success with no false one.
    """

    threshold: float
    episodes: int
    positive_episodes: int
    hits: int
    false_successes: int
    negative_bound: float
    positive_bound: float
    separable: bool


def threshold_for_episodes(
    probs: np.ndarray,
    labels: np.ndarray,
    episodes: np.ndarray,
    steps: np.ndarray,
    k: int,
    n: int,
    max_latency: int,
) -> EpisodeThresholdChoice:
    """The threshold with the widest margin that gives no false success and the most hits.

    Replays "``k`` of the last ``n`` frames pass" over each episode. A threshold above every
    confirmation score before an episode's first success frame (``negative_bound``) ends no
    episode early; among those, the hits are the positive episodes whose score reaches it
    within ``max_latency`` steps of their first success frame. The threshold is the midpoint
    between ``negative_bound`` and the lowest score that keeps all those hits,
    so that it sits as far as these episodes allow from both kinds of error (a handful of
    validation episodes bounds both only loosely, and held-out episodes score lower than the
    ones the head was tuned on). Frames labelled negative after an episode's first success
    frame do not count: the episode has ended by then at any threshold that confirmed it.

    If no threshold confirms a success without a false one (``separable`` False), precision
    comes first: the threshold is just above ``negative_bound`` (capped at 0.999), with no hits
    on these episodes.

    Raises:
        ValueError: On scores outside [0, 1] or not finite, labels other than 0/1,
            mismatched lengths, ``k``/``n`` out of range or a negative ``max_latency``.
    """
    if max_latency < 0:
        raise ValueError(f"max_latency must be >= 0 steps, got {max_latency}")
    scored = [
        (confirmation_scores(p, k, n), first)
        for p, first in _episode_traces(probs, labels, episodes, steps)
    ]
    early = [
        float(c[:first].max(initial=0.0) if first is not None else c.max()) for c, first in scored
    ]
    on_time = [
        float(c[first : first + max_latency + 1].max()) for c, first in scored if first is not None
    ]
    neg = max(early)
    reachable = sorted(x for x in on_time if x > neg)
    if reachable:
        mid = (neg + reachable[0]) / 2.0
        threshold = min(max(mid, float(np.nextafter(neg, 1.0))), reachable[0])
    else:
        threshold = min(float(np.nextafter(neg, 1.0)), 0.999)
    return EpisodeThresholdChoice(
        threshold=threshold,
        episodes=len(scored),
        positive_episodes=len(on_time),
        hits=sum(1 for x in on_time if x >= threshold),
        false_successes=sum(1 for x in early if x >= threshold),
        negative_bound=neg,
        positive_bound=reachable[0] if reachable else float("nan"),
        separable=bool(reachable),
    )


def episode_outcomes(
    probs: np.ndarray,
    labels: np.ndarray,
    episodes: np.ndarray,
    steps: np.ndarray,
    threshold: float,
    k: int,
    n: int,
) -> dict[str, float | int | None]:
    """What the runtime rule would have done on each episode at ``threshold``.

    Returns:
        ``episodes``, ``positive_episodes``; ``false_successes`` (confirmed before the first
        success frame, anywhere if none); ``detected`` (positive episodes confirmed at or after
        it); ``missed`` (positive episodes never confirmed); ``episode_recall``
        (detected / positive episodes, None without any) and ``mean_latency_steps`` (steps from
        the first success frame to the confirmation, over the detected episodes, None without
        any).
    """
    traces = _episode_traces(probs, labels, episodes, steps)
    false = detected = missed = 0
    latencies = []
    for p, first in traces:
        hit = np.flatnonzero(confirmation_scores(p, k, n) >= threshold)
        at = int(hit[0]) if hit.size else None
        if at is not None and (first is None or at < first):
            false += 1
        elif first is not None and at is None:
            missed += 1
        elif first is not None and at is not None:
            detected += 1
            latencies.append(at - first)
    positives = sum(1 for t in traces if t[1] is not None)
    return {
        "episodes": len(traces),
        "positive_episodes": positives,
        "false_successes": false,
        "detected": detected,
        "missed": missed,
        "episode_recall": detected / positives if positives else None,
        "mean_latency_steps": float(np.mean(latencies)) if latencies else None,
    }
