"""ForeignEnv: envs we did not write, mapped to the learner's observation, actions and success
(robot_rl.wrappers.foreign_env), on small envs whose spaces take the common shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.core import keys
from robot_rl.replay import ObsAdapter
from robot_rl.wrappers.foreign_env import ForeignEnv, ForeignEnvError, ObsMapping, plan_mapping

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_helpers import run_cli  # noqa: E402


class ToyEnv(gym.Env):
    """An env with a given observation and action space; obs are the space's samples, seeded."""

    def __init__(self, obs_space: gym.Space, act_space: gym.Space | None = None, info=None):
        self.observation_space = obs_space
        self.action_space = act_space or gym.spaces.Box(-2.0, 4.0, (3,), np.float32)
        self.info = info if info is not None else {"is_success": False}
        self.last_action = None
        self.reward = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), dict(self.info)

    def step(self, action):
        self.last_action = np.asarray(action)
        return self.observation_space.sample(), self.reward, False, False, dict(self.info)


def box(*shape, dtype=np.float32):
    if dtype == np.uint8:
        return gym.spaces.Box(0, 255, shape, np.uint8)
    return gym.spaces.Box(-1.0, 1.0, shape, dtype)


def test_a_flat_box_is_the_state_and_actions_map_from_minus_one_one_to_the_bounds() -> None:
    inner = ToyEnv(box(5))
    env = ForeignEnv(inner)
    obs, info = env.reset(seed=0)
    assert obs[keys.STATE].shape == (5,) and obs[keys.STATE].dtype == np.float32
    assert info[keys.INFO_SUCCESS] is False
    env.step(np.array([-1.0, 0.0, 1.0]))
    np.testing.assert_allclose(inner.last_action, [-2.0, 1.0, 4.0])
    env.step(np.array([-5.0, 0.5, 9.0]))  # clipped to [-1, 1] first: never past the bounds
    np.testing.assert_allclose(inner.last_action, [-2.0, 2.5, 4.0])
    with pytest.raises(ForeignEnvError, match="finite"):
        env.step(np.array([np.nan, 0.0, 0.0]))
    assert ObsAdapter(env.observation_space).layout.state_dim == 5


def test_a_dict_with_nested_cameras_gives_state_and_resized_square_images() -> None:
    space = gym.spaces.Dict(
        {
            "agent": gym.spaces.Dict({"qpos": box(7), "qvel": box(7)}),
            "pixels": gym.spaces.Dict(
                {"front": box(48, 64, 3, dtype=np.uint8), "wrist": box(32, 32, 4, dtype=np.uint8)}
            ),
            "mask": box(4, 4),  # 2-D, not an image: left out, with why
            "mode": gym.spaces.Discrete(3),
        }
    )
    env = ForeignEnv(ToyEnv(space), ObsMapping(image_size=16))
    plan = env.plan.describe()
    assert [p["path"] for p in plan["state"]] == ["agent.qpos", "agent.qvel"]
    assert plan["cameras"] == {"front": "pixels.front", "wrist": "pixels.wrist"}
    why = {p["path"]: p["why"] for p in plan["left_out"]}
    assert "not an (H, W, 3) image" in why["mask"] and "Discrete" in why["mode"]
    obs, _ = env.reset(seed=1)
    assert obs[keys.STATE].shape == (14,)
    assert obs[keys.IMAGES]["front"].shape == (16, 16, 3)
    assert obs[keys.IMAGES]["wrist"].shape == (16, 16, 3)  # alpha dropped
    layout = ObsAdapter(env.observation_space).layout
    assert layout.state_dim == 14 and set(layout.images) == {"front", "wrist"}


def test_a_goal_env_takes_observation_and_desired_goal() -> None:
    space = gym.spaces.Dict(
        {"observation": box(10), "achieved_goal": box(3), "desired_goal": box(3)}
    )
    env = ForeignEnv(ToyEnv(space))
    assert [p for p, _ in env.plan.state] == ["desired_goal", "observation"]
    assert env.plan.left_out[0][0] == "achieved_goal"
    kept = ForeignEnv(ToyEnv(space), ObsMapping(state=("observation", "achieved_goal")))
    assert kept.plan.state_dim == 13


def test_success_from_the_info_key_the_named_key_or_the_reward() -> None:
    inner = ToyEnv(box(2), info={"success": 1.0})
    env = ForeignEnv(inner)
    env.reset(seed=0)
    assert env.step(np.zeros(3))[4][keys.INFO_SUCCESS] is True
    inner = ToyEnv(box(2), info={"done_ok": 0})
    env = ForeignEnv(inner, ObsMapping(success_key="done_ok"))
    env.reset(seed=0)
    assert env.step(np.zeros(3))[4][keys.INFO_SUCCESS] is False
    inner = ToyEnv(box(2), info={})
    env = ForeignEnv(inner, ObsMapping(success_reward_at=0.0))
    env.reset(seed=0)
    inner.reward = -1.0
    assert env.step(np.zeros(3))[4][keys.INFO_SUCCESS] is False
    inner.reward = 0.0
    assert env.step(np.zeros(3))[4][keys.INFO_SUCCESS] is True
    env = ForeignEnv(ToyEnv(box(2), info={}))
    env.reset(seed=0)
    with pytest.raises(ForeignEnvError, match="--success-key"):
        env.step(np.zeros(3))


