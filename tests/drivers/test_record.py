"""`robot-rl record` through ROS 2 against the lockstep twin, teleop over ROS 2.

- RosTeleop against a test publisher: buttons and gripper requests latched between reads
  (a tap is never lost), the old four-button message accepted, a silent device reads as zero
  twist with a "silent" status, malformed messages counted and ignored;
- record with a recorded keyboard event file (tests/drivers/data/record_keyboard.jsonl: move,
  success, move + close, failure, move, discard, move, success), everything started by the
  recorder (--launch): the dataset holds exactly the three kept episodes with the right
  success labels, loadable by the demo loader and accepted by training's settings check;
- SIGKILL of the recorder mid-episode: every finished episode intact, the partial one is
  recognisable and dropped; --resume then appends to the same dataset, and SIGTERM ends it
  cleanly (the open episode dropped, nothing left open);
- the simulated human (sim.human_node) records demos through the teleop path that mostly
  succeed.

Under lockstep the twin advances only when stepped, but the event file plays on the wall
clock (the recorder paces itself at the control rate): the tests assert on labels, order and
counts, not on exact episode lengths.
ROS domain ids: the a2_domain fixture (30..49, leased across processes).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("mujoco")

from geometry_msgs.msg import TwistStamped  # noqa: E402
from record_helpers import Cli, held, keyboard_file, lockstep_setup, run_cli  # noqa: E402
from sensor_msgs.msg import Joy  # noqa: E402

from drivers.ros import convert, qos  # noqa: E402
from drivers.teleop.mapping import state_from_joy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")


# -- RosTeleop against a test publisher --------------------------------------------------------


def _wait(pred, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


def _wait_briefly(pred, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while not pred() and time.monotonic() < end:
        time.sleep(0.01)
    return pred()


def _teleop_and_publishers(client, joy_qos, stale_after_s: float):
    """A connected RosTeleop and the test's joy / twist publishers, matched with it."""
    from drivers.ros_teleop import RosTeleop, RosTeleopConfig

    joy_pub = client.publisher(Joy, "/arm/teleop/joy", joy_qos)
    twist_pub = client.publisher(TwistStamped, "/arm/teleop/twist", qos.SENSOR)
    teleop = RosTeleop(RosTeleopConfig(stale_after_s=stale_after_s))
    teleop.connect()
    _wait(lambda: joy_pub.get_subscription_count() > 0, 20, "the joy subscription")
    _wait(lambda: twist_pub.get_subscription_count() > 0, 20, "the twist subscription")
    return teleop, joy_pub, twist_pub


def test_ros_teleop_latches_buttons_and_zeroes_a_silent_twist(
    ros_client_factory, a2_domain: int
) -> None:
    client = ros_client_factory(a2_domain)
    teleop, joy_pub, twist_pub = _teleop_and_publishers(client, qos.COMMAND, stale_after_s=0.3)
    try:
        assert teleop.status().state == "waiting"
        sent = [0]

        def joy(buttons: list[int], gripper: float = 0.0, axes6=(0.0,) * 6) -> None:
            joy_pub.publish(
                Joy(header=convert.header(1.0), axes=[*axes6, gripper], buttons=buttons)
            )
            sent[0] += 1
            _wait(lambda: teleop.status().received >= sent[0], 10, f"joy message {sent[0]}")

        # A tap of success (one message) between two reads is latched for exactly one read.
        joy([0, 1, 0, 0, 0])
        joy([0, 0, 0, 0, 0])
        assert teleop.read().buttons == {"success"}
        assert teleop.read().buttons == frozenset()
        # The older four-button message is accepted; discard travels in the fifth slot.
        joy([0, 0, 0, 1])
        joy([0, 0, 0, 0, 1])
        assert teleop.read().buttons == {"reset", "discard"}
        # A gripper request (one message) is latched too; "no change" afterwards keeps it.
        joy([0, 0, 0, 0, 0], gripper=1.0)
        joy([0, 0, 0, 0, 0], gripper=0.0)
        r = teleop.read()
        assert r.gripper == 1.0 and teleop.read().gripper is None
        # Malformed messages are counted and change nothing.
        joy_pub.publish(Joy(header=convert.header(1.0), axes=[0.0] * 3, buttons=[0, 1, 0, 0, 0]))
        bad = TwistStamped(header=convert.header(1.0))
        bad.twist.linear.x = float("nan")
        twist_pub.publish(bad)
        _wait(lambda: teleop.status().rejected >= 2, 10, "two rejections")
        assert teleop.read().buttons == frozenset()
        assert "malformed" in teleop.status().describe()
        # A fresh twist is used; once the publisher goes silent the twist reads as zero.
        twist_pub.publish(convert.twist_stamped_to_msg(np.array([0.5, 0, 0, 0, 0, -0.25]), 2.0))
        _wait(lambda: teleop.status().received >= sent[0] + 1, 10, "the twist")
        np.testing.assert_allclose(teleop.read().twist, [0.5, 0, 0, 0, 0, -0.25])
        _wait(lambda: teleop.status().state == "silent", 10, "the silent state")
        np.testing.assert_array_equal(teleop.read().twist, np.zeros(6))
        assert "silent" in teleop.status().describe()
    finally:
        teleop.disconnect()


