"""Train and evaluate a :class:`rewards.classifier.ClassifierReward` from labelled frames.

The recipe (``robot-rl reward train``):

1. **Split by episode**, never by frame: consecutive frames of one episode are near copies,
   so a frame split would score the classifier on frames it has all but seen. Episodes go to
   train / val / test (seeded; each split keeps positive and negative episodes when it can).
2. **Cache frozen features**: the encoder is frozen, so each frame is encoded once (plus
   ``augment_copies`` augmented copies of each training frame: random shifts of up to
   ``shift_px`` and brightness / contrast jitter), and the head trains on cached features.
3. **Balanced batches**: half positives, half negatives, whatever the label ratio.
4. **Early stopping** on the validation loss (``patience_epochs``), keeping the best head.
5. **Temperature calibration** on the validation frames (one scalar minimising the NLL).
6. **Threshold** on the validation episodes. By default (``calibration="episodes"``) the
   runtime rule (success confirmed when ``confirm_k`` of the last ``confirm_n`` frames pass)
   is replayed over each episode, and the threshold is the middle of the widest gap with no
   false success and the most successes confirmed within ``max_latency_steps``
   (:func:`rewards.calibration.threshold_for_episodes`); the card says ``target_met: false``
   when no threshold confirms a success without a false one. ``calibration="frames"`` picks
   the smallest threshold with frame-level precision ``target_precision``
   (:func:`rewards.calibration.threshold_for_precision`) instead: with a dozen labelled
   episodes one unlabelled frame inside a held success sets that threshold at its score, and
   recall on new episodes can collapse to zero (twin pick_cube, 10 label episodes: threshold
   0.976, held-out recall 0.0, where the episode rule gives ~0.5 and confirms every held-out
   success).

:func:`evaluate` reports frame-level precision / recall / PR-AUC at the card's threshold and
the episode-level false-success rate (an episode is falsely called a success when ``k`` of the
last ``n`` frames cross the threshold before its first positive label, or anywhere in an episode
with no positive) on held-out episodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from rewards.calibration import (
    episode_outcomes,
    pr_auc,
    threshold_for_episodes,
    threshold_for_precision,
)
from rewards.classifier import ClassifierCard, ClassifierHead, FrozenImageEncoder
from rewards.detector import StateGate, gate_mask, gate_values, parse_gates


@dataclass(frozen=True)
class ClassifierTrainConfig:
    """How to train the head."""

    val_fraction: float = 0.25
    """Fraction of episodes for validation (early stopping, calibration, threshold)."""
    test_fraction: float = 0.25
    """Fraction of episodes held out for `reward eval` (0: none)."""
    hidden: int = 64
    """Hidden units per camera."""
    dropout: float = 0.3
    """Dropout on the frozen features."""
    lr: float = 1e-3
    """AdamW learning rate of the head."""
    weight_decay: float = 1e-4
    """AdamW weight decay of the head."""
    batch_size: int = 128
    """Frames per step (half positive, half negative)."""
    steps_per_epoch: int = 20
    """Gradient steps between two validations (one epoch)."""
    max_epochs: int = 100
    """Most epochs to train (early stopping usually ends sooner)."""
    patience_epochs: int = 10
    """Stop after this many epochs without a better validation loss."""
    augment_copies: int = 2
    """Augmented copies of each training frame (encoded once, cached)."""
    shift_px: int = 4
    """Largest random shift of an augmented copy, pixels (edge padding)."""
    jitter: float = 0.15
    """Brightness / contrast jitter of an augmented copy (relative)."""
    calibration: Literal["episodes", "frames"] = "episodes"
    """How the threshold is chosen on the validation episodes: ``episodes`` replays the k-of-n
    confirmation and takes the middle of the widest gap with no false success (see the module
    doc); ``frames`` takes the smallest threshold with frame precision target_precision."""
    target_precision: float = 0.99
    """With calibration=frames: the precision the threshold is chosen for, on the validation
    frames. Set it a point above
    the precision you need on new episodes: a threshold chosen on a dozen validation episodes
    fits them (on twin pick_cube frames, a 0.98 target gave 0.96-0.98 on held-out episodes, the
    misses being the frame just before the cube crossed the success height)."""
    confirm_k: int = 2
    """Success is confirmed when confirm_k of the last confirm_n frames pass the threshold: the
    rule the threshold is calibrated for and evaluated with; keep it equal to the runtime's
    (`--reward-k`, default 2)."""
    confirm_n: int = 3
    """The window of that rule, in frames (`--reward-n`, default 3)."""
    max_latency_steps: int = 10
    """With calibration=episodes: a success confirmed more than this many steps after its first
    labelled frame counts as missed (10 steps = 1 s at 10 Hz)."""
    gates: tuple[str, ...] = ()
    """State gates a frame must pass to fire, e.g. `gripper_pos>=0.45 gripper_pos<=0.7` (a cube
    in a closed hand: gripper_pos 0 open, 1 closed). The threshold is calibrated with them (a
    blocked frame cannot fire), the card stores them and the success detector applies them at
    run time. Needs frames that name their state parts (`robot-rl label` writes them)."""
    seed: int = 0
    """Seed of the episode split, the augmentation and the head's initialisation and batches."""

    def __post_init__(self) -> None:
        if not (0 < self.val_fraction < 1 and 0 <= self.test_fraction < 1):
            raise ValueError("val_fraction must be in (0, 1) and test_fraction in [0, 1)")
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must leave episodes for training")
        if not 0 < self.target_precision <= 1:
            raise ValueError(f"target_precision {self.target_precision} must be in (0, 1]")
        if not 1 <= self.confirm_k <= self.confirm_n:
            raise ValueError("need 1 <= confirm_k <= confirm_n")
        if self.calibration not in ("episodes", "frames"):
            raise ValueError(
                f"calibration must be 'episodes' or 'frames', got {self.calibration!r}"
            )
        if self.max_latency_steps < 0:
            raise ValueError(f"max_latency_steps must be >= 0, got {self.max_latency_steps}")
        if self.batch_size < 2 or self.max_epochs < 1 or self.augment_copies < 0:
            raise ValueError("batch_size >= 2, max_epochs >= 1, augment_copies >= 0")
        parse_gates(self.gates)  # malformed or duplicate gates


