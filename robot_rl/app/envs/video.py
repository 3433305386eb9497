"""Episode videos: camera frames side by side under a one-line text banner, written as mp4.

Frames are padded (black) to a multiple of 16 pixels in both directions so that the H.264
encoder never rescales them; :func:`video_frame_shape` gives the resulting size. The banner is
drawn with Pillow's default font (Pillow ships with imageio). Encoding uses the ffmpeg binary
bundled with ``imageio-ffmpeg``; no system ffmpeg is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

BANNER_PX = 16  # height of the text banner above the images, pixels
_BLOCK = 16  # H.264 macro block: frame sides are padded to a multiple of this


def _ceil_to(n: int, block: int) -> int:
    return -(-n // block) * block


def video_frame_shape(image_shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int]:
    """(H, W, 3) of a video frame composed from camera images of the given shapes."""
    h = max(s[0] for s in image_shapes) + BANNER_PX
    w = sum(s[1] for s in image_shapes)
    return _ceil_to(h, _BLOCK), _ceil_to(w, _BLOCK), 3


def compose_frame(images: Sequence[np.ndarray], text: str) -> np.ndarray:
    """One video frame: ``images`` (each (H, W, 3) uint8) side by side under a text banner.

    Returns:
        (H', W', 3) uint8 with ``(H', W', 3) == video_frame_shape(shapes)``.
    """
    from PIL import Image, ImageDraw, ImageFont

    if not images:
        raise ValueError("compose_frame needs at least one image")
    out = np.zeros(video_frame_shape([i.shape for i in images]), dtype=np.uint8)
    x = 0
    for img in images:
        h, w = img.shape[:2]
        out[BANNER_PX : BANNER_PX + h, x : x + w] = img
        x += w
    banner = Image.fromarray(out[:BANNER_PX])
    try:
        font = ImageFont.load_default(size=BANNER_PX - 4)
    except (TypeError, OSError):  # old Pillow or no FreeType: fixed-size bitmap font
        font = ImageFont.load_default()
    ImageDraw.Draw(banner).text((2, 1), text, fill=(255, 255, 255), font=font)
    out[:BANNER_PX] = np.asarray(banner)
    return out


class VideoWriter:
    """Writes composed frames to an mp4 file.

    Args:
        path: Output file (``.mp4``); parent directories are created.
        fps: Frames per second (the control rate gives real-time playback).
    """

    def __init__(self, path: str | Path, fps: float) -> None:
        import imageio.v2 as imageio

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = imageio.get_writer(
            str(self.path), fps=fps, codec="libx264", macro_block_size=_BLOCK, quality=7
        )
        self.frames = 0

    def add(self, images: Sequence[np.ndarray], text: str) -> None:
        """Append one frame composed of ``images`` (each (H, W, 3) uint8) and a banner."""
        self._writer.append_data(compose_frame(images, text))
        self.frames += 1

    def close(self) -> None:
        """Finish the file."""
        self._writer.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
