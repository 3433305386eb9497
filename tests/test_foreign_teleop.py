"""A person at a teleop device on an env robot_rl did not write (``--env``): the device's
readings mapped onto the env's actions (robot_rl.core.teleop_axes), demos recorded from a
recorded device (``collect --env --teleop-events``), and takeovers during training.

The device is a recorded keyboard event file (no terminal here: the bytes a person types are
the lowest boundary, and the replay runs them through the keyboard's own parser)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.teleop_axes import TeleopAxes
from robot_rl.core.types import TeleopState
from robot_rl.replay import EpisodeLog

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import toy_foreign_envs  # noqa: E402  (registers the toy envs)
from cli_helpers import flat, run_cli  # noqa: E402

TOY = "toy_foreign_envs:ToyPointGoal-v0"
NO_EVAL = ("--eval-every-steps", "10000", "--eval-episodes", "2")  # the final evaluation only


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def _keyboard_file(path: Path, episodes: list[list[tuple[float, str]]]) -> Path:
    """A keyboard event file: per episode an await line, then (file time s, key) presses."""
    lines = [{"format": "robot_rl.teleop_events", "version": 1, "device": "keyboard", "info": {}}]
    t0 = 0.0
    for presses in episodes:
        lines.append({"t_s": t0, "await": "episode"})
        for t, key in presses:
            lines.append({"t_s": t0 + t, "raw": key})
        t0 += presses[-1][0] + 0.01  # the next episode's await: at once
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def reading(twist=(0, 0, 0, 0, 0, 0), gripper=None) -> TeleopState:
    return TeleopState(0.0, np.asarray(twist, dtype=np.float64), gripper)


def test_teleop_axes_defaults_by_size_negation_gripper_hold_and_the_way_back() -> None:
    assert TeleopAxes.parse(None, 2).tokens == ("x", "y")
    assert TeleopAxes.parse(None, 4).tokens == ("x", "y", "z", "gripper")
    axes = TeleopAxes.parse("-y,x,0,gripper", 4)
    a = axes.to_action(reading((0.5, 0.25, 1.0, 0, 0, 0)), gripper_hold=-1.0)
    np.testing.assert_allclose(a, [-0.25, 0.5, 0.0, -1.0])  # z is not mapped; the hold kept
    assert axes.to_action(reading(gripper=1.0), gripper_hold=-1.0)[3] == 1.0
    inverted = TeleopAxes.parse("x,y,z,-gripper", 4)
    assert inverted.gripper_open == 1.0
    assert inverted.to_action(reading(gripper=1.0), gripper_hold=1.0)[3] == -1.0
    # The way back (a scripted policy acting as a person) reproduces the action.
    for ax in (axes, inverted, TeleopAxes.parse(None, 7)):
        act = np.array([0.3, -0.7, 0.0, 1.0, 0.2, -0.1, 1.0][: len(ax.tokens)], np.float32)
        if ax is axes:
            act[2] = 0.0  # a dimension mapped to 0 carries nothing
        back = ax.to_action(ax.to_teleop(act, 0.0), gripper_hold=0.0)
        np.testing.assert_allclose(back, act, atol=1e-6)
    with pytest.raises(ValueError, match="no default teleop mapping.*--teleop-axes"):
        TeleopAxes.parse(None, 5)
    with pytest.raises(ValueError, match="has 3 tokens; the env acts with 4"):
        TeleopAxes.parse("x,y,z", 4)
    with pytest.raises(ValueError, match="'q'"):
        TeleopAxes.parse("x,q", 2)
    with pytest.raises(ValueError, match="used twice"):
        TeleopAxes.parse("x,-x", 2)
    with pytest.raises(ValueError, match="finite"):
        axes.to_action(reading((np.nan, 0, 0, 0, 0, 0)), gripper_hold=0.0)


def _quiet_seed(moves: list[tuple[float, float]], steps: int = 12) -> int:
    """A reset seed ``s`` of the toy env where, for each ``k``, ``steps`` full steps along
    ``moves[k]`` from reset seed ``s + k`` never reach the goal (so that the env does not end
    the episode before the person's button)."""
    import gymnasium as gym

    env = gym.make("ToyPointGoal-v0")

    def reaches(seed: int, move) -> bool:
        env.reset(seed=seed)
        return any(env.step(0.05 * np.asarray(move))[2] for _ in range(steps))

    for s in range(200):
        if not any(reaches(s + k, m) for k, m in enumerate(moves)):
            return s
    raise AssertionError("no seed found")


def test_collect_records_a_replayed_keyboard_on_a_foreign_env_with_its_buttons(
    tmp_path: Path,
) -> None:
    """Three episodes from one keyboard file, on the env's step clock (10 Hz): ``w`` (+x, held
    for the parser's 0.6 s) then the success key: kept; then a discard: dropped; then the
    failure key: kept, but not written with --only-success."""
    seed = _quiet_seed([(1, 0), (1, 0), (0, -1), (1, 0), (1, 0), (0, -1)])
    events = _keyboard_file(
        tmp_path / "keys.jsonl",
        [[(0.05, "w"), (0.95, "y")], [(0.05, "w"), (0.35, "z")], [(0.05, "d"), (0.45, "n")]],
    )
    out = tmp_path / "demos.zarr"
    proc = _cli("collect", "--env", TOY, "--teleop-events", str(events), "--episodes", "5",
                "--seed", str(seed), "--out", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["episodes_written"] == 1 and res["attempts"] == 3, res
    assert res["discarded"] == 1 and res["kept_without_success"] == 1
    assert res["teleop"] == "keyboard" and res["teleop_axes"] == "x,y"
    log = EpisodeLog.open(out)
    try:
        assert log.num_episodes == 1
        ep = log.read_episode(0)
        meta = ep["meta"]
        assert meta.success is True and meta.source == "demo" and meta.seed == seed
        # Read at steps 1..9 (t = 0.1 .. 0.9): w drives +x from 0.1 to 0.6 s, then nothing;
        # the success key read at t = 1.0 ends the episode before a tenth step.
        want = np.zeros((9, 2), np.float32)
        want[:6, 0] = 1.0
        np.testing.assert_array_equal(ep["action"], want)
        assert ep["intervened"].all() and ep["terminated"][-1] and not ep["terminated"][:-1].any()
        assert log.meta["teleop_axes"] == "x,y" and log.meta["policy"] == "teleop"
    finally:
        log.close()
    # The same file again, appended, with failures written: two more episodes.
    proc = _cli("collect", "--env", TOY, "--teleop-events", str(events), "--episodes", "5",
                "--seed", str(seed), "--out", str(out), "--append", "--no-only-success",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dataset_episodes"] == 3
    log = EpisodeLog.open(out)
    try:
        failed = log.read_episode(2)
        assert failed["meta"].success is False
        np.testing.assert_array_equal(failed["action"][:4, 1], -np.ones(4, np.float32))
    finally:
        log.close()


def test_collect_teleop_refuses_what_cannot_work_saying_what_to_change(tmp_path: Path) -> None:
    events = _keyboard_file(tmp_path / "k.jsonl", [[(0.05, "w"), (0.5, "y")]])
    cases = [
        (("--teleop-events", str(events), "--policy", "toy_foreign_envs:goal_expert"),
         "both choose the actions"),
        (("--teleop-axes", "x,y"), "add --teleop or --teleop-events"),
        (("--teleop-events", str(events), "--teleop-axes", "x,y,z"),
         "has 3 tokens; the env acts with 2"),
        (("--teleop", "gamepad", "--teleop-events", str(events)), "a keyboard recording"),
        (("--teleop-events", str(tmp_path / "none.jsonl")), "is not a file"),
    ]  # fmt: skip
    for i, (args, match) in enumerate(cases):
        proc = _cli("collect", "--env", TOY, *args, "--out", str(tmp_path / f"d{i}.zarr"))
        assert proc.returncode == 2 and match in flat(proc.stderr), (args, proc.stderr)
    proc = _cli("collect", "--teleop", "keyboard", "--out", str(tmp_path / "twin.zarr"))
    assert proc.returncode == 2 and "robot-rl record" in flat(proc.stderr)


def _run_log(run: Path) -> dict:
    """Every step of a run's log: actions, intervened flags, learner states."""
    log = EpisodeLog.open(run / "log.zarr")
    try:
        eps = [log.read_episode(i, images=False) for i in range(log.num_episodes)]
    finally:
        log.close()
    return {
        "action": np.concatenate([e["action"] for e in eps]),
        "intervened": np.concatenate([e["intervened"] for e in eps]),
        "state": np.concatenate([e["obs"]["state"] for e in eps]),
        "source": [e["meta"].source for e in eps],
        "starts": np.cumsum([len(e["action"]) for e in eps])[:-1],
    }


def test_a_simulated_human_with_the_envs_scripted_policy_takes_over_in_training(
    tmp_path: Path,
) -> None:
    """``train --env --human sim --human-policy module:function``: the user's scripted policy
    takes over when the learner stalls, through a device reading mapped by the teleop axes; the
    stored takeover actions are the policy's own (in [-1, 1])."""
    run = tmp_path / "run"
    proc = _cli("train", "--env", TOY, "--task-reward", "sparse", "--steps", "200",
                "--human", "sim", "--human-policy", "toy_foreign_envs:goal_expert",
                "--human-patience-steps", "3", *NO_EVAL, "--run", str(run), "--no-progress",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["interventions"] >= 5 and res["intervened_steps"] > res["interventions"], res
    log = _run_log(run)
    took = log["intervened"]
    assert took.sum() == res["intervened_steps"]
    # The state is [goal, pos, vel] (desired_goal, then observation; `robot-rl envs --env`
    # shows it): the expert's action is the clipped way to the goal, 0.05 m per unit.
    # Hold-window steps are zero motion.
    goal, pos = log["state"][:, :2], log["state"][:, 2:4]
    want = np.clip((goal - pos) / toy_foreign_envs.STEP_M, -1.0, 1.0)
    moving = took & np.any(log["action"] != 0.0, axis=1)
    assert moving.sum() >= res["interventions"]
    np.testing.assert_allclose(log["action"][moving], want[moving], atol=1e-5)


def test_a_person_at_a_replayed_keyboard_takes_over_in_training(tmp_path: Path) -> None:
    """``train --env --human teleop --teleop-events``: the keyboard's presses take over from
    the policy (the ``w`` key is +x), the rest of the time the policy acts."""
    events = _keyboard_file(tmp_path / "keys.jsonl", [[(0.25, "w"), (3.05, "w"), (6.05, "d")]])
    run = tmp_path / "run"
    proc = _cli("train", "--env", TOY, "--steps", "120", "--human", "teleop",
                "--teleop-events", str(events), "--intervention-hold-steps", "0",
                *NO_EVAL, "--run", str(run), "--no-progress", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    # Each press drives 6 steps (the parser holds a key 0.6 s, 10 steps per second); a
    # takeover that an episode's end splits counts once in each episode.
    log = _run_log(run)
    steps = np.flatnonzero(log["intervened"])
    assert res["intervened_steps"] == 18 and len(steps) == 18, res
    presses = np.split(steps, np.flatnonzero(np.diff(steps) > 1) + 1)
    assert [len(p) for p in presses] == [6, 6, 6] and presses[0][0] == 2  # read at t = 0.3 s
    assert res["interventions"] == 3 + sum(
        int(np.any((p[:-1] < b) & (p[1:] >= b))) for p in presses for b in log["starts"]
    )
    acts = log["action"][log["intervened"]]
    np.testing.assert_array_equal(acts[:12], np.tile([1.0, 0.0], (12, 1)))
    np.testing.assert_array_equal(acts[12:], np.tile([0.0, -1.0], (6, 1)))
    proc = _cli("train", "--env", TOY, "--human", "teleop", "--run", str(tmp_path / "r2"))
    assert proc.returncode == 2 and "--teleop keyboard" in flat(proc.stderr)
    proc = _cli("train", "--env", TOY, "--human", "sim", "--run", str(tmp_path / "r3"))
    assert proc.returncode == 2 and "--human-policy module:function" in flat(proc.stderr)
    proc = _cli("train", "--teleop", "keyboard", "--run", str(tmp_path / "r4"))
    assert proc.returncode == 2 and "robot_rl did not write" in flat(proc.stderr)
