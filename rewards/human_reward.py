"""HumanReward: a person's teleop button as a :class:`RewardModel`.

HIL-SERL-style manual success: the operator holds (or taps) a button on the teleop device when
the task is done. The model reads the device when asked, so it judges the scene *now*; pass
batches of one frame, as the reward wrapper does. Use it with the success detector at
``k = n = 1`` (one press ends the episode), or through ``SuccessDetector.update(human=...)``
to override a classifier.

Its reward is the binary cost of the other models: 0 while the button is down, -1 otherwise.
"""

from __future__ import annotations

import numpy as np

from robot_rl.core.protocols import RewardQuery, RewardResult, Teleop

SUCCESS_BUTTON = "success"
"""Default button name (the teleop drivers' and ``robot-rl label``'s success button)."""


class HumanReward:
    """Success while the teleop's ``button`` is down.

    Args:
        teleop: A connected teleop device (SpaceMouse, gamepad, keyboard, recorded events).
        button: Button name that means "success".
    """

    def __init__(self, teleop: Teleop, button: str = SUCCESS_BUTTON) -> None:
        if not button:
            raise ValueError("button must name a teleop button, e.g. 'success'")
        self._teleop = teleop
        self._button = button

    @property
    def model_id(self) -> str:
        return f"human/{self._button}"

    @property
    def model_version(self) -> str:
        return "1"

    def predict(self, query: RewardQuery) -> RewardResult:
        """1.0 for every row while the button is held, else 0.0 (one reading per query)."""
        batch = {len(np.asarray(v)) for v in query.images.values()} or {1}
        if len(batch) > 1:
            raise ValueError(f"query rows disagree across cameras: sizes {sorted(batch)}")
        held = self._button in self._teleop.read().buttons
        prob = np.full(batch.pop(), 1.0 if held else 0.0, np.float32)
        return RewardResult(prob, prob - 1.0, self.model_id, self.model_version)
