"""The simulated human (sim.human) on the twin, through the real teleop path: SimHumanTeleop ->
Intervention wrapper -> GripperDiscretize / RelativeFrame -> RobotEnv."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_rl.app.envs.build import (
    EnvSetup,
    WrapperConfig,
    base_to_policy_action,
    make_env_from_setup,
    with_sim_human,
)
from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.core import keys
from robot_rl.core.teleop_action import INTERVENE, is_taking_over
from robot_rl.wrappers import InterventionConfig
from sim.human import HumanConfig, SimulatedHuman


def _env(task: str, human: HumanConfig, hold_steps: int = 5, wrappers=None):
    if wrappers is None:
        setup = LearnerEnvConfig(task=task).env_setup()
    else:
        setup = EnvSetup(task=task, wrappers=wrappers)
    env, backend = make_env_from_setup(setup)
    return with_sim_human(env, backend, human, InterventionConfig(hold_steps=hold_steps)), backend


def _zero_policy(env, gripper: float = -1.0) -> np.ndarray:
    a = np.zeros(env.action_space.shape, np.float32)
    a[-1] = gripper
    return a


def _episode(env, seed: int, policy) -> tuple[list[bool], dict]:
    obs, info = env.reset(seed=seed)
    flags = []
    while True:
        obs, _, terminated, truncated, info = env.step(policy(obs, info))
        flags.append(env.last_step.intervened)
        if terminated or truncated:
            return flags, info


def test_takes_over_a_stalled_policy_after_patience_and_finishes_the_task():
    human = HumanConfig(patience_steps=8, takeover_steps=25, max_interventions=2)
    env, backend = _env("pick_cube", human)
    for seed in range(3):
        flags, info = _episode(env, seed, lambda o, i: _zero_policy(env))
        # Step 0's reward starts the record, steps 1-8 stall: the human drives from step 9.
        assert flags[:9] == [False] * 9 and flags[9], flags
        assert info[keys.INFO_SUCCESS], "the expert took over mid-episode and should succeed"
        st = env.episode_stats
        assert st.interventions == 1 and st.intervened_steps == sum(flags)
    env.close()
    backend.close()


def test_respects_the_budget_and_takeover_length():
    # 3-step takeovers cannot finish the task: the human keeps coming back, at most twice.
    human = HumanConfig(patience_steps=5, takeover_steps=3, max_interventions=2)
    env, backend = _env("pick_cube", human, hold_steps=0)
    flags, _ = _episode(env, 0, lambda o, i: _zero_policy(env))
    runs = np.diff(np.concatenate([[0], np.array(flags, int), [0]]))
    starts, ends = np.flatnonzero(runs == 1), np.flatnonzero(runs == -1)
    assert len(starts) == 2 and list(ends - starts) == [3, 3], flags
    assert env.episode_stats.interventions == 2
    env.close()
    backend.close()


@pytest.mark.parametrize("task", ["pick_cube", "peg_insert"])
def test_does_not_take_over_from_the_expert(task):
    """The same expert acting as the policy makes steady progress: no takeover."""
    env, backend = _env(task, HumanConfig())
    expert = backend.make_expert()
    to_policy = base_to_policy_action(env)
    for seed in range(4):
        expert.reset(np.random.default_rng(seed))
        flags, info = _episode(env, seed, lambda o, i: to_policy(expert.act(o, i)))
        assert not any(flags) and info[keys.INFO_SUCCESS]
    env.close()
    backend.close()


def test_always_drives_every_step_through_relative_frame_and_gripper_discretize():
    """rule="always" (demos through teleop): the whole device path solves pick_cube, with the
    action wrappers inverting the human's base-frame actions."""
    wrappers = WrapperConfig(
        relative_frame=True, gripper_discretize=True, flatten_state=True, object_state=("cube_pos",)
    )
    env, backend = _env("pick_cube", HumanConfig(rule="always"), wrappers=wrappers)
    for seed in range(3):
        flags, info = _episode(env, seed, lambda o, i: _zero_policy(env))
        assert all(flags) and info[keys.INFO_SUCCESS]
        assert env.episode_stats.interventions == 1
    env.close()
    backend.close()


