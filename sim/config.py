"""Configs of the MuJoCo twin (physics rate, cameras, rendering, domain randomisation)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_ARM = "fr3"
"""The twin's arm kind when none is named (a key of :data:`sim.twin_arms.TWIN_ARMS`): the
7-DoF FR3-class arm, the kind the twin's tasks are written for."""


def check_action_delay_s(value: float) -> float:
    """``value`` as a float if it is a valid action delay (finite, >= 0 s), else ValueError.
    Shared by :class:`SimConfig` and :class:`sim.robot.SimRobot` (both public entry points)."""
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"action_delay_s must be >= 0 seconds, got {value}")
    return float(value)


@dataclass(frozen=True)
class RandomizationConfig:
    """Domain randomisation hooks; each range is sampled from the episode's Generator at reset.

    Attributes:
        object_pose: Randomise object start poses within the task's ranges (off: nominal pose).
        friction_scale: (low, high) multiplicative range for object/finger sliding friction;
            (1, 1) disables.
        light_jitter: Max absolute change of the head/scene light diffuse intensity (0 disables).
        color_jitter: Max absolute change per RGB channel of object/table colours (0 disables).
        camera_pos_jitter_m: Max camera position jitter per axis, metres (0 disables).
        camera_rot_jitter_rad: Max camera rotation jitter (rotation-vector norm), rad.
    """

    object_pose: bool = True
    friction_scale: tuple[float, float] = (1.0, 1.0)
    light_jitter: float = 0.0
    color_jitter: float = 0.0
    camera_pos_jitter_m: float = 0.0
    camera_rot_jitter_rad: float = 0.0

    def __post_init__(self) -> None:
        lo, hi = self.friction_scale
        if not 0 < lo <= hi:
            raise ValueError(f"friction_scale {self.friction_scale} must satisfy 0 < low <= high")
        jitters = ("light_jitter", "color_jitter", "camera_pos_jitter_m", "camera_rot_jitter_rad")
        for name in jitters:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


@dataclass(frozen=True)
class SimConfig:
    """The twin's physics and sensors.

    Attributes:
        sim_hz: Physics and impedance-controller rate; ``sim_hz / control_hz`` must be whole.
        cameras: Cameras to render into observations (subset of ``("front", "wrist")``);
            empty for state-only observations.
        image_height: Rendered image height, pixels.
        image_width: Rendered image width, pixels.
        randomization: Domain randomisation settings.
        action_delay_s: Each arm command takes effect this long after it was sent, seconds
            (below one control period; 0: at once). A real arm acts on an observation that
            is older than the arm when the action lands; this gives the direct twin that
            latency (:class:`sim.robot.SimRobot`).
        arm: The arm kind of the twin (a key of :data:`sim.twin_arms.TWIN_ARMS`: ``fr3``, the
            7-DoF FR3-class arm under impedance control; ``ur5e``, the 6-DoF UR5e-class arm
            under joint position control with IK at the bridge rate).
    """

    sim_hz: float = 500.0
    cameras: tuple[str, ...] = ("front", "wrist")
    image_height: int = 128
    image_width: int = 128
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    action_delay_s: float = 0.0
    arm: str = DEFAULT_ARM

    def __post_init__(self) -> None:
        check_action_delay_s(self.action_delay_s)
        from sim.twin_arms import TWIN_ARMS  # here: twin_arms builds on the model modules

        if self.arm not in TWIN_ARMS:
            raise ValueError(f"arm {self.arm!r}: the twin has {sorted(TWIN_ARMS)}")
        if not 100 <= self.sim_hz <= 2000:
            raise ValueError(f"sim_hz {self.sim_hz} outside [100, 2000]; 500 is the default")
        bad = [c for c in self.cameras if c not in ("front", "wrist")]
        if bad or len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras {self.cameras}: choose unique names from ('front', 'wrist')")
        if not (16 <= self.image_height <= 1024 and 16 <= self.image_width <= 1024):
            raise ValueError("image_height and image_width must be in [16, 1024]")