def test_ros_teleop_keeps_a_tap_when_an_older_twist_lands_after_it(
    ros_client_factory, a2_domain: int
) -> None:
    """The twist and the joy arrive on separate readers; under load an older twist can land
    after a newer joy. That is not the publisher's clock going back (a new episode of the
    simulated human), so the tap the joy carried stays latched. A real jump back still clears
    what the earlier episode latched, and the new episode's first press survives the second
    topic catching up."""
    client = ros_client_factory(a2_domain)
    teleop, joy_pub, twist_pub = _teleop_and_publishers(client, qos.TELEOP_JOY, stale_after_s=5.0)
    try:
        sent = [0]

        def send(pub, msg) -> None:  # one at a time, in this order
            # The twist is best effort: a copy may be lost (e.g. before the reader has matched
            # the writer), so publish until one arrives; a second copy changes nothing.
            end = time.monotonic() + 10.0
            while teleop.status().received <= sent[0]:
                assert time.monotonic() < end, f"message {sent[0] + 1} never arrived"
                pub.publish(msg)
                _wait_briefly(lambda: teleop.status().received > sent[0], 0.5)
            sent[0] = teleop.status().received

        def joy(stamp: float, buttons: list[int]) -> Joy:
            return Joy(header=convert.header(stamp), axes=[0.0] * 7, buttons=buttons)

        def twist(stamp: float) -> TwistStamped:
            return convert.twist_stamped_to_msg(np.zeros(6), stamp)

        send(joy_pub, joy(5.02, [0, 1, 0, 0, 0]))  # the tap
        send(twist_pub, twist(5.01))  # older than the tap: it arrived late
        assert teleop.read().buttons == {"success"}
        # The simulated human's reset: sim time restarts; a press latched before it is gone.
        send(joy_pub, joy(9.0, [0, 0, 1, 0, 0]))
        send(twist_pub, twist(0.02))  # the new episode, first on the twist topic
        send(joy_pub, joy(0.02, [0, 1, 0, 0, 0]))  # its first press
        assert teleop.read().buttons == {"success"}
    finally:
        teleop.disconnect()


def test_joy_accepts_four_or_five_buttons() -> None:
    axes = [0.0] * 7
    assert state_from_joy(axes, [0, 0, 0, 0, 1], 0.0).buttons == {"discard"}
    assert state_from_joy(axes, [0, 1, 0, 0], 0.0).buttons == {"success"}
    with pytest.raises(ValueError, match="5 buttons"):
        state_from_joy(axes, [0, 1, 0], 0.0)


# -- record against the lockstep twin ----------------------------------------------------------


def _episodes(path: Path):
    from robot_rl.replay import EpisodeLog

    with EpisodeLog.open(path, unfinished="drop", mode="r") as log:
        return [log.read_episode(e.index) for e in log.episodes], dict(log.meta)


