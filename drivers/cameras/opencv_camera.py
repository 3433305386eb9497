"""V4L2 / OpenCV camera: ``cv2.VideoCapture`` on a device index, a device path or a video file.

Frames come out as (H, W, 3) uint8 RGB (OpenCV delivers BGR) at the size the source delivers;
crop and resize are the env wrappers' job. A requested ``width`` / ``height`` is asked of the
device, and a source that then delivers another size is an error (never silently resized).

Live devices are read by a background thread that keeps only the newest frame; a video file is
read frame by frame in ``read()`` (``threaded=False``, the default for files), or played at its
frame rate by the thread (``threaded=True``), optionally looping. Stamps are
``time.monotonic()`` at arrival.

Without a ``/dev/video*`` (CI) the tests use a video file as the source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import Frame

from .common import CameraError, CameraIntrinsics, FrameGrabber, Grab


@dataclass(frozen=True)
class OpenCVCameraConfig:
    """Settings of one OpenCV camera.

    Attributes:
        name: Camera name (topic prefix, observation key).
        source: Device index (``0``), device path (``/dev/video2``) or a video file path.
        width: Requested / expected width (px); None: whatever the source delivers.
        height: Requested / expected height (px); None: whatever the source delivers.
        fps: Requested device frame rate, or the playback rate of a file (None: the file's).
        threaded: Background reader keeping the newest frame; None: True for devices, False
            for files.
        loop: Files only: start again at the end instead of repeating the last frame.
        first_frame_timeout_s: How long ``read()`` waits for the first frame (s).
        intrinsics: Calibration for ``camera_info`` (None: unknown, K left zero).
    """

    name: str
    source: int | str
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    threaded: bool | None = None
    loop: bool = False
    first_frame_timeout_s: float = 5.0
    intrinsics: CameraIntrinsics | None = None

    def __post_init__(self) -> None:
        if (self.width is None) != (self.height is None):
            raise ValueError("set both width and height, or neither")
        if self.width is not None and (self.width <= 0 or self.height <= 0):  # type: ignore[operator]
            raise ValueError(f"size {self.width}x{self.height} must be positive")
        if self.fps is not None and not self.fps > 0:
            raise ValueError(f"fps {self.fps} must be > 0")


def parse_source(text: str) -> int | str:
    """A CLI ``--source``: digits -> device index, anything else -> path."""
    return int(text) if text.isdigit() else text


def to_rgb(image: np.ndarray) -> np.ndarray:
    """OpenCV image (BGR, BGRA or grey) -> (H, W, 3) uint8 RGB."""
    if image.dtype != np.uint8:
        raise CameraError(f"source delivered {image.dtype} pixels; expected 8-bit")
    if image.ndim == 2:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB)
    if image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2RGB)
    if image.shape[2] == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    raise CameraError(f"source delivered {image.shape[2]} channels; expected 1, 3 or 4")


class OpenCVCamera:
    """:class:`robot_rl.core.protocols.Camera` over ``cv2.VideoCapture``."""

    def __init__(self, config: OpenCVCameraConfig) -> None:
        self.config = config
        self._cap: Any = None
        self._grabber: FrameGrabber | None = None
        self._size: tuple[int, int] | None = (
            None if config.width is None else (config.height, config.width)  # type: ignore[assignment]
        )
        self._last_rgb: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def is_file(self) -> bool:
        return isinstance(self.config.source, str) and os.path.isfile(self.config.source)

    @property
    def image_spec(self) -> ArraySpec:
        """(H, W, 3) uint8. Without a configured width/height, the first call before
        ``connect()`` opens the source briefly to ask its frame size."""
        if self._size is None:
            self._size = self._probe_size()
        return ArraySpec(shape=(*self._size, 3), dtype="uint8", low=0, high=255)

    def _probe_size(self) -> tuple[int, int]:
        cap = self._open()
        try:
            w, h = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        finally:
            cap.release()
        if w <= 0 or h <= 0:
            raise CameraError(f"camera {self.name}: {self.config.source!r} reports no frame size")
        return h, w

    def _open(self) -> Any:
        c = self.config
        if isinstance(c.source, str) and not self.is_file and not c.source.startswith("/dev/"):
            raise CameraError(f"camera {c.name}: no such file or device {c.source!r}")
        cap = cv2.VideoCapture(c.source)
        if not cap.isOpened():
            raise CameraError(
                f"camera {c.name}: cannot open {c.source!r} (index or /dev/video* path of a "
                "V4L2 device the user may read, or a video file)"
            )
        return cap

    @property
    def intrinsics(self) -> CameraIntrinsics | None:
        return self.config.intrinsics

    def connect(self) -> None:
        c = self.config
        cap = self._open()
        if not self.is_file:
            cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)
            if c.width is not None:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, c.width)
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, c.height)
            if c.fps is not None:
                cap.set(cv2.CAP_PROP_FPS, c.fps)
        self._cap = cap
        ok, first = cap.read()
        if not ok:
            cap.release()
            self._cap = None
            raise CameraError(f"camera {c.name}: {c.source!r} opened but delivered no frame")
        rgb = self._check(first)
        if self.is_file:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)  # deliver the first frame again
            self._last_rgb = None
        else:
            self._last_rgb = rgb
        threaded = (not self.is_file) if c.threaded is None else c.threaded
        pace = None
        if self.is_file and threaded:
            fps = c.fps or cap.get(cv2.CAP_PROP_FPS) or 30.0
            pace = 1.0 / fps
        self._grabber = FrameGrabber(
            c.name, self._grab, threaded, pace, first_frame_timeout_s=c.first_frame_timeout_s
        )
        self._grabber.start()

    def _check(self, bgr: np.ndarray) -> np.ndarray:
        rgb = to_rgb(bgr)
        if self._size is None:
            self._size = (rgb.shape[0], rgb.shape[1])
        elif rgb.shape[:2] != self._size:
            raise CameraError(
                f"camera {self.name}: source delivers {rgb.shape[1]}x{rgb.shape[0]}, configured "
                f"{self._size[1]}x{self._size[0]}: pick a mode the device supports (crop/resize "
                "belongs in the env wrappers)"
            )
        return rgb

    def _grab(self) -> Grab | None:
        if self._last_rgb is not None:  # a device's first frame, read in connect()
            rgb, self._last_rgb = self._last_rgb, None
            return Grab(rgb)
        ok, bgr = self._cap.read()
        if not ok and self.is_file and self.config.loop:
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, bgr = self._cap.read()
        if not ok:
            if self.is_file:
                return None
            raise CameraError(f"camera {self.name}: {self.config.source!r} stopped delivering")
        return Grab(self._check(bgr))

    def disconnect(self) -> None:
        if self._grabber is not None:
            self._grabber.stop()
            self._grabber = None
        if self._cap is not None:
            self._cap.release()
            self._cap = None

    def read(self) -> Frame:
        """The newest frame (see :class:`drivers.cameras.common.FrameGrabber`)."""
        if self._grabber is None:
            raise RuntimeError(f"camera {self.name} is not connected; call connect() first")
        return self._grabber.read()[0]

    @property
    def ended(self) -> bool:
        """A file source without looping has delivered its last frame."""
        return self._grabber is not None and self._grabber.ended
