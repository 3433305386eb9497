"""teleop reading <-> base env action (robot_rl.core.teleop_action)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.core.teleop_action import (
    INTERVENE,
    action_to_teleop,
    is_taking_over,
    teleop_to_action,
)
from robot_rl.core.types import TeleopState


def _state(twist, gripper=None, buttons=frozenset()):
    return TeleopState(
        stamp_s=1.0, twist=np.asarray(twist, float), gripper=gripper, buttons=buttons
    )


@pytest.mark.parametrize("dim", [4, 7])
def test_round_trip_from_action(dim: int) -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.uniform(-1, 1, dim).astype(np.float32)
        a[-1] = rng.choice([-1.0, 1.0])  # a device sends open/close, not half-closed
        s = action_to_teleop(a, 2.0)
        assert INTERVENE in s.buttons and is_taking_over(s)
        back = teleop_to_action(s, dim, gripper_hold=0.0)
        np.testing.assert_allclose(back, a, atol=1e-6)


def test_rotation_is_dropped_for_four_dim_actions() -> None:
    s = _state([0.1, -0.2, 0.3, 0.9, 0.9, 0.9], gripper=1.0)
    np.testing.assert_allclose(teleop_to_action(s, 4, 0.0), [0.1, -0.2, 0.3, 1.0], atol=1e-7)
    np.testing.assert_allclose(
        teleop_to_action(s, 7, 0.0), [0.1, -0.2, 0.3, 0.9, 0.9, 0.9, 1.0], atol=1e-7
    )


def test_no_gripper_request_keeps_the_last_command() -> None:
    s = _state([0, 0, 0, 0, 0, 0])
    assert teleop_to_action(s, 4, gripper_hold=0.7)[-1] == pytest.approx(0.7)
    assert not is_taking_over(s)
    assert is_taking_over(_state([0] * 6, gripper=0.0))


def test_bad_input_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="6 finite"):
        teleop_to_action(_state([np.nan, 0, 0, 0, 0, 0]), 4, 0.0)
    with pytest.raises(ValueError, match="4 .* or 7"):
        teleop_to_action(_state([0] * 6), 5, 0.0)
    # Out-of-range twists are clipped to the action box.
    assert teleop_to_action(_state([5, -5, 0, 0, 0, 0]), 4, 0.0)[:2].tolist() == [1.0, -1.0]
