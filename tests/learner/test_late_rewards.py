"""Learned rewards that answer late: the Trainer holds pending steps until their labels come.

The env is the learner tests' PointEnv wrapped in the real :class:`LearnedReward`; its rewarder
(a :class:`StepRewarder` written here) labels every other step late, holding the label back for
a few ``collect`` calls, and gives each step the reward ``reward_of(episode, step)``, so the
log can be checked step by step. HeldSteps (the FIFO behind the Trainer) is tested alone too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
from learner_helpers import PointEnv, sac_factory, served_learner, small_sac

from robot_rl.core.learned_reward import StepLabel
from robot_rl.core.types import Frame
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.loop import Trainer
from robot_rl.replay.log import EpisodeLog
from robot_rl.run.held import Held, HeldSteps
from robot_rl.wrappers import LearnedReward

CAM = "cam"


def reward_of(episode: int, step: int) -> float:
    """A distinct reward per (episode, step): any mismatch of label and step shows."""
    return -(1.0 + step / 100.0 + episode / 10_000.0)


class LateRewarder:
    """A StepRewarder answering odd steps ``hold`` collect calls late (labels in step order).

    ``terminate``: (episode, step) whose label confirms success. ``fail``: steps whose label
    comes back failed. ``withhold``: steps never answered (only ``drain`` fails them).
    """

    model_id = "late-test"
    model_version = "1"
    cameras = (CAM,)

    def __init__(
        self,
        hold: int = 3,
        terminate: frozenset[tuple[int, int]] = frozenset(),
        fail: frozenset[tuple[int, int]] = frozenset(),
        withhold: frozenset[tuple[int, int]] = frozenset(),
    ) -> None:
        self.hold, self.terminate, self.fail, self.withhold = hold, terminate, fail, withhold
        self.queue: list[list] = []  # [label, collect calls left]
        self.episode = -1
        self.submitted: list[tuple[int, int]] = []

    def begin_episode(self, episode: int) -> None:
        assert episode == self.episode + 1
        self.episode = episode

    def submit(self, episode, step, frames: Mapping[str, np.ndarray], state, human=None) -> None:
        assert episode == self.episode and frames[CAM].shape == (4, 4, 3)
        key = (episode, step)
        self.submitted.append(key)
        if key in self.fail:
            label = StepLabel(episode, step, math.nan, math.nan, failed=True, error="test")
        else:
            done = key in self.terminate
            label = StepLabel(episode, step, reward_of(*key), 0.9 if done else 0.1, done, done)
        wait = math.inf if key in self.withhold else (self.hold if step % 2 else 0)
        self.queue.append([label, wait])

    def collect(self, wait_for, timeout_s: float) -> list[StepLabel]:
        for item in self.queue:
            item[1] -= 1
        out = []
        while self.queue and self.queue[0][1] < 0:
            out.append(self.queue.pop(0)[0])
        return out

    def drain(self, timeout_s: float) -> list[StepLabel]:
        out = [
            lab if wait != math.inf else StepLabel(lab.episode, lab.step, math.nan, math.nan,
                                                   failed=True, error="drained")
            for lab, wait in self.queue
        ]  # fmt: skip
        self.queue = []
        return out

    def close(self) -> None:
        pass


class ConstCamera:
    """An out-of-band camera delivering a constant (4, 4, 3) frame."""

    name = CAM

    def read(self) -> Frame:
        return Frame(np.full((4, 4, 3), 7, np.uint8), 0.0, 0)

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        pass


def _cfg(steps: int) -> TrainConfig:
    return TrainConfig(
        total_env_steps=steps,
        batch_size=16,
        random_steps=steps,
        learning_starts=steps - 10,  # a few updates at the end, on labelled steps only
        eval_every_steps=steps,
        eval_episodes=1,
        progress=False,
    )


def _train(tmp_path, rewarder: LateRewarder, steps: int = 100, max_steps: int = 12):
    env = LearnedReward(PointEnv(max_steps), rewarder, {CAM: ConstCamera()}, deadline_s=0.0)
    trainer = Trainer(
        env, PointEnv(max_steps), _cfg(steps), sac_factory(small_sac()), tmp_path / "run",
        late_rewards=env, late_reward_drain_s=1.0,
    )  # fmt: skip
    res = trainer.run()
    return trainer, res, env


def _episodes(tmp_path) -> list[dict]:
    log = EpisodeLog.open(tmp_path / "run" / "log.zarr")
    return [ep for ep in log.iter_episodes() if ep["meta"].source == "online"]


def test_late_labels_fill_every_step_in_order(tmp_path):
    # (0, 0) is answered in time: it ends its own step. (1, 5) is late: its label comes in the
    # loop's poll after step 6, and the episode ends at the next step, 7.
    terminate = frozenset({(0, 0), (1, 5)})
    trainer, res, env = _train(tmp_path, LateRewarder(terminate=terminate))
    assert trainer.held.late > 0 and trainer.held.dropped == 0 and trainer.held.waiting == 0
    assert len(trainer.held) == 0
    eps = _episodes(tmp_path)
    assert sum(len(ep["reward"]) for ep in eps) == res.env_steps == 100
    assert len(eps) == res.episodes
    for i, ep in enumerate(eps):
        n = len(ep["reward"])
        assert not np.isnan(ep["reward"]).any()
        np.testing.assert_allclose(ep["reward"], [reward_of(i, t) for t in range(n)], rtol=1e-6)
        assert ep["meta"].reward_model_id == "late-test"
        ends = ep["terminated"] | ep["truncated"]
        assert not ends[:-1].any()
        assert ends[-1] or i == len(eps) - 1  # only the budget-cut episode may end open
    assert eps[0]["terminated"][-1] and len(eps[0]["reward"]) == 1
    assert eps[1]["terminated"][-1] and len(eps[1]["reward"]) == 8
    assert not np.isnan(trainer.online._reward[: len(trainer.online)]).any()
    stats = env.stats()
    assert stats["late_labels"] > 0 and stats["failed_labels"] == 0
    assert stats["labels"] == stats["steps"] == 100


def test_failed_labels_drop_their_steps_and_the_log_stays_consistent(tmp_path):
    fail = frozenset({(0, 3), (1, 0), (1, 1)})  # mid-episode (late), and an episode's start
    withhold = frozenset({(8, 2)})  # never answered: failed at the drain
    rewarder = LateRewarder(fail=fail, withhold=withhold)
    trainer, res, env = _train(tmp_path, rewarder, steps=100, max_steps=12)
    assert res.episodes >= 9, "the withheld step must fall inside the run"
    assert trainer.held.dropped == len(fail) + len(withhold)
    assert trainer.held.waiting == 0 and len(trainer.held) == 0
    eps = _episodes(tmp_path)
    assert sum(len(ep["reward"]) for ep in eps) == res.env_steps - trainer.held.dropped
    # A gap inside an episode splits it in the log (observations chain within an episode):
    # env episodes 0 and 8 are logged in two parts, the first closed with success unknown.
    cut = [ep["meta"] for ep in eps if ep["meta"].extra.get("cut_by_dropped_step")]
    assert [(m.seed, m.length, m.success) for m in cut] == [(0, 3, None), (8, 2, None)]
    assert len(eps) == res.episodes + len(cut)
    assert all(ep["meta"].reward_model_id == "late-test" for ep in eps)
    assert not any(ep["terminated"][-1] or ep["truncated"][-1] for ep in eps if ep["meta"] in cut)
    assert env.stats()["failed_labels"] == trainer.held.dropped
    for ep in eps:
        assert not np.isnan(ep["reward"]).any()
    # Every written reward is the one of its (episode, step), in order, with the gaps skipped.
    written = np.concatenate([ep["reward"] for ep in eps])
    assert set(fail | withhold) <= set(rewarder.submitted)
    expected = [reward_of(*k) for k in rewarder.submitted if k not in fail | withhold]
    np.testing.assert_allclose(written, expected, rtol=1e-6)
    assert len(trainer.online) == len(written)
    assert not np.isnan(trainer.online._reward[: len(trainer.online)]).any()


# -- HeldSteps -------------------------------------------------------------------------------


def _held() -> tuple[HeldSteps, list[Held]]:
    out: list[Held] = []
    return HeldSteps(out.append), out


def test_held_steps_leave_in_order_once_labelled():
    held, out = _held()
    held.push(Held("begin"))
    held.push(Held("step", {"t": 0}, None, -1.0))
    held.push(Held("step", {"t": 1}, (0, 1)))
    held.push(Held("step", {"t": 2}, None, -3.0))
    held.push(Held("step", {"t": 3}, (0, 3)))
    held.push(Held("end"))
    assert [(h.kind, h.data.get("t")) for h in out] == [("begin", None), ("step", 0)]
    assert held.waiting == 2 and len(held) == 4 and held.late == 2
    held.label([StepLabel(0, 3, -4.0, 0.0)])  # the later one first: still held
    assert len(out) == 2
    held.label([StepLabel(9, 9, -9.0, 0.0), StepLabel(0, 1, -2.0, 0.0)])  # unknown: ignored
    assert [h.data.get("t") for h in out] == [None, 0, 1, 2, 3, None]
    assert [h.reward for h in out[1:5]] == [-1.0, -2.0, -3.0, -4.0]
    assert held.waiting == 0 and len(held) == 0 and held.dropped == 0


def test_held_steps_refuse_an_unmarked_nan_reward_and_a_duplicate_key():
    held, _ = _held()
    with pytest.raises(ValueError, match="late_rewards"):
        held.push(Held("step", {}, None, math.nan))
    held.push(Held("step", {}, (0, 0)))
    with pytest.raises(ValueError, match="already waiting"):
        held.push(Held("step", {}, (0, 0)))


def test_held_steps_drop_failed_and_given_up_steps():
    held, out = _held()
    held.push(Held("begin"))
    for t in range(4):
        held.push(Held("step", {"t": t}, (0, t)))
    held.push(Held("end"))
    held.label([StepLabel(0, 0, -1.0, 0.0), StepLabel(0, 1, math.nan, math.nan, failed=True)])
    held.label([StepLabel(0, 2, math.inf, 1.0)])  # a non-finite reward counts as failed
    assert [h.data.get("t") for h in out] == [None, 0]
    held.give_up()
    assert [h.kind for h in out] == ["begin", "step", "end"]
    assert held.dropped == 3 and held.waiting == 0 and len(held) == 0


def test_a_distributed_actor_sends_only_labelled_steps(tmp_path):
    """The same actor loop behind gRPC (robot-rl actor --reward): the learner's copy of the
    log holds each labelled step once, in order, with its label's reward; failed steps are
    dropped before they are sent."""
    from robot_rl.actor.links import RemoteLink
    from robot_rl.actor.loop import Actor, ActorConfig
    from robot_rl.actor.policy import ActingPolicy
    from robot_rl.replay import ObsAdapter
    from robot_rl.run.evaluate import ActionMap

    fail = frozenset({(0, 3), (1, 0), (1, 1)})
    withhold = frozenset({(4, 2)})
    rewarder = LateRewarder(fail=fail, withhold=withhold)
    env = LearnedReward(PointEnv(12), rewarder, {CAM: ConstCamera()}, deadline_s=0.0)
    layout = ObsAdapter(env.observation_space).layout
    adim = ActionMap(env.action_space).dim
    with served_learner(tmp_path, layout, adim) as (client, sink):
        policy = ActingPolicy(sac_factory(small_sac())(layout, adim), layout, True, seed=0)
        cfg = ActorConfig(total_env_steps=60, random_steps=60, late_reward_drain_s=1.0)
        actor = Actor(env, policy, tmp_path / "arm", RemoteLink(client), cfg, late_rewards=env)
        st = actor.run()
        assert st.stopped_by == "steps" and st.dropped_steps == len(fail | withhold)
        assert st.acked_through == st.logged_transitions - 1 == 60 - len(fail | withhold) - 1
        theirs = [ep for ep in sink.log_of("arm").iter_episodes()]
    written = np.concatenate([ep["reward"] for ep in theirs])
    expected = [reward_of(*k) for k in rewarder.submitted if k not in fail | withhold]
    np.testing.assert_allclose(written, expected, rtol=1e-6)
    with EpisodeLog.open(tmp_path / "arm" / "log.zarr") as mine:
        ours = np.concatenate([ep["reward"] for ep in mine.iter_episodes()])
        assert all(ep.reward_model_id == "late-test" for ep in mine.episodes)
    np.testing.assert_array_equal(ours, written)
