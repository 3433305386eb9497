"""The env checker: it passes every twin task and option, and it catches broken envs.

Part 1 runs :func:`check_env` over every task in ``sim.backend.TASKS`` (new tasks are picked up
automatically) x observation/action options x the wrapper stack, with the task's scripted expert
for the success-reachable check. Part 2 feeds the checker deliberately broken envs (a small
generic Dict-observation env and wrappers that break one property each) and asserts that it
fails with a message naming the problem: a checker that cannot fail is worthless.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.app.envs.build import twin_joint_ik
from robot_rl.core import keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.specs import SpecError
from robot_rl.envs import RobotEnv
from robot_rl.envs.checker import EnvCheckError, check_env, check_observation
from robot_rl.wrappers import FlattenState, ImageCropResize, RelativeFrame
from sim.backend import TASKS, make_sim_backend
from sim.config import SimConfig

STEPS = 20
EPISODE_STEPS = 12  # short episodes so that the rollout crosses an episode boundary

# -- Part 1: every twin task x option ----------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One env variant of the suite."""

    name: str
    cameras: tuple[str, ...] = ()
    control_rotation: bool = True
    wrapped: bool = False  # RelativeFrame + ImageCropResize + FlattenState


OPTIONS = (
    Option("state"),
    Option("state-4dof", control_rotation=False),
    Option("cameras-64", cameras=("front", "wrist")),
    Option("wrapped-cameras", cameras=("front", "wrist"), wrapped=True),
    Option("wrapped-4dof-state", control_rotation=False, wrapped=True),
)
IMAGE_HW = 64


class _Twin:
    """Builds twin envs for one (task, option) and remembers each env's backend."""

    def __init__(self, task: str, option: Option, max_episode_steps: int, arm: str = "fr3") -> None:
        self.task = task
        self.arm = arm
        self.option = option
        self.max_episode_steps = max_episode_steps
        self.backends: dict[int, object] = {}

    def make(self) -> gym.Env:
        opt = self.option
        env_cfg = EnvConfig(
            max_episode_steps=self.max_episode_steps, control_rotation=opt.control_rotation
        )
        sim_cfg = SimConfig(
            cameras=opt.cameras, image_height=IMAGE_HW, image_width=IMAGE_HW, arm=self.arm
        )
        backend = make_sim_backend(self.task, sim_cfg, env_cfg, joint_ik=twin_joint_ik)
        env: gym.Env = RobotEnv(
            backend.robot, backend.cameras, backend.task, backend.clock, env_cfg
        )
        if opt.wrapped:
            env = RelativeFrame(env)
            if opt.cameras:
                env = ImageCropResize(env, crop=(8, 8, 48, 48), size=(32, 32))
            env = FlattenState(env)
        self.backends[id(env)] = backend
        return env

    def close(self) -> None:
        """Free the backends' renderers (OpenGL contexts)."""
        for backend in self.backends.values():
            backend.close()
        self.backends.clear()

    def expert(self, env: gym.Env) -> _BaseFrameExpert:
        return _BaseFrameExpert(self.backends[id(env)].make_expert(), env)


class _BaseFrameExpert:
    """Runs a base-frame scripted expert through the wrappers' inverses.

    The expert reads absolute base-frame observations and emits base-frame actions; the
    wrapped env's observations are mapped back (FlattenState.unflatten,
    RelativeFrame.inverse_observation) and its actions forward (RelativeFrame.inverse_action).
    """

    def __init__(self, expert, env: gym.Env) -> None:
        self.expert = expert
        self.flatten = _find(env, FlattenState)
        self.relative = _find(env, RelativeFrame)

    def reset(self, rng: np.random.Generator) -> None:
        self.expert.reset(rng)

    def act(self, obs: dict, info: dict) -> np.ndarray:
        if self.flatten is not None:
            obs = self.flatten.unflatten(obs)
        if self.relative is not None:
            obs = self.relative.inverse_observation(obs)
        action = np.asarray(self.expert.act(obs, info), dtype=np.float64)
        if self.relative is not None:
            action = self.relative.inverse_action(action)
        return action


def _find(env: gym.Env, cls: type) -> gym.Wrapper | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, cls):
            return env
        env = env.env
    return None