def test_readings_and_config_checks():
    env, backend = make_env_from_setup(LearnerEnvConfig(task="reach").env_setup())
    human = SimulatedHuman(backend.make_expert(), HumanConfig(patience_steps=2, takeover_steps=1))
    obs, info = env.reset(seed=0)
    human.reset(np.random.default_rng(0))
    p = info[keys.INFO_PRIVILEGED]
    first = human.observe(p, math.nan, 1.0)
    assert not is_taking_over(first) and first.gripper is None and not np.any(first.twist)
    readings = [human.observe(p, -0.5, 1.0 + k) for k in range(4)]  # no progress at all
    assert [is_taking_over(r) for r in readings] == [False, False, True, False]
    assert INTERVENE in readings[2].buttons and readings[2].stamp_s == 3.0
    assert human.interventions == 1
    env.close()
    backend.close()
    for bad in (
        dict(rule="sometimes"),
        dict(patience_steps=0),
        dict(takeover_steps=0),
        dict(max_interventions=-1),
        dict(min_progress=-0.1),
        dict(reaction_steps=-1),
        dict(action_noise=float("nan")),
        dict(attention_share=1.5),
        dict(trust_patience_steps=-1),
        dict(trust_episodes=0),
    ):
        with pytest.raises(ValueError):
            HumanConfig(**bad)


def test_presses_success_only_when_told_and_only_while_the_task_succeeds():
    env, backend = make_env_from_setup(LearnerEnvConfig(task="reach").env_setup())
    _, info = env.reset(seed=0)
    p = info[keys.INFO_PRIVILEGED]
    quiet = SimulatedHuman(backend.make_expert(), HumanConfig(rule="always"))
    marks = SimulatedHuman(backend.make_expert(), HumanConfig(rule="always", press_success=True))
    for h in (quiet, marks):
        h.reset(np.random.default_rng(0))
    assert "success" not in quiet.observe(p, -0.1, 1.0, success=True).buttons
    assert "success" not in marks.observe(p, -0.1, 2.0, success=False).buttons
    pressed = marks.observe(p, 0.0, 3.0, success=True)
    assert "success" in pressed.buttons and np.any(pressed.twist)  # still driving
    env.close()
    backend.close()


def test_a_person_reacts_late_after_the_stall():
    """With a reaction time the takeover starts that many steps after the patience ran out:
    the policy keeps the robot meanwhile."""
    for reaction in (0, 3):
        human = HumanConfig(patience_steps=8, takeover_steps=25, reaction_steps=reaction)
        env, backend = _env("pick_cube", human)
        flags, _ = _episode(env, 0, lambda o, i, e=env: _zero_policy(e))
        first = flags.index(True)
        assert first == 9 + reaction and not any(flags[:first]), flags
        env.close()
        backend.close()


def test_the_attention_budget_caps_the_persons_share_of_the_steps():
    """A person who may drive 5% of the robot's time leaves later stalls alone once the
    share is spent, run-wide: over several episodes of a policy that never moves, the driven
    share stays within one takeover of the budget (a takeover, once begun, is finished)."""
    human = HumanConfig(patience_steps=5, takeover_steps=10, attention_share=0.05)
    env, backend = _env("reach", human, hold_steps=0)
    all_flags = []
    for seed in range(6):
        flags, _ = _episode(env, seed, lambda o, i: _zero_policy(env))
        all_flags += flags
    driven = sum(all_flags)
    assert 0 < driven <= 0.05 * len(all_flags) + 10, (driven, len(all_flags))
    unlimited, ub = _env("reach", HumanConfig(patience_steps=5, takeover_steps=10), hold_steps=0)
    more = sum(
        sum(_episode(unlimited, s, lambda o, i: _zero_policy(unlimited))[0]) for s in range(6)
    )
    assert more > driven  # the budget is what held the person back
    for c in (env, backend, unlimited, ub):
        c.close()


def test_a_persons_hand_is_noisy_on_the_motion_axes_only():
    env, backend = make_env_from_setup(LearnerEnvConfig(task="pick_cube").env_setup())
    _, info = env.reset(seed=0)
    p = info[keys.INFO_PRIVILEGED]
    readings = {}
    for noise in (0.0, 0.3):
        human = SimulatedHuman(
            backend.make_expert(), HumanConfig(rule="always", action_noise=noise)
        )
        human.reset(np.random.default_rng(0))
        readings[noise] = human.observe(p, math.nan, 1.0)
    assert not np.allclose(readings[0.0].twist, readings[0.3].twist)
    assert readings[0.0].gripper == readings[0.3].gripper
    env.close()
    backend.close()


def _first_takeover(human: SimulatedHuman, p, success_at: int | None = None) -> int | None:
    """One episode of a policy that never makes progress (constant reward), 40 steps; the step
    whose reading first takes over (None: never). ``success_at``: the task succeeds from this
    step on (the episode then counts as unaided when nobody took over)."""
    human.reset(np.random.default_rng(0))
    human.observe(p, math.nan, 0.0)
    first = None
    for k in range(1, 41):
        ok = success_at is not None and k >= success_at
        if is_taking_over(human.observe(p, -0.5, float(k), success=ok)) and first is None:
            first = k
        if ok:
            break  # the episode ends on success
    return first


