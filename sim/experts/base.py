"""Scripted experts: the protocol and shared helpers.

An expert acts in the BASE env's action space (:class:`robot_rl.envs.RobotEnv`): float32 in
[-1, 1], ``[dx, dy, dz, rx, ry, rz, gripper]`` with ``EnvConfig.control_rotation`` (else
``[dx, dy, dz, gripper]``). Translation is a base-frame delta from the measured TCP pose scaled
by ``action_scale_m``; rotation a base-frame rotation vector scaled by ``action_scale_rad``;
gripper closure target ``(a + 1) / 2``. Being the sim's expert it may read
``info["privileged"]`` (sim truth), so it works whatever the observation wrappers do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from robot_rl.core import frames
from robot_rl.core.config import EnvConfig


@runtime_checkable
class Expert(Protocol):
    """A scripted policy in the base env's action space."""

    def reset(self, rng: np.random.Generator) -> None:
        """Start a new episode."""
        ...

    def act(self, obs: Mapping, info: Mapping) -> np.ndarray:
        """Action (A,) float32 in [-1, 1] for the current step."""
        ...


class ScriptedExpert:
    """Helpers to turn Cartesian goals into base-env actions.

    Args:
        env_cfg: The base env's config (action layout and scales).
        gain: Fraction of the remaining error commanded per step (1: all of it, clipped).
    """

    def __init__(self, env_cfg: EnvConfig, gain: float = 1.0) -> None:
        self.env_cfg = env_cfg
        self.gain = gain

    def action_towards(
        self,
        tcp_pose: np.ndarray,
        target_pos: np.ndarray,
        gripper: float,
        target_quat: np.ndarray | None = None,
    ) -> np.ndarray:
        """Action moving the TCP from ``tcp_pose`` (7,) towards ``target_pos`` (3,) (and
        ``target_quat`` when rotation is controlled), with gripper closure target ``gripper``
        in [0, 1]."""
        cfg = self.env_cfg
        a = np.zeros(cfg.action_dim, dtype=np.float64)
        a[:3] = self.gain * (np.asarray(target_pos) - tcp_pose[:3]) / cfg.action_scale_m
        if cfg.control_rotation and target_quat is not None:
            rot = frames.quat_error(np.asarray(target_quat), tcp_pose[3:7])
            a[3:6] = self.gain * rot / cfg.action_scale_rad
        # Keep the direction when clipping translation (a straight-line approach).
        n = float(np.max(np.abs(a[:3])))
        if n > 1.0:
            a[:3] /= n
        a[-1] = 2.0 * float(gripper) - 1.0
        return np.clip(a, -1.0, 1.0).astype(np.float32)
