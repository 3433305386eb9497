"""FixedGripper: hold the gripper at one command and drop its dimension from the policy's actions.

For tasks where the gripper never changes (insertion with the part already grasped), as
HIL-SERL does for its insertion tasks: the policy acts in ``[dx, dy, dz, (rx, ry, rz)]`` and
the inner env always receives ``command`` as the gripper value. Two reasons, both measured on
the twin's peg_insert: a policy that may open the gripper drops the peg (a -100 episode) while
it explores, and the entropy SAC spends on a dimension that must stay constant is entropy it
does not spend on the millimetre-scale xy moves the task needs.

Inverse for stored actions (:meth:`FixedGripper.inverse_action`): drop the last dimension. It is
exact on every action the wrapper emits; a human's gripper value (the inner env's last
dimension) is discarded, because the wrapped env holds the gripper whatever anyone asks.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class FixedGripper(gym.ActionWrapper):
    """The policy's actions lack the gripper dimension; the inner env gets ``command`` there.

    Args:
        env: Inner env whose 1-D action's last dimension is the gripper in [-1, 1].
        command: Gripper value sent on every step, in [-1, 1] (``+1``: closed, ``-1``: open).

    Raises:
        ValueError: ``command`` outside [-1, 1] or not finite, or a non 1-D action space with
            fewer than two dimensions.
    """

    def __init__(self, env: gym.Env, command: float = 1.0) -> None:
        super().__init__(env)
        if not np.isfinite(command) or not -1.0 <= command <= 1.0:
            raise ValueError(f"FixedGripper command {command} must be in [-1, 1] (+1 closed)")
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1 or space.shape[0] < 2:
            raise ValueError(
                f"FixedGripper needs a 1-D Box action with a gripper last, got {space}"
            )
        self.command = float(command)
        self.action_space = gym.spaces.Box(
            low=space.low[:-1], high=space.high[:-1], dtype=space.dtype
        )

    def action(self, action: Any) -> np.ndarray:
        """Policy action (no gripper) -> inner-env action with the fixed gripper command."""
        a = np.asarray(action, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise ValueError(
                f"action must have shape {self.action_space.shape} (the gripper is fixed at "
                f"{self.command:+.1f}; do not pass it), got {a.shape}"
            )
        return np.append(a, self.command)

    def inverse_action(self, action: Any) -> np.ndarray:
        """Inner-env action -> policy action: the gripper dimension is dropped."""
        a = np.asarray(action, dtype=np.float64)
        inner = self.env.action_space.shape
        if a.shape != inner:
            raise ValueError(f"inner action must have shape {inner}, got {a.shape}")
        return a[:-1].copy()
