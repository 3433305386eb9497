"""ClassifierReward: a frozen pretrained image encoder + a small trainable head per camera.

The workhorse reward model (HIL-SERL's): each camera's frame goes through a frozen encoder
(EfficientNet-Lite0 with ImageNet weights, or any local-path encoder the caller wraps), its
feature map is average-pooled to one vector, a per-camera head turns it into a hidden vector,
and a linear layer over the concatenated cameras gives one logit. ``success_prob`` is
``sigmoid(logit / temperature)`` with the temperature fitted on held-out frames (calibration),
and the reward is a **binary cost**: ``0`` when ``success_prob >= threshold`` (the threshold
chosen for a target precision on held-out frames), ``-1`` otherwise. Binary, not ``p - 1``:
a policy can climb a dense classifier output without doing the task (the classifier's
mistakes become the shaping); HIL-SERL's classifier reward is binary for the same reason.

A saved model is a directory: ``model.safetensors`` (the head and the temperature) and
``card.json`` (:class:`ClassifierCard`: encoder, cameras, image size, threshold, metrics, the
label set's hash). The encoder's own weights are not copied: the card names it, and the caller
rebuilds it from its local file (:func:`load_classifier` takes the factory), so this package
imports no encoder library. Never pickle: safetensors only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.core.features import FrameFeatures
from robot_rl.core.protocols import RewardQuery, RewardResult

CARD_FORMAT = "robot_rl.reward_classifier"
CARD_VERSION = 1


class FrozenImageEncoder:
    """A frozen feature-map network as ``(B, H, W, 3) uint8 -> (B, D) float32`` features.

    Args:
        name: What the card records (e.g. ``efficientnet_lite0``).
        backbone: ``(B, 3, H, W) normalised float -> (B, C, h, w)`` feature maps (or ``(B, C)``
            features), called under ``torch.no_grad`` in eval mode.
        mean, std: Per-channel normalisation of ``[0, 1]`` images (the encoder's own, e.g.
            ImageNet's for ImageNet weights).
        batch_size: Frames per forward pass.
        frame_features: Instead of ``backbone`` (and ``mean``, ``std``): a shared frozen
            backbone (e.g. the policy's, :mod:`robot_rl.core.features`); its uint8 feature maps
            are dequantised and averaged over the map. A frame it already encoded is not
            encoded again, so one backbone pass per frame serves both the policy and the reward.
    """

    def __init__(
        self,
        name: str,
        backbone: Callable[[torch.Tensor], torch.Tensor] | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        batch_size: int = 64,
        *,
        frame_features: FrameFeatures | None = None,
    ) -> None:
        if (backbone is None) == (frame_features is None):
            raise ValueError("FrozenImageEncoder needs either backbone or frame_features")
        if backbone is not None and (mean is None or std is None):
            raise ValueError("FrozenImageEncoder(backbone=...) needs the backbone's mean and std")
        self.name = name
        self.backbone = backbone
        self.frame_features = frame_features
        if backbone is not None:
            self.mean = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
            self.std = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
        self.batch_size = int(batch_size)
        self._dim: int | None = None

    def __call__(self, images: np.ndarray) -> torch.Tensor:
        """(B, H, W, 3) uint8 -> (B, D) float32 features."""
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(
                f"images must be (B, H, W, 3) uint8, got {images.shape} {images.dtype}"
            )
        if self.frame_features is not None:
            return self._from_shared(images)
        out = []
        with torch.no_grad():
            for i in range(0, len(images), self.batch_size):
                x = torch.from_numpy(images[i : i + self.batch_size]).permute(0, 3, 1, 2)
                x = (x.float() / 255.0 - self.mean) / self.std
                f = self.backbone(x)
                out.append(f.mean(dim=(2, 3)) if f.ndim == 4 else f.flatten(1))
        feats = torch.cat(out) if out else torch.zeros(0, self.feature_dim)
        return feats.float()

    @classmethod
    def from_frame_features(cls, name: str, features: FrameFeatures) -> FrozenImageEncoder:
        """The pooled features of a shared frozen backbone (``frame_features`` above)."""
        return cls(name, frame_features=features)

    def _from_shared(self, images: np.ndarray) -> torch.Tensor:
        q = self.frame_features.encode(images)  # (B, h, w, C) uint8
        pooled = q.reshape(len(q), -1, q.shape[-1]).mean(axis=1, dtype=np.float64)  # (B, C)
        return torch.from_numpy((pooled * self.frame_features.scale).astype(np.float32))

    @property
    def feature_dim(self) -> int:
        """D, found with one forward pass of a small blank image."""
        if self._dim is None:
            self._dim = int(self(np.zeros((1, 64, 64, 3), np.uint8)).shape[1])
        return self._dim


class ClassifierHead(nn.Module):
    """Per-camera ``Dropout -> Linear -> LayerNorm -> ReLU``, concatenated, ``Linear -> 1``.

    Holds the calibration temperature as a buffer (saved with the weights).
    """

    def __init__(
        self, cameras: Sequence[str], feature_dim: int, hidden: int = 64, dropout: float = 0.3
    ) -> None:
        super().__init__()
        if not cameras:
            raise ValueError("a classifier needs at least one camera")
        self.cameras = tuple(cameras)
        self.per_camera = nn.ModuleDict(
            {
                c: nn.Sequential(
                    nn.Dropout(dropout),
                    nn.Linear(feature_dim, hidden),
                    nn.LayerNorm(hidden),
                    nn.ReLU(),
                )
                for c in self.cameras
            }
        )
        self.out = nn.Linear(hidden * len(self.cameras), 1)
        self.register_buffer("temperature", torch.ones(()))

    def forward(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Camera -> (B, D) features -> (B,) logits (before the temperature)."""
        missing = [c for c in self.cameras if c not in features]
        if missing:
            raise KeyError(f"features for cameras {missing} missing (have {sorted(features)})")
        h = torch.cat([self.per_camera[c](features[c]) for c in self.cameras], dim=1)
        return self.out(h).squeeze(1)

    def prob(self, features: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Calibrated success probability (B,)."""
        return torch.sigmoid(self(features) / self.temperature)


@dataclass(frozen=True)
class ClassifierCard:
    """What a saved classifier is (``card.json``)."""

    encoder: str
    cameras: tuple[str, ...]
    image_size: tuple[int, int]
    feature_dim: int
    hidden: int
    dropout: float
    threshold: float
    target_precision: float
    temperature: float
    label_set_hash: str
    model_version: str
    metrics: dict[str, Any] = field(default_factory=dict)
    split: dict[str, list[int]] = field(default_factory=dict)
    train_config: dict[str, Any] = field(default_factory=dict)
    frames: str = ""
    camera_crops: dict[str, list[int] | None] | None = None
    """Camera -> the setup's crop box the frames were labelled through (None: not recorded);
    a run on a setup with other crops is refused."""
    gates: tuple[str, ...] = ()
    """State gates (``gripper_pos>=0.45``) the threshold was calibrated with; the success
    detector applies them at run time (``--reward-gate`` replaces them)."""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(format=CARD_FORMAT, version=CARD_VERSION)
        d["cameras"], d["image_size"] = list(self.cameras), list(self.image_size)
        d["gates"] = list(self.gates)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClassifierCard:
        if d.get("format") != CARD_FORMAT:
            raise ValueError(f"not a robot_rl reward classifier card (format {d.get('format')!r})")
        if d.get("version") != CARD_VERSION:
            raise ValueError(f"card version {d.get('version')} != {CARD_VERSION}")
        kw = {k: v for k, v in d.items() if k not in ("format", "version")}
        kw["cameras"], kw["image_size"] = tuple(kw["cameras"]), tuple(kw["image_size"])
        kw["gates"] = tuple(kw.get("gates", ()))  # cards written before gates have none
        return cls(**kw)


def classifier_model_id(card: ClassifierCard) -> str:
    """The ``model_id`` of the classifier a card describes (encoder and label set)."""
    return f"classifier/{card.encoder}/{card.label_set_hash[:12]}"


class ClassifierReward:
    """:class:`robot_rl.core.protocols.RewardModel` over a frozen encoder and a trained head.

    Args:
        encoder: The frozen encoder named by ``card.encoder``.
        head: The trained head (its temperature set).
        card: The model's card (cameras, image size, threshold, version).
    """

    def __init__(self, encoder: FrozenImageEncoder, head: ClassifierHead, card: ClassifierCard):
        self.encoder, self.head, self.card = encoder, head.eval(), card
        self._id = classifier_model_id(card)

    @property
    def model_id(self) -> str:
        return self._id

    @property
    def model_version(self) -> str:
        return self.card.model_version

    @property
    def threshold(self) -> float:
        return self.card.threshold

    @property
    def cameras(self) -> tuple[str, ...]:
        """Cameras every query must carry (the reward server checks requests against it)."""
        return self.card.cameras

    @property
    def image_size(self) -> tuple[int, int]:
        """(height, width) of the frames it was trained on (the reward server refuses others)."""
        return (int(self.card.image_size[0]), int(self.card.image_size[1]))

    def probs(self, images: Mapping[str, np.ndarray]) -> np.ndarray:
        """Camera -> (B, H, W, 3) uint8 -> calibrated success probability (B,) float64."""
        missing = [c for c in self.card.cameras if c not in images]
        if missing:
            raise KeyError(
                f"reward model {self.model_id} needs cameras {list(self.card.cameras)}; "
                f"missing {missing}"
            )
        sizes = {c: tuple(np.asarray(images[c]).shape[1:3]) for c in self.card.cameras}
        bad = {c: s for c, s in sizes.items() if s != tuple(self.card.image_size)}
        if bad:
            raise ValueError(
                f"reward model {self.model_id} was trained on {self.card.image_size} images; "
                f"got {bad} (resize with the env's image wrappers)"
            )
        # One encoder pass over every camera's frames (same size, checked above): batched,
        # two 64x64 frames take ~10 ms on this CPU instead of ~16 ms one by one.
        cams = self.card.cameras
        batches = {c: len(images[c]) for c in cams}
        if len(set(batches.values())) != 1:
            raise ValueError(f"every camera needs the same number of frames; got {batches}")
        stacked = self.encoder(np.concatenate([np.asarray(images[c]) for c in cams]))
        feats = dict(zip(cams, torch.split(stacked, batches[cams[0]]), strict=True))
        with torch.no_grad():
            return self.head.prob(feats).double().numpy()

    def predict(self, query: RewardQuery) -> RewardResult:
        p = self.probs(query.images)
        reward = np.where(p >= self.card.threshold, 0.0, -1.0)
        return RewardResult(
            success_prob=p.astype(np.float32),
            reward=reward.astype(np.float32),
            model_id=self.model_id,
            model_version=self.model_version,
        )


def save_classifier(directory: str | Path, head: ClassifierHead, card: ClassifierCard) -> Path:
    """Write ``model.safetensors`` and ``card.json`` into ``directory`` (created)."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(d / "model.safetensors"), metadata={"format": CARD_FORMAT})
    (d / "card.json").write_text(json.dumps(card.to_json(), indent=1))
    return d


def read_card(directory: str | Path) -> ClassifierCard:
    """The card of a saved classifier.

    Raises:
        FileNotFoundError: No ``card.json`` in ``directory``.
        ValueError: Not a classifier card, or an unreadable one.
    """
    path = Path(directory) / "card.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no reward classifier at {directory} (no card.json); train one with "
            "`robot-rl reward train`"
        )
    try:
        return ClassifierCard.from_json(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise ValueError(f"{path} is not a valid classifier card: {e}") from e


def load_classifier(
    directory: str | Path, encoder_factory: Callable[[str], FrozenImageEncoder]
) -> ClassifierReward:
    """Rebuild a saved classifier; ``encoder_factory(card.encoder)`` supplies the encoder.

    Raises:
        FileNotFoundError / ValueError: Missing or invalid card or weights (strict load).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    card = read_card(directory)
    weights = Path(directory) / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} is missing (the card is there; copy both files)")
    head = ClassifierHead(card.cameras, card.feature_dim, card.hidden, card.dropout)
    try:
        head.load_state_dict(load_file(str(weights)), strict=True)
    except (RuntimeError, OSError, SafetensorError) as e:
        raise ValueError(f"{weights} does not fit the card's head: {e}") from e
    return ClassifierReward(encoder_factory(card.encoder), head, card)
