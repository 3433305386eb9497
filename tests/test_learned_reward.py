"""LearnedReward on the MuJoCo twin: reward and termination from a reward model.

The env is built by robot_rl.app.envs.build (``make_env(..., reward=hook)``) for pick_cube with a
state observation; the reward model's camera is built in the twin beside the observation and
read out of band. The model is :class:`rewards.sim_reward.SimReward` (the twin's truth), so
the scripted expert's episode must be rewarded -1 until the cube is lifted, then end.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from rewards.detector import DetectorConfig
from rewards.online import OnlineRewarder
from rewards.sim_reward import SimReward
from robot_rl.app.envs.build import WrapperConfig, make_env
from robot_rl.app.envs.policies import ExpertPolicy
from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.protocols import RewardQuery, RewardResult
from robot_rl.wrappers import LearnedReward
from sim.config import SimConfig

TASK = "pick_cube"
MAX_STEPS = 80  # the expert lifts the cube in ~20-30 steps


class AlwaysSuccess:
    """A reward model that sees success in every frame (a badly wrong classifier)."""

    model_id = "always"
    model_version = "1"

    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []

    def predict(self, query: RewardQuery) -> RewardResult:
        img = np.asarray(query.images["front"])
        self.frames.append(img[0].copy())
        p = np.ones(len(img), np.float32)
        return RewardResult(p, p - 1.0, self.model_id, self.model_version)


def build(model_for_task, cameras=("front",), obs_cameras=(), k=1, n=1, human=None):
    """Twin env wrapped in LearnedReward(OnlineRewarder(model)); returns (env, wrapper, backend)."""
    made: dict[str, LearnedReward] = {}

    def hook(env, out_of_band, task):
        rewarder = OnlineRewarder(
            model_for_task(task), DetectorConfig(threshold=0.5, k=k, n=n), cameras
        )
        made["w"] = LearnedReward(env, rewarder, out_of_band, deadline_s=0.0, human=human)
        return made["w"]

    env_cfg = EnvConfig(max_episode_steps=MAX_STEPS, terminate_on_success=False)
    sim_cfg = SimConfig(cameras=("front", "wrist"), image_height=32, image_width=32)
    env, backend = make_env(
        TASK, env_cfg, sim_cfg, WrapperConfig(), obs_cameras=obs_cameras, reward=hook
    )
    return env, made["w"], backend


@pytest.fixture
def truth_env() -> Iterator[tuple]:
    env, wrapper, backend = build(SimReward)
    try:
        yield env, wrapper, backend
    finally:
        env.close()
        backend.close()


def expert_episode(env, backend, seed: int):
    policy = ExpertPolicy(backend.make_expert(), env)
    obs, info = env.reset(seed=seed)
    policy.reset(np.random.default_rng(seed))
    steps = []
    for _ in range(MAX_STEPS):
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        steps.append((reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return steps


def test_expert_episode_is_rewarded_minus_one_until_success_then_ends(truth_env):
    env, wrapper, backend = truth_env
    assert wrapper.model_id == "sim_truth/pick_cube"
    for episode, seed in enumerate((0, 1)):
        steps = expert_episode(env, backend, seed)
        rewards = [s[0] for s in steps]
        assert 5 < len(steps) < MAX_STEPS, "the expert should lift the cube well in time"
        assert rewards[:-1] == [-1.0] * (len(steps) - 1) and rewards[-1] == 0.0
        *before, (_, terminated, truncated, info) = steps
        assert terminated and not truncated
        assert not any(s[1] or s[2] for s in before)
        # info: the detector's verdict and the twin's truth, both true only at the end.
        assert info[keys.INFO_SUCCESS] and info[keys.INFO_TRUE_SUCCESS]
        assert not any(s[3][keys.INFO_SUCCESS] or s[3][keys.INFO_TRUE_SUCCESS] for s in before)
        assert info[keys.INFO_REWARD] == {"success_prob": 1.0, "pending": False}
        assert wrapper.last_step is not None and not wrapper.last_step.pending
        assert (wrapper.last_step.episode, wrapper.last_step.step) == (episode, len(steps) - 1)
        assert wrapper.poll() == []  # in process: nothing is ever late
        stats = wrapper.stats()
        assert stats["confirmations"] == episode + 1 and stats["false_confirmations"] == 0
        assert stats["true_success_episodes"] == episode + 1 and stats["missed_episodes"] == 0
        assert stats["late_labels"] == stats["failed_labels"] == 0
    assert stats["steps"] == stats["labels"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(env.action_space.shape, np.float32))


def test_reset_info_carries_the_truth_and_no_success(truth_env):
    env, wrapper, _ = truth_env
    assert wrapper.last_step is None
    with pytest.raises(RuntimeError, match="reset"):  # before the first reset
        env.step(np.zeros(env.action_space.shape, np.float32))
    _, info = env.reset(seed=0)
    assert info[keys.INFO_SUCCESS] is False and info[keys.INFO_TRUE_SUCCESS] is False
    assert keys.IMAGES not in env.observation_space.spaces  # state policy, reward camera aside


def test_a_model_that_always_sees_success_is_counted_as_false_confirmations():
    model = AlwaysSuccess()
    env, wrapper, backend = build(lambda task: model)
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            _, reward, terminated, _, info = env.step(np.zeros(env.action_space.shape))
            assert reward == 0.0 and terminated
            assert info[keys.INFO_SUCCESS] and not info[keys.INFO_TRUE_SUCCESS]
        stats = wrapper.stats()
        assert stats["confirmations"] == 2 and stats["false_confirmations"] == 2
        assert stats["true_success_episodes"] == 0 and stats["missed_episodes"] == 0
        # The out-of-band frames are real renders of the front camera, not blank images.
        assert len(model.frames) == 2 and model.frames[0].shape == (32, 32, 3)
        assert model.frames[0].std() > 5
    finally:
        env.close()
        backend.close()


def test_frames_of_cameras_in_the_observation_are_the_observed_ones():
    model = AlwaysSuccess()
    env, wrapper, backend = build(lambda task: model, obs_cameras=("front",))
    try:
        env.reset(seed=0)
        obs, *_ = env.step(np.zeros(env.action_space.shape))
        np.testing.assert_array_equal(model.frames[-1], obs[keys.IMAGES]["front"])
    finally:
        env.close()
        backend.close()


def test_a_camera_that_is_nowhere_is_a_clear_error_at_construction():
    with pytest.raises(ValueError, match=r"reads cameras \['nope'\].*out-of-band"):
        build(SimReward, cameras=("nope",))
    env_cfg = EnvConfig(max_episode_steps=MAX_STEPS, terminate_on_success=False)
    sim_cfg = SimConfig(cameras=(), image_height=32, image_width=32)
    with pytest.raises(ValueError, match=r"\['front'\] are neither in the observation"):
        make_env(
            TASK, env_cfg, sim_cfg, obs_cameras=(),
            reward=lambda env, cams, task: LearnedReward(
                env, OnlineRewarder(SimReward(task), DetectorConfig(), ("front",)), cams
            ),
        )  # fmt: skip


def test_deadline_must_be_a_finite_time(truth_env):
    env, wrapper, _ = truth_env
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="deadline_s"):
            LearnedReward(wrapper.env, wrapper.rewarder, {}, deadline_s=bad)


class GatedMeanRed:
    """Served model: success probability = mean red / 255; blocks until the gate opens."""

    model_id = "gated-red"
    model_version = "1"
    cameras = ("front",)

    def __init__(self) -> None:
        self.gate = threading.Event()

    def predict(self, query: RewardQuery) -> RewardResult:
        assert self.gate.wait(30.0), "the test never opened the gate"
        p = (np.asarray(query.images["front"])[..., 0].mean(axis=(1, 2)) / 255.0).astype(np.float32)
        return RewardResult(p, p - 1.0, self.model_id, self.model_version)


def test_late_answers_of_a_reward_server_come_through_poll_and_drain():
    pytest.importorskip("grpc", reason="reward serving needs the `serve` extra (grpcio)")
    from rewards.serve import AsyncRewardLabeller, RewardClient, serve

    model = GatedMeanRed()
    srv = serve(model, max_wait_ms=1.0)
    client = RewardClient(srv.address, timeout_s=30.0)

    def hook(env, out_of_band, task):
        labeller = AsyncRewardLabeller(client, late_timeout_s=30.0)
        rewarder = OnlineRewarder.remote(
            labeller, DetectorConfig(threshold=0.99, k=1, n=1), ("front",), "gated-red", "1"
        )
        return LearnedReward(env, rewarder, out_of_band, deadline_s=0.01)

    env_cfg = EnvConfig(max_episode_steps=MAX_STEPS, terminate_on_success=False)
    sim_cfg = SimConfig(cameras=("front",), image_height=32, image_width=32)
    env, backend = make_env(TASK, env_cfg, sim_cfg, obs_cameras=(), reward=hook)
    try:
        env.reset(seed=0)
        for t in range(3):
            _, reward, terminated, _, info = env.step(np.zeros(env.action_space.shape))
            assert math.isnan(reward) and not terminated  # the model is blocked: pending
            assert env.last_step.pending and (env.last_step.episode, env.last_step.step) == (0, t)
            assert info[keys.INFO_REWARD]["pending"]
            assert math.isnan(info[keys.INFO_REWARD]["success_prob"])
        assert env.poll() == []
        model.gate.set()
        labels = env.drain(30.0)
        assert [(lab.episode, lab.step) for lab in labels] == [(0, 0), (0, 1), (0, 2)]
        assert all(not lab.failed and -1.0 <= lab.reward < 0.0 for lab in labels)
        stats = env.stats()
        assert stats["late_labels"] == stats["labels"] == stats["steps"] == 3
        assert stats["failed_labels"] == 0
    finally:
        model.gate.set()
        env.close()
        backend.close()
        client.close()
        srv.stop(grace_s=0.0)


class PressAt:
    """A person who presses ``button`` at step ``at`` of every episode (HumanVerdicts)."""

    def __init__(self, button: str, at: int) -> None:
        self.button, self.at, self.t = button, at, 0

    def reset(self) -> None:
        self.t = 0

    def __call__(self) -> str | None:
        self.t += 1
        return self.button if self.t - 1 == self.at else None


@pytest.mark.parametrize("button", ["success", "failure"])
def test_a_persons_press_ends_the_episode_at_that_step(button):
    env, wrapper, backend = build(SimReward, human=PressAt(button, 2))
    try:
        env.reset(seed=0)
        zero = np.zeros(env.action_space.shape, np.float32)
        for t in range(3):
            _, reward, terminated, truncated, info = env.step(zero)
            assert terminated == (t == 2) and not truncated
        # The scene is far from success (the truth says no), the person decides.
        assert info[keys.INFO_SUCCESS] == (button == "success")
        assert not info[keys.INFO_TRUE_SUCCESS]
        assert reward == (0.0 if button == "success" else -1.0)
        assert wrapper.stats()["human_verdicts"] == 1
    finally:
        env.close()
        backend.close()
