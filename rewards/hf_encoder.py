"""Frozen transformers vision backbones (DINOv2, SigLIP, CLIP, ...) as classifier encoders.

:func:`load_hf_encoder` turns a local ``save_pretrained`` directory into a
:class:`rewards.classifier.FrozenImageEncoder` for :class:`rewards.classifier.ClassifierReward`:

- **Which network**: ``Dinov2Model`` (and DINOv2 with registers), the vision tower of a
  ``SiglipModel`` / ``CLIPModel`` (or a saved ``SiglipVisionModel`` / ``CLIPVisionModel``), and
  any other ``AutoModel`` whose input is ``pixel_values``. Loaded with ``local_files_only=True``
  from safetensors only (:func:`rewards.hf_local.check_model_dir`); a checkpoint that leaves
  any weight of the network uninitialised is refused rather than run half random.
- **Input**: frames are scaled to ``[0, 1]``, normalised with ``image_mean`` / ``image_std`` of
  the directory's ``preprocessor_config.json`` (else the model family's published defaults:
  ImageNet for DINOv2, 0.5 / 0.5 for SigLIP, OpenAI's for CLIP; the spec says which), then the
  whole frame is resized (bilinear, antialiased; no centre crop, which would cut the scene's
  edges) to the processor's crop / resize size, else the config's ``image_size``. Twin frames
  are 64 x 64; the backbones want 224 or so.
- **Feature**: DINOv2 gives ``[CLS, mean of patch tokens]`` (2 x hidden), the linear-probe
  feature of the DINOv2 paper and of transformers' ``Dinov2ForImageClassification``: the
  CLS token alone drops the spatial detail a gripper-holds-cube decision needs. Every other
  model gives its ``pooler_output`` (SigLIP's attention-pool head, CLIP's post-layernorm CLS,
  a CNN's global pool), or the token / spatial mean of ``last_hidden_state`` if it has none.

The encoder's name, which the classifier card records, is ``hf:<model_type>:<digest>``: the
digest covers ``config.json``, every ``*.safetensors`` file and the preprocessing above, so a
classifier only ever reloads on the very encoder it was trained on (the CLI compares the names).
``transformers`` (the ``vlm`` extra) is imported only when a model loads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rewards.classifier import FrozenImageEncoder
from rewards.hf_local import check_model_dir, pretrained_kwargs, weights_digest

NAME_PREFIX = "hf:"
"""Encoder names of this module start with it (``hf:<model_type>:<digest>``)."""

FEATURE_RULES = 1
"""Version of the input / pooling rules above; part of the digest (bump it when they change)."""

Triple = tuple[float, float, float]
IMAGENET: tuple[Triple, Triple] = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
SIGLIP: tuple[Triple, Triple] = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
OPENAI_CLIP: tuple[Triple, Triple] = (
    (0.48145466, 0.4578275, 0.40821073),
    (0.26862954, 0.26130258, 0.27577711),
)
DEFAULT_NORMALISATION: dict[str, tuple[Triple, Triple, str]] = {
    "dinov2": (*IMAGENET, "ImageNet"),
    "dinov2_with_registers": (*IMAGENET, "ImageNet"),
    "siglip": (*SIGLIP, "SigLIP 0.5/0.5"),
    "siglip_vision_model": (*SIGLIP, "SigLIP 0.5/0.5"),
    "siglip2": (*SIGLIP, "SigLIP 0.5/0.5"),
    "siglip2_vision_model": (*SIGLIP, "SigLIP 0.5/0.5"),
    "clip": (*OPENAI_CLIP, "OpenAI CLIP"),
    "clip_vision_model": (*OPENAI_CLIP, "OpenAI CLIP"),
}
"""Model type -> (mean, std, what it is): used when the directory has no image_mean / std."""

DINOV2_TYPES = ("dinov2", "dinov2_with_registers")


@dataclass(frozen=True)
class HFEncoderSpec:
    """How a directory is turned into features (read from its files, before loading weights)."""

    model_dir: str
    model_type: str
    """``config.json``'s ``model_type`` (e.g. ``dinov2``, ``siglip``, ``clip``)."""
    image_size_px: tuple[int, int]
    """(H, W) every frame is resized to, pixels."""
    image_size_source: str
    mean: Triple
    std: Triple
    """Per-channel normalisation of [0, 1] images."""
    normalisation_source: str
    """``preprocessor_config.json`` or the model family default used instead."""
    pooling: str
    """``cls+patch_mean`` (DINOv2) or ``pooler_or_token_mean``."""
    digest: str
    """16 hex digits of sha256 over the weights digest and the preprocessing settings."""

    @property
    def name(self) -> str:
        """What the classifier card records: ``hf:<model_type>:<digest>``."""
        return f"{NAME_PREFIX}{self.model_type}:{self.digest}"


