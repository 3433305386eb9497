"""Wire format of the reward service: images as JPEG bytes, the flat state as safetensors.

Never pickle: a JPEG decodes to pixels and a safetensors blob to one named float32 tensor, and
nothing else can come out of either. Decoding checks everything a client can get wrong and
raises :class:`PayloadError` naming the offending field, so the server can answer
``INVALID_ARGUMENT`` with a message that says what to fix.

Frames are checked from their JPEG headers before any is decoded (:func:`jpeg_size`): only JPEG
is accepted (OpenCV would also decode PNG, TIFF, ...), every frame must have the model's size
when it is known, and the request's total pixel count is bounded (:class:`PayloadTooLarge`), so
that a small file declaring a huge image (a decompression bomb) is refused without allocating it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cv2
import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

STATE_KEY = "state"
"""Name of the (B, S) float32 tensor inside the state safetensors blob."""

DEFAULT_JPEG_QUALITY = 95
"""JPEG quality (0-100) the client encodes with (with full-resolution 4:4:4 chroma). Why so
high: a success classifier trained on raw 64x64 twin frames flipped about 3% of its decisions
on quality-90 4:2:0 JPEG copies of the same frames, none at quality 100 with 4:4:4, and about
0.3% at 95 with 4:4:4; at 64x64 the bytes are small either way."""


class PayloadError(ValueError):
    """A request field that cannot be decoded or is inconsistent.

    Attributes:
        field: Which field, e.g. ``"images['front'][3]"`` or ``"state"``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PayloadTooLarge(PayloadError):
    """A request within the message size limit that would decode to more than the server allows
    (the server answers ``RESOURCE_EXHAUSTED``)."""


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""JPEG start-of-frame markers (baseline, progressive, ...); C4, C8 and CC are other segments."""


def jpeg_size(data: bytes, field: str = "jpeg") -> tuple[int, int]:
    """(height, width) of a JPEG from its frame header, without decoding it.

    Args:
        data: The file's bytes.
        field: The request field, for the error.

    Raises:
        PayloadError: Not a JPEG (it must start with ``ff d8 ff``), or no usable frame header
            before the image data.
    """
    if data[:3] != b"\xff\xd8\xff":
        raise PayloadError(
            field,
            f"not a decodable JPEG ({len(data)} bytes starting {data[:4].hex(' ') or 'empty'}; "
            "a JPEG starts ff d8 ff); send JPEG frames (codec.encode_images)",
        )
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header came first
            break
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _SOF_MARKERS and length >= 8 and i + 9 <= n:
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            width = int.from_bytes(data[i + 7 : i + 9], "big")
            if height == 0 or width == 0:
                raise PayloadError(field, f"JPEG frame header declares a {height}x{width} image")
            return height, width
        if length < 2:
            break
        i += 2 + length
    raise PayloadError(
        field, f"not a decodable JPEG ({len(data)} bytes): no frame header before the image data"
    )


def encode_images(
    images: Mapping[str, np.ndarray], quality: int = DEFAULT_JPEG_QUALITY
) -> dict[str, list[bytes]]:
    """JPEG-encode each frame of each camera.

    Args:
        images: Camera name -> (B, H, W, 3) uint8 RGB, the same B for every camera.
        quality: JPEG quality, 1..100.

    Returns:
        Camera name -> B JPEG byte strings.

    Raises:
        ValueError: Wrong dtype, shape, or differing batch sizes.
    """
    if not 1 <= quality <= 100:
        raise ValueError(f"quality={quality}: use a JPEG quality in 1..100")
    if not images:
        raise ValueError("images: give at least one camera")
    out: dict[str, list[bytes]] = {}
    batch = None
    for cam, frames in images.items():
        frames = np.asarray(frames)
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(
                f"images[{cam!r}]: expected (B, H, W, 3) uint8 RGB, got {frames.dtype} "
                f"{frames.shape}"
            )
        if batch is not None and frames.shape[0] != batch:
            raise ValueError(f"images[{cam!r}]: batch {frames.shape[0]}, other cameras {batch}")
        batch = frames.shape[0]
        out[cam] = []
        for frame in frames:
            ok, buf = cv2.imencode(
                ".jpg",
                cv2.cvtColor(frame, cv2.COLOR_RGB2BGR),
                [
                    cv2.IMWRITE_JPEG_QUALITY,
                    quality,
                    cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                    cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
                ],
            )
            if not ok:
                raise ValueError(f"images[{cam!r}]: JPEG encoding failed for {frame.shape}")
            out[cam].append(buf.tobytes())
    return out


def decode_images(
    jpegs: Mapping[str, Sequence[bytes]],
    cameras: Sequence[str] = (),
    *,
    image_size: tuple[int, int] | None = None,
    max_pixels: int | None = None,
) -> dict[str, np.ndarray]:
    """Decode JPEG frames back to (B, H, W, 3) uint8 RGB per camera.

    Every frame's header is checked before any frame is decoded.

    Args:
        jpegs: Camera name -> B JPEG byte strings.
        cameras: Cameras the model needs (empty: accept any non-empty set).
        image_size: (height, width) every frame must have, pixels (None: any, the same within
            a camera).
        max_pixels: Most pixels all frames together may have (None: no limit).

    Returns:
        Camera name -> (B, H, W, 3) uint8 RGB.

    Raises:
        PayloadTooLarge: The frames' headers add up to more than ``max_pixels``.
        PayloadError: No camera, a missing camera, an empty batch, a frame that is not a
            colour JPEG, frames of different sizes within a camera or not of ``image_size``,
            or batch sizes that differ between cameras.
    """
    if not jpegs:
        raise PayloadError("images", "no camera given; send at least one camera's frames")
    missing = [c for c in cameras if c not in jpegs]
    if missing:
        raise PayloadError(
            "images", f"missing camera(s) {missing}; the model reads {list(cameras)}"
        )
    out: dict[str, np.ndarray] = {}
    batch = None
    for cam, frames in jpegs.items():
        if len(frames) == 0:
            raise PayloadError(f"images[{cam!r}]", "no frames; send B >= 1 JPEG frames")
        if batch is not None and len(frames) != batch:
            raise PayloadError(
                "images",
                f"inconsistent batch sizes: {cam!r} has {len(frames)} frames, another camera "
                f"has {batch}; send the same B frames for every camera",
            )
        batch = len(frames)
    pixels = 0
    for cam, frames in jpegs.items():  # headers only: nothing is decoded yet
        first = None
        for i, data in enumerate(frames):
            field = f"images[{cam!r}][{i}]"
            size = jpeg_size(data, field)
            if image_size is not None and size != tuple(image_size):
                raise PayloadError(
                    field,
                    f"{size[0]}x{size[1]} frame (height x width), the model expects "
                    f"{image_size[0]}x{image_size[1]}; resize with the env's image wrappers",
                )
            if first is not None and size != first:
                raise PayloadError(field, f"frame size {size} differs from frame 0's {first}")
            first = size
            pixels += size[0] * size[1]
    if max_pixels is not None and pixels > max_pixels:
        n = sum(len(f) for f in jpegs.values())
        raise PayloadTooLarge(
            "images",
            f"{n} frames of {pixels} pixels in all > max_request_pixels={max_pixels} (from the "
            "JPEG headers; nothing was decoded); send fewer or smaller frames per request",
        )
    for cam, frames in jpegs.items():
        decoded = []
        for i, data in enumerate(frames):
            field = f"images[{cam!r}][{i}]"
            bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
            if bgr is None:
                raise PayloadError(field, f"not a decodable JPEG ({len(data)} bytes)")
            if bgr.ndim != 3 or bgr.shape[2] != 3 or bgr.dtype != np.uint8:
                raise PayloadError(
                    field, f"expected an 8-bit colour (3-channel) JPEG, got {bgr.dtype} {bgr.shape}"
                )
            if bgr.shape[:2] != jpeg_size(data, field):
                raise PayloadError(
                    field, f"decodes to {bgr.shape[:2]}, its header says {jpeg_size(data, field)}"
                )
            decoded.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        out[cam] = np.stack(decoded)  # (B, H, W, 3)
    return out


def encode_state(state: np.ndarray) -> bytes:
    """Serialise a (B, S) float32 state as safetensors bytes (tensor ``"state"``).

    Raises:
        ValueError: Not a 2-D float32 array.
    """
    state = np.asarray(state)
    if state.dtype != np.float32 or state.ndim != 2:
        raise ValueError(f"state: expected (B, S) float32, got {state.dtype} {state.shape}")
    return st_save({STATE_KEY: np.ascontiguousarray(state)})


def decode_state(data: bytes, batch: int, state_dim: int | None = None) -> np.ndarray:
    """Parse safetensors bytes holding exactly one (batch, S) float32 tensor ``"state"``.

    Args:
        data: The bytes as received.
        batch: B, the images' batch size.
        state_dim: S the model expects (None: any).

    Raises:
        PayloadError: Not safetensors, other tensors, wrong dtype, rank, batch size or width, or
            non-finite values.
    """
    try:
        tensors = st_load(data)
    except Exception as e:  # untrusted bytes: any parser failure is the caller's payload
        raise PayloadError("state", f"not a safetensors blob ({len(data)} bytes): {e}") from e
    if set(tensors) != {STATE_KEY}:
        raise PayloadError(
            "state", f"expected exactly one tensor named {STATE_KEY!r}, got {sorted(tensors)}"
        )
    state = tensors[STATE_KEY]
    if state.dtype != np.float32 or state.ndim != 2:
        raise PayloadError("state", f"expected (B, S) float32, got {state.dtype} {state.shape}")
    if state.shape[0] != batch:
        raise PayloadError(
            "state", f"batch {state.shape[0]} differs from the images' batch {batch}"
        )
    if state_dim is not None and state.shape[1] != state_dim:
        raise PayloadError(
            "state", f"width {state.shape[1]}, the model expects (B, {state_dim}) float32"
        )
    if not np.isfinite(state).all():
        raise PayloadError("state", "contains NaN or inf")
    return state
