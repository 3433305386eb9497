"""The Intervention wrapper on the MuJoCo twin: human actions stored in the policy's action
space (round trip through GripperDiscretize and RelativeFrame), flag, proposal, counters, hold
window, labels and refusals.

The teleop here is a replay device (a list of readings played back one per ``read()``), the
same kind of Teleop as a recorded event file; it stands in for a person.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.teleop_action import INTERVENE, teleop_to_action
from robot_rl.core.types import TeleopState
from robot_rl.envs import RobotEnv
from robot_rl.wrappers import (
    FlattenState,
    GripperDiscretize,
    Intervention,
    InterventionConfig,
    ObjectState,
    RelativeFrame,
    TimeLimit,
)
from sim.backend import make_sim_backend
from sim.config import SimConfig


class ReplayTeleop:
    """Plays back readings, one per read(); a zero reading once they run out."""

    def __init__(self, readings: Sequence[TeleopState | None] = ()) -> None:
        self.readings = list(readings)
        self.reads = 0

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read(self) -> TeleopState:
        r = self.readings[self.reads] if self.reads < len(self.readings) else None
        self.reads += 1
        return r if r is not None else TeleopState(stamp_s=0.0, twist=np.zeros(6))


class BaseActionRecorder(gym.Wrapper):
    """Records every action the base env receives (sits right above RobotEnv)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.actions: list[np.ndarray] = []

    def step(self, action):
        self.actions.append(np.asarray(action, dtype=np.float64).copy())
        return self.env.step(action)


def _chain(task: str, control_rotation: bool, teleop, cfg=None, max_steps: int = 60):
    """RobotEnv -> recorder -> ObjectState -> GripperDiscretize -> RelativeFrame -> FlattenState
    -> TimeLimit -> Intervention, as the factory stacks them."""
    env_cfg = EnvConfig(max_episode_steps=200, control_rotation=control_rotation)
    b = make_sim_backend(task, SimConfig(cameras=()), env_cfg)
    base = RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg)
    rec = BaseActionRecorder(base)
    spec = b.task.privileged_spec
    env = ObjectState(rec, {"cube_pos": spec["cube_pos"]}) if task == "pick_cube" else rec
    env = TimeLimit(FlattenState(RelativeFrame(GripperDiscretize(env))), max_steps)
    return Intervention(env, teleop, cfg), rec


def _reading(twist, gripper=None, buttons=frozenset({INTERVENE})) -> TeleopState:
    tw = np.asarray(twist, float)
    return TeleopState(stamp_s=0.0, twist=tw, gripper=gripper, buttons=buttons)


def _random_readings(rng, n: int, dim: int, unit_ball: bool) -> list[TeleopState]:
    out = []
    for _ in range(n):
        tw = rng.uniform(-1, 1, 6)
        if unit_ball:  # |v| <= 1 and |w| <= 1: any rotation of it stays in [-1, 1]^3
            tw[:3] /= max(1.0, np.linalg.norm(tw[:3]))
            tw[3:] /= max(1.0, np.linalg.norm(tw[3:]))
        if dim == 4:
            tw[3:] = 0.0
        out.append(_reading(tw, gripper=float(rng.choice([0.0, 1.0]))))
    return out


@pytest.mark.parametrize("control_rotation", [True, False])
def test_human_action_is_stored_in_the_policy_frame_and_replays_exactly(control_rotation):
    """Human readings -> stored policy actions; replaying the stored actions as a policy (no
    human) from the same reset executes the same base actions, step for step."""
    dim = 7 if control_rotation else 4
    for seed in range(4):
        rng = np.random.default_rng(seed)
        readings = _random_readings(rng, 25, dim, unit_ball=seed % 2 == 0)
        env, rec = _chain("pick_cube", control_rotation, ReplayTeleop(readings))
        env.reset(seed=seed)
        stored, hold = [], -1.0
        for r in readings:
            proposal = rng.uniform(-1, 1, dim).astype(np.float32)
            env.step(proposal)
            step = env.last_step
            assert step.intervened and np.array_equal(step.policy_action, proposal)
            assert env.action_space.contains(step.action)
            want = teleop_to_action(r, dim, hold)
            got = rec.actions[-1]
            np.testing.assert_array_equal(got[-1], want[-1])  # discretised gripper: exact
            if seed % 2 == 0:  # inside the unit ball nothing is clipped: the human's motion
                np.testing.assert_allclose(got[:-1], want[:-1], atol=1e-5)
            hold = got[-1]
            stored.append(step.action)
        human_base = np.array(rec.actions)
        env.close()

        replay, rec2 = _chain("pick_cube", control_rotation, ReplayTeleop())
        replay.reset(seed=seed)
        for a in stored:
            replay.step(a)
            assert not replay.last_step.intervened
        np.testing.assert_allclose(np.array(rec2.actions), human_base, atol=1e-5)
        replay.close()


