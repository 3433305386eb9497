"""SimReward (the twin's truth) and HumanReward (a teleop button) as RewardModels.

SimReward runs on the real twin task (and a scripted Task for the success case; the wrapper
tests run it through a whole expert episode). HumanReward reads a Teleop at its Protocol
boundary: a scripted device returning TeleopState readings.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from rewards.detector import DetectorConfig
from rewards.human_reward import SUCCESS_BUTTON, HumanReward
from rewards.online import OnlineRewarder
from rewards.sim_reward import SimReward
from robot_rl.core.config import EnvConfig
from robot_rl.core.protocols import RewardModel, RewardQuery, Task, Teleop
from robot_rl.core.specs import ArraySpec
from robot_rl.core.types import TaskStatus, TeleopState


def query(batch: int = 1, **sizes: int) -> RewardQuery:
    cams = sizes or {"front": batch}
    return RewardQuery(images={c: np.zeros((b, 8, 8, 3), np.uint8) for c, b in cams.items()})


class ScriptedTask:
    """A Task whose success the test sets; ``privileged`` decides whether it has sim state."""

    name = "scripted"

    def __init__(self, privileged: bool = True) -> None:
        self.success = False
        spec = ArraySpec((3,), "float32")
        self._spec: Mapping[str, ArraySpec] = {"cube_pos": spec} if privileged else {}

    @property
    def privileged_spec(self) -> Mapping[str, ArraySpec]:
        return self._spec

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        return np.array([0.5, 0, 0.2, 0, 1, 0, 0], np.float64)

    def evaluate(self) -> TaskStatus:
        return TaskStatus(reward=0.0 if self.success else -1.0, success=self.success)


def test_sim_reward_answers_the_twins_truth_now():
    from sim.backend import make_sim_backend
    from sim.config import SimConfig

    backend = make_sim_backend("pick_cube", SimConfig(cameras=()), EnvConfig())
    try:
        backend.task.reset(np.random.default_rng(0))
        model = SimReward(backend.task, version="mjcf-1")
        assert isinstance(model, RewardModel)
        assert (model.model_id, model.model_version) == ("sim_truth/pick_cube", "mjcf-1")
        res = model.predict(query(2))
        np.testing.assert_array_equal(res.success_prob, [0.0, 0.0])  # the cube lies on the table
        np.testing.assert_array_equal(res.reward, [-1.0, -1.0])
        assert res.success_prob.dtype == np.float32 and res.model_id == model.model_id
    finally:
        backend.close()
    task = ScriptedTask()
    model = SimReward(task)
    task.success = True
    res = model.predict(query(3))
    np.testing.assert_array_equal(res.success_prob, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(res.reward, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="disagree"):
        model.predict(query(front=2, wrist=3))
    bad_state = RewardQuery(images=query(2).images, state=np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="disagree"):
        model.predict(bad_state)


def test_sim_reward_refuses_a_task_without_privileged_state():
    task = ScriptedTask(privileged=False)
    assert isinstance(task, Task)
    with pytest.raises(ValueError, match="no privileged sim state.*real robot"):
        SimReward(task)


class ScriptedTeleop:
    """A Teleop whose readings are the buttons the test queued (then none)."""

    def __init__(self) -> None:
        self.presses: list[frozenset[str]] = []
        self.reads = 0

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass

    def read(self) -> TeleopState:
        self.reads += 1
        buttons = self.presses.pop(0) if self.presses else frozenset()
        return TeleopState(stamp_s=float(self.reads), twist=np.zeros(6), buttons=buttons)


def test_human_reward_is_success_while_the_button_is_down():
    teleop = ScriptedTeleop()
    assert isinstance(teleop, Teleop)
    model = HumanReward(teleop)
    assert isinstance(model, RewardModel)
    assert (model.model_id, model.model_version) == (f"human/{SUCCESS_BUTTON}", "1")
    teleop.presses = [frozenset(), frozenset({"success"}), frozenset({"intervene"})]
    probs = [model.predict(query(2)).success_prob.tolist() for _ in range(3)]
    assert probs == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert teleop.reads == 3  # one reading per query
    teleop.presses = [frozenset({"success"})]
    np.testing.assert_array_equal(model.predict(query()).reward, [0.0])
    other = HumanReward(teleop, button="done")
    teleop.presses = [frozenset({"success"}), frozenset({"done"})]
    assert [other.predict(query()).success_prob[0] for _ in range(2)] == [0.0, 1.0]
    with pytest.raises(ValueError, match="button"):
        HumanReward(teleop, button="")
    with pytest.raises(ValueError, match="disagree"):
        model.predict(query(front=1, wrist=2))


def test_a_button_press_ends_the_episode_through_the_rewarder():
    teleop = ScriptedTeleop()
    r = OnlineRewarder(HumanReward(teleop), DetectorConfig(threshold=0.5, k=1, n=1), ("front",))
    r.begin_episode(0)
    teleop.presses = [frozenset(), frozenset(), frozenset({"success"})]
    labels = []
    for t in range(3):
        r.submit(0, t, {"front": np.zeros((8, 8, 3), np.uint8)}, None)
        labels += r.collect((0, t), 0.0)
    assert [(lab.reward, lab.terminated, lab.success) for lab in labels] == [
        (-1.0, False, False),
        (-1.0, False, False),
        (0.0, True, True),
    ]


def test_sim_reward_needs_no_camera_in_the_rewarder():
    task = ScriptedTask()
    r = OnlineRewarder(SimReward(task), DetectorConfig(threshold=0.5, k=1, n=1), ())
    assert r.cameras == ()
    r.begin_episode(0)
    r.submit(0, 0, {}, None)
    task.success = True
    r.submit(0, 1, {}, None)
    labels = r.collect((0, 1), 0.0)
    assert [(lab.step, lab.reward, lab.terminated) for lab in labels] == [
        (0, -1.0, False),
        (1, 0.0, True),
    ]
