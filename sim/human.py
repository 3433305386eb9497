"""A simulated human for tests and benchmarks: the scripted expert watches the policy and takes
over through the teleop path when the policy stops making progress.

:class:`SimulatedHuman` is plain Python. Call :meth:`SimulatedHuman.observe` once after every env
reset (``reward=nan``: no step yet) and once after every env step, with the task's privileged
state (``info["privileged"]``) and the step's reward; it returns the teleop reading for the
NEXT step: a zero reading (no motion, no gripper request, no buttons) while the policy drives,
else the expert's base-env action as a device reading
(:func:`robot_rl.core.teleop_action.action_to_teleop`: twist + gripper + ``intervene``). So the
whole path device reading -> intervention wrapper -> learner is exercised (a ROS node can publish
the same readings as ``teleop/twist`` + ``teleop/joy``).

Rules (:class:`HumanConfig`):

- ``"always"``: the expert drives every step (recording demonstrations through teleop);
- ``"no_progress"``: the best reward of the episode so far must improve by at least
  ``min_progress`` within ``patience_steps`` steps; when it does not, the expert takes over for
  ``takeover_steps`` steps (the episode may end first, e.g. on success), at most
  ``max_interventions`` times per episode. After a takeover the progress record starts afresh,
  so the policy gets ``patience_steps`` again. The stall count runs over every step, including
  an intervention wrapper's hold window after the takeover (the robot holds still then).

A person's stopwatch starts when the robot starts acting: :meth:`SimulatedHuman.observe` with
``acting=False`` (a ROS twin's statuses between the scene's reset and the policy's first command,
while the actor resets, waits for fresh images or for the learner) counts no stall and no watched
step. And a policy earns autonomy (``trust_patience_steps``): the person gives a policy that has
been succeeding on its own more patience, in proportion to its unaided successes over the last
``trust_episodes`` episodes (an episode is unaided when the task succeeded with no takeover).

The experts are state machines (:mod:`sim.experts`); each takeover restarts the expert's phase
machine (``expert.reset``) from the state it finds: reach is stateless; pick_cube re-approaches
the cube (opening the gripper if it holds the cube unlifted, then re-grasping); peg_insert
re-aligns above the hole. Each copes with starting mid-episode; a takeover should be long
enough for the expert to finish (pick_cube ~20 steps, peg_insert ~15).

:class:`SimHumanTeleop` adapts a :class:`SimulatedHuman` to the
:class:`robot_rl.core.protocols.Teleop` Protocol for the direct twin: the intervention wrapper
calls its :class:`robot_rl.core.intervention.StepObserver` hooks after every reset and step, and
``read()`` returns the reading computed from the last of them.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from robot_rl.core import keys
from robot_rl.core.clock import obs_stamp
from robot_rl.core.teleop_action import action_to_teleop
from robot_rl.core.types import TeleopState
from sim.experts.base import Expert

HumanRule = Literal["always", "no_progress"]


@dataclass(frozen=True)
class HumanConfig:
    """When the simulated human takes over (see the module docstring)."""

    rule: HumanRule = "no_progress"
    """``always``: the expert drives every step; ``no_progress``: take over when the policy
    stalls."""
    patience_steps: int = 10
    """Steps without progress before taking over (no_progress)."""
    min_progress: float = 0.01
    """Improvement of the best reward so far that counts as progress (the twin's dense costs
    span [-1, 0))."""
    takeover_steps: int = 20
    """Steps the expert drives per takeover (no_progress)."""
    max_interventions: int = 2
    """Takeovers per episode at most (no_progress); 0 never takes over."""
    press_success: bool = False
    """Press the success button in every reading while the task's success holds, as a person
    marks success where nothing else knows it (a twin setup with ``privileged: false``:
    ``record`` / ``label`` with ``--success-from buttons``)."""
    reaction_steps: int = 0
    """A person's reaction time, control steps: a takeover starts this many steps after the
    stall was seen (the policy keeps driving meanwhile). 0: at once. People react to a
    visual cue in about 0.2-0.3 s: 2-3 steps at 10 Hz."""
    action_noise: float = 0.0
    """Standard deviation of Gaussian noise on each driven action's motion axes (action units,
    [-1, 1]; the gripper is left alone): a hand on a SpaceMouse is not a state machine. 0: the
    expert's action exactly."""
    attention_share: float = 1.0
    """The attention budget: the person drives at most this share of the robot's steps so far
    (over the whole run, not per episode); while over it, a stall goes uncorrected. 1.0: no
    budget. A person supervising an hour of training cannot drive a third of it."""
    trust_patience_steps: int = 0
    """Earned autonomy: extra patience, steps, once the policy succeeded on its own in every one
    of the last ``trust_episodes`` episodes (scaled by the share that did: half of them, half
    of it). A person who has watched a policy succeed lets it try longer before taking over.
    0: the patience never grows."""
    trust_episodes: int = 20
    """The recent episodes whose unaided successes earn the policy trust
    (``trust_patience_steps``)."""

    def __post_init__(self) -> None:
        if self.rule not in ("always", "no_progress"):
            raise ValueError(f"rule must be 'always' or 'no_progress', got {self.rule!r}")
        if self.patience_steps < 1:
            raise ValueError(f"patience_steps must be >= 1, got {self.patience_steps}")
        if not math.isfinite(self.min_progress) or self.min_progress < 0:
            raise ValueError(f"min_progress must be a finite number >= 0, got {self.min_progress}")
        if self.takeover_steps < 1:
            raise ValueError(f"takeover_steps must be >= 1, got {self.takeover_steps}")
        if self.max_interventions < 0:
            raise ValueError(f"max_interventions must be >= 0, got {self.max_interventions}")
        if self.reaction_steps < 0:
            raise ValueError(f"reaction_steps must be >= 0, got {self.reaction_steps}")
        if not (math.isfinite(self.action_noise) and self.action_noise >= 0):
            raise ValueError(f"action_noise must be a finite number >= 0, got {self.action_noise}")
        if not 0.0 <= self.attention_share <= 1.0:
            raise ValueError(f"attention_share must be in [0, 1], got {self.attention_share}")
        if self.trust_patience_steps < 0:
            raise ValueError(f"trust_patience_steps must be >= 0, got {self.trust_patience_steps}")
        if self.trust_episodes < 1:
            raise ValueError(f"trust_episodes must be >= 1, got {self.trust_episodes}")


