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

    def start_move(self, pose: np.ndarray, gripper: float) -> None:
        """Start moving smoothly to ``pose`` (7,) and the gripper to ``gripper``; return at once
        (a move that takes seconds must not block: the bridge's node waits for it without its
        lock, so that e-stop, hold, the watchdog and state publishing go on). A backend may
        arrive before returning (the twin teleports). :meth:`hold` ends the move.

        Already safe: inside the box and cone (no per-step limit: the backend moves smoothly).
        """
        ...

    def move_done(self) -> bool:
        """True once the move of the last :meth:`start_move` has arrived (arm and gripper);
        returns at once.

        Raises:
            RuntimeError: The move cannot arrive (e.g. a reflex aborted it, or it did not arrive
                within the backend's time limit).
        """
        ...

    def clear_error(self) -> bool:
        """Recover from an error (e.g. a Franka reflex); True if motion is possible again."""
        ...

    @property
    def error(self) -> str | None:
        """The current backend error, or None when the arm can move."""
        ...

    # Optional: ``telemetry() -> dict`` of JSON values, published in ``status["backend"]``
    # (e.g. the Franka's ``command_success_rate``). Not part of the protocol's required methods.
