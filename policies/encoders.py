"""Observation encoders: learner layout -> one feature vector.

Input is the learner observation layout of :mod:`robot_rl.core.batch`:
``{"state": (B, S) float32, "images": {cam: (B, H, W, 3) uint8}}`` as torch tensors.

* state: identity or a small MLP;
* ``conv``: small CNN trained end to end (by the critic loss in SAC), DrQ random shift;
* ``efficientnet``: frozen pretrained EfficientNet-Lite0 (:mod:`policies.features`, run once
  per frame) followed by a trainable head (:class:`FeatureHead`: a 1x1 channel bottleneck, the
  flattened map, a Linear). The head reads ``obs["features"]`` (uint8 feature maps
  cached by the replay buffer) when the batch has them, and otherwise runs the backbone on
  ``obs["images"]`` (acting; its memo makes a frame's second pass free).

The backbone is not a submodule: it is never in a state dict, a checkpoint or the weights a
learner sends to actors (each side loads it from its local file).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from policies.config import EncoderConfig
from policies.features import (
    FEATURE_SCALE,
    IMAGENET_MEAN,
    IMAGENET_STD,
    EfficientNetFeatures,
    load_efficientnet_lite0,
)
from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.features import FrameFeatures

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ConvEncoder",
    "FeatureHead",
    "ObsEncoder",
    "feature_dropout",
    "load_efficientnet_lite0",
    "obs_to_torch",
    "random_shift",
    "trainable_state_dict",
]


def random_shift(
    images: torch.Tensor, pad_px: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """DrQ random shift: replicate-pad by ``pad_px`` and crop back at a random offset.

    Implemented by clamped index gathering (identical to replicate padding + crop), so it
    works on uint8 without allocating the padded image.

    Args:
        images: (B, H, W, C) any dtype.
        pad_px: Padding in pixels; the shift per axis is uniform in [-pad_px, pad_px].
        generator: Torch generator on ``images.device``.

    Returns:
        (B, H, W, C), same dtype; each sample shifted by its own integer offset.
    """
    if pad_px == 0:
        return images
    b, h, w, _ = images.shape
    dev = images.device
    shift = torch.randint(0, 2 * pad_px + 1, (2, b), generator=generator, device=dev) - pad_px
    rows = (torch.arange(h, device=dev)[None, :] + shift[0][:, None]).clamp(0, h - 1)  # (B, H)
    cols = (torch.arange(w, device=dev)[None, :] + shift[1][:, None]).clamp(0, w - 1)  # (B, W)
    bidx = torch.arange(b, device=dev)[:, None, None]
    return images[bidx, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)


def feature_dropout(
    features: torch.Tensor, p: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Channel dropout of a channels-last feature map: each sample loses a random fraction
    ``p`` of its channels at every position; the rest are scaled by ``1 / (1 - p)``.

    Args:
        features: (B, h, w, C), any dtype (uint8 steps for cached features).
        p: Drop probability per channel, in [0, 1); 0 returns ``features`` unchanged.
        generator: Torch generator on ``features.device``.

    Returns:
        (B, h, w, C) float32 (``features`` itself when ``p == 0``).
    """
    if p == 0:
        return features
    b, _, _, c = features.shape
    keep = torch.rand((b, 1, 1, c), generator=generator, device=features.device) >= p
    return features.float() * (keep.float() / (1.0 - p))


