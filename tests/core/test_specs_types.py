"""Specs, the checker, and the typed values' own validation."""

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.core.config import EnvConfig
from robot_rl.core.specs import ArraySpec, SpecError, check_array, check_tree, from_space, to_space
from robot_rl.core.types import Transition

SPEC = {
    "state": {"tcp_pose": ArraySpec((7,), "float32")},
    "img": ArraySpec((4, 4, 3), "uint8", 0, 255),
}


def good():
    return {"state": {"tcp_pose": np.zeros(7, np.float32)}, "img": np.zeros((4, 4, 3), np.uint8)}


def test_check_tree_accepts_conforming_value():
    check_tree(good(), SPEC)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda o: o["state"].update(tcp_pose=np.zeros(6, np.float32)), "shape"),
        (lambda o: o["state"].update(tcp_pose=np.zeros(7, np.float64)), "dtype"),
        (lambda o: o["state"].update(tcp_pose=np.full(7, np.nan, np.float32)), "NaN"),
        (lambda o: o.pop("img"), "missing"),
        (lambda o: o.update(extra=np.zeros(1)), "unexpected"),
        (lambda o: o.update(img=[[0]]), "numpy array"),
    ],
)
def test_check_tree_names_the_problem(mutate, match):
    o = good()
    mutate(o)
    with pytest.raises(SpecError, match=match):
        check_tree(o, SPEC)


def test_bounds_checked():
    with pytest.raises(SpecError, match="above high"):
        check_array(np.full(3, 2.0, np.float32), ArraySpec((3,), "float32", -1, 1), "action")


def test_space_round_trip():
    space = to_space(SPEC)
    assert isinstance(space, gym.spaces.Dict)
    assert space["img"].dtype == np.uint8
    assert space.contains(good())
    back = from_space(space)
    assert back["img"] == ArraySpec((4, 4, 3), "uint8", 0, 255)


def test_transition_refuses_inconsistent_flags():
    a = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="intervened"):
        Transition({}, a + 1, a, 0.0, {}, False, False, False, 0, 0.0, 0.1)
    with pytest.raises(ValueError, match="same shape"):
        Transition({}, np.zeros(3), a, 0.0, {}, False, False, True, 0, 0.0, 0.1)
    t = Transition({}, a + 1, a, 0.0, {}, False, False, True, 3, 0.0, 0.1)
    assert t.intervened and t.policy_version == 3


def test_env_config_validation_says_what_to_change():
    with pytest.raises(ValueError, match="choose a non-empty subset"):
        EnvConfig(state_parts=("tcp_pose", "cube_pos"))
    assert EnvConfig(control_rotation=False).action_dim == 4
