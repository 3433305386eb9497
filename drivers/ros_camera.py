"""RosCamera: :class:`robot_rl.core.protocols.Camera` over ``/<ns>/<cam>/image_raw``.

The subscription keeps only the newest valid frame: ``rgb8`` (``bgr8`` is converted, a lossless
channel swap) of the configured size, ``data`` of ``height * step`` bytes. Any other frame (another
encoding or size, a short row or buffer: :func:`drivers.ros.convert.msg_to_image`) is dropped,
counted, logged, and never reaches the policy; while frames are being rejected, the stale-frame
error says why ("the last 37 frames on /arm/front/image_raw were rejected: encoding mono8,
expected rgb8 ..."). :meth:`RosCamera.read` returns it as a fresh array with
``seq`` = the number of valid frames received so far, so ``seq`` increases only when a new
message arrived. A frame older than ``max_age_s`` relative to the env clock's ``now_s()`` (same
time base as the stamps), or no frame at all, raises :class:`StaleSensorError`: a frame is never
silently reused past its age limit. Crop and resize stay in the env wrappers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sensor_msgs.msg import Image

from drivers.ros import convert, qos
from drivers.ros_session import Latest, RosSession
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import Frame, StaleSensorError


@dataclass(frozen=True)
class RosCameraConfig:
    """One camera over ROS 2.

    Attributes:
        name: Camera name; topic ``/<namespace>/<name>/image_raw``.
        height: Expected image height, pixels (other sizes are rejected).
        width: Expected image width, pixels.
        namespace: Arm namespace the camera lives under.
        max_age_s: A frame older than this at ``read()`` is stale.
    """

    name: str
    height: int
    width: int
    namespace: str = "arm"
    max_age_s: float = 0.2

    def __post_init__(self) -> None:
        if self.height < 1 or self.width < 1:
            raise ValueError(f"camera {self.name!r}: height and width must be >= 1")
        if self.max_age_s <= 0:
            raise ValueError(f"camera {self.name!r}: max_age_s must be positive")


class RosCamera:
    """The newest frame of one ROS 2 image topic. See the module docstring.

    Args:
        config: Name, size, namespace, age limit.
        now_s: The env clock's ``now_s``.
        session: Shared session (None: a private one, closed on :meth:`disconnect`).
    """

    def __init__(
        self,
        config: RosCameraConfig,
        now_s: Callable[[], float],
        session: RosSession | None = None,
    ) -> None:
        self.config = config
        self._now = now_s
        self._own_session = session is None
        self.session = session or RosSession(config.namespace, node_name=f"{config.name}_reader")
        self._spec = ArraySpec((config.height, config.width, 3), "uint8", 0, 255)
        self._slot: Latest | None = None
        self._sub = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def image_spec(self) -> ArraySpec:
        return self._spec

    def connect(self) -> None:
        """Subscribe to the image topic (frames arrive in the background)."""
        if self._slot is not None:
            return
        size = (self.config.height, self.config.width)

        def decode(msg: Image) -> tuple[np.ndarray, float]:
            return convert.msg_to_image(msg, size)

        self._slot, self._sub = self.session.subscribe(
            f"{self.config.name}/image_raw", Image, qos.IMAGE, decode, kind="frame"
        )
        self.session.synced.append(self._slot)

    def disconnect(self) -> None:
        if self._slot is not None and self._slot in self.session.synced:
            self.session.synced.remove(self._slot)
        if self.session.started:
            self.session.unsubscribe(self._sub)
        self._slot, self._sub = None, None
        if self._own_session:
            self.session.close()

    def rejections(self) -> tuple[int, int, str | None]:
        """Frames rejected so far, rejected since the last valid one, and the last reason."""
        if self._slot is None:
            return 0, 0, None
        with self.session.cond:
            return self._slot.rejected, self._slot.rejected_in_row, self._slot.last_error

    def read(self) -> Frame:
        """The newest frame (a fresh array).

        Raises:
            StaleSensorError: No valid frame yet, or the newest is older than ``max_age_s``.
        """
        if self._slot is None:
            raise RuntimeError(f"camera {self.name!r} is not connected; call connect() first")
        now = self._now()
        with self.session.cond:
            slot = self._slot
            if slot.value is None or slot.stamp_s is None:
                raise StaleSensorError(f"camera {self.name!r}: {slot.describe_missing()}")
            image, stamp, seq = slot.value, slot.stamp_s, slot.count
            why = slot.describe_rejections() or "is the camera node running and streaming?"
        age = now - stamp
        if age > self.config.max_age_s:
            raise StaleSensorError(
                f"camera {self.name!r}: newest valid frame on {slot.topic} is {age:.3f} s old at "
                f"clock time {now:.3f} s (limit max_age_s={self.config.max_age_s}); {why}"
            )
        return Frame(image=np.array(image, dtype=np.uint8, copy=True), stamp_s=stamp, seq=seq)
