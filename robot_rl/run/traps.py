"""The two reward traps of episodic RL, detected from the episodes a run actually sees.

An episode that terminates stops its reward stream. Whether ending it is attractive to the
agent depends on the terminal reward against the value of carrying on, which for a per-step
reward ``c`` is about ``c / (1 - gamma)`` (the discounted sum of ``c`` forever):

- **Bonus + termination on success.** A positive per-step reward (a shaped bonus for reaching
  and lifting) and an episode that ends on success: near success the agent collects ``c > 0``
  per step, worth ``c / (1 - gamma)`` if it never finishes, far more than the one success
  step. It learns to hover just short of success. Seen in the wild: a cube held half-lifted
  forever, Q values growing from 0.5 to 24.
- **Cost + termination on failure.** A negative per-step reward (a cost, e.g. -1 per step with
  ``--reward-offset -1``) and an episode that ends on failure (the object off the table) with a
  terminal reward above ``c / (1 - gamma)``: failing at once is the cheapest way out of the
  cost. It learns to push the object off the table (714 episodes of ~14 steps in 10k steps).

:class:`RewardTrapCheck` is fed every finished episode (the rewards the learner will see, the
reward offset added) and warns once per trap, with what to do. The twin's shaped costs avoid
both by design (0 on success; -100 = -1 / (1 - 0.99) on failure), and so does the sparse 0/1
success reward (``--task-reward sparse``); the check is for other rewards, other envs and
offsets.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

SUCCESS_TRAP = "bonus_with_termination_on_success"
FAILURE_TRAP = "cost_with_termination_on_failure"


@dataclass(frozen=True)
class TrapWarning:
    """One detected trap: its name, the figures that show it, and what to do."""

    trap: str
    env_steps: int
    message: str

    def as_dict(self) -> dict:
        return {"trap": self.trap, "env_steps": self.env_steps, "message": self.message}


class RewardTrapCheck:
    """Watches finished episodes for the two reward traps (module docstring).

    Args:
        gamma: The agent's discount.
        reward_offset: Added to every reward at update time (``TrainConfig.reward_offset``):
            the check judges the rewards the critic learns from.
        near_steps: The per-step reward "near success" is the mean of the last ``near_steps``
            rewards before a success.
    """

    def __init__(self, gamma: float, reward_offset: float = 0.0, near_steps: int = 5) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if near_steps < 1:
            raise ValueError(f"near_steps must be >= 1, got {near_steps}")
        self.gamma, self.offset, self.near_steps = float(gamma), float(reward_offset), near_steps
        self.warnings: list[TrapWarning] = []
        self._sum, self._count = 0.0, 0  # non-final rewards of every episode seen

    def _warned(self, trap: str) -> bool:
        return any(w.trap == trap for w in self.warnings)

    def episode(
        self, rewards: Sequence[float], terminated: bool, success: bool, env_steps: int = 0
    ) -> list[TrapWarning]:
        """Judge one finished episode.

        Args:
            rewards: Its rewards in order, as logged (without the offset).
            terminated: Its last step was terminal (not a time-limit truncation).
            success: It succeeded.
            env_steps: The run's env steps so far (for the message).

        Returns:
            The traps first detected by this episode (each is also logged as a warning).
        """
        r = [float(x) + self.offset for x in rewards if math.isfinite(float(x))]
        if not r:
            return []
        body, final = r[:-1], r[-1]
        self._sum += sum(body)
        self._count += len(body)
        horizon = math.inf if self.gamma == 1.0 else 1.0 / (1.0 - self.gamma)
        new: list[TrapWarning] = []
        if terminated and success and body and not self._warned(SUCCESS_TRAP):
            near = body[-self.near_steps :]
            c = sum(near) / len(near)
            if c > 0 and c * horizon > final:
                new.append(
                    TrapWarning(
                        SUCCESS_TRAP,
                        env_steps,
                        f"reward trap: a positive per-step reward (mean {c:.3g} over the last "
                        f"{len(near)} steps before a success) and episodes that end on success. "
                        f"Never finishing is worth ~{c * horizon:.3g} (c / (1 - gamma), gamma "
                        f"{self.gamma}), the success step {final:.3g}: the agent learns to hover "
                        "short of success. Fix: make the per-step reward <= 0 (e.g. "
                        "--reward-offset -1 on a reward in [0, 1]: a cost that finishing stops), "
                        "or use the sparse success reward (--task-reward sparse: 1 on success, "
                        "0 otherwise).",
                    )
                )
        if terminated and not success and self._count and not self._warned(FAILURE_TRAP):
            c = self._sum / self._count
            if c < 0 and final > c * horizon:
                new.append(
                    TrapWarning(
                        FAILURE_TRAP,
                        env_steps,
                        f"reward trap: a per-step cost (mean {c:.3g}) and episodes that end on "
                        f"failure with a reward of {final:.3g}, above the ~{c * horizon:.3g} of "
                        f"carrying on (c / (1 - gamma), gamma {self.gamma}): failing at once is "
                        "the cheapest way out of the cost, and the agent learns to fail fast. "
                        f"Fix: give failure a terminal reward <= {c * horizon:.3g} (the twin's "
                        "tasks use -100 = -1 / (1 - 0.99)), end failures by truncation instead of "
                        "termination, or use a 0 / 1 success reward without a negative offset "
                        "(--task-reward sparse, --reward-offset 0).",
                    )
                )
        for w in new:
            log.warning("%s", w.message)
        self.warnings.extend(new)
        return new
