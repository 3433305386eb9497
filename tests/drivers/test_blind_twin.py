"""The twin played as a real robot (setup ``privileged: false``), against the real twin node.

The env must read none of the twin's truth: no ``task/status`` subscription, no success in
``info``, no object state in the observation, and a refusal (with what to do) wherever a run
would need the task's reward or the scripted expert. What the run achieved is scored by the twin
itself (``--score-log``): an episode driven to the reach goal from the observation alone is
recorded as a success there, and one left idle is not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_rl.core import keys

pytest.importorskip("mujoco")

GOAL = np.array([0.5, 0.0, 0.12])  # sim.tasks.reach.GOAL_POS_M: fixed, part of the task's spec


def _setup(path: Path, score_log: Path, privileged: bool) -> Path:
    """A lockstep reach twin without cameras, scoring its episodes into ``score_log``."""
    from record_helpers import lockstep_setup

    raw = yaml.safe_load(lockstep_setup(path).read_text())
    raw.update(task="reach", privileged=privileged)
    raw["nodes"][0]["args"] += ["--score-log", str(score_log)]
    path.write_text(yaml.safe_dump(raw))
    return path


def _drive_to_goal(env, obs, steps: int) -> list[dict]:
    """A proportional controller on the observed TCP position (robot state only)."""
    infos = []
    scale = env.unwrapped.config.action_scale_m
    for _ in range(steps):
        tcp = np.asarray(obs[keys.STATE][keys.TCP_POSE][:3], dtype=np.float64)
        a = np.zeros(4, dtype=np.float32)
        a[:3] = np.clip((GOAL - tcp) / scale, -1.0, 1.0)
        obs, _, terminated, truncated, info = env.step(a)
        infos.append(info)
        if terminated or truncated:
            break
    return infos


def test_a_blind_run_reads_no_truth_and_the_twin_scores_it(tmp_path: Path, a2_domain: int) -> None:
    from drivers.ros.graph import topic_subscribers
    from drivers.ros_task import RosTwinSceneTask, RosTwinTask, RosTwinTaskConfig
    from robot_rl.app.nodes.ros_env import make_ros_env
    from sim.scoring import read_scores

    scores = tmp_path / "scores.jsonl"
    setup = _setup(tmp_path / "blind.yaml", scores, privileged=False)
    with pytest.raises(ValueError, match="privileged: false.*learned reward"):
        make_ros_env(setup, domain_id=a2_domain, launch=True, log_dir=tmp_path / "logs0")

    env, backend = make_ros_env(
        setup,
        domain_id=a2_domain,
        launch=True,
        log_dir=tmp_path / "logs",
        control_rotation=False,
        needs_task_reward=False,
        max_episode_steps=60,
    )
    try:
        assert isinstance(backend.task, RosTwinSceneTask)
        with pytest.raises(ValueError, match="privileged: false"):
            backend.make_expert()
        obs, info = env.reset(seed=0)
        assert keys.INFO_SUCCESS not in info and info[keys.INFO_PRIVILEGED] == {}
        infos = _drive_to_goal(env, obs, 60)  # episode 1: to the goal
        assert all(keys.INFO_SUCCESS not in i and i[keys.INFO_PRIVILEGED] == {} for i in infos)
        assert len(infos) == 60, "nothing the env reads may end the episode on success"
        obs, _ = env.reset(seed=1)
        for _ in range(5):  # episode 2: held still, far from the goal
            env.step(np.zeros(4, dtype=np.float32))
        env.reset(seed=2)  # closes episode 2

        # Nothing in this process subscribes to the twin's truth; the robot state is (so the
        # graph query sees this process's subscriptions).
        node = backend.session.node
        assert node.count_subscribers(backend.session.topic("task/status")) == 0
        assert node.count_subscribers(backend.session.topic("robot_state")) >= 1
        # The graph probe `robot-rl rehearse` enforces with sees a reader when there is one.
        RosTwinTask(RosTwinTaskConfig("reach"), lambda: 0.0, backend.session).connect()
        seen = topic_subscribers(a2_domain, "/arm/task/status", "robot_rl_env", 30.0)
        assert seen == ["robot_rl_env"]
    finally:
        env.close()
        backend.close()  # stops the twin: the open episode 3 is written as "stop"

    recs = read_scores(scores)
    assert [r["episode"] for r in recs] == [0, 1, 2, 3]
    assert [r["end"] for r in recs] == ["reset", "reset", "reset", "stop"]
    one, two = recs[1], recs[2]
    assert one["success"] and one["first_success_sim_s"] is not None
    assert not two["success"] and two["first_success_sim_s"] is None
    assert one["sim_s"] > two["sim_s"] > 0.0
    assert one["wall_end"] >= one["wall_start"]


def test_privileged_is_twin_only_in_the_setup_schema(tmp_path: Path) -> None:
    from drivers.setup import SetupError, parse_setup

    base = {"robot": "hardware", "task": "t", "reset_pose": [0.5, 0, 0.2, 0, 1, 0, 0],
            "nodes": [{"name": "a", "module": "m"}]}  # fmt: skip
    assert parse_setup(base).privileged is False
    with pytest.raises(SetupError, match="privileged: a real robot has no sim truth"):
        parse_setup({**base, "privileged": True})
    twin = {"robot": "twin", "task": "reach", "nodes": [{"name": "a", "module": "m"}]}
    assert parse_setup(twin).privileged is True
    assert parse_setup({**twin, "privileged": False}).privileged is False
    with pytest.raises(SetupError, match="privileged"):
        parse_setup({**twin, "privileged": "no"})


def _cli(args: list[str], domain: int, timeout_s: float = 300) -> dict:
    import json

    from record_helpers import run_cli

    return json.loads(run_cli(args, domain, timeout_s)[0])


def test_record_and_label_on_a_blind_twin_take_success_from_the_humans_button(
    tmp_path: Path, a2_domain: int
) -> None:
    """The simulated human (its own node, which may read the truth) presses success as a
    person would; record keeps its episodes as successes and label marks positive frames, with
    no task reference (-1) and no truth read by the recorder."""
    from record_helpers import lockstep_setup

    from robot_rl.app.teleop.label import read_frames
    from robot_rl.replay import EpisodeLog

    raw = yaml.safe_load(lockstep_setup(tmp_path / "s.yaml", cameras=("front",)).read_text())
    setup = tmp_path / "blind.yaml"
    setup.write_text(yaml.safe_dump({**raw, "task": "reach", "privileged": False}))
    common = ["--setup", str(setup), "--launch", "--teleop", "sim-expert"]
    common += ["--realtime-factor", "0", "--json", "--log-dir", str(tmp_path / "logs")]

    demos = tmp_path / "demos.zarr"
    res = _cli(["record", *common, "--out", str(demos), "--episodes", "3"], a2_domain)
    with EpisodeLog.open(demos, unfinished="drop", mode="r") as log:
        meta, eps = dict(log.meta), [e for e in log.episodes]
    assert meta["success_from"] == "buttons", res
    assert [e.success for e in eps] == [True, True, True], res  # the button, not the task
    assert all(e.length < 50 for e in eps), "success (the button) ends the episode"

    frames = tmp_path / "frames.zarr"
    args = ["label", *common, "--out", str(frames), "--episodes", "2"]
    _cli([*args, "--max-episode-steps", "40"], a2_domain)
    f = read_frames(frames)
    assert 0 < int(f["label"].sum()) < len(f["label"])  # held once the goal is reached
    assert (f["task_success"] == -1).all()  # nothing read the task's success
    with pytest.raises(AssertionError, match="success-from task"):
        _cli(["record", *common, "--out", str(tmp_path / "x.zarr"), "--episodes", "1",
              "--success-from", "task"], a2_domain)  # fmt: skip


def test_label_with_near_misses_shows_the_classifier_failures_that_look_like_success(
    tmp_path: Path, a2_domain: int
) -> None:
    """`label --teleop sim-expert --sim-near-miss-every 2`: every second episode the simulated
    human grasps the cube and holds it low, short of success, and never presses the button;
    the others end in a lift with the button held. `--sim-near-miss-margin` reaches the
    simulated human's node (a margin it refused would leave label without a teleop)."""
    from record_helpers import lockstep_setup

    from robot_rl.app.teleop.label import read_frames

    raw = yaml.safe_load(lockstep_setup(tmp_path / "s.yaml", cameras=("front",)).read_text())
    setup = tmp_path / "blind.yaml"
    setup.write_text(yaml.safe_dump({**raw, "task": "pick_cube", "privileged": False}))
    frames = tmp_path / "frames.zarr"
    args = ["label", "--setup", str(setup), "--launch", "--teleop", "sim-expert"]
    args += ["--realtime-factor", "0", "--json", "--log-dir", str(tmp_path / "logs")]
    args += ["--out", str(frames), "--episodes", "2", "--sim-near-miss-every", "2"]
    _cli([*args, "--sim-near-miss-margin", "0.9", "--max-episode-steps", "60"], a2_domain)
    f = read_frames(frames)
    per_episode = [int(f["label"][f["episode"] == e].sum()) for e in (0, 1)]
    assert per_episode[0] > 0 and per_episode[1] == 0, per_episode
    # the near miss moved: the arm went down to the cube and closed (not an idle episode)
    g = f["obs"]["state"][f["episode"] == 1]
    assert np.ptp(g[:, 2]) > 0.03, "the near-miss episode never reached down to the cube"
    with pytest.raises(AssertionError, match="sim-expert"):
        _cli([*args[:4], "--out", str(tmp_path / "x.zarr"), "--sim-near-miss-every", "2"],
             a2_domain)  # fmt: skip
    with pytest.raises(AssertionError, match="--sim-near-miss-margin must be in"):
        other = [str(tmp_path / "y.zarr") if a == str(frames) else a for a in args]
        _cli([*other, "--sim-near-miss-margin", "1"], a2_domain)