def label_set_hash(
    labels: np.ndarray, episodes: np.ndarray, steps: np.ndarray, stamps_s: np.ndarray
) -> str:
    """sha256 of the labels with their (episode, step, stamp) keys: which label set a model
    saw (the stamps tell two stores with the same label pattern apart)."""
    h = hashlib.sha256()
    keys = ((labels, np.uint8), (episodes, np.int64), (steps, np.int64), (stamps_s, np.float64))
    for a, dt in keys:
        h.update(np.ascontiguousarray(np.asarray(a, dtype=dt)).tobytes())
    return h.hexdigest()


def split_episodes(
    episodes: np.ndarray, labels: np.ndarray, cfg: ClassifierTrainConfig
) -> dict[str, list[int]]:
    """Episode ids for train / val / test; positive and negative episodes spread separately."""
    ids = np.unique(episodes)
    pos = {int(e) for e in np.unique(episodes[labels.astype(bool)])}
    rng = np.random.default_rng((cfg.seed, 11))
    out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for group in ([e for e in ids if int(e) in pos], [e for e in ids if int(e) not in pos]):
        group = [int(e) for e in rng.permutation(group)]
        n_val = int(round(cfg.val_fraction * len(group)))
        n_test = int(round(cfg.test_fraction * len(group)))
        if len(group) >= 3:  # keep each split non-empty when the group allows it
            n_val = max(n_val, 1)
            n_test = max(n_test, 1) if cfg.test_fraction > 0 else 0
        out["val"] += group[:n_val]
        out["test"] += group[n_val : n_val + n_test]
        out["train"] += group[n_val + n_test :]
    if not out["val"] and len(out["train"]) >= 2:
        # Groups of one or two round to no validation episode (e.g. 3 episodes: two with
        # successes, one without): lend the larger group's last training episode.
        pos_train = [e for e in out["train"] if e in pos]
        neg_train = [e for e in out["train"] if e not in pos]
        lent = (pos_train if len(pos_train) >= len(neg_train) else neg_train)[-1]
        out["train"].remove(lent)
        out["val"].append(lent)
    for k in out:
        out[k].sort()
    if not out["train"] or not out["val"]:
        raise ValueError(
            f"{len(ids)} episodes are too few to split into train and validation; label more "
            "episodes (a dozen or more, with successes and failures)"
        )
    return out


