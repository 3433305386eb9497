"""FrameFeatures: what a frozen image backbone looks like to replay, learner and rewards.

A frozen pretrained backbone's output for a frame never changes, so it is computed once per
frame, when the frame enters learning, and the RAM replay holds the features instead of the
frame (raw frames stay in the zarr log). This Protocol is all that storage code needs to know
about the backbone; ``policies.features.EfficientNetFeatures`` implements it.

Features are quantised to uint8 (a fixed scale, see the implementation), laid out
``(h, w, C)`` per frame (the backbone's feature map, channels last).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_IMAGE_SIZE = 128
"""Camera image side in pixels the learner, the recorder and the reward frames default to: one
size so demos, the reward classifier and the policy agree. The pixel figures in bench/results
were measured at 128 (EfficientNet-Lite0 gives a 4x4 feature map there; 64 gives 2x2)."""


@runtime_checkable
class FrameFeatures(Protocol):
    """A frozen image backbone: ``(N, H, W, 3) uint8`` frames -> ``(N, h, w, C) uint8``."""

    scale: float
    """Feature value per uint8 step (features = stored value * scale)."""

    def feature_shape(self, image_hw: tuple[int, int]) -> tuple[int, int, int]:
        """(h, w, C) of one frame's features for frames of ``image_hw`` = (H, W) pixels."""
        ...

    def cache_key(self, image_hw: tuple[int, int]) -> str:
        """A string naming the backbone's weights (their hash), the image size and the feature
        dtype: features stored under one key are valid for exactly that combination."""
        ...

    def encode(self, frames: np.ndarray) -> np.ndarray:
        """(N, H, W, 3) uint8 frames -> (N, h, w, C) uint8 features (a new array)."""
        ...