ARM_CASES = [
    (task, option, arm)
    for arm, options in (("fr3", OPTIONS), ("ur5e", OPTIONS[::2]))
    for option in options
    for task in sorted(TASKS)
    if option.control_rotation or not TASKS[task].needs_rotation
]
"""Every task x option on the FR3-class arm; every task x three options on the UR5e-class arm
(6 joints, joint servos + IK): one observation and action layout for every arm. A task that
needs rotation (plug_insert) skips the 4-dof options: learner envs refuse it without."""


@pytest.mark.parametrize(
    ("task", "option", "arm"), ARM_CASES, ids=lambda v: getattr(v, "name", str(v))
)
def test_twin_envs_pass_the_checker(task: str, option: Option, arm: str) -> None:
    twin = _Twin(task, option, EPISODE_STEPS, arm)
    expert_twin = _Twin(task, option, TASKS[task].max_episode_steps, arm)
    try:
        report = check_env(
            twin.make,
            steps=STEPS,
            seed=0,
            expert_fn=expert_twin.expert,
            expert_episodes=3,
            expert_env_fn=expert_twin.make,
        )
    finally:
        twin.close()
        expert_twin.close()
    assert report.steps == STEPS and report.episodes >= 2
    assert len(report.reset_seeds) == 3
    assert report.expert_successes == 1


# -- Part 2: the checker catches broken envs ----------------------------------------------------


class DictEnv(gym.Env):
    """A small generic env with a Dict observation (not robot_rl's layout): a 2-D point that
    moves by the action, plus an 4x4 image whose brightness is the step count. Success when
    the point is within 0.2 of the origin.

    Args:
        randomise: Sample the start point from ``np_random`` (else always (1, 1)).
    """

    def __init__(self, randomise: bool = True) -> None:
        self.randomise = randomise
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32),
                "camera": gym.spaces.Box(0, 255, (4, 4, 3), np.uint8),
            }
        )
        self.action_space = gym.spaces.Box(-0.25, 0.25, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-2, 2, 2) if self.randomise else np.ones(2)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._pos = np.clip(self._pos + np.asarray(action, dtype=np.float64), -5, 5)
        self._t += 1
        success = bool(np.linalg.norm(self._pos) < 0.2)
        truncated = self._t >= 8
        return (
            self._obs(),
            float(-np.linalg.norm(self._pos)),
            success,
            truncated,
            {keys.INFO_SUCCESS: success},
        )

    def _obs(self) -> dict:
        return {
            "pos": self._pos.astype(np.float32),
            "camera": np.full((4, 4, 3), min(self._t * 10, 255), np.uint8),
        }


class GreedyExpert:
    """Moves the DictEnv point straight to the origin."""

    def reset(self, rng: np.random.Generator) -> None:
        pass

    def act(self, obs: dict, info: dict) -> np.ndarray:
        return np.clip(-obs["pos"], -0.25, 0.25)


def test_generic_dict_env_passes():
    report = check_env(DictEnv, steps=20, seed=3, expert_fn=lambda env: GreedyExpert())
    assert report.episodes >= 3  # 8-step episodes
    assert report.expert_successes == 1


class _ObsBreaker(gym.Wrapper):
    """Applies ``fn(obs, state)`` to every observation; ``state`` is a per-wrapper dict."""

    def __init__(self, env: gym.Env, fn) -> None:
        super().__init__(env)
        self.fn = fn
        self.mem: dict = {}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.fn(obs, self.mem), info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return self.fn(obs, self.mem), r, term, trunc, info


def _reuse_buffer(obs, mem):
    """Writes into one cached array and returns it every time (a classic wrapper bug)."""
    buf = mem.setdefault("buf", np.zeros(2, np.float32))
    buf[:] = obs["pos"]
    return {**obs, "pos": buf}


def _alias_keys(obs, mem):
    return {**obs, "pos2": obs["pos"]}


def _float64(obs, mem):
    return {**obs, "pos": obs["pos"].astype(np.float64)}


def _nan(obs, mem):
    pos = obs["pos"].copy()
    pos[0] = np.nan
    return {**obs, "pos": pos}


def _out_of_bounds(obs, mem):
    return {**obs, "pos": obs["pos"] + np.float32(100.0)}


def _missing_key(obs, mem):
    return {"pos": obs["pos"]}


