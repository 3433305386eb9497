"""Teleop readings <-> the actions of an env we did not write (pure numpy, no device code).

A twin env acts in robot_rl's own layout, ``[dx, dy, dz, (rx, ry, rz,) gripper]``, onto which a
teleop reading maps one to one (:mod:`robot_rl.core.teleop_action`). An env from elsewhere
(``--env``) acts however its author chose: a 2-D point mass, Fetch's ``[dx, dy, dz, gripper]``,
a Meta-World arm's ``[dx, dy, dz, grip]``. :class:`TeleopAxes` says which device axis drives
each of its action dimensions, in the learner's [-1, 1] action (the env's Box bounds mapped
to [-1, 1], :class:`robot_rl.wrappers.foreign_env.ForeignEnv`):

- one token per action dimension, comma-separated: ``x``, ``y``, ``z`` (translation), ``rx``,
  ``ry``, ``rz`` (rotation) of the reading's twist, each optionally negated (``-y``);
  ``gripper`` (a closure target ``g`` becomes ``2 g - 1``; no request keeps the last command,
  as on the twin) or ``-gripper`` (the env closes at -1); ``0`` (the dimension stays 0);
- the default for common sizes: 2 ``x,y``; 3 ``x,y,z``; 4 ``x,y,z,gripper``; 6
  ``x,y,z,rx,ry,rz``; 7 ``x,y,z,rx,ry,rz,gripper``; any other size needs the flag.

:meth:`TeleopAxes.to_action` maps a reading to an action, :meth:`TeleopAxes.to_teleop` an
action back to the reading that produces it (a scripted policy acting as a simulated human).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.core.teleop_action import INTERVENE
from robot_rl.core.types import TeleopState

TWIST_AXES = ("x", "y", "z", "rx", "ry", "rz")
"""The reading's twist components, in order."""
GRIPPER = "gripper"
ZERO = "0"

DEFAULT_AXES: dict[int, tuple[str, ...]] = {
    2: ("x", "y"),
    3: ("x", "y", "z"),
    4: ("x", "y", "z", GRIPPER),
    6: TWIST_AXES,
    7: (*TWIST_AXES, GRIPPER),
}
"""The mapping for an action of each size when none is given."""


def _check_token(token: str) -> str:
    name = token.removeprefix("-")
    if name not in (*TWIST_AXES, GRIPPER, ZERO) or token == "-0":
        raise ValueError(
            f"teleop axis {token!r}: use one of {', '.join(TWIST_AXES)}, gripper (each may be "
            "negated, e.g. -y) or 0"
        )
    return token


@dataclass(frozen=True)
class TeleopAxes:
    """Which reading component drives each action dimension (see the module docstring)."""

    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError("teleop axes: give one token per action dimension")
        for t in self.tokens:
            _check_token(t)
        named = [t.removeprefix("-") for t in self.tokens if t != ZERO]
        twice = sorted({n for n in named if named.count(n) > 1})
        if twice:
            raise ValueError(f"teleop axes {','.join(self.tokens)}: {twice} used twice")

    @classmethod
    def parse(cls, spec: str | tuple[str, ...] | None, action_dim: int) -> TeleopAxes:
        """The axes for ``spec`` (``"x,y,z,gripper"`` or tokens; None: the default for
        ``action_dim``), checked against ``action_dim``.

        Raises:
            ValueError: A bad token, a size that is not ``action_dim``, or no default for it.
        """
        if spec is None:
            if action_dim not in DEFAULT_AXES:
                raise ValueError(
                    f"the env acts with {action_dim} dims and there is no default teleop "
                    "mapping for that size: give --teleop-axes, one token per action dimension "
                    "(x, y, z, rx, ry, rz, gripper, each may be negated, or 0), e.g. "
                    f"{','.join((['x', 'y', 'z', 'gripper'] + ['0'] * action_dim)[:action_dim])}"
                )
            return cls(DEFAULT_AXES[action_dim])
        tokens = tuple(
            t.strip()
            for part in ((spec,) if isinstance(spec, str) else spec)
            for t in part.split(",")
            if t.strip()
        )
        axes = cls(tokens)
        if len(tokens) != action_dim:
            raise ValueError(
                f"--teleop-axes {','.join(tokens)} has {len(tokens)} tokens; the env acts with "
                f"{action_dim} dims: give one per dimension"
            )
        return axes

    @property
    def gripper_index(self) -> int | None:
        """The action dimension the gripper drives (None: no gripper)."""
        for i, t in enumerate(self.tokens):
            if t.removeprefix("-") == GRIPPER:
                return i
        return None

    @property
    def gripper_open(self) -> float:
        """The gripper dimension's value that opens the hand (-1; +1 for ``-gripper``): what a
        takeover keeps before any gripper command of the episode."""
        g = self.gripper_index
        return 1.0 if g is not None and self.tokens[g].startswith("-") else -1.0

    def to_action(self, state: TeleopState, gripper_hold: float) -> np.ndarray:
        """One reading -> the learner's action, float32 in [-1, 1].

        Args:
            state: The reading (twist in [-1, 1] per axis, gripper target or None).
            gripper_hold: The gripper action dimension's value in [-1, 1] to keep when
                ``state.gripper`` is None (the last executed one).

        Raises:
            ValueError: A twist that is not (6,) finite numbers.
        """
        twist = np.asarray(state.twist, dtype=np.float64)
        if twist.shape != (6,) or not np.all(np.isfinite(twist)):
            raise ValueError(f"teleop twist must be 6 finite numbers, got {twist!r}")
        a = np.zeros(len(self.tokens), dtype=np.float64)
        for i, t in enumerate(self.tokens):
            name, sign = t.removeprefix("-"), -1.0 if t.startswith("-") else 1.0
            if name == GRIPPER:
                if state.gripper is None:
                    a[i] = gripper_hold
                else:
                    a[i] = sign * (2.0 * float(state.gripper) - 1.0)
            elif name != ZERO:
                a[i] = sign * twist[TWIST_AXES.index(name)]
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    def to_teleop(
        self,
        action: np.ndarray,
        stamp_s: float,
        buttons: frozenset[str] = frozenset({INTERVENE}),
    ) -> TeleopState:
        """A learner action -> the reading that produces it (a simulated human at a device):
        the gripper becomes closed (1) or open (0) as a device's buttons give; dimensions mapped
        to ``0`` are lost.

        Raises:
            ValueError: ``action`` is not one value per token.
        """
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
        if a.shape != (len(self.tokens),):
            raise ValueError(f"action must have {len(self.tokens)} values, got {a.shape}")
        twist = np.zeros(6, dtype=np.float64)
        gripper = None
        for i, t in enumerate(self.tokens):
            name, sign = t.removeprefix("-"), -1.0 if t.startswith("-") else 1.0
            if name == GRIPPER:
                gripper = 1.0 if sign * a[i] >= 0.0 else 0.0
            elif name != ZERO:
                twist[TWIST_AXES.index(name)] = sign * a[i]
        return TeleopState(stamp_s=float(stamp_s), twist=twist, gripper=gripper, buttons=buttons)

    def spec(self) -> str:
        """The ``--teleop-axes`` value of this mapping."""
        return ",".join(self.tokens)