def describe_hf_encoder(model_dir: str | Path) -> HFEncoderSpec:
    """Read the spec of the encoder in ``model_dir`` (hashes every weight byte, ~1 s per GB).

    Raises:
        FileNotFoundError: No such directory, or no ``config.json`` in it.
        ValueError: No safetensors weights, no ``model_type``, no image size or normalisation
            to be found.
    """
    path = check_model_dir(model_dir)
    config = _read_json(path / "config.json")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"{path / 'config.json'} has no model_type; is it a transformers model?")
    processor = _processor_config(path)
    size, size_source = _image_size(config, processor, path)
    mean, std, norm_source = _normalisation(model_type, processor, path)
    pooling = "cls+patch_mean" if model_type in DINOV2_TYPES else "pooler_or_token_mean"
    settings = {
        "rules": FEATURE_RULES,
        "weights": weights_digest(path),
        "image_size_px": list(size),
        "mean": list(mean),
        "std": list(std),
        "pooling": pooling,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return HFEncoderSpec(
        model_dir=str(path),
        model_type=model_type,
        image_size_px=size,
        image_size_source=size_source,
        mean=mean,
        std=std,
        normalisation_source=norm_source,
        pooling=pooling,
        digest=digest,
    )


class HFVisionBackbone(nn.Module):
    """``(B, 3, H, W)`` normalised frames -> ``(B, D)`` features of a frozen transformers model.

    Args:
        model: The vision network (called as ``model(pixel_values=...)``), frozen here.
        spec: Its :class:`HFEncoderSpec` (target size, pooling).
        device: Torch device the network runs on; features come back on the CPU.
    """

    def __init__(self, model: nn.Module, spec: HFEncoderSpec, device: str = "cpu") -> None:
        super().__init__()
        self.model = model.to(torch.device(device)).eval().requires_grad_(False)
        self.spec = spec
        self.device = torch.device(device)
        self.register_tokens = int(
            getattr(getattr(model, "config", None), "num_register_tokens", 0)
        )
        self.eval()

    def train(self, mode: bool = True) -> HFVisionBackbone:
        """Stays in eval mode: the backbone is frozen (dropout off, whatever the caller asks)."""
        return super().train(False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"expected (B, 3, H, W) frames, got {tuple(x.shape)}")
        x = x.to(self.device, torch.float32)
        if tuple(x.shape[2:]) != self.spec.image_size_px:
            x = F.interpolate(
                x,
                size=self.spec.image_size_px,
                mode="bilinear",
                align_corners=False,
                antialias=True,
            )
        out = self.model(pixel_values=x)
        hidden = out.last_hidden_state
        if self.spec.pooling == "cls+patch_mean":  # hidden: (B, 1 + registers + patches, D)
            patches = hidden[:, 1 + self.register_tokens :]
            feats = torch.cat([hidden[:, 0], patches.mean(dim=1)], dim=1)  # (B, 2D)
        elif getattr(out, "pooler_output", None) is not None:
            feats = out.pooler_output.flatten(1)  # (B, D) or a CNN's (B, C, 1, 1)
        elif hidden.ndim == 3:
            feats = hidden.mean(dim=1)  # (B, N, D) tokens
        else:
            feats = hidden.mean(dim=(2, 3))  # (B, C, h, w) feature map
        return feats.float().cpu()


def load_hf_encoder(
    model_dir: str | Path, device: str = "cpu", batch_size: int = 32
) -> FrozenImageEncoder:
    """A frozen encoder from a local ``save_pretrained`` directory (see the module docstring).

    Args:
        model_dir: The directory (``config.json``, ``*.safetensors``, ideally
            ``preprocessor_config.json``); nothing is downloaded.
        device: Torch device of the backbone (``cpu``, ``cuda:0``); features return on the CPU.
        batch_size: Frames per forward pass.

    Returns:
        A :class:`FrozenImageEncoder` named ``hf:<model_type>:<digest>`` whose ``backbone`` is
        an :class:`HFVisionBackbone`.

    Raises:
        FileNotFoundError / ValueError: As :func:`describe_hf_encoder`; also if the model is not
            a vision model or the checkpoint lacks some of its weights.
        ImportError: transformers (the ``vlm`` extra) is not installed.
    """
    spec = describe_hf_encoder(model_dir)
    try:
        from transformers import AutoModel
    except ImportError as e:
        raise ImportError(
            f"transformers encoders need the `vlm` extra ({e}): pip install 'robot_rl[vlm]'"
        ) from e
    kwargs = pretrained_kwargs("float32")
    model, info = AutoModel.from_pretrained(spec.model_dir, output_loading_info=True, **kwargs)
    missing = sorted(info.get("missing_keys", ()))
    if hasattr(model, "vision_model"):  # a SigLIP / CLIP dual encoder: its vision tower only
        missing = [k for k in missing if k.startswith("vision_model.")]
        model = model.vision_model
    if missing:
        raise ValueError(
            f"{spec.model_dir} lacks weights {missing[:5]}{' ...' if len(missing) > 5 else ''} "
            "of its network (they would be random); save the full model with save_pretrained"
        )
    if getattr(model, "main_input_name", "pixel_values") != "pixel_values":
        raise ValueError(
            f"{type(model).__name__} in {spec.model_dir} is not a vision model (its input is "
            f"{model.main_input_name!r}); give a DINOv2, SigLIP, CLIP or other image backbone"
        )
    backbone = HFVisionBackbone(model, spec, device)
    encoder = FrozenImageEncoder(spec.name, backbone, spec.mean, spec.std, batch_size)
    try:
        encoder.feature_dim  # noqa: B018 - one forward pass: fail here, not mid-training
    except (RuntimeError, ValueError, TypeError) as e:
        raise ValueError(
            f"{type(model).__name__} in {spec.model_dir} failed on a "
            f"{spec.image_size_px} frame ({spec.image_size_source}): {e}"
        ) from e
    return encoder


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def _processor_config(path: Path) -> dict[str, Any]:
    """The image processor settings: ``preprocessor_config.json``, else the ``image_processor``
    entry of ``processor_config.json``, else empty."""
    if (path / "preprocessor_config.json").is_file():
        return _read_json(path / "preprocessor_config.json")
    if (path / "processor_config.json").is_file():
        nested = _read_json(path / "processor_config.json").get("image_processor")
        if isinstance(nested, dict):
            return nested
    return {}


def _hw(value: Any) -> tuple[int, int] | None:
    """(H, W) from an int, a [H, W] pair or a size dict with height / width / shortest_edge."""
    if isinstance(value, int) and value > 0:
        return value, value
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    ):
        return int(value[0]), int(value[1])
    if isinstance(value, dict):
        if isinstance(value.get("height"), int) and isinstance(value.get("width"), int):
            return int(value["height"]), int(value["width"])
        if isinstance(value.get("shortest_edge"), int):
            return int(value["shortest_edge"]), int(value["shortest_edge"])
    return None


