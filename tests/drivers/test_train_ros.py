"""`robot-rl train --setup`: training against the lockstep twin behind ROS 2, with the
simulated human (sim.human_node) taking over through the teleop topics.

- train --human sim (everything started by the CLI, --launch): the run finishes; intervened
  transitions carry the human's action (!= the policy's proposal), the others the policy's own;
  the episode metadata count the takeovers; every answer of the human arrived before its step;
  evaluations (on the same twin) never cut into a training episode (each episode's stamps run
  0.1, 0.2, ... without a reset in between); --resume continues the run's counters and log;
- the same with --human none has no intervened step;
- a hardware setup is refused before anything starts without a learned reward;
- --reward rm/: a classifier (trained here on a few twin frames) labels every step; its cameras
  are subscribed beside the state observation and resized from 128 to its 64 x 64;
- RosTeleop waits for the joy message of an answer and drops latches of an earlier episode;
  the first answer of a session is awaited past the per-step timeout (discovery);
  the human node answers once per control period of a real-time twin's 100 Hz statuses.

ROS domain ids: the h9_domain fixture (60..69, leased across processes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("mujoco")

from record_helpers import lockstep_setup, run_cli  # noqa: E402
from sensor_msgs.msg import Joy  # noqa: E402

from drivers.ros import convert, qos  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DT_S = 0.1  # control period of the test setup


def _train(tmp_path: Path, domain: int, run: Path, *extra: str, timeout_s: float = 240):
    setup = lockstep_setup(tmp_path / "setup.yaml")  # task pick_cube; --task reach overrides it
    args = ["train", "--setup", str(setup), "--launch", "--task", "reach", "--obs", "state"]
    args += ["--run", str(run), "--learning-starts", "64", "--random-steps", "100"]
    args += ["--eval-episodes", "1", "--log-dir", str(tmp_path / "logs"), "--json"]
    args += ["--no-progress", *extra]
    stdout, text = run_cli(args, domain, timeout_s)
    return json.loads(stdout), text


def _episodes(run: Path) -> list[dict]:
    from robot_rl.replay import EpisodeLog

    with EpisodeLog.open(run / "log.zarr", unfinished="error", mode="r") as log:
        return [log.read_episode(e.index) for e in log.episodes]


def _evals(run: Path) -> list[dict]:
    return [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]


def _check_continuous(episodes: list[dict]) -> None:
    """No reset (an evaluation) inside a training episode: stamps step by one period."""
    for ep in episodes:
        n = ep["meta"].length
        np.testing.assert_allclose(ep["stamp_s"], DT_S * np.arange(1, n + 1), atol=1e-6)


def _nodes_stopped(tmp_path: Path) -> None:
    for f in (tmp_path / "logs").rglob("up.json"):
        assert all(n["pid"] is None for n in json.loads(f.read_text())["nodes"]), f


def test_train_with_the_simulated_human_over_ros(tmp_path: Path, h9_domain: int) -> None:
    run = tmp_path / "hil"
    result, _ = _train(tmp_path, h9_domain, run, "--human", "sim", "--steps", "160")
    _train_checks(run, result, steps=160)
    _nodes_stopped(tmp_path)

    # --resume continues the run: counters and interventions from the log, new steps appended.
    before = _episodes(run)
    resumed, _ = _train(
        tmp_path, h9_domain, run, "--resume", "--steps", "220", "--eval-every-steps", "1000"
    )
    assert resumed["env_steps"] == 220 and resumed["human"] == "sim"
    assert resumed["updates"] > result["updates"]
    after = _episodes(run)
    assert len(after) > len(before)
    for a, b in zip(before, after, strict=False):
        np.testing.assert_array_equal(a["action"], b["action"])
    _train_checks(run, resumed, steps=220)
    assert resumed["interventions"] >= result["interventions"]


def _train_checks(run: Path, result: dict, steps: int) -> None:
    assert result["env_steps"] == steps and result["setup"].endswith("setup.yaml")
    assert result["late_teleop_answers"] == 0, result  # every answer arrived before its step
    episodes = _episodes(run)
    assert sum(ep["meta"].length for ep in episodes) == steps
    intervened = np.concatenate([ep["intervened"] for ep in episodes])
    assert 0 < intervened.sum() < steps, intervened
    for ep in episodes:
        iv = ep["intervened"]
        diff = np.abs(ep["action"] - ep["policy_action"]).max(axis=1)
        assert (diff[iv] > 1e-6).all(), "a takeover stored the policy's own action"
        np.testing.assert_array_equal(ep["action"][~iv], ep["policy_action"][~iv])
        onsets = int(np.sum(iv & ~np.concatenate([[False], iv[:-1]])))
        assert ep["meta"].extra["interventions"] == onsets
        assert ep["meta"].extra["intervened_steps"] == int(iv.sum())
    assert sum(ep["meta"].extra["interventions"] for ep in episodes) == result["interventions"]
    assert result["interventions"] > 0 and result["intervened_steps"] == intervened.sum()
    # The human (reach expert) drives to the target: a takeover ends in success.
    assert any(ep["meta"].success and ep["intervened"].any() for ep in episodes)
    _check_continuous(episodes)
    # Each step used the human's answer to the observation it was taken from: replaying the
    # takeover rule on the logged rewards gives exactly the logged intervened steps (an answer
    # one step late would shift them).
    for ep in episodes:
        np.testing.assert_array_equal(ep["intervened"], _expected_intervened(ep["reward"]))


class _Still:
    """Stands in for the reach expert when only WHEN the human takes over is replayed (the rule
    reads rewards only; where the expert moves needs the twin's privileged state)."""

    def reset(self, rng) -> None:
        pass

    def act(self, obs, info):
        return np.zeros(4)


def _expected_intervened(rewards: np.ndarray, hold_steps: int = 5) -> np.ndarray:
    """The intervened flags of an episode: the train defaults' no_progress rule
    (sim.human.SimulatedHuman) on ``rewards``, plus the intervention wrapper's hold window."""
    from sim.human import HumanConfig, SimulatedHuman

    human = SimulatedHuman(_Still(), HumanConfig())
    human.reset(np.random.default_rng(0))
    driving = "intervene" in human.observe({}, float("nan"), 0.0).buttons
    hold, out = 0, []
    for k, r in enumerate(rewards):
        if driving:
            hold, intervened = hold_steps, True
        elif hold > 0:
            hold, intervened = hold - 1, True
        else:
            intervened = False
        out.append(intervened)
        driving = "intervene" in human.observe({}, float(r), DT_S * (k + 1)).buttons
    return np.asarray(out)


def test_train_over_ros_without_human_and_evaluation_between_episodes(
    tmp_path: Path, h9_domain: int
) -> None:
    run = tmp_path / "plain"
    extra = ("--human", "none", "--steps", "120", "--eval-every-steps", "30")
    result, _ = _train(tmp_path, h9_domain, run, *extra)
    assert result["env_steps"] == 120 and result["interventions"] == 0
    episodes = _episodes(run)
    for ep in episodes:
        assert not ep["intervened"].any()
        np.testing.assert_array_equal(ep["action"], ep["policy_action"])
    _check_continuous(episodes)
    # Evaluations fell due every 30 steps, mid-episode, and ran at the next episode end.
    ends = set(np.cumsum([ep["meta"].length for ep in episodes]).tolist())
    evals = _evals(run)
    assert evals[0]["env_steps"] == 0 and evals[-1]["env_steps"] == 120
    assert len(evals) >= 4
    assert all(e["env_steps"] in ends | {0} for e in evals), (evals, ends)
    assert (run / "checkpoints" / "latest.json").exists()
    _nodes_stopped(tmp_path)


def test_train_refuses_a_hardware_setup(tmp_path: Path, h9_domain: int) -> None:
    args = ["train", "--setup", str(REPO / "launch" / "franka_realsense.yaml")]
    args += ["--run", str(tmp_path / "run"), "--human", "teleop"]
    text = _refused(args, h9_domain)
    assert "robot: hardware" in text and "reward model" in text, text
    assert not (tmp_path / "run").exists()


def test_train_refuses_pixel_demos_recorded_through_other_crops(
    tmp_path: Path, h9_domain: int
) -> None:
    """Demos whose frames were cropped otherwise than the setup's cameras would teach the
    policy pixels it never sees on this setup: refused before any node starts."""
    from robot_rl.core.batch import ObsLayout
    from robot_rl.core.specs import ArraySpec
    from robot_rl.replay import EpisodeLog

    demos = tmp_path / "demos.zarr"
    spec = ArraySpec((128, 128, 3), "uint8")
    layout = ObsLayout(state_dim=4, images={"front": spec, "wrist": spec})
    crops = {"front": [0, 16, 96, 96], "wrist": None}  # as `record` stores them
    EpisodeLog.create(demos, layout, 4, {"camera_crops": crops}).close()
    setup = lockstep_setup(tmp_path / "setup.yaml", cameras=("front", "wrist"), image=128)
    run = tmp_path / "run"
    args = ["train", "--setup", str(setup), "--launch", "--task", "pick_cube", "--obs",
            "pixels", "--demos", str(demos), "--run", str(run), "--human", "none"]  # fmt: skip
    text = _refused(args, h9_domain)
    assert "were recorded through other camera crops (front: [0, 16, 96, 96] there" in text, text
    assert not run.exists()


def test_an_actor_on_a_setup_refuses_the_learners_pixel_demos_of_other_crops(
    tmp_path: Path, h9_domain: int
) -> None:
    """Distributed: the learner names its pixel demos' crop boxes in the policy settings it
    tells actors; an actor on a ``--setup`` whose cameras crop otherwise refuses before acting
    (the learner would train the actor's policy on pixels its robot never shows it)."""
    import signal

    import zarr

    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect

    demos = tmp_path / "demos.zarr"
    env = LearnerEnvConfig(task="pick_cube", obs="pixels", image_size=64)
    run_collect(CollectConfig(env=env, out=demos, episodes=1), progress=False)
    root = zarr.open_group(str(demos), mode="r+")  # as `record` stores the boxes it cropped with
    root.attrs["meta"] = {**root.attrs["meta"], "camera_crops": {"front": [0, 8, 48, 48]}}
    run = tmp_path / "learner"
    args = ["--task", "pick_cube", "--obs", "pixels", "--image-size", "64", "--demos", str(demos)]
    learner, address = _serve_learner(run, args, 180)
    try:
        setup = lockstep_setup(tmp_path / "setup.yaml", cameras=("front", "wrist"), image=64)
        arm = tmp_path / "arm"
        args = ["actor", "--setup", str(setup), "--learner", address, "--run", str(arm)]
        text = _refused(args, h9_domain)
        assert "the learner's demos were recorded through other camera crops" in text, text
        assert "front: [0, 8, 48, 48] there, whole frame in" in text, text
        assert not (arm / "log.zarr").exists()  # refused before acting
    finally:
        learner.send_signal(signal.SIGTERM)
        learner.communicate(timeout=60)


def test_train_over_ros_with_a_learned_reward(tmp_path: Path, h9_domain: int) -> None:
    frames, model = tmp_path / "frames.zarr", tmp_path / "rm"
    for args in (
        ["reward", "frames", "--task", "pick_cube", "--out", str(frames), "--episodes", "10",
         "--max-steps", "25", "--image-size", "64"],
        ["reward", "train", "--frames", str(frames), "--out", str(model), "--max-epochs", "3",
         "--augment-copies", "0"],
    ):  # fmt: skip
        run_cli(args, h9_domain, 300)
    setup = lockstep_setup(tmp_path / "setup.yaml", cameras=("front", "wrist"), image=128)
    run = tmp_path / "run"
    args = ["train", "--setup", str(setup), "--launch", "--task", "pick_cube", "--obs", "state"]
    args += ["--run", str(run), "--reward", str(model), "--human", "none", "--steps", "60"]
    args += ["--eval-every-steps", "60", "--eval-episodes", "1", "--learning-starts", "32"]
    args += ["--random-steps", "40", "--log-dir", str(tmp_path / "logs"), "--json", "--no-progress"]
    stdout, _ = run_cli(args, h9_domain, 300)
    result = json.loads(stdout)
    stats = result["reward_stats"]
    # Training and the evaluations between episodes both run through the learned reward.
    assert stats["steps"] >= 60 and stats["labels"] == stats["steps"], stats
    assert stats["failed_labels"] == 0 and result["reward_dropped_steps"] == 0
    episodes = _episodes(run)
    assert sum(ep["meta"].length for ep in episodes) == 60
    rewards = np.concatenate([ep["reward"] for ep in episodes])
    assert set(np.unique(rewards)) <= {0.0, -1.0}  # the classifier's binary cost
    assert {ep["meta"].reward_model_id for ep in episodes} == {result["reward_model_id"]}
    _nodes_stopped(tmp_path)

    # A classifier whose frames were labelled through another crop box of a camera would judge
    # pixels it never saw: refused before any node starts.
    card_path = model / "card.json"
    card = json.loads(card_path.read_text())
    card["camera_crops"] = {"front": [0, 16, 96, 96], "wrist": None}
    card_path.write_text(json.dumps(card))
    other = tmp_path / "run_cropped"
    text = _refused([a if a != str(run) else str(other) for a in args], h9_domain)
    assert "other camera crops (front: [0, 16, 96, 96] there, whole frame in" in text, text
    assert not other.exists()


# -- the pieces ---------------------------------------------------------------------------------


def _refused(args: list[str], domain: int) -> str:
    """Run ``robot-rl *args``, which must refuse (exit 2); returns its output."""
    return run_cli(args, domain, 120, expect=2)[1]


def _wait(pred, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def _serve_learner(run: Path, args: list[str], timeout_s: float) -> tuple[Any, str]:
    """`robot-rl learner --run run *args --bind 127.0.0.1:0 --eval-episodes 0 --no-progress
    --json` in a subprocess (stdout piped); returns it and its address once it serves."""
    import os
    import subprocess
    import sys

    learner = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli.main", "learner", "--run", str(run), *args,
         "--bind", "127.0.0.1:0", "--eval-episodes", "0", "--no-progress", "--json"],
        cwd=REPO, env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    _wait(lambda: (run / "server.json").exists() or learner.poll() is not None, timeout_s,
          "the learner serving")  # fmt: skip
    assert learner.poll() is None, "the learner exited"
    return learner, json.loads((run / "server.json").read_text())["address"]


def test_ros_teleop_waits_for_the_joy_answer_and_forgets_an_earlier_episode(
    ros_client_factory, h9_domain: int
) -> None:
    from geometry_msgs.msg import TwistStamped

    from drivers.ros_teleop import RosTeleop

    client = ros_client_factory(h9_domain)
    joy_pub = client.publisher(Joy, "/arm/teleop/joy", qos.COMMAND)
    twist_pub = client.publisher(TwistStamped, "/arm/teleop/twist", qos.SENSOR)
    teleop = RosTeleop()
    teleop.connect()
    try:
        _wait(lambda: joy_pub.get_subscription_count() > 0, 20, "the joy subscription")
        _wait(lambda: twist_pub.get_subscription_count() > 0, 20, "the twist subscription")

        def joy(stamp: float, buttons: list[int], gripper: float = 0.0) -> None:
            n = teleop.status().received
            joy_pub.publish(
                Joy(
                    header=convert.header(stamp),
                    axes=[0.3, 0, 0, 0, 0, 0, gripper],
                    buttons=buttons,
                )
            )
            _wait(lambda: teleop.status().received > n, 10, f"joy at {stamp}")

        # The twist of an answer alone is not the answer: its joy (buttons, gripper) is.
        n = teleop.status().received

        def twist_arrived() -> bool:  # best effort: the first messages may be lost, resend
            twist_pub.publish(convert.twist_stamped_to_msg(np.array([0.3, 0, 0, 0, 0, 0]), 2.0))
            return teleop.status().received > n

        _wait(twist_arrived, 10, "the twist")
        assert not teleop.wait_for_stamp(2.0, 0.2)
        joy(2.0, [1, 0, 0, 0, 0], gripper=1.0)
        assert teleop.wait_for_stamp(2.0, 0.2)
        # An answer of the ending episode (intervene, close) then the publisher's clock goes
        # back (a reset): the next read holds the new episode's answer only.
        joy(2.1, [1, 0, 0, 0, 0], gripper=1.0)
        joy(0.0, [0, 0, 0, 0, 0])
        r = teleop.read()
        assert r.buttons == frozenset() and r.gripper is None
        # Within an episode the latches hold as before.
        joy(0.1, [1, 0, 0, 0, 0], gripper=1.0)
        joy(0.2, [0, 0, 0, 0, 0])
        r = teleop.read()
        assert r.buttons == {"intervene"} and r.gripper == 1.0
    finally:
        teleop.disconnect()


def test_the_first_answer_is_awaited_past_the_step_timeout_and_none_is_a_clear_error(
    ros_client_factory, h9_domain: int
) -> None:
    """HumanAnswers (record, label, train --human sim in lockstep): the first answer of a
    session comes when the human's node hears the twin, which DDS discovery may delay by
    seconds after this reader matched its publisher; the loop must not step before it (the CI
    failure of label on a blind twin: whole episodes stepped with no input, labels an episode
    late). Later answers have the short per-step timeout; none at the start is an error."""
    import threading

    from drivers.ros_teleop import RosTeleop
    from robot_rl.app.teleop.human_answers import HumanAnswers

    client = ros_client_factory(h9_domain)
    joy_pub = client.publisher(Joy, "/arm/teleop/joy", qos.COMMAND)
    teleop = RosTeleop()
    teleop.connect()
    reports: list[str] = []
    try:
        _wait(lambda: joy_pub.get_subscription_count() > 0, 20, "the joy subscription")
        step_s = 0.2
        answers = HumanAnswers(teleop, True, reports.append, timeout_s=step_s, first_timeout_s=60)
        # the human hears the twin only after several step timeouts: its answer to the first
        # observation (robot time 0.0, success held) is published then
        answer = Joy(header=convert.header(0.0), axes=[0.0] * 7, buttons=[0, 1, 0, 0, 0])
        late = threading.Timer(5 * step_s, joy_pub.publish, (answer,))
        late.start()
        try:
            assert answers.wait(0.0)
        finally:
            late.join()
        assert answers.late == 0 and reports == []
        assert teleop.read().buttons == {"success"}  # the answer to the frame held
        # after the first answer a missing one costs one step timeout, counted and reported
        assert not answers.wait(0.1)
        assert answers.late == 1 and "no answer" in reports[0]
        # a human that never answers: the session stops with what to look at
        never = HumanAnswers(teleop, True, reports.append, first_timeout_s=1.0, log_hint="; X")
        with pytest.raises(TimeoutError, match="did not answer the first observation.*; X"):
            never.wait(5.0)
        # a human whose node has exited: no wait, not counted (the loop sees the end)
        gone = HumanAnswers(teleop, True, reports.append, lambda: True, first_timeout_s=60)
        assert not gone.wait(5.0) and gone.late == 0
        # off (real time, a person's device): nothing is awaited
        assert HumanAnswers(teleop, False, reports.append).wait(5.0)
    finally:
        teleop.disconnect()


def test_status_follower_steps_once_per_control_period_of_a_realtime_twin() -> None:
    from robot_rl.app.envs.build import EnvSetup, make_env_from_setup
    from robot_rl.core.config import EnvConfig
    from sim.human import HumanConfig
    from sim.human_node import StatusFollower, make_human

    env, _backend = make_env_from_setup(EnvSetup(task="reach", control_rotation=False))
    try:
        _, info = env.reset(seed=1)
        p = info["privileged"]
        cfg = HumanConfig(rule="no_progress", patience_steps=3, takeover_steps=2)
        human = make_human("reach", EnvConfig(control_rotation=False), cfg)
        follower = StatusFollower(human, seed=0, control_dt_s=DT_S)
        answers = [follower.on_status(p, -1.0, round(0.01 * k, 3)) for k in range(0, 61)]
        # 100 Hz statuses, 10 Hz control: a step at 0.1, 0.2, ... 0.6 only.
        stepped = [round(0.01 * k, 3) for k, a in enumerate(answers) if a is not None]
        assert stepped == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
        assert follower.steps == 6
        # No progress (constant reward) for 3 steps: the expert drives steps 4 and 5.
        driving = ["intervene" in answers[k].buttons for k in range(0, 61, 10)]
        assert driving == [False, False, False, False, True, True, False]
        with pytest.raises(ValueError, match="control_dt_s"):
            StatusFollower(human, control_dt_s=0.0)
    finally:
        env.close()
        _backend.close()


def test_actor_behind_ros2_feeds_a_distributed_learner(tmp_path: Path, h9_domain: int) -> None:
    """`robot-rl actor --setup ... --learner HOST:PORT`: the twin behind ROS 2 as the actor's
    robot, next to a second actor on the direct twin (robot + twin feeding one learner); each
    actor's every logged transition reaches the learner, counted per actor."""
    import os
    import signal
    import subprocess
    import sys

    run = tmp_path / "learner"
    learner, address = _serve_learner(run, ["--task", "reach", "--obs", "state"], 120)
    twin = None
    try:
        twin = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli.main", "actor", "--task", "reach", "--obs",
             "state", "--learner", address, "--run", str(tmp_path / "twin"), "--steps", "40",
             "--seed", "7", "--no-progress", "--json"],
            cwd=REPO, env={**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")},
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        setup = lockstep_setup(tmp_path / "setup.yaml")
        args = ["actor", "--setup", str(setup), "--launch", "--task", "reach", "--obs", "state"]
        args += ["--learner", address, "--run", str(tmp_path / "arm"), "--steps", "60"]
        args += ["--log-dir", str(tmp_path / "logs"), "--no-progress", "--json"]
        got = json.loads(run_cli(args, h9_domain, 240)[0])
        assert got["stopped_by"] == "steps" and got["env_steps"] == 60
        assert got["acked_through"] == got["logged_transitions"] - 1 == 59
        twin_out, _ = twin.communicate(timeout=120)
        assert twin.returncode == 0
        t = json.loads(twin_out.strip().splitlines()[-1])
        assert t["stopped_by"] == "steps" and t["acked_through"] == 39
        learner.send_signal(signal.SIGTERM)
        out, _ = learner.communicate(timeout=120)
        assert learner.returncode == 0
        res = json.loads(out.strip().splitlines()[-1])
        assert res["actors"]["arm"]["transitions"] == 60
        assert res["actors"]["twin"]["transitions"] == 40 and res["replay_size"] == 100
    finally:
        if twin is not None and twin.poll() is None:
            twin.kill()
            twin.wait()
        if learner.poll() is None:
            learner.kill()
            learner.wait()
