"""GripperDiscretize: the last action dimension becomes a close / open / keep command.

HIL-SERL style: the policy's gripper output ``g`` (in [-1, 1]) is read as

* ``g > threshold``: close (the inner env receives ``+1``),
* ``g < -threshold``: open (``-1``),
* otherwise: keep the previous command (after a reset: the hand as the reset left it, closed
  on a task that starts with the tool grasped, else open).

So the inner env only ever sees ``-1`` or ``+1`` in the gripper dimension; the other
dimensions pass through unchanged.

Inverse for stored actions (:meth:`GripperDiscretize.inverse_action`): an inner-env action
(e.g. a human's) maps to ``+1`` if its gripper value is above ``threshold``, ``-1`` if below
``-threshold``, and ``0`` (keep) otherwise. This is an exact right inverse on the commands the
wrapper emits (``action(inverse_action(b)) == b`` whenever ``b[-1]`` is ``+1`` or ``-1``),
independent of the previous command. A continuous human value inside the dead band has no
exact counterpart (the inner env would have moved the fingers half way); it is recorded as
"keep", which is what the policy can actually do.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core.teleop_action import gripper_hold_after_reset

CLOSE = 1.0
OPEN = -1.0


class GripperDiscretize(gym.Wrapper):
    """Close / open / keep gripper commands from a continuous last action dimension.

    Args:
        env: Inner env whose last action dimension is the gripper in [-1, 1].
        threshold: Dead band half-width in (0, 1).
        initial_command: Command kept after reset until the policy decides (``-1`` open,
            ``+1`` closed; None: the hand as the reset left it, read from the base env's
            ``robot_state``, open where there is none:
            ``core.teleop_action.gripper_hold_after_reset``).
    """

    def __init__(
        self, env: gym.Env, threshold: float = 0.5, initial_command: float | None = None
    ) -> None:
        super().__init__(env)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold {threshold} must be in (0, 1); 0.5 is a common choice")
        if initial_command not in (OPEN, CLOSE, None):
            raise ValueError(
                f"initial_command must be {OPEN} (open), {CLOSE} (closed) or None (as reset)"
            )
        if len(env.action_space.shape) != 1:
            raise ValueError(f"expected a 1-D action space, got {env.action_space.shape}")
        self.threshold = float(threshold)
        self.initial_command = None if initial_command is None else float(initial_command)
        self._command = OPEN if initial_command is None else self.initial_command

    @property
    def command(self) -> float:
        """The gripper command currently held (+1 closed, -1 open)."""
        return self._command

    def action(self, action: Any) -> np.ndarray:
        """Policy action -> inner-env action given the current held command (no side effect)."""
        a = np.array(action, dtype=np.float64, copy=True)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {a.shape}")
        g = a[-1]
        if g > self.threshold:
            a[-1] = CLOSE
        elif g < -self.threshold:
            a[-1] = OPEN
        elif np.isfinite(g):
            a[-1] = self._command
        # NaN/inf stays: the inner env refuses it and holds the robot.
        return a

    def inverse_action(self, action: Any) -> np.ndarray:
        """Inner-env action -> policy action (see the module docstring for exactness)."""
        a = np.array(action, dtype=np.float64, copy=True)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {a.shape}")
        g = a[-1]
        a[-1] = CLOSE if g > self.threshold else OPEN if g < -self.threshold else 0.0
        return a

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        result = self.env.reset(seed=seed, options=options)
        self._command = (
            gripper_hold_after_reset(self.env)
            if self.initial_command is None
            else self.initial_command
        )
        return result

    def step(self, action: Any):
        a = self.action(action)
        result = self.env.step(a)
        if np.isfinite(a[-1]):
            self._command = float(a[-1])
        return result