def test_record_event_file_keeps_the_marked_episodes(tmp_path: Path, a2_domain: int) -> None:
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig, same_data_settings
    from robot_rl.replay import ObsAdapter, load_demos

    setup = lockstep_setup(tmp_path / "setup.yaml")
    out = tmp_path / "demos.zarr"
    args = ["record", "--setup", str(setup), "--launch", "--out", str(out), "--episodes", "3"]
    args += ["--teleop-events", str(DATA / "record_keyboard.jsonl")]
    args += ["--log-dir", str(tmp_path / "logs"), "--json"]
    stdout, log = run_cli(args, a2_domain, 240)
    result = json.loads(stdout)
    assert [e["end"] for e in result["per_episode"]] == ["success", "failure", "success"], log
    assert result["discarded"] == 1 and result["kept"] == 3, (result, log)

    episodes, meta = _episodes(out)
    assert [ep["meta"].success for ep in episodes] == [True, False, True]
    assert [ep["meta"].extra["end_reason"] for ep in episodes] == ["success", "failure", "success"]
    for ep, axis in zip(episodes, (0, 1, 2), strict=True):  # w (+x), a (+y), r (+z)
        a = ep["action"]
        assert ep["meta"].source == "demo" and ep["meta"].length > 3
        assert ep["intervened"].all() and ep["terminated"][-1] and not ep["terminated"][:-1].any()
        assert a[:, axis].max() == 1.0 and not np.any(np.delete(a[:, :3], axis, axis=1))
        moved = ep["next_obs"]["state"][-1, axis] - ep["obs"]["state"][0, axis]
        assert moved > 0.02, f"the arm did not move along axis {axis}: {moved}"
    assert (episodes[1]["action"][:, -1] == 1.0).any()  # c closed the gripper
    assert (episodes[0]["action"][:, -1] == -1.0).all()  # never closed: held open

    # Loadable by the demo loader, and training with the same settings accepts it.
    buf = load_demos(out)
    assert len(buf) == sum(ep["meta"].length for ep in episodes)
    lenv = LearnerEnvConfig()
    assert same_data_settings(meta["env"], lenv)
    env, backend = make_env_from_setup(lenv.env_setup())
    try:
        assert ObsAdapter(env.observation_space).layout == buf.layout
    finally:
        env.close()
        backend.close()

    # Nothing started by the recorder survives it.
    states = json.loads((tmp_path / "logs" / "up.json").read_text())["nodes"]
    states += json.loads((tmp_path / "logs" / "teleop" / "up.json").read_text())["nodes"]
    assert all(n["pid"] is None for n in states), states

    # An existing dataset is refused without --resume (before any node starts).
    again = Cli(["record", "--setup", str(setup), "--out", str(out)], a2_domain)
    code, _ = again.finish(120)
    assert code == 2 and any("--resume" in line for line in again.lines), again.lines


def test_killed_recorder_keeps_finished_episodes_and_resume_appends(
    tmp_path: Path, ros_processes, a2_domain: int
) -> None:
    from robot_rl.replay import EpisodeLog, UnfinishedEpisodeError

    setup = lockstep_setup(tmp_path / "setup.yaml")
    ros_processes(
        [sys.executable, "-m", "sim.ros_node", "--task", "pick_cube", "--cameras"]
        + ["--mode", "lockstep"],
        a2_domain,
        "twin",
    )
    # One success, then an episode that never ends (the recorder is killed in it). Playback
    # starts once the recorder subscribes, which can be seconds before its first step on a
    # loaded machine: each key is held long enough to survive that.
    events = held("w", 0.0, 3.0) + [(4.5, "y")] + held("a", 5.5, 40.0)
    first = keyboard_file(tmp_path / "kill.jsonl", events)
    teleop = ros_processes(
        [sys.executable, "-m", "drivers.teleop.node", "--device", "replay", "--file", str(first)],
        a2_domain,
        "teleop1",
    )
    out = tmp_path / "demos.zarr"
    cli = Cli(["record", "--setup", str(setup), "--out", str(out), "--episodes", "5"], a2_domain)
    try:
        kept = cli.wait_line(r"episode 0 kept: success \((\d+) steps", 120)
        cli.wait_line(r"episode 1 at 20 steps", 60)
    finally:
        cli.kill()  # SIGKILL mid-episode: no clean shutdown
    assert cli.proc.returncode == -signal.SIGKILL
    teleop.stop()

    with pytest.raises(UnfinishedEpisodeError):  # the partial episode is recognisable
        EpisodeLog.open(out, unfinished="error", mode="r")
    episodes, _ = _episodes(out)
    assert len(episodes) == 1
    before = episodes[0]
    assert before["meta"].success is True and before["meta"].length == int(kept.group(1))
    assert before["action"][:, 0].max() == 1.0

    # --resume: a failure, then SIGTERM mid-episode (a clean stop drops the open episode).
    events = held("r", 0.0, 3.0) + [(4.5, "n")] + held("w", 5.5, 40.0)
    second = keyboard_file(tmp_path / "resume.jsonl", events)
    ros_processes(
        [sys.executable, "-m", "drivers.teleop.node", "--device", "replay", "--file", str(second)],
        a2_domain,
        "teleop2",
    )
    args = ["record", "--setup", str(setup), "--out", str(out), "--episodes", "5", "--resume"]
    resumed = Cli([*args, "--json"], a2_domain)
    try:
        resumed.wait_line(r"episode 1 kept: failure", 120)
        resumed.wait_line(r"episode 2 at 20 steps", 60)
        resumed.proc.send_signal(signal.SIGTERM)
        code, stdout = resumed.finish(60)
    finally:
        resumed.kill()
    assert code == 0, "\n".join(resumed.lines)
    assert any("left open by a crash" in line for line in resumed.lines), resumed.lines
    result = json.loads(stdout)
    assert (result["stopped_by"], result["kept"], result["dropped_unfinished"]) == ("SIGTERM", 1, 1)
    EpisodeLog.open(out, unfinished="error", mode="r").close()  # nothing left open
    episodes, _ = _episodes(out)
    assert [ep["meta"].success for ep in episodes] == [True, False]
    for k in ("action", "reward", "terminated", "stamp_s"):
        np.testing.assert_array_equal(episodes[0][k], before[k])
    np.testing.assert_array_equal(episodes[0]["obs"]["state"], before["obs"]["state"])
    assert episodes[1]["action"][:, 2].max() == 1.0  # the resumed episode moved up (r)
    assert episodes[1]["meta"].seed != episodes[0]["meta"].seed


