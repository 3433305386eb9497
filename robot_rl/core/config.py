"""Typed, frozen configs shared by every backend. Parsed from the command line by tyro in the
CLI; validated in ``__post_init__`` with messages that say what to change (STYLE.md #2).

Backend-specific configs live with their backend (``sim.config.SimConfig``); the CLI composes
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.core import keys


@dataclass(frozen=True)
class EnvConfig:
    """How :class:`robot_rl.envs.RobotEnv` turns actions into commands and readings into
    observations.

    Attributes:
        control_hz: Policy/control rate; one ``env.step`` is one control period.
        max_episode_steps: Episode length limit; reaching it sets ``truncated``.
        state_parts: Named state parts in the observation (see ``robot_rl.core.keys``).
        control_rotation: If True the action is ``[dx, dy, dz, rx, ry, rz, gripper]`` (7);
            if False it is ``[dx, dy, dz, gripper]`` (4) and the TCP keeps the episode's start
            orientation.
        action_scale_m: TCP translation per step for an action of 1.0, metres (base frame).
        action_scale_rad: TCP rotation per step for an action of 1.0, radians (rotation vector).
        max_state_age_s: A robot state older than this at observation time is an error.
        max_image_age_s: A camera frame older than this at observation time is an error.
        terminate_on_success: End the episode (``terminated``) when the task reports success.
        quat_hemisphere_ref: (w, x, y, z). The observed ``tcp_pose`` quaternion is sign-flipped
            into this reference's hemisphere (``dot(q, ref) >= 0``). ``q`` and ``-q`` are the same
            rotation; the ``w >= 0`` canonical form jumps sign for a TCP pointing straight down
            (w near 0), which a policy would see as a discontinuity. Default: pointing down.
    """

    control_hz: float = 10.0
    max_episode_steps: int = 100
    state_parts: tuple[str, ...] = keys.DEFAULT_STATE_PARTS
    control_rotation: bool = True
    action_scale_m: float = 0.02
    action_scale_rad: float = 0.1
    max_state_age_s: float = 0.2
    max_image_age_s: float = 0.2
    terminate_on_success: bool = True
    quat_hemisphere_ref: tuple[float, float, float, float] = (0.0, 1.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        if self.control_hz <= 0:
            raise ValueError(f"control_hz must be positive, got {self.control_hz}")
        if self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {self.max_episode_steps}")
        unknown = [p for p in self.state_parts if p not in keys.STATE_PARTS]
        if unknown or not self.state_parts:
            raise ValueError(
                f"state_parts {self.state_parts}: unknown {unknown}; choose a non-empty subset "
                f"of {keys.STATE_PARTS}"
            )
        if len(set(self.state_parts)) != len(self.state_parts):
            raise ValueError(f"state_parts has duplicates: {self.state_parts}")
        if self.action_scale_m <= 0 or self.action_scale_rad <= 0:
            raise ValueError("action_scale_m and action_scale_rad must be positive")
        if self.max_state_age_s <= 0 or self.max_image_age_s <= 0:
            raise ValueError("max_state_age_s and max_image_age_s must be positive")

    @property
    def control_dt_s(self) -> float:
        """Control period in seconds."""
        return 1.0 / self.control_hz

    @property
    def action_dim(self) -> int:
        """7 with rotation control, 4 without."""
        return 7 if self.control_rotation else 4
