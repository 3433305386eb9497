"""assemble (stage 14's two-stage assembly): the pocket and the hole are as tight as they say;
the expert places the bracket and presses the pin from random poses; the pin pressed into a
bracket that is not in its nest is not an assembly; a knocked-over pin fails; hovering and
random actions never succeed."""

import numpy as np
import pytest

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.envs import RobotEnv
from sim.backend import TASKS, make_sim_backend
from sim.config import SimConfig
from sim.tasks.assemble import (
    BRACKET_SIDE_M,
    NEST_CLEARANCE_M,
    PIN_CLEARANCE_M,
    PIN_SIDE_M,
    wrap_quarter,
)
from sim.tasks.base import FAILURE_REWARD

INFO = TASKS["assemble"]


def _env():
    env_cfg = EnvConfig(
        control_rotation=True,
        action_scale_m=INFO.action_scale_m,
        max_episode_steps=INFO.max_episode_steps,
    )
    b = make_sim_backend("assemble", SimConfig(cameras=()), env_cfg)
    return RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg), b


def _gap(m, name: str, axis: int) -> float:
    """Inner gap between the positive and the negative wall of a ring of boxes."""
    hi, lo = m.geom(f"{name}_p{'xy'[axis]}"), m.geom(f"{name}_n{'xy'[axis]}")
    return float((hi.pos[axis] - hi.size[axis]) - (lo.pos[axis] + lo.size[axis]))


def test_the_pocket_and_the_hole_are_as_tight_as_they_say() -> None:
    env, b = _env()
    m = b.task.world.model
    for axis in (0, 1):
        assert _gap(m, "nest", axis) - BRACKET_SIDE_M == pytest.approx(NEST_CLEARANCE_M, abs=1e-9)
        assert _gap(m, "bracket", axis) - PIN_SIDE_M == pytest.approx(PIN_CLEARANCE_M, abs=1e-9)
    env.close()


def _run_expert(env, expert, seed, stop_phase=None):
    obs, info = env.reset(seed=seed)
    expert.reset(np.random.default_rng(seed))
    for _ in range(INFO.max_episode_steps):
        a = expert.act(obs, info)
        if stop_phase is not None and expert.phase == stop_phase:
            return obs, info, False
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    return obs, info, bool(info[keys.INFO_SUCCESS])


def test_the_expert_places_the_bracket_and_presses_the_pin() -> None:
    env, b = _env()
    expert = b.make_expert()
    wins = sum(_run_expert(env, expert, seed)[2] for seed in range(6))
    assert wins >= 5
    env.close()


def test_a_pin_in_a_bracket_outside_its_nest_is_no_assembly() -> None:
    """Skip stage 1: the pin pressed into the bracket where it lies is in, but the bracket is
    not seated, so the task does not succeed."""
    env, b = _env()
    expert = b.make_expert()
    expert.stages[0].phase = "done"  # as if placed: go straight for the pin
    obs, info = env.reset(seed=2)
    expert._i = 0
    deepest = 0.0
    for _ in range(INFO.max_episode_steps):
        obs, _, term, trunc, info = env.step(expert.act(obs, info))
        p = info[keys.INFO_PRIVILEGED]
        deepest = max(deepest, float(p["pin_depth_m"][0]))
        assert not info[keys.INFO_SUCCESS]
        if term or trunc:
            break
    assert deepest >= 0.01, "the pin should have gone into the loose bracket"
    env.close()


def test_a_knocked_over_pin_fails_and_idle_policies_never_succeed() -> None:
    env, b = _env()
    obs, info = env.reset(seed=1)
    pin = np.asarray(info[keys.INFO_PRIVILEGED]["pin_pos"], dtype=np.float64)
    lying = frames.pose(pin * [1, 1, 0] + [0, 0, 0.006], frames.quat_from_rotvec([np.pi / 2, 0, 0]))
    b.task.world.set_free_body_pose("pin", lying)
    _, r, term, _, info = env.step(np.zeros(7, np.float32))
    assert term and r == FAILURE_REWARD
    rng = np.random.default_rng(0)
    for seed, policy in ((0, "hover"), (3, "random")):
        obs, info = env.reset(seed=seed)
        for _ in range(INFO.max_episode_steps):
            a = np.zeros(7) if policy == "hover" else rng.uniform(-1, 1, 7)
            obs, _, term, trunc, info = env.step(a.astype(np.float32))
            assert not info[keys.INFO_SUCCESS], policy
            if term or trunc:
                break
    env.close()


def test_square_parts_wrap_yaw_to_a_quarter_turn() -> None:
    assert wrap_quarter(np.pi / 2) == pytest.approx(0.0, abs=1e-12)
    assert wrap_quarter(np.pi / 4 + 0.1) == pytest.approx(-np.pi / 4 + 0.1)
