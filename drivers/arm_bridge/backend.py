"""The :class:`ArmBackend` Protocol: what the bridge core drives (``drivers/CONTRACT.md``).

Implementations: the twin backend (in ``sim/ros_node.py``, over ``sim.robot.SimRobot``) and
the Franka backend (``drivers/franka/``). A backend does no safety of its own beyond what the
hardware does: :class:`drivers.arm_bridge.core.ArmBridge` hands it only commands that passed the
safety layer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from robot_rl.core.types import RobotState


@runtime_checkable
class ArmBackend(Protocol):
    """An arm + gripper driven by absolute TCP target poses in the base frame."""

    def connect(self) -> None:
        """Open the connection (lifecycle ``configure``)."""
        ...

    def disconnect(self) -> None:
        """Close the connection (lifecycle ``cleanup``)."""
        ...

    def read_state(self) -> RobotState:
        """The newest measured state (stamp in the backend's time base)."""
        ...

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        """Track ``target_pose`` (7,) ``[x, y, z, qw, qx, qy, qz]``, gripper closure in [0, 1].

        Already safe: inside the box and cone and within the per-step limit of the measured pose.
        """
        ...

    def hold(self) -> None:
        """Hold the current measured pose (gripper target unchanged)."""
        ...

    def move_to(self, pose: np.ndarray, gripper: float) -> None:
        """Move smoothly to ``pose`` (7,) and the gripper to ``gripper``; blocks until there."""
        ...

    def clear_error(self) -> bool:
        """Recover from an error (e.g. a Franka reflex); True if motion is possible again."""
        ...

    @property
    def error(self) -> str | None:
        """The current backend error, or None when the arm can move."""
        ...
