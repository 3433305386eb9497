"""Intel RealSense camera via pyrealsense2: colour + depth aligned to colour, intrinsics.

Source: a live device (``serial``, or the first one found) or a recording played back
(``playback_path``: librealsense 2.59 writes and reads ROS 2 bag ``.db3`` files; older ``.bag``
files are read too). The same pipeline code runs in both cases, so the tests exercise it with a
recording that a ``pyrealsense2.software_device`` produced (no camera on CI machines).

Colour frames come out as (H, W, 3) uint8 RGB (``rgb8`` requested from a device; ``bgr8``
recordings are converted); depth is aligned to the colour image with ``rs.align`` and comes out
as (H, W) uint16 in units of ``depth_scale_m``. Intrinsics are those of the colour stream.
Stamps are ``time.monotonic()`` at arrival (device timestamps use another clock).

Needs the system library ``libusb-1.0-0`` (``apt-get install libusb-1.0-0``), and for a live
camera the udev rules of librealsense.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import Frame

from .common import CameraError, CameraIntrinsics, DepthFrame, FrameGrabber, Grab

_POLL_MS = 100
"""Frame wait slice (ms) between checks for the end of a recording."""

_PLUMB_BOB_MODELS = ("brown_conrady", "modified_brown_conrady", "inverse_brown_conrady")


@dataclass(frozen=True)
class RealSenseConfig:
    """Settings of one RealSense camera.

    Attributes:
        name: Camera name (topic prefix, observation key).
        serial: Device serial number (``rs-enumerate-devices -s``); None: the first device.
        playback_path: Play this recording instead of a device.
        width: Colour (and depth) width (px); None for playback: as recorded.
        height: Colour (and depth) height (px); None for playback: as recorded.
        fps: Frame rate of a live device.
        depth: Also stream depth, aligned to colour.
        threaded: Background reader keeping the newest frame set; False: ``read()`` waits for
            the next set (every frame of a recording, in order).
        realtime_playback: Play a recording at its recorded rate (False: as fast as read).
        loop_playback: Start a recording again at its end.
        timeout_s: Longest wait for a frame set (s).
    """

    name: str
    serial: str | None = None
    playback_path: str | None = None
    width: int | None = 640
    height: int | None = 480
    fps: int = 30
    depth: bool = True
    threaded: bool = True
    realtime_playback: bool = True
    loop_playback: bool = False
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.serial is not None and self.playback_path is not None:
            raise ValueError("set serial (live camera) or playback_path (recording), not both")
        if self.playback_path is None and (self.width is None or self.height is None):
            raise ValueError("a live camera needs width and height")
        if not self.fps > 0 or not self.timeout_s > 0:
            raise ValueError("fps and timeout_s must be > 0")


def intrinsics_from_rs(intr: Any) -> CameraIntrinsics:
    """``pyrealsense2.intrinsics`` -> :class:`CameraIntrinsics` (Brown-Conrady -> plumb_bob)."""
    model = str(intr.model).split(".")[-1]
    coeffs = tuple(float(c) for c in intr.coeffs)
    if model in _PLUMB_BOB_MODELS:
        dist = "plumb_bob"
    elif model == "none":
        dist, coeffs = "plumb_bob", (0.0,) * 5
    else:  # kannala_brandt4 / ftheta (fisheye): ROS calls Kannala-Brandt "equidistant"
        dist = "equidistant" if model == "kannala_brandt4" else model
    return CameraIntrinsics(
        width=int(intr.width),
        height=int(intr.height),
        fx=float(intr.fx),
        fy=float(intr.fy),
        cx=float(intr.ppx),
        cy=float(intr.ppy),
        distortion_model=dist,
        coeffs=coeffs,
    )


class RealSenseCamera:
    """:class:`robot_rl.core.protocols.Camera` over a RealSense pipeline, plus depth."""

    def __init__(self, config: RealSenseConfig) -> None:
        self.config = config
        self._pipe: Any = None
        self._align: Any = None
        self._grabber: FrameGrabber | None = None
        self._intrinsics: CameraIntrinsics | None = None
        self._depth_scale_m = 0.0
        self._bgr = False
        self._playback: Any = None
        self.device_name = ""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def image_spec(self) -> ArraySpec:
        """(H, W, 3) uint8. For a recording without a configured size, the first call before
        ``connect()`` reads the size from the file."""
        c = self.config
        if self._intrinsics is not None:
            h, w = self._intrinsics.height, self._intrinsics.width
        elif c.width is not None and c.height is not None:
            h, w = c.height, c.width
        else:
            h, w = self._probe_size()
        return ArraySpec(shape=(h, w, 3), dtype="uint8", low=0, high=255)

    def _probe_size(self) -> tuple[int, int]:
        import pyrealsense2 as rs

        cfg, pipe = self._rs_config(), rs.pipeline()
        try:
            profile = cfg.resolve(pipe)
        except RuntimeError as e:
            where = self.config.playback_path
            raise CameraError(f"camera {self.name}: cannot read {where}: {e}") from e
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        return color.height(), color.width()

    @property
    def intrinsics(self) -> CameraIntrinsics | None:
        """Colour intrinsics (after connect)."""
        return self._intrinsics

    @property
    def depth_scale_m(self) -> float:
        """Metres per depth unit (after connect; 0 without depth)."""
        return self._depth_scale_m

    def _rs_config(self) -> Any:
        import pyrealsense2 as rs

        c = self.config
        cfg = rs.config()
        if c.playback_path is not None:
            path = Path(c.playback_path)
            if not path.is_file():
                raise CameraError(f"camera {c.name}: recording {path} does not exist")
            cfg.enable_device_from_file(str(path), repeat_playback=c.loop_playback)
            cfg.enable_stream(rs.stream.color)
            if c.depth:
                cfg.enable_stream(rs.stream.depth)
        else:
            if c.serial is not None:
                cfg.enable_device(c.serial)
            cfg.enable_stream(rs.stream.color, c.width, c.height, rs.format.rgb8, c.fps)
            if c.depth:
                cfg.enable_stream(rs.stream.depth, c.width, c.height, rs.format.z16, c.fps)
        return cfg

    def connect(self) -> None:
        import pyrealsense2 as rs  # needs libusb-1.0-0; imported here, not at module import

        c = self.config
        cfg = self._rs_config()
        pipe = rs.pipeline()
        try:
            if c.playback_path is not None:
                # set the playback speed before streaming starts, or the first frames race by
                cfg.resolve(pipe).get_device().as_playback().set_real_time(c.realtime_playback)
            profile = pipe.start(cfg)
        except RuntimeError as e:
            where = c.playback_path or (c.serial or "the first RealSense")
            raise CameraError(
                f"camera {c.name}: cannot start {where}: {e} (is it connected, is the mode "
                f"{c.width}x{c.height}@{c.fps} supported, is another process using it?)"
            ) from e
        device = profile.get_device()
        if device.supports(rs.camera_info.name):
            self.device_name = device.get_info(rs.camera_info.name)
        self._playback = None
        if c.playback_path is not None:
            self._playback = device.as_playback()
            self._playback.set_real_time(c.realtime_playback)
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        fmt = color.format()
        if fmt not in (rs.format.rgb8, rs.format.bgr8):
            pipe.stop()
            raise CameraError(f"camera {c.name}: colour format {fmt}; need rgb8 or bgr8")
        self._bgr = fmt == rs.format.bgr8
        intr = intrinsics_from_rs(color.get_intrinsics())
        if c.width is not None and (intr.width, intr.height) != (c.width, c.height):
            pipe.stop()
            raise CameraError(
                f"camera {c.name}: colour stream is {intr.width}x{intr.height}, configured "
                f"{c.width}x{c.height}"
            )
        self._intrinsics = intr
        if c.depth:
            self._depth_scale_m = float(device.first_depth_sensor().get_depth_scale())
            self._align = rs.align(rs.stream.color)
        self._pipe = pipe
        self._grabber = FrameGrabber(c.name, self._grab, c.threaded, None, c.timeout_s)
        self._grabber.start()

    def _wait(self) -> Any:
        """The next frame set; None at the end of a recording."""
        import pyrealsense2 as rs

        deadline = time.monotonic() + self.config.timeout_s
        while True:
            ok, frames = self._pipe.try_wait_for_frames(_POLL_MS)
            if ok:
                return frames
            if self._playback is not None and not self.config.loop_playback:
                if self._playback.current_status() == rs.playback_status.stopped:
                    return None  # end of the recording
            if time.monotonic() > deadline:
                raise CameraError(f"camera {self.name}: no frames within {self.config.timeout_s} s")

    def _grab(self) -> Grab | None:
        frames = self._wait()
        if frames is None:
            return None
        depth = None
        if self._align is not None:
            frames = self._align.process(frames)
            d = frames.get_depth_frame()
            if d:
                depth = np.asanyarray(d.get_data()).copy()
        c = frames.get_color_frame()
        if not c:
            raise CameraError(f"camera {self.name}: frame set without a colour frame")
        rgb = np.asanyarray(c.get_data()).copy()
        if self._bgr:
            rgb = np.ascontiguousarray(rgb[..., ::-1])
        return Grab(rgb, depth)

    def disconnect(self) -> None:
        if self._grabber is not None:
            self._grabber.stop()
            self._grabber = None
        if self._pipe is not None:
            self._pipe.stop()
            self._pipe = None

    def read(self) -> Frame:
        """The newest colour frame."""
        return self.read_with_depth()[0]

    def read_with_depth(self) -> tuple[Frame, DepthFrame | None]:
        """The newest colour frame and the depth aligned to it (None without depth)."""
        if self._grabber is None:
            raise RuntimeError(f"camera {self.name} is not connected; call connect() first")
        frame, depth = self._grabber.read()
        if depth is None:
            return frame, None
        return frame, DepthFrame(depth, frame.stamp_s, frame.seq, self._depth_scale_m)

    @property
    def ended(self) -> bool:
        """A recording without looping has been played to its end."""
        return self._grabber is not None and self._grabber.ended
