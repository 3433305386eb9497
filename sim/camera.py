"""SimCamera: a MuJoCo camera behind :class:`robot_rl.core.protocols.Camera`.

Renders at ``read()`` time (on the world's render thread, :mod:`sim.gl`) with a renderer
shared per image size (shadows, reflections and anti-aliasing off). A frame is rendered only
when the world changed since the last render (``SimWorld.step_count``); otherwise the same
frame (same ``seq``) is returned, as a real camera with nothing new would. Every read returns
a fresh array.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import Frame
from sim.world import SimWorld


class SimCamera:
    """One named camera of the twin (``"front"`` or ``"wrist"``).

    Args:
        world: The world to render.
        name: MJCF camera name.
        height: Image height, pixels.
        width: Image width, pixels.
    """

    def __init__(self, world: SimWorld, name: str, height: int, width: int) -> None:
        world.model.camera(name)  # raises KeyError on an unknown camera
        self.world = world
        self._name = name
        self._spec = ArraySpec((height, width, 3), "uint8", 0, 255)
        self._seq = 0
        self._last: Frame | None = None
        self._last_version = -1
        self._connected = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def image_spec(self) -> ArraySpec:
        return self._spec

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def read(self) -> Frame:
        """The newest frame; a new render (and ``seq``) only if the world changed."""
        if not self._connected:
            raise RuntimeError(f"camera {self._name!r} is not connected; call connect() first")
        w = self.world
        if self._last is None or self._last_version != w.step_count:
            h, wd = self._spec.shape[:2]
            image = w.render(self._name, h, wd)  # a new array per call
            self._seq += 1
            self._last = Frame(image=image, stamp_s=float(w.data.time), seq=self._seq)
            self._last_version = w.step_count
        last = self._last
        return Frame(image=np.array(last.image, copy=True), stamp_s=last.stamp_s, seq=last.seq)