def test_a_policy_earns_patience_by_succeeding_unaided_and_loses_it_when_corrected():
    """--human-trust-patience-steps: the patience grows with the share of the last
    trust_episodes episodes that succeeded with no takeover, and shrinks again after
    corrected ones (a person trusts what they have seen work)."""
    env, backend = make_env_from_setup(LearnerEnvConfig(task="reach").env_setup())
    _, info = env.reset(seed=0)
    p = info[keys.INFO_PRIVILEGED]
    cfg = HumanConfig(patience_steps=5, takeover_steps=3, trust_patience_steps=8, trust_episodes=4)
    human = SimulatedHuman(backend.make_expert(), cfg)
    # No history: the base patience (a stall of 5 steps, then the takeover's reading).
    assert human.patience == 5 and _first_takeover(human, p) == 6
    # That episode was corrected; then successes the person never had to touch (the success
    # comes before the patience runs out).
    for _ in range(4):
        assert _first_takeover(human, p, success_at=3) is None
    human.reset(np.random.default_rng(1))  # ends the 4th unaided episode
    assert human.patience == 5 + 8  # all of the last 4 were unaided
    assert _first_takeover(human, p) == 14
    human.reset(np.random.default_rng(2))  # that episode was corrected: 3 of the last 4
    assert human.patience == 5 + 6
    # Off (the default): the patience never grows.
    plain = SimulatedHuman(backend.make_expert(), HumanConfig(patience_steps=5))
    for _ in range(3):
        assert _first_takeover(plain, p, success_at=3) is None
    assert plain.patience == 5 and _first_takeover(plain, p) == 6
    env.close()
    backend.close()


def test_steps_before_the_robot_acts_are_not_the_policys_stall():
    """observe(acting=False): the robot waits for its first command (the actor resets, waits
    for images or its learner); those steps count neither as a stall nor as watched steps."""
    env, backend = make_env_from_setup(LearnerEnvConfig(task="reach").env_setup())
    _, info = env.reset(seed=0)
    p = info[keys.INFO_PRIVILEGED]
    human = SimulatedHuman(backend.make_expert(), HumanConfig(patience_steps=5, takeover_steps=3))
    human.reset(np.random.default_rng(0))
    human.observe(p, math.nan, 0.0)
    waiting = [human.observe(p, -0.5, float(k), acting=False) for k in range(1, 21)]
    assert not any(is_taking_over(r) for r in waiting) and human.steps_seen == 0
    acting = [is_taking_over(human.observe(p, -0.5, 20.0 + k)) for k in range(1, 8)]
    assert acting == [False] * 5 + [True, True], acting  # patience counted from the first act
    env.close()
    backend.close()


def test_the_human_node_counts_from_the_bridges_first_accepted_target():
    """sim.human_node --wait-for-command (a real-time twin): statuses before the bridge's
    ``last_command_s`` changes after the reset are the actor's wait, not the policy's stall;
    without the flag, or before any bridge status is heard, it counts from the reset."""
    from sim.human_node import StatusFollower

    env, backend = make_env_from_setup(LearnerEnvConfig(task="reach").env_setup())
    _, info = env.reset(seed=0)
    p = info[keys.INFO_PRIVILEGED]

    def run(wait: bool, commands: dict[int, float]) -> list[int]:
        human = SimulatedHuman(
            backend.make_expert(),
            HumanConfig(patience_steps=4, takeover_steps=2, max_interventions=1),
        )
        f = StatusFollower(human, seed=0, control_dt_s=0.1, wait_for_command=wait)
        f.on_bridge_status(7.0)  # the previous episode's last target
        taking = []
        for k in range(16):  # a status per control period after the reset
            if k in commands:
                f.on_bridge_status(commands[k])
            r = f.on_status(p, -0.5, round(0.1 * k, 3))
            if r is not None and is_taking_over(r):
                taking.append(k)
        return taking

    # The first target is accepted at step 6, which starts the record: stall steps 7-10, the
    # takeover drives from the 4th of them (as from step 4 when counted from the reset).
    assert run(True, {6: 9.0}) == [10, 11]
    assert run(False, {6: 9.0}) == [5, 6]  # counted from the reset: step 1 starts the record
    assert run(True, {}) == []  # the robot never acted: no takeover
    env.close()
    backend.close()