def zero_reading(stamp_s: float) -> TeleopState:
    """A device at rest: no motion, no gripper request, no buttons."""
    return TeleopState(stamp_s=float(stamp_s), twist=np.zeros(6))


class SimulatedHuman:
    """The scripted expert as a human who watches the policy (see the module docstring).

    Args:
        expert: A scripted expert (``backend.make_expert()``), acting in the base env's space.
        cfg: The takeover rule.
        to_reading: The expert's action -> the device reading that produces it (default:
            :func:`robot_rl.core.teleop_action.action_to_teleop`, the twin's base layout; an env
            robot_rl did not write passes its
            :meth:`robot_rl.core.teleop_axes.TeleopAxes.to_teleop`).
    """

    def __init__(
        self,
        expert: Expert,
        cfg: HumanConfig | None = None,
        to_reading: Callable[[np.ndarray, float], TeleopState] = action_to_teleop,
    ) -> None:
        self.expert = expert
        self.cfg = cfg or HumanConfig()
        self._to_reading = to_reading
        self._rng = np.random.default_rng(0)
        self._driving = False
        self.steps_seen = 0  # steps the person watched, over the run (the attention budget)
        self.steps_driven = 0  # of them, steps the person drove
        self._unaided: deque[bool] = deque(maxlen=self.cfg.trust_episodes)
        self._new_episode()

    def _new_episode(self) -> None:
        self._best = -math.inf
        self._stall = 0
        self._left = 0  # steps of the current takeover still to drive
        self._count = 0  # takeovers this episode
        self._react = -1  # steps until a decided takeover starts (-1: none decided)
        self._watched = 0  # steps watched this episode (the robot acting)
        self._succeeded = False  # the task's success seen this episode

    @property
    def interventions(self) -> int:
        """Takeovers started this episode."""
        return self._count

    @property
    def patience(self) -> int:
        """Steps without progress the person allows now: ``patience_steps``, plus the trust the
        policy earned (``trust_patience_steps`` x its recent unaided success share)."""
        cfg = self.cfg
        if not self._unaided or cfg.trust_patience_steps == 0:
            return cfg.patience_steps
        share = sum(self._unaided) / len(self._unaided)
        return cfg.patience_steps + round(cfg.trust_patience_steps * share)

    @property
    def intervening(self) -> bool:
        """Whether the last reading was the expert driving."""
        return self._driving

    def reset(self, rng: np.random.Generator) -> None:
        """Start an episode (``rng`` seeds the expert's per-takeover randomness)."""
        if self._watched:  # the episode that ends here counts towards trust
            self._unaided.append(self._succeeded and self._count == 0)
        self._rng = rng
        self._new_episode()
        self._driving = False
        self.expert.reset(rng)

    def observe(
        self,
        privileged: Mapping,
        reward: float,
        stamp_s: float,
        success: bool = False,
        acting: bool = True,
    ) -> TeleopState:
        """See the state after a reset (``reward=nan``) or a step; the reading for the next step.

        Args:
            privileged: The task's privileged state (``info["privileged"]``).
            reward: The step's reward (nan right after reset).
            stamp_s: Monotonic stamp of the reading.
            success: The task's success now (pressed as the success button with
                ``press_success``; an unaided success earns trust).
            acting: Whether the robot has begun acting this episode (False: it waits for its
                first command after the reset; the person's stopwatch has not started).
        """
        self._succeeded |= bool(success)
        if not acting and self.cfg.rule != "always" and self._left == 0 and self._react < 0:
            self._driving = False
            reading = zero_reading(stamp_s)
        else:
            reading = self._reading(privileged, reward, stamp_s)
        if self.cfg.press_success and success:
            return dataclasses.replace(reading, buttons=reading.buttons | {"success"})
        return reading

    def _reading(self, privileged: Mapping, reward: float, stamp_s: float) -> TeleopState:
        cfg = self.cfg
        if cfg.rule == "always":
            return self._drive(privileged, stamp_s)
        r = float(reward)
        if math.isfinite(r):
            self.steps_seen += 1
            self._watched += 1
            if r >= self._best + cfg.min_progress:
                self._best, self._stall = r, 0
            else:
                self._stall += 1
        budget = self.steps_driven < cfg.attention_share * self.steps_seen or (
            cfg.attention_share >= 1.0
        )
        stalled = self._stall >= self.patience and self._count < cfg.max_interventions
        if self._left == 0 and self._react < 0 and stalled and budget:
            self._react = cfg.reaction_steps  # decided; the hand gets there in a moment
        if self._left == 0 and self._react > 0:
            self._react -= 1
            self._driving = False
            return zero_reading(stamp_s)
        if self._left > 0 or self._react == 0:
            self._react = -1
            if self._left == 0:  # a takeover begins
                self._count += 1
                self._left = cfg.takeover_steps
                self.expert.reset(self._rng)  # the phase machine starts from what it finds
            self._left -= 1
            if self._left == 0:  # the takeover's last step: the progress record starts afresh
                self._best, self._stall = -math.inf, 0
            return self._drive(privileged, stamp_s)
        self._driving = False
        return zero_reading(stamp_s)

    def _drive(self, privileged: Mapping, stamp_s: float) -> TeleopState:
        self._driving = True
        self.steps_driven += 1
        a = np.asarray(self.expert.act({}, {keys.INFO_PRIVILEGED: privileged}), dtype=np.float64)
        if self.cfg.action_noise > 0:  # the motion axes; the gripper is the last one
            a[:-1] = np.clip(
                a[:-1] + self._rng.normal(0.0, self.cfg.action_noise, a.size - 1), -1, 1
            )
        return self._to_reading(a, stamp_s)