@pytest.mark.parametrize(
    "act, match",
    [
        (gym.spaces.Discrete(4), "not a Box"),
        (gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "unbounded"),
        (gym.spaces.Box(-1, 1, (2, 2), np.float32), "not 1-D"),
    ],
)
def test_action_spaces_the_learner_cannot_use_are_refused_saying_why(act, match) -> None:
    with pytest.raises(ForeignEnvError, match=match):
        plan_mapping(ToyEnv(box(3), act))


def test_an_observation_with_nothing_usable_and_wrong_names_are_refused() -> None:
    with pytest.raises(ForeignEnvError, match="nothing of the observation is usable"):
        plan_mapping(ToyEnv(gym.spaces.Dict({"t": gym.spaces.Text(5)})))
    with pytest.raises(ForeignEnvError, match="no part 'agent.qacc'.*agent.qpos"):
        plan_mapping(
            ToyEnv(gym.spaces.Dict({"agent": gym.spaces.Dict({"qpos": box(2)})})),
            ObsMapping(state=("agent.qacc",)),
        )
    same = gym.spaces.Dict(
        {"a": gym.spaces.Dict({"rgb": box(8, 8, 3, dtype=np.uint8)}),
         "b": gym.spaces.Dict({"rgb": box(8, 8, 3, dtype=np.uint8)})}
    )  # fmt: skip
    with pytest.raises(ForeignEnvError, match="share a name"):
        plan_mapping(ToyEnv(same))
    env = ForeignEnv(ToyEnv(same), ObsMapping(cameras=("left=a.rgb", "right=b.rgb")))
    assert dict(env.plan.cameras) == {"left": "a.rgb", "right": "b.rgb"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def test_envs_env_prints_the_mapping_of_a_registered_module_env_and_refuses_unknown_ids() -> None:
    proc = _cli("envs", "--env", "toy_foreign_envs:ToyPointPixels-v0", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["id"] == "ToyPointPixels-v0" and out["max_episode_steps"] == 20
    assert out["mapping"]["cameras"] == {"top": "pixels.top"}
    assert [p["path"] for p in out["mapping"]["state"]] == ["agent.pos"]
    assert out["mapping"]["action_high"] == [0.05, 0.05]
    proc = _cli("envs", "--env", "toy_foreign_envs:ToyPointGoal-v0", "--env-state", "nothing")
    assert proc.returncode == 2 and "no part 'nothing'" in proc.stderr
    proc = _cli("envs", "--env", "ToyPointGoal-v9")
    assert proc.returncode == 2 and "not a registered gymnasium id" in proc.stderr
    proc = _cli("envs", "--env", "no_such_module_here:Toy-v0")
    assert proc.returncode == 2 and "cannot import module 'no_such_module_here'" in proc.stderr


def test_collect_train_and_eval_a_foreign_env_from_the_command_line(tmp_path: Path) -> None:
    """The user's path with a gymnasium env robot_rl did not write: demos from their scripted
    policy (module:function, in the env's own units), training on the env's success as the
    sparse reward, evaluation of the run; success rises from where it started."""
    env = ["--env", "toy_foreign_envs:ToyPointGoal-v0", "--task-reward", "sparse"]
    demos = tmp_path / "demos.zarr"
    proc = _cli("collect", *env, "--policy", "toy_foreign_envs:goal_expert", "--episodes", "10",
                "--out", str(demos), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["episodes_written"] == 10 and out["mean_return"] == 1.0  # success ends each
    run = tmp_path / "run"
    proc = _cli("train", *env, "--obs", "state", "--demos", str(demos), "--steps", "1000",
                "--eval-every-steps", "250", "--run", str(run), "--no-progress",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["task"] == "toy_foreign_envs:ToyPointGoal-v0"
    curve = [json.loads(s)["success_rate"] for s in (run / "eval.jsonl").read_text().splitlines()]
    assert curve[0] <= 0.4 and max(curve) >= 0.8, curve
    proc = _cli("eval", "--run", str(run), "--episodes", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["success_rate"] >= 0.6
    # Demos of another env setting are refused, saying which setting differs.
    proc = _cli("train", "--env", "toy_foreign_envs:ToyPointGoal-v0", "--obs", "state",
                "--demos", str(demos), "--steps", "10", "--run", str(tmp_path / "r2"))  # fmt: skip
    assert proc.returncode == 2 and "task_reward" in proc.stderr
    proc = _cli("collect", *env, "--policy", "toy_foreign_envs:no_such_function", "--out",
                str(tmp_path / "d2.zarr"))  # fmt: skip
    assert proc.returncode == 2 and "cannot load it" in proc.stderr
    proc = _cli("train", *env, "--gripper-discretize", "--run", str(tmp_path / "r3"))
    assert proc.returncode == 2 and "--gripper-discretize" in proc.stderr


def test_rollout_runs_a_scripted_policy_written_for_a_foreign_env() -> None:
    env = ("--env", "toy_foreign_envs:ToyPointGoal-v0")
    proc = _cli("rollout", *env, "--policy", "toy_foreign_envs:goal_expert", "--episodes", "5",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["task"] == "toy_foreign_envs:ToyPointGoal-v0" and out["success_rate"] == 1.0
    proc = _cli("rollout", *env, "--policy", "random", "--episodes", "5", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["success_rate"] < 1.0
    proc = _cli("rollout", *env, "--video", "x.mp4")
    assert proc.returncode == 2 and "without video" in proc.stderr


def test_env_kwargs_reach_gym_make_and_a_phased_policy_object_is_reset_each_episode() -> None:
    proc = _cli("envs", "--env", "toy_foreign_envs:ToyPointGoal-v0", "--env-kwargs",
                '{"pixels": true}', "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["mapping"]["cameras"] == {"top": "pixels.top"}
    proc = _cli("envs", "--env", "toy_foreign_envs:ToyPointGoal-v0", "--env-kwargs", "[1]")
    assert proc.returncode == 2 and "must be a JSON object" in proc.stderr
    proc = _cli("collect", "--env-kwargs", "{}", "--out", "x.zarr")
    assert proc.returncode == 2 and "add --env ID" in " ".join(proc.stderr.split())
    # A policy with phases: without a reset per episode it would stay in its y phase.
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.app.envs.policies import make_policy

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import toy_foreign_envs

    env, backend = make_env_from_setup(
        LearnerEnvConfig(env="toy_foreign_envs:ToyPointGoal-v0").env_setup()
    )
    policy = make_policy("toy_foreign_envs:axis_by_axis", env, backend)
    wins = 0
    for seed in range(5):
        obs, info = env.reset(seed=seed)
        policy.reset(np.random.default_rng(seed))
        for _ in range(20):
            obs, _, term, trunc, info = env.step(policy.act(obs, info))
            if term or trunc:
                break
        wins += bool(info[keys.INFO_SUCCESS])
    env.close()
    assert toy_foreign_envs.axis_by_axis.resets == 5 and wins == 5


def test_a_foreign_envs_demos_go_out_as_lerobot_and_come_back_to_train(tmp_path: Path) -> None:
    """The worked example of docs/your_env.md: demos of a foreign env exported as a LeRobot
    dataset, imported back, and trained from (the import keeps actions and states)."""
    pytest.importorskip("pyarrow")
    env = ["--env", "toy_foreign_envs:ToyPointGoal-v0", "--task-reward", "sparse"]
    demos, out, back = tmp_path / "demos.zarr", tmp_path / "demos_lerobot", tmp_path / "back.zarr"
    proc = _cli("collect", *env, "--policy", "toy_foreign_envs:goal_expert", "--episodes", "8",
                "--out", str(demos))  # fmt: skip
    assert proc.returncode == 0 and "episodes of toy_foreign_envs:ToyPointGoal-v0" in proc.stdout
    proc = _cli("dataset", "export", str(demos), "--format", "lerobot", "--out", str(out))
    assert proc.returncode == 2 and "pass --fps" in proc.stderr  # no time stamps to tell it
    proc = _cli("dataset", "export", str(demos), "--format", "lerobot", "--fps", "10",
                "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "task 'toy_foreign_envs:ToyPointGoal-v0'" in proc.stdout
    proc = _cli("dataset", "import", str(out), "--out", str(back), "--json")
    assert proc.returncode == 0, proc.stderr
    from robot_rl.replay import EpisodeLog

    logs = [EpisodeLog.open(p) for p in (demos, back)]
    try:
        a, b = ([lg.read_episode(i) for i in range(lg.num_episodes)] for lg in logs)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x["action"], y["action"])
            np.testing.assert_allclose(x["obs"]["state"], y["obs"]["state"], rtol=1e-6)
    finally:
        for lg in logs:
            lg.close()
    proc = _cli("train", *env, "--demos", str(back), "--steps", "300", "--eval-every-steps",
                "300", "--eval-episodes", "2", "--run", str(tmp_path / "run"), "--no-progress",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["demo_transitions"] == sum(len(x["action"]) for x in a)