# -- the simulated human as a teleop node ------------------------------------------------------


class _Counting:
    """The real pick_cube expert, counting its act() calls (how many observations it got)."""

    def __init__(self, expert) -> None:
        self.expert, self.acts, self.resets = expert, 0, 0

    def reset(self, rng) -> None:
        self.resets += 1
        self.expert.reset(rng)

    def act(self, obs, info):
        self.acts += 1
        return self.expert.act(obs, info)


def test_status_follower_observes_once_per_step_and_restarts_on_time_going_back() -> None:
    from robot_rl.app.envs.build import EnvSetup, make_env_from_setup
    from sim.human import HumanConfig, SimulatedHuman
    from sim.human_node import StatusFollower

    env, backend = make_env_from_setup(EnvSetup(task="pick_cube", control_rotation=False))
    try:
        _, info = env.reset(seed=1)
        p = info["privileged"]
        expert = _Counting(backend.make_expert())
        follower = StatusFollower(SimulatedHuman(expert, HumanConfig(rule="always")), seed=3)
        first = follower.on_status(p, 0.0, 0.0)
        assert first is not None and "intervene" in first.buttons and first.gripper == 0.0
        assert follower.on_status(p, 0.0, 0.0) is not None  # the arm placed: redo step 0
        assert (expert.resets, expert.acts) == (2, 2)
        assert follower.on_status(p, -0.5, 0.1) is not None
        assert follower.on_status(p, -0.5, 0.1) is None  # a repeat after a step: ignored
        assert (follower.episodes, follower.steps, expert.acts) == (1, 1, 3)
        assert follower.on_status(p, 0.0, 0.0) is not None  # time went back: a new episode
        assert (follower.episodes, follower.steps, expert.resets) == (2, 0, 3)
    finally:
        env.close()
        backend.close()


def test_record_with_the_simulated_human_mostly_succeeds(tmp_path: Path, a2_domain: int) -> None:
    from robot_rl.replay import load_demos

    setup = lockstep_setup(tmp_path / "setup.yaml")
    out = tmp_path / "expert.zarr"
    args = ["record", "--setup", str(setup), "--launch", "--out", str(out), "--episodes", "6"]
    args += ["--teleop", "sim-expert", "--realtime-factor", "0", "--json"]
    args += ["--log-dir", str(tmp_path / "logs")]
    result = json.loads(run_cli(args, a2_domain, 300)[0])
    episodes, meta = _episodes(out)
    assert len(episodes) == 6 and meta["teleop"] == "sim-expert"
    wins = [ep["meta"].success for ep in episodes]
    assert sum(w is True for w in wins) >= 4, result  # the expert through the teleop path
    for ep in episodes:
        assert ep["intervened"].all() and np.abs(ep["action"][:, :3]).max() > 0.5
        if ep["meta"].success:  # a pick: the gripper was closed through teleop/joy
            assert (ep["action"][:, -1] == 1.0).any()
    assert len(load_demos(out)) == sum(ep["meta"].length for ep in episodes)


