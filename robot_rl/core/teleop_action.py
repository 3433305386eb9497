"""Teleop readings <-> the base env's action, both ways (pure numpy, no device code).

The base env (:class:`robot_rl.envs.RobotEnv`) acts with float32 in [-1, 1]:
``[dx, dy, dz, rx, ry, rz, gripper]`` (``EnvConfig.control_rotation``) or
``[dx, dy, dz, gripper]``: base-frame deltas scaled by the env's per-step limits and the
gripper closure target ``(a[-1] + 1) / 2``. A :class:`TeleopState` carries a base-frame twist in
[-1, 1] per axis with the same scaling, and a gripper closure target (or ``None``: no change).
So a teleop reading maps onto the base env's action one to one:

- translation ``a[:3] = twist[:3]``; rotation ``a[3:6] = twist[3:6]`` when the env controls
  rotation (otherwise the device's rotation axes are ignored);
- gripper ``a[-1] = 2 g - 1`` for a target ``g``; with no target the gripper keeps the last
  executed command (``gripper_hold``), so releasing the button does not reopen the hand.

:func:`action_to_teleop` is the inverse for a simulated human: the scripted expert's base-env
action becomes the reading a device would have produced (with the ``intervene`` button), so
that the whole device -> teleop -> env path is exercised.

Both the recorder (`robot-rl record`) and the intervention wrapper use these two functions;
nothing else converts between the two.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.core.types import TeleopState

INTERVENE = "intervene"
"""The TeleopState button meaning "the person has taken over"."""


def gripper_hold_after_reset(env: Any) -> float:
    """The base-env gripper action that keeps the hand as the reset left it: closed (+1) where
    the reset closed it (peg_insert starts with the peg grasped, as a real arm handed a tool
    would), else open (-1; also for an env without ``unwrapped.robot_state``).

    The one rule for "no gripper request yet this episode": the recorder and the labeller (a
    teleop reading without gripper target), :class:`robot_rl.wrappers.Intervention` (a takeover
    without one) and :class:`robot_rl.wrappers.GripperDiscretize` (a policy output in the dead
    band). Holding "open" after every reset dropped the peg in the first step of each recorded
    episode."""
    state = getattr(getattr(env, "unwrapped", env), "robot_state", None)
    closure = getattr(state, "gripper_pos", None)
    return 1.0 if closure is not None and float(closure) >= 0.5 else -1.0


def _rotation(action_dim: int) -> bool:
    if action_dim not in (4, 7):
        raise ValueError(
            f"base env actions have 4 ([dx, dy, dz, gripper]) or 7 ([dx, dy, dz, rx, ry, rz, "
            f"gripper]) dims, got {action_dim}"
        )
    return action_dim == 7


def teleop_to_action(state: TeleopState, action_dim: int, gripper_hold: float) -> np.ndarray:
    """One teleop reading -> the base env's action.

    Args:
        state: The reading (twist in the base frame, [-1, 1] per axis).
        action_dim: 4 or 7 (the base env's action layout).
        gripper_hold: The gripper action in [-1, 1] to keep when ``state.gripper`` is None
            (normally the last executed gripper action).

    Returns:
        (action_dim,) float32 in [-1, 1].

    Raises:
        ValueError: A twist that is not (6,) finite numbers, or a bad ``action_dim``.
    """
    rot = _rotation(action_dim)
    twist = np.asarray(state.twist, dtype=np.float64)
    if twist.shape != (6,) or not np.all(np.isfinite(twist)):
        raise ValueError(f"teleop twist must be 6 finite numbers, got {twist!r}")
    a = np.zeros(action_dim, dtype=np.float64)
    a[:3] = twist[:3]
    if rot:
        a[3:6] = twist[3:6]
    a[-1] = gripper_hold if state.gripper is None else 2.0 * float(state.gripper) - 1.0
    return np.clip(a, -1.0, 1.0).astype(np.float32)


def action_to_teleop(
    action: np.ndarray,
    stamp_s: float,
    buttons: frozenset[str] = frozenset({INTERVENE}),
) -> TeleopState:
    """A base env action -> the teleop reading that produces it (simulated human).

    The gripper becomes a closure target (1 closed if ``action[-1] >= 0``, else 0 open), as a
    device's gripper buttons would give; rotation is 0 for a 4-dim action.

    Args:
        action: (4,) or (7,) base env action in [-1, 1].
        stamp_s: Monotonic stamp of the reading.
        buttons: Buttons held with this reading (``intervene`` by default).
    """
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    rot = _rotation(a.shape[0])
    twist = np.zeros(6, dtype=np.float64)
    twist[:3] = a[:3]
    if rot:
        twist[3:6] = a[3:6]
    gripper = 1.0 if a[-1] >= 0.0 else 0.0
    return TeleopState(stamp_s=float(stamp_s), twist=twist, gripper=gripper, buttons=buttons)


def is_taking_over(state: TeleopState) -> bool:
    """True if the reading says the person is driving: ``intervene`` held (devices add it on
    any motion above their deadzone, see ``drivers.teleop.mapping``) or a gripper request."""
    return INTERVENE in state.buttons or state.gripper is not None