class SimHumanTeleop:
    """A :class:`SimulatedHuman` as a :class:`robot_rl.core.protocols.Teleop` for the direct twin.

    Implements :class:`robot_rl.core.intervention.StepObserver`: the intervention wrapper feeds
    it every reset and step; :meth:`read` returns the reading for the coming step.

    Args:
        human: The simulated human.
        seed: Seeds the human's per-episode generator (with the env's reset seed).
        scene: What the human sees of a step's ``info`` (default: the twin's privileged state,
            refused without it); the expert gets it as ``info["privileged"]``. An env robot_rl
            did not write passes the whole ``info`` (its scripted policy reads the env's own
            observation and info).
    """

    def __init__(
        self,
        human: SimulatedHuman,
        seed: int = 0,
        scene: Callable[[Mapping[str, Any]], Mapping] | None = None,
    ) -> None:
        self.human = human
        self.seed = int(seed)
        self._scene = scene or _privileged
        self._episodes = 0
        self._reading = zero_reading(0.0)

    def connect(self) -> None:
        """Nothing to connect (the twin is in process)."""

    def disconnect(self) -> None:
        """Nothing to disconnect."""

    def read(self) -> TeleopState:
        return self._reading

    def observe_reset(self, obs: Mapping, info: Mapping[str, Any], seed: int | None) -> None:
        key = self._episodes if seed is None else int(seed)
        self._episodes += 1
        self.human.reset(np.random.default_rng((self.seed, key)))
        self._reading = self.human.observe(self._scene(info), math.nan, obs_stamp(obs))

    def observe_step(self, obs: Mapping, reward: float, info: Mapping[str, Any]) -> None:
        # Under a learned reward the human judges progress on the task's own (dense) reward:
        # it stands in for a person watching the scene, not for the reward model.
        seen = info.get(keys.INFO_TASK_REWARD, reward) if isinstance(info, Mapping) else reward
        success = _true_success(info)
        self._reading = self.human.observe(
            self._scene(info), float(seen), obs_stamp(obs), success=success
        )


def _true_success(info: Mapping[str, Any]) -> bool:
    """The task's own success in a step's ``info``, as a person watching the scene sees it
    (under a learned reward: the env's truth, not the model's verdict)."""
    if not isinstance(info, Mapping):
        return False
    return bool(info.get(keys.INFO_TRUE_SUCCESS, info.get(keys.INFO_SUCCESS, False)))


def _privileged(info: Mapping[str, Any]) -> Mapping:
    p = info.get(keys.INFO_PRIVILEGED) if isinstance(info, Mapping) else None
    if not p:
        raise ValueError(
            "the simulated human needs the twin's privileged state in info['privileged']; it "
            "works on the MuJoCo twin only (use a real teleop on a robot)"
        )
    return p