def mlp(
    in_dim: int, hidden: tuple[int, ...], out_dim: int, layer_norm: bool = False
) -> nn.Sequential:
    """Linear-ReLU stack (optional LayerNorm after each hidden Linear) ending in a Linear."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers.append(nn.Linear(d, h))
        if layer_norm:
            layers.append(nn.LayerNorm(h))
        layers.append(nn.ReLU())
        d = h
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)


class ConvEncoder(nn.Module):
    """Small CNN: uint8 (B, H, W, 3) -> (B, feature_dim), LayerNorm + tanh output (DrQ)."""

    def __init__(self, image_hw: tuple[int, int], cfg: EncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c, s in zip(cfg.conv_channels, cfg.conv_strides, strict=True):
            layers += [nn.Conv2d(c_in, c, 3, stride=s), nn.ReLU()]
            c_in = c
        self.convs = nn.Sequential(*layers)
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, 3, *image_hw)).numel()
        self.head = nn.Sequential(
            nn.Linear(n_flat, cfg.feature_dim), nn.LayerNorm(cfg.feature_dim), nn.Tanh()
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0 - 0.5  # (B, 3, H, W)
        return self.head(self.convs(x).flatten(1))  # (B, F)


class FeatureHead(nn.Module):
    """Trainable head on a frozen backbone's cached uint8 features -> (B, feature_dim).

    ``(B, h, w, C)`` uint8 (channels last, :mod:`policies.features`) -> float -> a 1x1
    channel bottleneck ``C -> k`` (a Linear over channels; the uint8 scale is folded into its
    weights) + ReLU -> flatten the ``h * w * k`` map -> Linear -> LayerNorm -> tanh (DrQ's
    conv-encoder output, on a frozen trunk). The bottleneck keeps the map's positions: where
    the gripper and the object are. A Linear over the flattened small map learns what SERL's
    spatial embeddings learn, at a fraction of the cost on a CPU
    (``bench/learner_throughput.py``).
    """

    def __init__(self, feature_shape: tuple[int, int, int], cfg: EncoderConfig) -> None:
        super().__init__()
        h, w, c = feature_shape
        k = cfg.bottleneck_channels
        self.bottleneck = nn.Linear(c, k)
        self.head = nn.Sequential(
            nn.Linear(h * w * k, cfg.feature_dim), nn.LayerNorm(cfg.feature_dim), nn.Tanh()
        )
        self.precision = cfg.bottleneck_precision

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        b, h, w, c = features.shape
        weight = self.bottleneck.weight * FEATURE_SCALE  # steps -> feature values, folded
        if features.device.type == "cpu" and use_bfloat16(self.precision):
            # uint8 -> bfloat16 is exact and 3x cheaper than -> float32, and the products run
            # on the CPU's bfloat16 units; float32 master weights (the casts carry gradients)
            x = features.reshape(b, h * w, c).to(torch.bfloat16)
            bias = self.bottleneck.bias.to(torch.bfloat16)
            y = F.linear(x, weight.to(torch.bfloat16), bias).float()
        else:
            x = features.reshape(b, h * w, c).float()  # (B, hw, C), uint8 steps
            y = F.linear(x, weight, self.bottleneck.bias)
        return self.head(F.relu(y).flatten(1))  # (B, F); y: (B, hw, k)


@functools.cache
def cpu_has_native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX tiles or AVX512-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:  # not Linux: stay float32
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def use_bfloat16(precision: str) -> bool:
    """Whether a ``"auto" | "float32" | "bfloat16"`` precision setting means bfloat16 here."""
    return precision == "bfloat16" or (precision == "auto" and cpu_has_native_bfloat16())


class ObsEncoder(nn.Module):
    """One encoder per camera + state (identity or MLP), concatenated -> (B, out_dim).

    Args:
        layout: The learner observation layout.
        cfg: Encoder settings.
        frame_features: ``cfg.kind="efficientnet"``: the frozen backbone (shared with the
            replay buffers, so that each frame is encoded once); None builds one from
            ``cfg.weights_path`` on ``device``.
        device: Where a backbone built here runs (the module itself is built on the CPU).
    """

    def __init__(
        self,
        layout: ObsLayout,
        cfg: EncoderConfig,
        frame_features: FrameFeatures | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__()
        self.layout = layout
        self.cfg = cfg
        self.cams = tuple(sorted(layout.images))
        self.frame_features: FrameFeatures | None = None
        if cfg.kind == "efficientnet" and self.cams:
            if frame_features is None:
                if cfg.weights_path is None:
                    raise ValueError(
                        "EncoderConfig.kind='efficientnet' needs weights_path (a local file)"
                    )
                frame_features = EfficientNetFeatures(cfg.weights_path, device)
            self.frame_features = frame_features
            self.images = nn.ModuleDict(
                {
                    c: FeatureHead(frame_features.feature_shape(layout.images[c].shape[:2]), cfg)
                    for c in self.cams
                }
            )
        else:
            self.images = nn.ModuleDict(
                {c: ConvEncoder(tuple(layout.images[c].shape[:2]), cfg) for c in self.cams}
            )
        self.state_net: nn.Module = nn.Identity()
        state_out = layout.state_dim
        if layout.state_dim and cfg.state_hidden_dims:
            self.state_net = mlp(layout.state_dim, cfg.state_hidden_dims, cfg.state_feature_dim)
            state_out = cfg.state_feature_dim
        self.out_dim = state_out + cfg.feature_dim * len(self.cams)

    def augment(
        self, obs: Mapping[str, object], generator: torch.Generator | None
    ) -> dict[str, object]:
        """Update-time augmentation (never at act time); state untouched.

        Frames (conv encoder): DrQ random shift by ``drq_pad_px``. Cached features
        (efficientnet head): the shift by ``feature_shift`` cells of the feature map, then
        channel dropout ``feature_dropout`` (:func:`feature_dropout`); both off by default."""
        out = dict(obs)
        if not self.cams:
            return out
        if keys.FEATURES in obs:
            feats = obs[keys.FEATURES]
            shift, p = self.cfg.feature_shift, self.cfg.feature_dropout
            if shift or p:
                out[keys.FEATURES] = {
                    c: feature_dropout(random_shift(feats[c], shift, generator), p, generator)
                    for c in self.cams
                }
        elif keys.IMAGES in obs and self.cfg.drq_pad_px:
            imgs = obs[keys.IMAGES]
            pad = self.cfg.drq_pad_px
            out[keys.IMAGES] = {c: random_shift(imgs[c], pad, generator) for c in self.cams}
        return out

    def forward(self, obs: Mapping[str, object]) -> torch.Tensor:
        feats = []
        if self.layout.state_dim:
            feats.append(self.state_net(obs[keys.STATE].float()))  # (B, S')
        for c in self.cams:
            feats.append(self.images[c](self._camera_input(obs, c)))  # (B, F)
        return torch.cat(feats, dim=-1)  # (B, E)

    def _camera_input(self, obs: Mapping[str, object], cam: str) -> torch.Tensor:
        """What camera ``cam``'s encoder reads: (B, H, W, 3) frames (conv), or (B, h, w, C)
        uint8 features (efficientnet: cached in the batch, else computed here)."""
        if self.frame_features is None:
            return obs[keys.IMAGES][cam]
        if keys.FEATURES in obs:
            return obs[keys.FEATURES][cam]
        frames = obs[keys.IMAGES][cam]
        q = self.frame_features.encode(frames.cpu().numpy())  # (B, h, w, C) uint8
        return torch.from_numpy(q).to(frames.device)


def obs_to_torch(
    obs: Mapping[str, object], device: torch.device, layout: ObsLayout | None = None
) -> dict[str, object]:
    """One numpy sample (no batch dim) in the learner layout -> batch-of-1 torch tensors.

    With ``layout``, shapes are checked first (ValueError naming the key).
    """
    if layout is not None:
        if layout.state_dim and np.shape(obs[keys.STATE]) != (layout.state_dim,):
            raise ValueError(
                f"obs[{keys.STATE!r}] has shape {np.shape(obs[keys.STATE])}, expected "
                f"({layout.state_dim},): pass one sample without a batch dimension"
            )
        for cam, spec in layout.images.items():
            shape = np.shape(obs[keys.IMAGES][cam])
            if shape != tuple(spec.shape):
                raise ValueError(f"image {cam!r} has shape {shape}, expected {spec.shape}")
    out: dict[str, object] = {}
    if keys.STATE in obs:
        out[keys.STATE] = torch.as_tensor(obs[keys.STATE], dtype=torch.float32, device=device)[None]
    if keys.IMAGES in obs:
        out[keys.IMAGES] = {
            c: torch.as_tensor(v, dtype=torch.uint8, device=device)[None]
            for c, v in obs[keys.IMAGES].items()
        }
    return out


def trainable_state_dict(module: nn.Module, prefix: str = "") -> dict[str, torch.Tensor]:
    """``module.state_dict()``, names prefixed. Every entry is learned: the frozen backbone is
    no submodule of an encoder."""
    return {prefix + k: v for k, v in module.state_dict().items()}