@pytest.mark.parametrize("obs", ["state", "pixels"])
def test_record_keeps_the_peg_in_the_hand(tmp_path: Path, a2_domain: int, obs: str) -> None:
    """peg_insert starts with the peg grasped and its learner env holds the gripper closed
    (FixedGripper): the recorder maps the human's 4-dim readings through the env's wrappers,
    so the demos hold 3-dim actions and no reading can open the hand (before, state refused to
    record and pixels dropped the peg in the first step of every episode: no demo succeeded)."""
    cams = ("front",) if obs == "pixels" else ()
    setup = lockstep_setup(tmp_path / "setup.yaml", cameras=cams, task="peg_insert")
    out = tmp_path / "peg.zarr"
    args = ["record", "--setup", str(setup), "--launch", "--out", str(out), "--episodes", "2"]
    args += ["--obs", obs] + (["--cameras", "front", "--image-size", "64"] if cams else [])
    args += ["--teleop", "sim-expert", "--realtime-factor", "0", "--json"]
    args += ["--log-dir", str(tmp_path / "logs")]
    result = json.loads(run_cli(args, a2_domain, 300)[0])
    episodes, _ = _episodes(out)
    assert len(episodes) == 2
    assert all(ep["action"].shape[1] == 3 for ep in episodes)  # [dx, dy, dz]: gripper held
    assert all(ep["meta"].success for ep in episodes), result


def test_the_teleop_gripper_hold_keeps_the_hand_as_the_reset_left_it() -> None:
    """Before the human's first gripper request, record and label keep the hand as the reset
    left it: closed on peg_insert's peg (a real arm handed a tool), open on pick_cube."""
    from robot_rl.app.envs.build import make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.core.teleop_action import gripper_hold_after_reset

    for task, want in (("peg_insert", 1.0), ("pick_cube", -1.0)):
        env, backend = make_env_from_setup(LearnerEnvConfig(task=task).env_setup())
        try:
            env.reset(seed=0)
            assert gripper_hold_after_reset(env) == want, task
        finally:
            env.close()
            backend.close()


def test_a_stalled_twin_drops_the_open_episode_and_record_goes_on(
    tmp_path: Path, a2_domain: int
) -> None:
    """A real-time twin frozen (SIGSTOP) mid-session: the sensors go stale, the open episode is
    dropped (a person would redo it), and once the twin runs again the session goes on to the
    episodes asked for; finished episodes are untouched."""
    import os

    import yaml

    from drivers.ros.env import ros_env
    from drivers.setup import load_setup
    from robot_rl.app.nodes.supervisor import Supervisor

    raw = yaml.safe_load(lockstep_setup(tmp_path / "s.yaml", cameras=("front",)).read_text())
    raw["clock"] = "realtime"
    setup = tmp_path / "rt.yaml"
    setup.write_text(yaml.safe_dump(raw))
    extra = {"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    sup = Supervisor(load_setup(setup), tmp_path / "nodes", ros_env(a2_domain, extra=extra))
    sup.start()
    out = tmp_path / "demos.zarr"
    args = ["record", "--setup", str(setup), "--out", str(out), "--episodes", "3", "--json"]
    args += ["--teleop", "sim-expert", "--obs", "pixels", "--log-dir", str(tmp_path / "logs")]
    cli = Cli(args, a2_domain)
    try:
        cli.wait_line(r"episode 1 started", 180)
        twin = sup.nodes[0].pid
        os.kill(twin, signal.SIGSTOP)
        try:
            cli.wait_line(r"stale sensor", 60)  # the recorder saw it while the twin was frozen
        finally:
            os.kill(twin, signal.SIGCONT)
        code, stdout = cli.finish(300)
    finally:
        cli.kill()
        sup.stop(5.0)
    assert code == 0, "\n".join(cli.lines)
    result = json.loads(stdout)
    assert result["sensor_faults"] >= 1 and result["kept"] == 3, result
    episodes, _ = _episodes(out)
    assert len(episodes) == 3 and all(ep["meta"].finished for ep in episodes)