def augment(images: np.ndarray, rng: np.random.Generator, shift_px: int, jitter: float):
    """Random shift (edge padding) and brightness / contrast jitter, per image; uint8 out."""
    n, h, w, _ = images.shape
    out = np.empty_like(images)
    pad = np.pad(images, ((0, 0), (shift_px, shift_px), (shift_px, shift_px), (0, 0)), "edge")
    dy = rng.integers(0, 2 * shift_px + 1, n)
    dx = rng.integers(0, 2 * shift_px + 1, n)
    gain = 1.0 + rng.uniform(-jitter, jitter, n)
    bias = rng.uniform(-jitter, jitter, n) * 255.0 * 0.5
    for i in range(n):
        crop = pad[i, dy[i] : dy[i] + h, dx[i] : dx[i] + w].astype(np.float32)
        out[i] = np.clip(crop * gain[i] + bias[i], 0, 255).astype(np.uint8)
    return out


def encode(
    encoder: FrozenImageEncoder, images: Mapping[str, np.ndarray], cameras: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """Camera -> (N, D) frozen features."""
    return {c: encoder(np.asarray(images[c])) for c in cameras}


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The temperature T > 0 minimising the NLL of ``sigmoid(logits / T)`` (1-D search)."""
    grid = torch.logspace(-1.5, 1.5, 121)
    nll = torch.stack(
        [F.binary_cross_entropy_with_logits(logits / t, labels.float()) for t in grid]
    )
    return float(grid[int(torch.argmin(nll))])


def frame_metrics(probs: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """Precision, recall, PR-AUC and counts at ``threshold``."""
    y = labels.astype(bool)
    flagged = probs >= threshold
    tp = int((flagged & y).sum())
    return {
        "frames": int(len(y)),
        "positives": int(y.sum()),
        "precision": tp / int(flagged.sum()) if flagged.any() else 1.0,
        "recall": tp / int(y.sum()) if y.any() else 1.0,
        "pr_auc": pr_auc(probs, y) if y.any() and (~y).any() else None,
        "false_positives": int((flagged & ~y).sum()),
    }


def evaluate(
    probs: np.ndarray,
    labels: np.ndarray,
    episodes: np.ndarray,
    steps: np.ndarray,
    threshold: float,
    k: int = 1,
    n: int = 1,
) -> dict[str, Any]:
    """Frame-level metrics, and per episode what the k-of-n rule would have done: the
    false-success rate, the successes detected and missed, episode recall and the latency from
    the first labelled success frame to the confirmation (see the module doc)."""
    out = frame_metrics(probs, labels, threshold)
    outcomes = episode_outcomes(probs, labels, episodes, steps, threshold, k, n)
    rate = outcomes["false_successes"] / outcomes["episodes"]
    out.update(outcomes, episode_false_success_rate=rate, confirm_k=k, confirm_n=n)
    return out


def train_classifier(
    frames: Mapping[str, Any],
    encoder: FrozenImageEncoder,
    cameras: tuple[str, ...],
    cfg: ClassifierTrainConfig,
    on_epoch: Callable[[int, float, float], None] | None = None,
    state_slices: Mapping[str, Any] | None = None,
) -> tuple[ClassifierHead, ClassifierCard]:
    """Train a head on ``frames`` (:meth:`robot_rl.replay.frames.FrameLog.read`'s dict).

    ``state_slices``: the frames' state layout (part -> ``[start, stop)``), needed with
    ``cfg.gates``.

    Returns the trained, calibrated head and its card (``frames`` left empty for the caller).

    Raises:
        ValueError: No positive or no negative training frames, too few episodes, missing
            cameras, gates without a named state layout.
    """
    torch.manual_seed(cfg.seed)
    labels = np.asarray(frames["label"]).astype(bool)
    gates = parse_gates(cfg.gates)
    passes = frames_passing_gates(frames, gates, state_slices)
    check_gates_pass_successes(frames, gates, state_slices, labels, passes)
    episodes, steps = np.asarray(frames["episode"]), np.asarray(frames["step"])
    images = frames["obs"].get("images", {})
    missing = [c for c in cameras if c not in images]
    if missing:
        raise ValueError(f"the frames have no camera {missing} (they have {sorted(images)})")
    split = split_episodes(episodes, labels, cfg)
    idx = {k: np.flatnonzero(np.isin(episodes, v)) for k, v in split.items()}
    tr = idx["train"]
    if not labels[tr].any() or labels[tr].all():
        raise ValueError(
            "the training episodes need both positive and negative frames; label more "
            "successes and failures"
        )
    rng = np.random.default_rng((cfg.seed, 13))
    train_imgs = {c: np.asarray(images[c])[tr] for c in cameras}
    feats = [encode(encoder, train_imgs, cameras)]
    for _ in range(cfg.augment_copies):
        aug = {c: augment(train_imgs[c], rng, cfg.shift_px, cfg.jitter) for c in cameras}
        feats.append(encode(encoder, aug, cameras))
    xtr = {c: torch.cat([f[c] for f in feats]) for c in cameras}
    ytr = torch.from_numpy(np.tile(labels[tr], 1 + cfg.augment_copies)).float()
    va = idx["val"]
    xva = encode(encoder, {c: np.asarray(images[c])[va] for c in cameras}, cameras)
    yva = torch.from_numpy(labels[va]).float()

    feature_dim = int(xtr[cameras[0]].shape[1])
    head = ClassifierHead(cameras, feature_dim, cfg.hidden, cfg.dropout)
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    pos, neg = torch.nonzero(ytr > 0.5).squeeze(1), torch.nonzero(ytr < 0.5).squeeze(1)
    gen = torch.Generator().manual_seed(cfg.seed)
    best = (float("inf"), None, -1)
    half = cfg.batch_size // 2
    for epoch in range(cfg.max_epochs):
        head.train()
        for _ in range(cfg.steps_per_epoch):
            b = torch.cat(
                [
                    pos[torch.randint(len(pos), (half,), generator=gen)],
                    neg[torch.randint(len(neg), (half,), generator=gen)],
                ]
            )
            loss = F.binary_cross_entropy_with_logits(head({c: xtr[c][b] for c in cameras}), ytr[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        with torch.no_grad():
            val_loss = float(_balanced_bce(head(xva), yva))
        if on_epoch is not None:
            on_epoch(epoch, float(loss.detach()), val_loss)
        if val_loss < best[0] - 1e-5:
            best = (val_loss, {k: v.clone() for k, v in head.state_dict().items()}, epoch)
        elif epoch - best[2] >= cfg.patience_epochs:
            break
    assert best[1] is not None
    head.load_state_dict(best[1])
    head.eval()
    with torch.no_grad():
        logits = head(xva)
    head.temperature.fill_(fit_temperature(logits, yva))
    with torch.no_grad():
        pva = head.prob(xva).double().numpy()
    pva = np.where(passes[va], pva, 0.0)  # a frame a gate blocks cannot fire
    threshold, target_met, choice = _calibrate(pva, labels[va], episodes[va], steps[va], cfg)
    val = evaluate(
        pva, labels[va], episodes[va], steps[va], threshold, cfg.confirm_k, cfg.confirm_n
    )
    card = ClassifierCard(
        encoder=encoder.name,
        cameras=tuple(cameras),
        image_size=tuple(np.asarray(images[cameras[0]]).shape[1:3]),
        feature_dim=feature_dim,
        hidden=cfg.hidden,
        dropout=cfg.dropout,
        threshold=threshold,
        target_precision=cfg.target_precision,
        temperature=float(head.temperature),
        label_set_hash=label_set_hash(labels, episodes, steps, np.asarray(frames["stamp_s"])),
        model_version="1",
        metrics={
            "val": val,
            "target_met": target_met,
            "best_epoch": best[2],
            "calibration": cfg.calibration,
            **({"episode_choice": choice} if choice is not None else {}),
            **(
                {
                    "gated_val_frames": int((~passes[va]).sum()),
                    "gated_val_positive_frames": int((~passes[va] & labels[va]).sum()),
                }
                if gates
                else {}
            ),
        },
        split=split,
        train_config=asdict(cfg),
        gates=tuple(str(g) for g in gates),
    )
    return head, card


MAX_GATED_SUCCESS_SHARE = 0.5
"""Training refuses gates that block more than this share of the frames labelled success: a
gate is there to refuse look-alike failures (an empty closed hand), and gates that refuse the
successes themselves leave a classifier that can never fire (e.g. one arm's gripper range used
on another arm's gripper)."""


def check_gates_pass_successes(
    frames: Mapping[str, Any],
    gates: Sequence[StateGate],
    state_slices: Mapping[str, Any] | None,
    labels: np.ndarray,
    passes: np.ndarray,
) -> None:
    """Raise a ValueError that names each blocking gate and the range its state entry has on the
    success frames, if ``gates`` block more than :data:`MAX_GATED_SUCCESS_SHARE` of the frames
    labelled success (``passes``: :func:`frames_passing_gates`)."""
    labels = np.asarray(labels, dtype=bool)
    if not gates or not labels.any():
        return
    blocked = float(np.mean(~passes[labels]))
    if blocked <= MAX_GATED_SUCCESS_SHARE:
        return
    assert state_slices is not None  # frames_passing_gates checked it
    state = np.asarray(frames["obs"]["state"])[labels]
    parts = []
    for g in gates:
        share = float(np.mean(~gate_mask([g], state, state_slices)))
        if share > 0:
            x = gate_values(g, state, state_slices)
            lo, hi = np.percentile(x, [5, 95])
            parts.append(f"{g} blocks {share:.0%} ({g.label} on them: {lo:.2f}-{hi:.2f})")
    raise ValueError(
        f"the gates block {blocked:.0%} of the {int(labels.sum())} frames labelled success: "
        f"{'; '.join(parts)}. A gate must let the successes through: set it from what the "
        "robot state reads while the task is done (e.g. gripper_pos about 0.1 either side of "
        "its value holding the object; it differs per gripper and object, see docs/arms.md), "
        "or train without gates"
    )


def frames_passing_gates(
    frames: Mapping[str, Any], gates: Sequence[StateGate], state_slices: Mapping[str, Any] | None
) -> np.ndarray:
    """(N,) bool: the frames every gate lets fire (all True without gates).

    Raises:
        ValueError: Gates, but the frames have no state or do not name its parts.
    """
    n = len(np.asarray(frames["label"]))
    if not gates:
        return np.ones(n, dtype=bool)
    state = frames.get("obs", {}).get("state")
    if state is None or not state_slices:
        raise ValueError(
            f"gates {[str(g) for g in gates]} read the robot state, but these frames "
            f"{'have no state' if state is None else 'do not name their state parts'}; label "
            "them again with this version of `robot-rl label`, or train without gates"
        )
    return gate_mask(gates, np.asarray(state), state_slices)


def _calibrate(
    probs: np.ndarray,
    labels: np.ndarray,
    episodes: np.ndarray,
    steps: np.ndarray,
    cfg: ClassifierTrainConfig,
) -> tuple[float, bool, dict[str, Any] | None]:
    """(threshold, target met, the episode choice as JSON or None) on the validation frames."""
    choice = None
    if cfg.calibration == "episodes":
        c = threshold_for_episodes(
            probs, labels, episodes, steps, cfg.confirm_k, cfg.confirm_n, cfg.max_latency_steps
        )
        threshold, target_met = c.threshold, c.separable
        choice = {
            k: (None if isinstance(v, float) and not np.isfinite(v) else v)
            for k, v in asdict(c).items()
        }
    else:
        target_met = True
        try:
            threshold = threshold_for_precision(probs, labels, cfg.target_precision).threshold
        except ValueError:
            target_met = False
            threshold = float(np.max(probs[labels])) if labels.any() else 0.5
    return float(np.clip(threshold, 1e-6, 1 - 1e-6)), target_met, choice


def _balanced_bce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """BCE with positives and negatives weighted equally (the val set is imbalanced)."""
    w_pos = 0.5 / max(float(y.sum()), 1.0)
    w_neg = 0.5 / max(float((1 - y).sum()), 1.0)
    w = torch.where(y > 0.5, torch.tensor(w_pos), torch.tensor(w_neg))
    return (F.binary_cross_entropy_with_logits(logits, y, reduction="none") * w).sum()
