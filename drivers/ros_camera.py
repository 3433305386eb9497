"""RosCamera: :class:`robot_rl.core.protocols.Camera` over ``/<ns>/<cam>/image_raw``.

The subscription keeps only the newest valid frame (``rgb8``, the configured size; anything else
is dropped, counted and reported). :meth:`RosCamera.read` returns it as a fresh array with
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
        h, w = self.config.height, self.config.width
        topic = f"{self.config.name}/image_raw"

        def decode(msg: Image) -> tuple[np.ndarray, float]:
            image, stamp = convert.msg_to_image(msg)
            if image.shape[:2] != (h, w):
                raise ValueError(
                    f"frame is {image.shape[0]}x{image.shape[1]} (HxW); this camera is set up for "
                    f"{h}x{w}: fix the camera node or the setup's cameras entry"
                )
            return image, stamp

        self._slot, self._sub = self.session.subscribe(topic, Image, qos.IMAGE, decode)
        self.session.synced.append(self._slot)

    def disconnect(self) -> None:
        if self._slot is not None and self._slot in self.session.synced:
            self.session.synced.remove(self._slot)
        if self.session.started:
            self.session.unsubscribe(self._sub)
        self._slot, self._sub = None, None
        if self._own_session:
            self.session.close()

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
        age = now - stamp
        if age > self.config.max_age_s:
            raise StaleSensorError(
                f"camera {self.name!r}: newest frame on {slot.topic} is {age:.3f} s old at clock "
                f"time {now:.3f} s (limit max_age_s={self.config.max_age_s}); is the camera node "
                "running and streaming?"
            )
        return Frame(image=np.array(image, dtype=np.uint8, copy=True), stamp_s=stamp, seq=seq)
