"""Intervention: a person (or a simulated human) takes over from the policy through a teleop.

The OUTERMOST wrapper (policy-facing). At every ``step(policy_action)`` it reads the
:class:`robot_rl.core.protocols.Teleop` once:

- the person is taking over when the reading says so
  (:func:`robot_rl.core.teleop_action.is_taking_over`: the ``intervene`` button, which devices
  add on any motion above their deadzone, or a gripper request) or when its twist exceeds
  ``InterventionConfig.deadzone`` on some axis (for teleops that do not set the button);
- after the last such reading the takeover stays alive for ``hold_steps`` more steps (the hold
  window, default 5 = 0.5 s at 10 Hz), so that a correction made of several strokes is one
  intervention, not many. In the hold the human action is zero motion with the gripper held:
  the robot holds, as it would with a device at rest in the person's hand;
- the human's base-env action (:func:`robot_rl.core.teleop_action.teleop_to_action`; no gripper
  request keeps the last executed gripper command) is mapped into this wrapper's action space
  through the ``inverse_action`` of every action wrapper below, innermost first, at their
  CURRENT state (before stepping: :class:`~robot_rl.wrappers.RelativeFrame` rotates with the
  TCP rotation the step will use). The result is clipped to the action space (a rotated
  base-frame action can leave [-1, 1]) and the CLIPPED action is executed, so the stored action
  is exactly what ran (it then differs from the human's base action by that clipping);
- otherwise the policy's action is executed unchanged.

What happened is kept as a typed record, :attr:`Intervention.last_step`
(:class:`robot_rl.core.intervention.InterventionStep`: executed action, the policy's proposal,
the flag, the onset and the buttons), and per-episode counters, :attr:`Intervention.episode_stats`
(takeovers, intervened steps, rate). Nothing goes through ``info``. The training loop reads both
after every step (:class:`robot_rl.core.intervention.InterventionSource`).

Labels: with ``human_labels`` on, a ``success`` / ``failure`` button ends the episode
(``terminated``; the task's reward is kept; ``info["is_success"]`` / ``info["is_failure"]`` set,
since that is where the loop and evaluation read success). The button is read at the start of
the step, so the label applies after that step's action. Off (default, the twin): the task
decides. ``discard`` and ``reset`` are recorded in ``buttons`` only.

Simulated humans: a teleop that also implements
:class:`robot_rl.core.intervention.StepObserver` is told about every reset and step (the
observation, reward and info), so that it can decide from the task's state; real devices are
never called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core import keys
from robot_rl.core.intervention import InterventionStats, InterventionStep, StepObserver
from robot_rl.core.protocols import Teleop
from robot_rl.core.teleop_action import (
    gripper_hold_after_reset,
    is_taking_over,
    teleop_to_action,
)
from robot_rl.core.teleop_axes import TeleopAxes
from robot_rl.core.types import TeleopState

SUCCESS = "success"
FAILURE = "failure"


@dataclass(frozen=True)
class InterventionConfig:
    """How readings become takeovers."""

    hold_steps: int = 5
    """Steps the takeover stays alive after the last moving reading (0.5 s at 10 Hz); the
    robot holds still during them (zero motion, gripper kept)."""
    deadzone: float = 0.05
    """A reading whose twist exceeds this on any axis (each in [-1, 1]) counts as a takeover even
    without the ``intervene`` button."""
    human_labels: bool = False
    """``success`` / ``failure`` buttons end the episode (on a robot without a reward model);
    off in the twin, where the task decides."""
    initial_gripper_action: float | None = None
    """Base-env gripper action held by a takeover without gripper request before the first
    executed command of an episode (None: the hand as the reset left it, closed on a task that
    starts with the tool grasped, else open; ``core.teleop_action.gripper_hold_after_reset``)."""

    def __post_init__(self) -> None:
        if self.hold_steps < 0:
            raise ValueError(f"hold_steps must be >= 0 (0: no hold window), got {self.hold_steps}")
        if not 0.0 <= self.deadzone < 1.0:
            raise ValueError(f"deadzone {self.deadzone} must be in [0, 1)")
        if (
            self.initial_gripper_action is not None
            and not -1.0 <= self.initial_gripper_action <= 1.0
        ):
            raise ValueError(
                f"initial_gripper_action {self.initial_gripper_action} must be in [-1, 1]"
            )


def _identity(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def base_to_policy_action(env: gym.Env) -> Callable[[np.ndarray], np.ndarray]:
    """A function mapping a base-env action into ``env``'s action space (float64, not clipped).

    Applies the ``inverse_action`` of every action wrapper in ``env``'s stack, innermost first,
    at the wrappers' current state; identity without action wrappers.

    Raises:
        ValueError: A ``gym.ActionWrapper`` in the stack has no ``inverse_action``.
    """
    inverses = []
    e = env
    while isinstance(e, gym.Wrapper):
        inv = getattr(type(e), "inverse_action", None)
        if callable(inv):
            inverses.append(e.inverse_action)
        elif isinstance(e, gym.ActionWrapper):
            raise ValueError(
                f"{type(e).__name__} changes actions but has no inverse_action; human actions "
                "cannot be stored in the policy's action space. Give it an exact inverse."
            )
        e = e.env
    inverses.reverse()  # innermost first

    def to_policy(a_base: np.ndarray) -> np.ndarray:
        a = np.asarray(a_base, dtype=np.float64)
        for inv in inverses:
            a = np.asarray(inv(a), dtype=np.float64)
        return a

    return to_policy


class Intervention(gym.Wrapper):
    """Human takeover through a teleop (see the module docstring). Put it outermost.

    Args:
        env: The wrapped stack; ``env.unwrapped`` acts with the base layout
            ``[dx, dy, dz, (rx, ry, rz,) gripper]`` (4 or 7 dims).
        teleop: The device (already connected by the caller), or a simulated human.
        cfg: Hold window, deadzone, labels.
        axes: For an env we did not write (``--env``): which reading component drives each of
            ``env``'s action dimensions (:class:`robot_rl.core.teleop_axes.TeleopAxes`); the
            human's action is then that mapping, in ``env``'s action space, and the base env's
            layout does not matter. None: the robot_rl base layout (4 or 7 dims).
    """

    def __init__(
        self,
        env: gym.Env,
        teleop: Teleop,
        cfg: InterventionConfig | None = None,
        axes: TeleopAxes | None = None,
    ) -> None:
        super().__init__(env)
        self.cfg = cfg or InterventionConfig()
        space = env.action_space
        base_space = space if axes is not None else env.unwrapped.action_space
        for name, s in (("action", space), ("base env action", base_space)):
            if not isinstance(s, gym.spaces.Box) or len(s.shape) != 1:
                raise ValueError(f"Intervention needs a 1-D Box {name} space, got {s}")
        self.base_action_dim = int(base_space.shape[0])
        self.axes = axes
        if axes is not None and len(axes.tokens) != self.base_action_dim:
            raise ValueError(
                f"teleop axes {axes.spec()} have {len(axes.tokens)} tokens; the env acts with "
                f"{self.base_action_dim} dims"
            )
        if axes is None and self.base_action_dim not in (4, 7):
            raise ValueError(
                f"the base env acts with {self.base_action_dim} dims; Intervention maps teleop "
                "readings onto the 4- or 7-dim robot_rl layout, or give teleop axes (an env "
                "robot_rl did not write)"
            )
        self.teleop = teleop
        self._observer = teleop if isinstance(teleop, StepObserver) else None
        self._to_policy = base_to_policy_action(env) if axes is None else _identity
        self._low = space.low.astype(np.float64)
        self._high = space.high.astype(np.float64)
        self._new_episode_state()

    def _new_episode_state(self) -> None:
        self._hold_left = 0
        self._prev_intervened = False
        initial = self.cfg.initial_gripper_action
        self._gripper_hold = -1.0 if initial is None else initial  # reset() reads the hand
        self._last: InterventionStep | None = None
        self._stats = InterventionStats()

    # -- records -----------------------------------------------------------------------------

    @property
    def last_step(self) -> InterventionStep | None:
        """The last step's record (None right after reset)."""
        return self._last

    @property
    def episode_stats(self) -> InterventionStats:
        """Counters of the current episode (kept after its last step until the next reset)."""
        return self._stats

    def human_action(self, a_base: np.ndarray) -> np.ndarray:
        """A base-env action -> the action this wrapper would execute for it, now (clipped)."""
        a = self._to_policy(np.asarray(a_base, dtype=np.float64))
        return np.clip(a, self._low, self._high).astype(self.action_space.dtype)

    # -- gym API -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._new_episode_state()
        obs, info = self.env.reset(seed=seed, options=options)
        if self.cfg.initial_gripper_action is None:
            self._gripper_hold = (
                gripper_hold_after_reset(self.env) if self.axes is None else self.axes.gripper_open
            )
        if self._observer is not None:
            self._observer.observe_reset(obs, info, seed)
        return obs, info

    def _taking_over(self, reading: TeleopState) -> bool:
        twist = np.asarray(reading.twist, dtype=np.float64)
        return is_taking_over(reading) or bool(np.max(np.abs(twist)) > self.cfg.deadzone)

    def step(self, action: Any):
        proposal = np.array(action, dtype=self.action_space.dtype, copy=True)
        if proposal.shape != self.action_space.shape:
            raise ValueError(
                f"action must have shape {self.action_space.shape}, got {proposal.shape}"
            )
        reading = self.teleop.read()
        moving = self._taking_over(reading)
        if moving:
            self._hold_left = self.cfg.hold_steps
            human = True
        elif self._hold_left > 0:
            self._hold_left -= 1
            human = True
            reading = TeleopState(reading.stamp_s, np.zeros(6), None, reading.buttons)
        else:
            human = False
        if human:
            if self.axes is None:
                a_base = teleop_to_action(reading, self.base_action_dim, self._gripper_hold)
            else:
                a_base = self.axes.to_action(reading, self._gripper_hold)
            executed = self.human_action(a_base)
        else:
            a_base, executed = None, proposal
        obs, reward, terminated, truncated, info = self.env.step(executed)
        self._track_gripper(info, a_base, executed)
        buttons = frozenset(reading.buttons)
        if self.cfg.human_labels and buttons & {SUCCESS, FAILURE}:
            info = dict(info)
            info[keys.INFO_SUCCESS] = SUCCESS in buttons
            info[keys.INFO_FAILURE] = SUCCESS not in buttons
            terminated, truncated = True, False
        onset = human and not self._prev_intervened
        self._prev_intervened = human
        st = self._stats
        self._stats = InterventionStats(
            steps=st.steps + 1,
            interventions=st.interventions + int(onset),
            intervened_steps=st.intervened_steps + int(human),
        )
        self._last = InterventionStep(
            action=np.array(executed, copy=True),
            policy_action=proposal,
            intervened=human,
            onset=onset,
            buttons=buttons,
        )
        if self._observer is not None:
            self._observer.observe_step(obs, float(reward), info)
        return obs, reward, terminated, truncated, info

    def _track_gripper(self, info: dict, a_base: np.ndarray | None, executed: np.ndarray) -> None:
        """Remember the gripper command a takeover without gripper request keeps (with teleop
        axes: the executed action's gripper dimension, whoever chose it)."""
        if self.axes is not None:
            g = self.axes.gripper_index
            if g is not None:
                self._gripper_hold = float(np.clip(executed[g], -1.0, 1.0))
            return
        cmd = info.get(keys.INFO_COMMAND) if isinstance(info, dict) else None
        if cmd is not None and len(cmd) == 8:  # RobotEnv: (7,) target pose + gripper in [0, 1]
            self._gripper_hold = float(np.clip(2.0 * float(cmd[7]) - 1.0, -1.0, 1.0))
        elif a_base is not None:
            self._gripper_hold = float(a_base[-1])
