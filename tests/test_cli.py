"""The ``robot-rl`` command line, run as a real subprocess, and the composition root."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REQUIRED_KEYS = {"task", "episodes", "success_rate", "mean_return", "mean_length", "seed"}


def robot_rl(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m robot_rl.cli.main ARGS`` headless; capture stdout and stderr."""
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"))
    return subprocess.run(
        [sys.executable, "-m", "robot_rl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def rollout_json(*args: str) -> dict:
    proc = robot_rl("rollout", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must hold exactly one JSON object, got: {proc.stdout!r}"
    return json.loads(lines[0])


def test_rollout_json_reports_required_keys_and_seeds_per_episode():
    args = ("--task", "pick_cube", "--policy", "random", "--episodes", "2", "--seed", "7")
    out = rollout_json(*args, "--max-episode-steps", "8")
    assert REQUIRED_KEYS <= set(out)
    assert out["task"] == "pick_cube" and out["policy"] == "random" and out["episodes"] == 2
    assert [ep["seed"] for ep in out["per_episode"]] == [7, 8]
    assert all(1 <= ep["length"] <= 8 for ep in out["per_episode"])
    assert out["mean_length"] == pytest.approx(np.mean([e["length"] for e in out["per_episode"]]))
    assert out["mean_return"] == pytest.approx(np.mean([e["return"] for e in out["per_episode"]]))
    assert 0.0 <= out["success_rate"] <= 1.0


def test_rollout_is_reproducible_under_a_seed():
    args = ("--policy", "random", "--episodes", "2", "--max-episode-steps", "6", "--seed", "3")
    a, b = rollout_json(*args), rollout_json(*args)
    assert a["per_episode"] == b["per_episode"]
    c = rollout_json("--policy", "random", "--episodes", "2", "--max-episode-steps", "6")
    assert [e["return"] for e in c["per_episode"]] != [e["return"] for e in a["per_episode"]]


def test_scripted_expert_solves_pick_cube():
    out = rollout_json("--task", "pick_cube", "--policy", "scripted", "--episodes", "4")
    assert out["success_rate"] >= 0.75, out["per_episode"]
    # Success ends an episode early (terminate_on_success): lengths below the step limit.
    assert min(e["length"] for e in out["per_episode"] if e["success"]) < 100


def test_scripted_expert_acts_through_action_wrappers():
    # The expert's base-frame actions go through RelativeFrame / GripperDiscretize inverses.
    args = ("--policy", "scripted", "--episodes", "3", "--no-control-rotation")
    out = rollout_json(*args, "--relative-frame", "--gripper-discretize", "--flatten-state")
    assert out["success_rate"] >= 2 / 3, out["per_episode"]
    assert out["wrappers"]["relative_frame"] and out["wrappers"]["gripper_discretize"]


def test_video_is_a_readable_mp4_of_the_right_size(tmp_path):
    from robot_rl.app.envs.video import video_frame_shape

    path = tmp_path / "sub" / "out.mp4"
    out = rollout_json(
        "--policy", "zero", "--episodes", "2", "--max-episode-steps", "5",
        "--image-size", "64", "--video", str(path), "--video-episodes", "1",
    )  # fmt: skip
    assert path.exists() and path.stat().st_size > 0
    frames = _read_mp4(path)
    # First episode only: the reset frame plus one per step.
    assert out["video_frames"] == 6
    assert len(frames) == 6
    assert frames[0].shape == video_frame_shape([(64, 64, 3), (64, 64, 3)])
    # The camera area is not black (something was rendered below the banner).
    assert frames[0][16:, :, :].mean() > 10


def _read_mp4(path) -> list[np.ndarray]:
    """Decode every frame with imageio's ffmpeg plugin (imageio-ffmpeg's bundled binary)."""
    import imageio.v2 as imageio

    with imageio.get_reader(str(path), format="FFMPEG") as reader:
        return [np.asarray(f) for f in reader]


def test_unknown_task_fails_and_lists_known_tasks():
    proc = robot_rl("rollout", "--task", "stack_blocks", "--episodes", "1")
    assert proc.returncode == 2
    assert "unknown task 'stack_blocks'" in proc.stderr
    assert "pick_cube" in proc.stderr
    assert proc.stdout.strip() == ""


@pytest.mark.parametrize("args", [("NOSUCH",), ("NOSUCH", "--help"), ("--help", "NOSUCH")])
def test_an_unknown_subcommand_is_an_error_that_lists_the_subcommands(args):
    """Also with --help: the top-level help with exit 0 read as if the command existed."""
    proc = robot_rl(*args, timeout_s=60)
    assert proc.returncode == 2
    assert "unknown subcommand 'NOSUCH'" in proc.stderr
    assert "rehearse" in proc.stderr and "train" in proc.stderr
    assert proc.stdout.strip() == ""


def test_every_subcommand_help_says_what_it_does_in_plain_words():
    proc = robot_rl("--help", timeout_s=60)
    assert proc.returncode == 0
    assert "``" not in proc.stdout and "module docstring" not in proc.stdout


def test_invalid_options_fail_with_a_message():
    proc = robot_rl("rollout", "--episodes", "0")
    assert proc.returncode != 0
    assert "episodes must be >= 1" in proc.stderr
    proc = robot_rl("rollout", "--episodes", "1", "--sim-hz", "333")
    assert proc.returncode == 2
    assert "not a whole number" in proc.stderr


def test_envs_json_lists_pick_cube_with_specs():
    proc = robot_rl("envs", "--json")
    assert proc.returncode == 0, proc.stderr
    tasks = {t["name"]: t for t in json.loads(proc.stdout)["tasks"]}
    assert "pick_cube" in tasks
    pick = tasks["pick_cube"]
    assert pick["description"]
    assert pick["action_spec"] == {"shape": [7], "dtype": "float32", "low": -1.0, "high": 1.0}
    assert pick["observation_spec"]["state"]["tcp_pose"]["shape"] == [7]
    assert "images" not in pick["observation_spec"]  # default: state-only
    assert (pick["action_scale_m"], pick["learner_fixed_gripper"]) == (0.02, None)
    peg = tasks["peg_insert"]
    assert (peg["action_scale_m"], peg["learner_fixed_gripper"]) == (0.01, 1.0)
    for t in tasks.values():  # the shaped cost is marked privileged, the sparse one is not
        assert t["rewards"]["shaped"].startswith("privileged")
        assert "privileged" not in t["rewards"]["sparse"]


def test_envs_for_the_so101_lists_its_tasks_in_its_size():
    proc = robot_rl("envs", "--json", "--arm", "so101")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    tasks = {t["name"]: t for t in out["tasks"]}
    assert out["arm"] == "so101" and sorted(tasks) == ["pick_cube", "reach"]  # no peg_insert
    pick = tasks["pick_cube"]
    assert pick["action_scale_m"] == pytest.approx(0.008)
    assert pick["default_safety"]["workspace_high_m"][0] <= 0.27
    assert "On the so101 twin, distances and heights are 0.4" in pick["description"]
    proc = robot_rl("envs", "--arm", "ur10")
    assert proc.returncode != 0 and "the twin has" in proc.stderr


def test_configure_headless_gl_respects_explicit_choice():
    from robot_rl.cli.main import configure_headless_gl

    env: dict[str, str] = {}
    if sys.platform.startswith("linux"):
        assert configure_headless_gl(env) == "osmesa"
    env = {"MUJOCO_GL": "egl"}
    assert configure_headless_gl(env) == "egl"
    env = {"DISPLAY": ":0"}
    assert configure_headless_gl(env) is None and "MUJOCO_GL" not in env


def test_make_env_composes_wrappers_and_out_of_band_cameras():
    from robot_rl.app.envs.build import EnvSetup, WrapperConfig, make_env_from_setup
    from robot_rl.core import keys

    setup = EnvSetup(
        task="pick_cube",
        image_size=32,
        control_rotation=False,
        max_episode_steps=3,
        wrappers=WrapperConfig(relative_frame=True, flatten_state=True),
    )
    env, backend = make_env_from_setup(setup, extra_cameras=("front",))
    try:
        obs, _ = env.reset(seed=0)
        assert keys.IMAGES not in obs  # the video camera stays out of the observation
        assert [c.name for c in backend.cameras] == ["front"]
        assert obs[keys.STATE].ndim == 1 and obs[keys.STATE].dtype == np.float32
        assert env.observation_space[keys.STATE].contains(obs[keys.STATE])
        assert env.action_space.shape == (4,)
        steps = 0
        while True:
            *_, terminated, truncated, _ = env.step(env.action_space.sample())
            steps += 1
            if terminated or truncated:
                break
        assert steps <= 3
    finally:
        env.close()


@pytest.mark.parametrize("control_rotation", [True, False])
def test_base_to_policy_action_reproduces_the_base_command(control_rotation):
    from robot_rl.app.envs.build import (
        EnvSetup,
        WrapperConfig,
        base_to_policy_action,
        make_env_from_setup,
    )
    from robot_rl.core import keys

    base_setup = EnvSetup(task="pick_cube", control_rotation=control_rotation)
    wrapped = WrapperConfig(relative_frame=True, gripper_discretize=True, flatten_state=True)
    plain, b1 = make_env_from_setup(base_setup)
    env, b2 = make_env_from_setup(dataclasses.replace(base_setup, wrappers=wrapped))
    rng = np.random.default_rng(0)
    try:
        plain.reset(seed=5)
        env.reset(seed=5)
        to_policy = base_to_policy_action(env)
        for _ in range(6):
            a = rng.uniform(-0.5, 0.5, plain.action_space.shape)
            a[-1] = rng.choice([-1.0, 1.0])  # the discretised gripper reproduces only +-1
            a_policy = to_policy(a)
            _, r1, *_, info1 = plain.step(a.astype(np.float32))
            _, r2, *_, info2 = env.step(a_policy)
            cmd1, cmd2 = info1[keys.INFO_COMMAND], info2[keys.INFO_COMMAND]
            np.testing.assert_allclose(cmd2, cmd1, atol=1e-5)
            assert r1 == pytest.approx(r2, abs=1e-5)
        assert not np.allclose(a_policy[:3], a[:3])  # the TCP frame is not the base frame
    finally:
        for e, b in ((plain, b1), (env, b2)):
            e.close()
            b.close()
