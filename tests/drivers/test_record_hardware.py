"""``robot-rl record`` / ``label`` on a hardware setup (``robot: hardware``), and its task.

- HardwareTask (no ROS): the start pose is the setup's ``reset_pose`` moved by a seeded
  uniform jitter and clipped into the safety box; ``evaluate()`` never claims success;
- setup keys ``reset_pose`` / ``reset_jitter_m`` / ``time_base``: bad values are errors that name
  the key; the shipped ``launch/franka_realsense.yaml`` has a valid start pose;
- commands that need a task reward (rollout) refuse a hardware setup before any node starts,
  and record refuses ``--success-from task`` and ``--obs state`` on it;
- real processes: a hardware setup whose arm is the twin in realtime mode renamed
  ``arm_bridge`` (it speaks the arm bridge contract; it stamps with sim time, so the setup says
  ``time_base: stream``), the replay teleop node, and ``robot-rl record`` / ``label`` with
  ``--launch``: record keeps the episodes the buttons mark (success only from the buttons,
  reward 0), every episode starts at the seeded jittered start pose, and the env never uses
  the twin's ``task/status`` or ``task/reset``; label stores the task success reference as
  unknown (-1).

ROS domain ids: 50..59 (leased across processes).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from ros_graph import DomainIds, RosClient

from drivers.ros_hw_task import HardwareTask, HardwareTaskConfig, check_reset_pose
from drivers.setup import SetupError, load_setup, parse_setup
from robot_rl.core.safety import SafetyConfig

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
SAFETY = SafetyConfig(
    workspace_low_m=(0.3, -0.28, 0.015),
    workspace_high_m=(0.7, 0.28, 0.35),
    orientation_max_rad=0.8,
)  # pick_cube's default_safety: the twin's limits, given to it as parameters below
START = (0.5, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0)  # gripper pointing down
JITTER_M = (0.03, 0.03, 0.0)
HW_DOMAINS = DomainIds(50, 60)


def _safety_dict() -> dict:
    return {
        "workspace_low_m": list(SAFETY.workspace_low_m),
        "workspace_high_m": list(SAFETY.workspace_high_m),
        "orientation_max_rad": SAFETY.orientation_max_rad,
    }


def _hw_raw(**top) -> dict:
    raw = {
        "name": "test_hw",
        "robot": "hardware",
        "task": "wipe_table",  # free text on hardware
        "safety": _safety_dict(),
        "reset_pose": list(START),
        "nodes": [{"name": "arm_bridge", "module": "drivers.franka.node"}],
    }
    raw.update(top)
    return {k: v for k, v in raw.items() if v is not None}


# -- HardwareTask and the setup keys (no ROS) --------------------------------------------------


def test_hardware_task_start_is_seeded_jittered_and_clipped_into_the_box() -> None:
    near_edge = (0.69, 0.0, 0.02, 0.0, 1.0, 0.0, 0.0)  # 1 cm from x_high, 5 mm above z_low
    task = HardwareTask(HardwareTaskConfig("wipe", near_edge, (0.05, 0.05, 0.05), SAFETY))
    poses = np.array([task.reset(np.random.default_rng(s)) for s in range(200)])
    lo, hi = np.array(SAFETY.workspace_low_m), np.array(SAFETY.workspace_high_m)
    assert np.all(poses[:, :3] >= lo) and np.all(poses[:, :3] <= hi)
    assert np.isclose(poses[:, 0], hi[0]).any() and np.isclose(poses[:, 2], lo[2]).any()
    assert np.all(np.abs(poses[:, :3] - near_edge[:3]) <= 0.05 + 1e-12)
    assert poses[:, 1].std() > 0.02  # y is free to move: it does
    np.testing.assert_allclose(poses[:, 3:], np.tile(near_edge[3:], (200, 1)), atol=1e-12)
    np.testing.assert_array_equal(  # the same seed gives the same start
        task.reset(np.random.default_rng(7)), task.reset(np.random.default_rng(7))
    )
    still = HardwareTask(HardwareTaskConfig("wipe", START, safety=SAFETY))
    np.testing.assert_allclose(still.reset(np.random.default_rng(3)), START)
    # Never a success (unknown: None), a failure, a reward or sim truth, whatever happens.
    status = task.evaluate()
    assert (status.reward, status.success, status.failure, dict(status.privileged)) == (
        0.0,
        None,
        False,
        {},
    )
    assert task.privileged_spec == {} and task.name == "wipe"


@pytest.mark.parametrize(
    ("top", "key", "match"),
    [
        (
            {"reset_pose": [0.9, 0.0, 0.2, 0.0, 1.0, 0.0, 0.0]},
            "reset_pose",
            "outside the safety box",
        ),
        ({"reset_pose": [0.5, 0.0, 0.2, 0.0, 0.5, 0.0, 0.0]}, "reset_pose", "unit quaternion"),
        ({"reset_pose": [0.5, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0]}, "reset_pose", "cone"),
        ({"reset_pose": [0.5, 0.0, 0.2]}, "reset_pose", "list of 7 numbers"),
        ({"reset_jitter_m": [0.01, -0.01, 0.0]}, "reset_jitter_m", ">= 0"),
        ({"reset_pose": None, "reset_jitter_m": [0.01] * 3}, "reset_jitter_m", "needs reset_pose"),
        ({"robot": "twin"}, "reset_pose", "robot: hardware"),
        ({"robot": "twin", "reset_pose": None, "time_base": "monotonic"}, "time_base", "sim time"),
        ({"time_base": "ros"}, "time_base", "monotonic, stream"),
    ],
)
def test_bad_start_keys_name_the_key(top: dict, key: str, match: str) -> None:
    with pytest.raises(SetupError, match=rf"hw\.yaml: {key}: .*{match}"):
        parse_setup(_hw_raw(**top), source="hw.yaml")


def test_hardware_setup_defaults_and_the_shipped_franka_setup() -> None:
    s = parse_setup(_hw_raw(reset_jitter_m=[0.01, 0.02, 0.0]), source="hw.yaml")
    assert (s.time_base, s.reset_pose, s.reset_jitter_m) == ("monotonic", START, (0.01, 0.02, 0.0))
    assert parse_setup(_hw_raw(time_base="stream"), source="hw.yaml").time_base == "stream"
    twin = load_setup(REPO / "launch" / "sim.yaml")
    assert (twin.time_base, twin.reset_pose) == ("stream", None)
    franka = load_setup(REPO / "launch" / "franka_realsense.yaml")
    assert franka.robot == "hardware" and franka.time_base == "monotonic"
    assert franka.reset_pose is not None and franka.safety is not None
    check_reset_pose(franka.reset_pose, franka.reset_jitter_m, franka.safety)
    # The start stays out of the bridge's parameters (the env sets reset_pose at each reset).
    argv = franka.node("arm_bridge").command("python")
    assert not any(a.startswith("reset_pose") for a in argv), argv


def test_commands_that_need_a_task_reward_refuse_hardware(tmp_path: Path) -> None:
    from robot_rl.app.nodes.ros_env import make_ros_env
    from robot_rl.app.teleop.record import RecordConfig, run_record

    franka = REPO / "launch" / "franka_realsense.yaml"
    with pytest.raises(ValueError, match="reward model"):  # rollout's call; no node started
        make_ros_env(franka, launch=True, log_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()
    no_start = parse_setup(_hw_raw(reset_pose=None), source="hw.yaml")
    with pytest.raises(ValueError, match="needs reset_pose"):
        make_ros_env(no_start, needs_task_reward=False)
    for kw, match in (
        ({"success_from": "task", "obs": "pixels"}, "only the person's buttons"),
        ({"success_from": "both", "obs": "pixels"}, "only the person's buttons"),
        ({"obs": "state"}, "--obs pixels"),
    ):
        with pytest.raises(ValueError, match=match):
            run_record(RecordConfig(setup=franka, out=tmp_path / "demos.zarr", **kw))
    assert not (tmp_path / "demos.zarr").exists()


# -- record and label over ROS 2, the twin standing in for the arm ------------------------------


@pytest.fixture
def hw_domain() -> int:
    """A fresh ROS domain id (50..59, leased across processes)."""
    pytest.importorskip("mujoco")
    return HW_DOMAINS.next()


def _twin_arm_setup(path: Path) -> Path:
    """A hardware setup whose arm is the realtime twin, renamed ``arm_bridge``."""
    args = ["--task", "pick_cube", "--ns", "${namespace}", "--cameras", "front"]
    args += ["--image-size", "64", "--mode", "realtime", "--control-hz", "${control_hz}"]
    args += ["--ros-args", "-r", "__node:=arm_bridge"]
    raw = _hw_raw(
        clock="realtime",
        time_base="stream",  # the twin stamps with sim time
        control_hz=10.0,
        # Generous staleness limits: this test is about buttons and labels, not latency, and a
        # realtime twin on a loaded 2-core machine can publish a frame late (bench/ measures it).
        max_state_age_s=0.5,
        max_image_age_s=0.5,
        cameras=[{"name": "front", "height": 64, "width": 64}],
        reset_jitter_m=list(JITTER_M),
        nodes=[
            {"name": "arm_bridge", "module": "sim.ros_node", "args": args},
            # The setup's own device (replaced by --teleop-events; never started here).
            {"name": "teleop", "module": "drivers.teleop.node", "args": ["--device", "spacemouse"]},
        ],
    )
    raw["nodes"][0]["parameters"] = _safety_dict()  # the bridge gets the env's limits
    path.write_text(yaml.safe_dump(raw))
    return path


def test_record_on_hardware_keeps_what_the_buttons_mark(tmp_path: Path, hw_domain: int) -> None:
    from gymnasium.utils import seeding
    from record_helpers import Cli

    from robot_rl.replay import EpisodeLog

    setup_path = _twin_arm_setup(tmp_path / "hw.yaml")
    out = tmp_path / "demos.zarr"
    args = ["record", "--setup", str(setup_path), "--launch", "--out", str(out)]
    args += ["--episodes", "3", "--obs", "pixels", "--image-size", "64", "--json"]
    args += ["--log-dir", str(tmp_path / "logs")]
    args += ["--teleop-events", str(DATA / "record_keyboard.jsonl")]
    client = RosClient(hw_domain, "h7_observer")  # watches the graph while record runs
    cli = Cli(args, hw_domain)
    try:
        cli.wait_line(r"episode 1 started", 180)
        node = client.node
        client.wait_for(  # the env's endpoints are discovered (it has run for seconds)
            lambda: (
                node.count_subscribers("/arm/robot_state") >= 1
                and node.count_publishers("/arm/target_pose") >= 1
                and node.count_subscribers("/arm/teleop/joy") >= 1
            ),
            30,
            "the env's endpoints",
        )
        task_status_readers = node.count_subscribers("/arm/task/status")
        task_reset_clients = node.count_clients("/arm/task/reset")
        code, stdout = cli.finish(240)
    finally:
        cli.kill()
        client.close()
    log = "\n".join(cli.lines)
    assert code == 0, log
    assert (task_status_readers, task_reset_clients) == (0, 0), "the env used the twin's task"
    result = json.loads(stdout)
    assert [e["end"] for e in result["per_episode"]] == ["success", "failure", "success"], log
    assert (result["kept"], result["discarded"], result["successes"]) == (3, 1, 2), (result, log)

    with EpisodeLog.open(out, unfinished="error", mode="r") as store:
        meta = dict(store.meta)
        episodes = [store.read_episode(e.index) for e in store.episodes]
    assert meta["success_from"] == "buttons" and meta["env"]["task"] == "wipe_table"
    assert [ep["meta"].success for ep in episodes] == [True, False, True]
    task = HardwareTask(HardwareTaskConfig("wipe_table", START, JITTER_M, SAFETY))
    starts = []
    for ep, axis in zip(episodes, (0, 1, 2), strict=True):  # w (+x), a (+y), r (+z)
        assert ep["meta"].length > 3 and ep["intervened"].all()
        assert not ep["reward"].any()  # no task reward on hardware
        assert ep["terminated"][-1] and not ep["terminated"][:-1].any()
        assert ep["obs"]["images"]["front"].std() > 0
        # The env reset the arm to the setup's start, jittered with the episode's seed.
        expected = task.reset(seeding.np_random(ep["meta"].seed)[0])
        np.testing.assert_allclose(ep["obs"]["state"][0, :3], expected[:3], atol=0.003)
        starts.append(expected[:3])
        moved = ep["next_obs"]["state"][-1, axis] - ep["obs"]["state"][0, axis]
        assert moved > 0.02, f"the arm did not move along axis {axis}: {moved}"
    assert np.ptp(np.array(starts)[:, :2], axis=0).max() > 1e-3  # the jitter varies


def test_label_on_hardware_stores_no_task_success(tmp_path: Path, hw_domain: int) -> None:
    from record_helpers import run_cli

    from robot_rl.replay.frames import FrameLog

    setup_path = _twin_arm_setup(tmp_path / "hw.yaml")
    out = tmp_path / "frames.zarr"
    args = ["label", "--setup", str(setup_path), "--launch", "--out", str(out)]
    args += ["--episodes", "2", "--json", "--log-dir", str(tmp_path / "logs")]
    args += ["--teleop-events", str(DATA / "label_keyboard.jsonl")]
    assert json.loads(run_cli(args, hw_domain, 240)[0])["kept"] == 2
    with FrameLog.open(out) as store:
        d = store.read()
        assert store.positives > 0 and store.negatives > 0
    assert (d["task_success"] == -1).all()  # unknown on hardware, never a claimed success
    for e in range(2):
        labels = d["label"][d["episode"] == e]
        assert labels.any() and labels[:5].sum() == 0, labels  # held only after driving
