"""Shared helpers for the Hugging Face reward models: local-only loading, versions, image batches.

Every loader here reads a local directory written by ``save_pretrained`` (``config.json``,
``*.safetensors`` and the tokenizer / processor files); nothing is ever downloaded and pickled
weights (``pytorch_model.bin``) are refused. ``transformers`` and ``PIL`` (the ``vlm`` extra) are
imported inside the functions that need them, so ``import rewards`` works without the extra.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robot_rl.core.protocols import RewardQuery

if TYPE_CHECKING:
    from PIL import Image

DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""Accepted ``dtype`` names of the VLM configs."""


def check_model_dir(model_dir: str | Path) -> Path:
    """Check that ``model_dir`` is a local ``save_pretrained`` directory with safetensors weights.

    Args:
        model_dir: Path of the directory.

    Returns:
        The directory as a resolved ``Path``.

    Raises:
        FileNotFoundError: If the directory or its ``config.json`` is missing.
        ValueError: If it holds no ``*.safetensors`` weights (pickled weights are refused).
    """
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"VLM model directory {str(path)!r} does not exist; give a local directory written "
            "by save_pretrained (weights are never downloaded at run time)"
        )
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{str(path)!r} has no config.json; is it a save_pretrained dir?")
    if not any(path.glob("*.safetensors")):
        raise ValueError(
            f"{str(path)!r} has no *.safetensors weights; pickled weights (pytorch_model.bin) are "
            "not loaded: re-save the model with save_pretrained(..., safe_serialization=True)"
        )
    return path.resolve()


def weights_digest(model_dir: Path, chunk_bytes: int = 1 << 22) -> str:
    """SHA-256 (first 16 hex digits) of ``config.json`` and every ``*.safetensors`` file.

    Reads all weight bytes (about 1 s per GB); pass an explicit version to the reward configs
    to skip it for large models.
    """
    digest = hashlib.sha256()
    for file in [model_dir / "config.json", *sorted(model_dir.glob("*.safetensors"))]:
        digest.update(file.name.encode())
        with file.open("rb") as f:
            while chunk := f.read(chunk_bytes):
                digest.update(chunk)
    return digest.hexdigest()[:16]


def settings_digest(settings: Mapping[str, Any]) -> str:
    """Short (8 hex digits) digest of JSON-serialisable settings (prompts, alpha, calibration)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def pretrained_kwargs(dtype: str) -> dict[str, Any]:
    """Keyword arguments for ``from_pretrained``: local files only, safetensors only, dtype."""
    import transformers

    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    dtype_key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return {"local_files_only": True, "use_safetensors": True, dtype_key: DTYPES[dtype]}


def check_dtype_device(dtype: str, device: str) -> None:
    """Raise ``ValueError`` with a fix if ``dtype`` or ``device`` is not usable."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    try:
        torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device {device!r} is not a torch device (e.g. 'cpu', 'cuda:0')") from e


def check_cameras(cameras: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``cameras`` is a non-empty tuple of distinct names."""
    if not isinstance(cameras, tuple) or not cameras:
        raise ValueError(f"cameras must be a non-empty tuple of camera names, got {cameras!r}")
    if len(set(cameras)) != len(cameras):
        raise ValueError(f"cameras must be distinct, got {cameras!r}")


def query_images(query: RewardQuery, cameras: Sequence[str]) -> tuple[list[np.ndarray], int]:
    """The query's images for ``cameras``, checked to be (B, H, W, 3) uint8 with one B.

    Returns:
        (per-camera image arrays in ``cameras`` order, batch size B).
    """
    missing = [c for c in cameras if c not in query.images]
    if missing:
        raise KeyError(
            f"reward query lacks camera(s) {missing}; it has {sorted(query.images)} "
            f"and the model needs {list(cameras)}"
        )
    arrays = [np.asarray(query.images[c]) for c in cameras]
    for camera, images in zip(cameras, arrays, strict=True):
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(
                f"camera {camera!r}: images must be (B, H, W, 3) uint8, got "
                f"{images.shape} {images.dtype}"
            )
    sizes = {images.shape[0] for images in arrays}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"all cameras need the same non-zero batch size, got {sorted(sizes)}")
    return arrays, sizes.pop()


def to_pil(images: np.ndarray) -> list[Image.Image]:
    """(B, H, W, 3) uint8 RGB -> list of B PIL images."""
    from PIL import Image

    return [Image.fromarray(np.ascontiguousarray(image)) for image in images]


def pooled(output: Any) -> torch.Tensor:
    """Embedding tensor of ``get_image_features`` / ``get_text_features``.

    transformers < 5 returns the tensor, >= 5 a ``BaseModelOutputWithPooling`` whose
    ``pooler_output`` holds the projected embedding.
    """
    if isinstance(output, torch.Tensor):
        return output
    return output.pooler_output