def _image_size(
    config: dict[str, Any], processor: dict[str, Any], path: Path
) -> tuple[tuple[int, int], str]:
    """(H, W) the frames are resized to and where it came from."""
    if processor.get("do_center_crop") and (hw := _hw(processor.get("crop_size"))):
        return hw, "preprocessor crop_size"
    if processor.get("do_resize", True) and (hw := _hw(processor.get("size"))):
        return hw, "preprocessor size"
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    for source, cfg in (("config vision_config.image_size", vision), ("config image_size", config)):
        if hw := _hw(cfg.get("image_size")):
            return hw, source
    raise ValueError(
        f"{path} says no image size (no preprocessor_config.json size, no config image_size); "
        "save the model's image processor into the directory"
    )


def _normalisation(
    model_type: str, processor: dict[str, Any], path: Path
) -> tuple[Triple, Triple, str]:
    """(mean, std, source) for [0, 1] images."""
    if processor.get("do_normalize") is False:
        return (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), "preprocessor_config.json (do_normalize false)"
    mean, std = processor.get("image_mean"), processor.get("image_std")
    if mean is not None and std is not None:
        m, s = _three(mean), _three(std)
        if m is None or s is None or min(s) <= 0:
            raise ValueError(f"{path}: image_mean {mean} / image_std {std} are not 3 numbers")
        return m, s, "preprocessor_config.json"
    if model_type in DEFAULT_NORMALISATION:
        m, s, what = DEFAULT_NORMALISATION[model_type]
        return m, s, f"{what} default for {model_type} (no image_mean / image_std saved)"
    raise ValueError(
        f"{path} has no image_mean / image_std (preprocessor_config.json) and {model_type!r} has "
        f"no known default (known: {sorted(DEFAULT_NORMALISATION)}); save its image processor"
    )


def _three(value: Any) -> Triple | None:
    if isinstance(value, int | float):
        return (float(value),) * 3
    if isinstance(value, list | tuple) and len(value) == 3:
        return float(value[0]), float(value[1]), float(value[2])
    return None


__all__ = ["HFEncoderSpec", "HFVisionBackbone", "describe_hf_encoder", "load_hf_encoder"]
