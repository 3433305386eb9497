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