def test_clipped_human_action_is_what_ran():
    """A base action that leaves [-1, 1] in the TCP frame is clipped there, and the clipped
    action is the one executed (the stored action maps forward onto the recorded one)."""
    r = _reading([1.0, 1.0, 1.0, 0, 0, 0], gripper=1.0)
    env, rec = _chain("pick_cube", True, ReplayTeleop([r] * 3))
    env.reset(seed=3)
    inner = env.env.env.env  # TimeLimit -> FlattenState -> RelativeFrame
    assert isinstance(inner, RelativeFrame)
    for _ in range(3):
        R = inner.R_base_ee
        env.step(np.zeros(7, np.float32))
        a = env.last_step.action
        assert np.all(np.abs(a) <= 1.0)
        np.testing.assert_allclose(rec.actions[-1][:3], R @ a[:3], atol=1e-5)
    env.close()


def test_flag_proposal_counters_and_hold_window():
    hold = 3
    move = _reading([0.5, 0, 0, 0, 0, 0], gripper=1.0)
    none = None
    # step: 0 policy, 1-2 human, 3-5 hold, 6-7 policy, 8 human, 9-11 hold, 12 policy
    seq = [none, move, move, none, none, none, none, none, move]
    env, rec = _chain("reach", False, ReplayTeleop(seq), InterventionConfig(hold_steps=hold))
    env.reset(seed=0)
    assert env.last_step is None and env.episode_stats.steps == 0
    flags, onsets = [], []
    for t in range(13):
        proposal = np.full(4, 0.25, np.float32)
        proposal[-1] = -1.0
        env.step(proposal)
        s = env.last_step
        flags.append(s.intervened)
        onsets.append(s.onset)
        np.testing.assert_array_equal(s.policy_action, proposal)
        if not s.intervened:
            np.testing.assert_array_equal(s.action, proposal)
        if t in (3, 4, 5):  # hold: no motion, the gripper kept closed by the last reading
            np.testing.assert_array_equal(rec.actions[-1], [0, 0, 0, 1.0])
    assert [t for t, f in enumerate(flags) if f] == [1, 2, 3, 4, 5, 8, 9, 10, 11]
    assert [t for t, o in enumerate(onsets) if o] == [1, 8]
    st = env.episode_stats
    assert (st.steps, st.interventions, st.intervened_steps) == (13, 2, 9)
    assert st.rate == pytest.approx(9 / 13)
    assert st.as_dict()["intervention_rate"] == pytest.approx(9 / 13)
    env.reset(seed=1)
    assert env.episode_stats.steps == 0 and env.last_step is None
    env.close()


def test_motion_above_the_deadzone_takes_over_without_the_button():
    quiet = _reading([0.02, 0, 0, 0, 0, 0], buttons=frozenset())
    moving = _reading([0.3, 0, 0, 0, 0, 0], buttons=frozenset())
    env, _ = _chain("reach", False, ReplayTeleop([quiet, moving]), InterventionConfig(hold_steps=0))
    env.reset(seed=0)
    env.step(np.zeros(4, np.float32))
    assert not env.last_step.intervened
    env.step(np.zeros(4, np.float32))
    assert env.last_step.intervened
    env.close()


@pytest.mark.parametrize("labels", [True, False])
def test_success_button_ends_the_episode_only_with_human_labels(labels):
    tap = TeleopState(stamp_s=0.0, twist=np.zeros(6), buttons=frozenset({"success"}))
    env, _ = _chain("reach", False, ReplayTeleop([tap]), InterventionConfig(human_labels=labels))
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(np.zeros(4, np.float32))
    assert terminated is labels and not truncated
    assert info[keys.INFO_SUCCESS] is labels
    assert env.last_step.buttons == frozenset({"success"}) and not env.last_step.intervened
    env.close()