def _noisy(obs, mem):
    rng = np.random.default_rng()  # unseeded: not reproducible
    return {**obs, "pos": (obs["pos"] + rng.normal(0, 1e-3, 2)).astype(np.float32)}


@pytest.mark.parametrize(
    ("fn", "error", "match"),
    [
        (_reuse_buffer, EnvCheckError, "shares memory"),
        (_float64, SpecError, "dtype"),
        (_nan, SpecError, "NaN"),
        (_out_of_bounds, SpecError, "outside"),
        (_missing_key, SpecError, "missing"),
        (_noisy, EnvCheckError, "reset.*different observations"),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_checker_catches_broken_observations(fn, error, match):
    with pytest.raises(error, match=match):
        check_env(lambda: _ObsBreaker(DictEnv(), fn), steps=10)


def test_checker_catches_aliased_arrays_in_one_observation():
    env_fn = lambda: _ObsBreaker(DictEnv(), _alias_keys)  # noqa: E731
    spaces = dict(DictEnv().observation_space.spaces, pos2=DictEnv().observation_space["pos"])

    def make():
        env = env_fn()
        env.observation_space = gym.spaces.Dict(spaces)
        return env

    with pytest.raises(EnvCheckError, match="pos2.*this observation"):
        check_env(make, steps=5)


class _StepBreaker(gym.Wrapper):
    def __init__(self, env: gym.Env, what: str) -> None:
        super().__init__(env)
        self.what = what

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        if self.what == "reward_array":
            r = np.array([r])
        elif self.what == "reward_nan":
            r = float("nan")
        elif self.what == "terminated_int":
            term = int(term)
        elif self.what == "info_none":
            info = None
        elif self.what == "reward_noise":
            r += float(np.random.default_rng().normal(0.0, 1e-6))  # unseeded: not reproducible
        return obs, r, term, trunc, info


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("reward_array", "reward must be a float"),
        ("reward_nan", "not finite"),
        ("terminated_int", "terminated must be a bool"),
        ("info_none", "info must be a dict"),
        ("reward_noise", r"not deterministic: record \d+ \(reward"),
    ],
)
def test_checker_catches_bad_step_returns(what, match):
    with pytest.raises(EnvCheckError, match=match):
        check_env(lambda: _StepBreaker(DictEnv(), what), steps=5)


def test_checker_catches_unrandomised_reset_and_unreachable_success():
    with pytest.raises(EnvCheckError, match="not randomised"):
        check_env(lambda: DictEnv(randomise=False), steps=5)
    check_env(lambda: DictEnv(randomise=False), steps=5, check_reset_varies=False)

    class Lazy(GreedyExpert):
        def act(self, obs, info):
            return np.zeros(2, np.float32)

    with pytest.raises(EnvCheckError, match="none of 2 episodes"):
        check_env(DictEnv, steps=5, expert_fn=lambda env: Lazy(), expert_episodes=2)


def test_checker_catches_seed_ignoring_reset():
    class SelfSeeded(DictEnv):
        def reset(self, *, seed=None, options=None):
            return super().reset(seed=None)  # ignores the seed: fresh entropy each time

    with pytest.raises(EnvCheckError, match="reset|deterministic"):
        check_env(SelfSeeded, steps=5)


def test_twin_env_with_a_shared_buffer_is_caught():
    """The same breakage on the real twin env: a wrapper caching the TCP pose array."""

    def cache_pose(obs, mem):
        buf = mem.setdefault("buf", np.zeros(7, np.float32))
        buf[:] = obs[keys.STATE][keys.TCP_POSE]
        return {**obs, keys.STATE: {**obs[keys.STATE], keys.TCP_POSE: buf}}

    twin = _Twin(sorted(TASKS)[0], OPTIONS[0], EPISODE_STEPS)
    with pytest.raises(EnvCheckError, match="tcp_pose.*shares memory"):
        check_env(lambda: _ObsBreaker(twin.make(), cache_pose), steps=3)


def test_check_observation_accepts_matching_and_names_the_key():
    space = DictEnv().observation_space
    good = {"pos": np.zeros(2, np.float32), "camera": np.zeros((4, 4, 3), np.uint8)}
    check_observation(good, space)
    with pytest.raises(SpecError, match=r"obs\['camera'\].*shape"):
        check_observation({**good, "camera": np.zeros((4, 3, 3), np.uint8)}, space)
