"""Shared parts of the camera drivers: intrinsics, depth frames, a latest-frame grabber thread.

A camera driver supplies one ``grab()`` function that blocks until the source delivers its next
frame and returns a :class:`Grab` (or ``None`` at the end of a file). :class:`FrameGrabber`
either calls it on every ``read()`` (synchronous: every frame of a file, in order) or runs it in
a background thread and keeps only the newest frame (threaded: a live camera never queues up
old frames behind a slow consumer). ``Frame.seq`` counts delivered frames; a read that returns
the same ``seq`` twice got nothing new.

Stamps are ``time.monotonic()`` when the frame reached this process (the contract's
hardware time base); device timestamps are in another clock and are not used for staleness.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from robot_rl.core.types import Frame


@dataclass(frozen=True)
class CameraIntrinsics:
    """Pinhole intrinsics of the colour image (pixels), for ``sensor_msgs/CameraInfo``.

    Attributes:
        width: Image width (px).
        height: Image height (px).
        fx: Focal length x (px).
        fy: Focal length y (px).
        cx: Principal point x (px).
        cy: Principal point y (px).
        distortion_model: ``"plumb_bob"`` (5 coefficients k1 k2 t1 t2 k3) or ``"none"``.
        coeffs: Distortion coefficients.
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion_model: str = "plumb_bob"
    coeffs: tuple[float, ...] = field(default=(0.0, 0.0, 0.0, 0.0, 0.0))

    @property
    def k(self) -> list[float]:
        """Row-major 3x3 camera matrix."""
        return [self.fx, 0.0, self.cx, 0.0, self.fy, self.cy, 0.0, 0.0, 1.0]

    @property
    def p(self) -> list[float]:
        """Row-major 3x4 projection matrix (monocular: no translation)."""
        return [self.fx, 0.0, self.cx, 0.0, 0.0, self.fy, self.cy, 0.0, 0.0, 0.0, 1.0, 0.0]


@dataclass(frozen=True)
class DepthFrame:
    """One depth image aligned to the colour image.

    Attributes:
        depth: (H, W) uint16 depth in units of ``depth_scale_m`` (0 = no data).
        stamp_s: Monotonic time of arrival (same as the colour frame of the same set).
        seq: Same counter as the colour frame of the same set.
        depth_scale_m: Metres per depth unit (0.001 on most RealSense models).
    """

    depth: np.ndarray
    stamp_s: float
    seq: int
    depth_scale_m: float


@dataclass(frozen=True)
class Grab:
    """What a driver's ``grab()`` returns: (H, W, 3) uint8 RGB and optional aligned depth."""

    rgb: np.ndarray
    depth: np.ndarray | None = None


class CameraError(RuntimeError):
    """The camera source failed or delivered no frame in time; the message says which."""


class FrameGrabber:
    """Newest-frame holder over a blocking ``grab()``.

    Args:
        name: Camera name (for messages).
        grab: Blocks until the next frame; returns None at the end of a file.
        threaded: Grab in a background thread (live cameras) or in ``read()`` (files, tests).
        pace_s: Threaded only: least time between grabs (plays a file at its frame rate; a
            live device paces itself, use None).
        first_frame_timeout_s: How long ``read()`` waits for the first frame.
        now_fn: Monotonic clock.
    """

    def __init__(
        self,
        name: str,
        grab: Callable[[], Grab | None],
        threaded: bool,
        pace_s: float | None = None,
        first_frame_timeout_s: float = 5.0,
        now_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._grab = grab
        self._threaded = threaded
        self._pace_s = pace_s
        self._timeout_s = first_frame_timeout_s
        self._now = now_fn
        self._cond = threading.Condition()
        self._frame: Frame | None = None
        self._depth: np.ndarray | None = None
        self._seq = 0
        self._ended = False
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def ended(self) -> bool:
        """The source reported its end (a file without looping)."""
        return self._ended

    def start(self) -> None:
        if self._threaded:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"cam-{self.name}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def _store(self, g: Grab) -> None:
        rgb = np.asarray(g.rgb)
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
            raise CameraError(f"camera {self.name}: grab returned {rgb.shape} {rgb.dtype}")
        with self._cond:
            self._seq += 1
            self._frame = Frame(image=rgb, stamp_s=self._now(), seq=self._seq)
            self._depth = g.depth
            self._cond.notify_all()

    def _grab_once(self) -> bool:
        g = self._grab()
        if g is None:
            with self._cond:
                self._ended = True
                self._cond.notify_all()
            return False
        self._store(g)
        return True

    def _run(self) -> None:
        next_s = self._now()
        try:
            while not self._stop.is_set():
                if self._pace_s is not None:
                    delay = next_s - self._now()
                    if delay > 0 and self._stop.wait(delay):
                        break
                    next_s = max(next_s + self._pace_s, self._now() - self._pace_s)
                if not self._grab_once():
                    break
        except BaseException as e:  # reported to the reader, who raises it with context
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def read(self) -> tuple[Frame, np.ndarray | None]:
        """The newest frame and its depth (None without depth).

        Synchronous mode grabs the next frame first (at the end of a file: the last frame
        again, same ``seq``). Threaded mode waits only for the very first frame.

        Raises:
            CameraError: The source failed, or gave no first frame within the timeout.
        """
        if not self._threaded and not self._ended:
            try:
                self._grab_once()
            except CameraError:
                raise
            except Exception as e:
                raise CameraError(f"camera {self.name}: grabbing a frame failed: {e}") from e
        with self._cond:
            if self._error is not None:
                raise CameraError(
                    f"camera {self.name}: the source failed: {self._error!r}"
                ) from self._error
            if self._frame is None:
                self._cond.wait_for(
                    lambda: self._frame is not None or self._error is not None or self._ended,
                    timeout=self._timeout_s,
                )
            if self._error is not None:
                raise CameraError(f"camera {self.name}: the source failed: {self._error!r}")
            if self._frame is None:
                why = "the source ended" if self._ended else f"none within {self._timeout_s} s"
                raise CameraError(f"camera {self.name}: no frame yet ({why})")
            return self._frame, self._depth