class _Scale(gym.ActionWrapper):
    def action(self, a):
        return 0.5 * np.asarray(a)


def test_refuses_an_action_wrapper_without_inverse_and_bad_configs():
    env_cfg = EnvConfig(control_rotation=False)
    b = make_sim_backend("reach", SimConfig(cameras=()), env_cfg)
    base = RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg)
    with pytest.raises(ValueError, match="inverse_action"):
        Intervention(_Scale(base), ReplayTeleop())
    base.close()
    with pytest.raises(ValueError, match="hold_steps"):
        InterventionConfig(hold_steps=-1)
    with pytest.raises(ValueError, match="deadzone"):
        InterventionConfig(deadzone=1.5)


def test_the_previous_action_is_the_one_that_ran_human_or_policy():
    """PreviousAction under Intervention: the next observation holds the action the arm
    executed (the human's while a person takes over, the policy's otherwise), zeros after a
    reset, and the stored transition's action equals the next observation's prev_action."""
    from robot_rl.wrappers import PreviousAction

    env_cfg = EnvConfig(max_episode_steps=200, control_rotation=False)
    b = make_sim_backend("reach", SimConfig(cameras=()), env_cfg)
    base = RobotEnv(b.robot, b.cameras, b.task, b.clock, env_cfg)
    human = [None, None, _reading([0.5, 0.0, -0.5, 0, 0, 0], gripper=1.0)]
    env = Intervention(FlattenState(PreviousAction(base)), ReplayTeleop(human))
    flat = env.env
    sl = flat.slices["prev_action"]
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs[keys.STATE][sl], np.zeros(4))
    rng = np.random.default_rng(0)
    for i in range(len(human)):
        proposal = rng.uniform(-1, 1, 4).astype(np.float32)
        obs, *_ = env.step(proposal)
        step = env.last_step
        assert step.intervened == (i >= 2)  # from the human's reading on (and its hold)
        np.testing.assert_allclose(obs[keys.STATE][sl], step.action, atol=1e-6)
        if not step.intervened:
            np.testing.assert_allclose(obs[keys.STATE][sl], proposal, atol=1e-6)
        else:
            assert not np.allclose(step.action, proposal)
    assert not np.allclose(obs[keys.STATE][sl], 0)
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs[keys.STATE][sl], np.zeros(4))
    with pytest.raises(ValueError):
        env.step(np.full(4, np.nan, np.float32))
    obs, *_ = env.step(np.zeros(4, np.float32))
    np.testing.assert_array_equal(obs[keys.STATE][sl], np.zeros(4))  # the NaN never counted
    env.close()


@pytest.mark.parametrize(("task", "closed"), [("peg_insert", True), ("pick_cube", False)])
def test_a_takeover_on_step_0_keeps_the_hand_as_the_reset_left_it(task, closed):
    """A takeover on an episode's first step without a gripper request, and a policy output in
    the discretiser's dead band, keep the hand as the reset left it: peg_insert starts with the
    peg grasped (with the gripper the policy's, ``--gripper policy``), so neither may open it and
    drop the peg; pick_cube starts open. (Both once held "open" after every reset.)"""
    want = 1.0 if closed else -1.0
    move = _reading([0.0, 0.0, -0.3, 0, 0, 0])  # no gripper target
    readings = [move, None] * 2  # per episode: step 0 the human's, step 1 the policy's
    env, rec = _chain(task, False, ReplayTeleop(readings), InterventionConfig(hold_steps=0))
    for seed in (0, 1):
        env.reset(seed=seed)
        env.step(np.zeros(4, np.float32))  # step 0: the human's, no gripper request
        assert env.last_step.intervened
        assert rec.actions[-1][-1] == want
        env.step(np.zeros(4, np.float32))  # the policy's, gripper 0.0: in the dead band
        assert not env.last_step.intervened
        assert rec.actions[-1][-1] == want
    grasped = env.unwrapped.robot_state.gripper_pos
    assert (grasped >= 0.5) is closed, grasped
    env.close()
    with pytest.raises(ValueError, match="initial_gripper_action"):
        InterventionConfig(initial_gripper_action=2.0)
