"""ImageCropResize: crop camera images to a pixel box and resize them (cv2 INTER_AREA).

Images stay ``uint8 (H, W, C)``; the observation space's image Boxes are updated. Cameras
without a setting pass through unchanged.

:class:`CroppedCamera` crops at the camera instead (a setup camera's ``crop``): every reader of
the camera (the observation, a learned reward's out-of-band frames) sees the same box.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import cv2
import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import Frame


@dataclass(frozen=True)
class CropResize:
    """How to crop and resize one camera's images.

    Attributes:
        crop_tlhw: ``(top, left, height, width)`` crop box in input pixels, or None for the
            whole image. Must lie inside the input image.
        size_hw: ``(height, width)`` output size in pixels, or None to keep the cropped size.
    """

    crop_tlhw: tuple[int, int, int, int] | None = None
    size_hw: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.crop_tlhw is not None:
            if (
                len(self.crop_tlhw) != 4
                or min(self.crop_tlhw[:2]) < 0
                or min(self.crop_tlhw[2:]) < 1
            ):
                raise ValueError(
                    f"crop_tlhw {self.crop_tlhw} must be (top >= 0, left >= 0, height >= 1, "
                    "width >= 1) pixels"
                )
        if self.size_hw is not None and (len(self.size_hw) != 2 or min(self.size_hw) < 1):
            raise ValueError(f"size_hw {self.size_hw} must be (height >= 1, width >= 1) pixels")

    def output_shape(self, in_shape: tuple[int, ...]) -> tuple[int, int, int]:
        """Output ``(H, W, C)`` for an input image of shape ``in_shape``; validates the crop."""
        if len(in_shape) != 3:
            raise ValueError(f"expected an (H, W, C) image, got shape {in_shape}")
        h_in, w_in, c = in_shape
        if self.crop_tlhw is not None:
            top, left, h, w = self.crop_tlhw
            if top + h > h_in or left + w > w_in:
                raise ValueError(
                    f"crop_tlhw {self.crop_tlhw} reaches outside the {h_in}x{w_in} image; "
                    "shrink the box or move it inside the image"
                )
        else:
            h, w = h_in, w_in
        if self.size_hw is not None:
            h, w = self.size_hw
        return (int(h), int(w), int(c))


def crop_resize(image: np.ndarray, setting: CropResize) -> np.ndarray:
    """Crop then resize one ``(H, W, C)`` uint8 image; always returns a new array."""
    out_h, out_w, _ = setting.output_shape(image.shape)
    if setting.crop_tlhw is not None:
        top, left, h, w = setting.crop_tlhw
        image = image[top : top + h, left : left + w]
    if image.shape[:2] == (out_h, out_w):
        return np.array(image, copy=True)
    resized = cv2.resize(np.ascontiguousarray(image), (out_w, out_h), interpolation=cv2.INTER_AREA)
    if resized.ndim == 2:  # cv2 drops a trailing channel axis of size 1
        resized = resized[:, :, None]
    return resized


class ImageCropResize(gym.ObservationWrapper):
    """Crop and resize camera images in ``obs["images"]``.

    Either give one ``crop`` / ``size`` for every camera, or ``per_camera`` settings.

    Args:
        env: Inner env whose observation has an ``images`` Dict of ``(H, W, C)`` uint8 Boxes.
        crop: ``(top, left, height, width)`` pixels applied to every camera, or None.
        size: ``(height, width)`` output pixels for every camera, or None.
        per_camera: Camera name -> :class:`CropResize`; cameras not named pass through.
    """

    def __init__(
        self,
        env: gym.Env,
        crop: tuple[int, int, int, int] | None = None,
        size: tuple[int, int] | None = None,
        *,
        per_camera: Mapping[str, CropResize] | None = None,
    ) -> None:
        super().__init__(env)
        obs_space = env.observation_space
        images = (
            obs_space.spaces.get(keys.IMAGES) if isinstance(obs_space, gym.spaces.Dict) else None
        )
        if not isinstance(images, gym.spaces.Dict):
            raise ValueError("ImageCropResize needs obs['images']; build the env with cameras")
        if per_camera is not None:
            if crop is not None or size is not None:
                raise ValueError("give either crop/size for every camera or per_camera, not both")
            unknown = sorted(set(per_camera) - set(images.spaces))
            if unknown:
                raise ValueError(
                    f"per_camera names {unknown} not among cameras {sorted(images.spaces)}"
                )
            settings = dict(per_camera)
        else:
            settings = {name: CropResize(crop, size) for name in images.spaces}
        self.settings: dict[str, CropResize] = settings
        new_images = dict(images.spaces)
        for name, setting in settings.items():
            space = images.spaces[name]
            if space.dtype != np.uint8:
                raise ValueError(f"camera {name!r} images are {space.dtype}, expected uint8")
            new_images[name] = gym.spaces.Box(
                0, 255, shape=setting.output_shape(tuple(space.shape)), dtype=np.uint8
            )
        spaces = dict(obs_space.spaces)
        spaces[keys.IMAGES] = gym.spaces.Dict(new_images)
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, obs: dict) -> dict:
        """New observation dict with cropped and resized images (new arrays)."""
        images = dict(obs[keys.IMAGES])
        for name, setting in self.settings.items():
            images[name] = crop_resize(images[name], setting)
        out = dict(obs)
        out[keys.IMAGES] = images
        return out


class CroppedCamera:
    """A :class:`robot_rl.core.protocols.Camera` that delivers a box of another camera's frames.

    Args:
        camera: The camera (its frames must contain the box).
        crop_tlhw: ``(top, left, height, width)`` in the camera's pixels.

    Raises:
        ValueError: The box does not fit the camera's frames.
    """

    def __init__(self, camera, crop_tlhw: tuple[int, int, int, int]) -> None:
        self.camera = camera
        self.setting = CropResize(crop_tlhw=tuple(int(v) for v in crop_tlhw))
        spec = camera.image_spec
        shape = self.setting.output_shape(tuple(spec.shape))
        self._spec = ArraySpec(shape, spec.dtype, spec.low, spec.high)

    @property
    def name(self) -> str:
        return self.camera.name

    @property
    def image_spec(self) -> ArraySpec:
        return self._spec

    def connect(self) -> None:
        self.camera.connect()

    def disconnect(self) -> None:
        self.camera.disconnect()

    def read(self) -> Frame:
        """The wrapped camera's newest frame, cropped (a fresh array; same stamp and seq)."""
        frame = self.camera.read()
        return Frame(image=crop_resize(frame.image, self.setting), stamp_s=frame.stamp_s,
                     seq=frame.seq)  # fmt: skip
