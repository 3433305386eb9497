"""Setup YAML files and the ``robot-rl up`` supervisor.

Part 1 (no ROS graph): what the shipped setups pass to their nodes; node command lines
(malformed setups: ``test_setup_schema.py``).
Part 2 (real processes over DDS): ``up`` starts a twin + teleop setup, restarts a SIGKILLed
optional node per its policy (the new process publishes again), gives up on a node that keeps
failing and takes the setup down, and stops everything cleanly on SIGINT without orphans.
A required node that dies (a twin refusing an invalid parameter, a node SIGKILLed while ``up``
runs) is reported by name, exit status, log file and the log's last lines; exit code 3.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from drivers.setup import SetupError, load_setup, parse_setup
from robot_rl.app.nodes.supervision import EXIT_NODE_DIED

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")

# -- Part 1: schema ----------------------------------------------------------------------------


def test_sim_setup_passes_its_values_to_the_twin() -> None:
    setup = load_setup(REPO / "launch" / "sim.yaml")
    argv = setup.node("twin").command("python")
    assert argv[argv.index("--mode") + 1] == setup.clock
    assert argv[argv.index("--ns") + 1] == setup.namespace
    assert argv[argv.index("--task") + 1] == setup.task
    assert [c.name for c in setup.cameras] == ["front", "wrist"]


def test_franka_setup_gives_the_bridge_the_env_safety_limits() -> None:
    setup = load_setup(REPO / "launch" / "franka_realsense.yaml")
    assert setup.safety is not None
    argv = setup.node("arm_bridge").command("python")
    ros = argv[argv.index("--ros-args") + 1 :]
    params = dict(p.split(":=", 1) for p in ros[1::2])
    assert params["robot_ip"] == "172.16.0.2"
    assert yaml.safe_load(params["max_step_m"]) == setup.safety.max_step_m
    assert tuple(yaml.safe_load(params["workspace_low_m"])) == setup.safety.workspace_low_m


def _valid() -> dict:
    return {
        "name": "t",
        "namespace": "arm",
        "robot": "twin",
        "task": "pick_cube",
        "clock": "lockstep",
        "cameras": [{"name": "front", "height": 64, "width": 64}],
        "nodes": [
            {"name": "twin", "module": "sim.ros_node", "args": ["--ns", "${namespace}"]},
            {
                "name": "cam",
                "module": "drivers.cameras.realsense_node",
                "restart": {"policy": "on-failure", "max_restarts": 2},
                "required": False,
            },
        ],
    }


def test_parameters_become_ros_args() -> None:
    raw = _valid()
    raw["nodes"][0]["parameters"] = {
        "ip": "10.0.0.2",
        "hz": 100,
        "on": True,
        "v": [1.0, 2],
        "s": "5",
    }
    argv = parse_setup(raw).node("twin").command("py")
    i = argv.index("--ros-args")
    assert argv[i + 1 :] == [
        "-p", "ip:=10.0.0.2", "-p", "hz:=100", "-p", "on:=true", "-p", "v:=[1.0, 2.0]",
        "-p", "s:='5'",
    ]  # fmt: skip


def test_only_one_node_may_read_the_terminal() -> None:
    raw = _valid()
    for n in raw["nodes"]:
        n["terminal"] = True
    with pytest.raises(SetupError, match="only one node may read the terminal"):
        parse_setup(raw)


# -- Part 2: the supervisor over real processes ------------------------------------------------


def _write_setup(tmp_path: Path, nodes: list[dict]) -> Path:
    raw = {
        "name": "uptest",
        "namespace": "arm",
        "robot": "twin",
        "task": "reach",
        "clock": "lockstep",
        "nodes": nodes,
    }
    path = tmp_path / "setup.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _teleop(name: str = "teleop", policy: str = "on-failure", max_restarts: int = 3) -> dict:
    # The replay device stands in for a camera-like streaming node: a real node process that
    # publishes at a fixed rate and can crash independently of the arm.
    return {
        "name": name,
        "module": "drivers.teleop.node",
        "args": ["--device", "replay", "--file", str(DATA / "keyboard.jsonl"), "--ns", "arm",
                 "--start-timeout-s", "0.5"],
        "restart": {"policy": policy, "max_restarts": max_restarts, "backoff_s": 0.2},
        "required": False,
    }  # fmt: skip


TWIN = {
    "name": "twin",
    "module": "sim.ros_node",
    "args": ["--task", "${task}", "--ns", "${namespace}", "--cameras", "--mode", "${clock}"],
    "restart": {"policy": "never"},
}


class UpProcess:
    """``python -m robot_rl.cli.up`` as a child process; state read from its up.json."""

    def __init__(self, setup: Path, log_dir: Path, domain: int) -> None:
        self.log_dir = log_dir
        env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"))
        self.stderr_path = log_dir.parent / "up.stderr"
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli.up", str(setup), "--log-dir", str(log_dir),
             "--domain-id", str(domain), "--shutdown-timeout-s", "5"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=self._err,
        )  # fmt: skip
        self.pids: set[int] = set()

    def state(self) -> dict:
        try:
            data = json.loads((self.log_dir / "up.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"nodes": []}
        self.pids |= {n["pid"] for n in data["nodes"] if n["pid"]}
        return data

    def node(self, name: str) -> dict:
        return next((n for n in self.state()["nodes"] if n["name"] == name), {})

    def wait(self, predicate, timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > end:
                raise TimeoutError(f"{what} within {timeout_s} s; stderr:\n{self.stderr()}")
            if self.proc.poll() is not None and not predicate():
                raise AssertionError(f"up exited ({self.proc.returncode}):\n{self.stderr()}")
            time.sleep(0.05)

    def stderr(self) -> str:
        self._err.flush()
        return self.stderr_path.read_text()

    def finish(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        for pid in self.pids:  # never leave a node behind, even when the test failed
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._err.close()


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def up_factory(tmp_path: Path):
    made: list[UpProcess] = []

    def make(setup: Path, domain: int) -> UpProcess:
        u = UpProcess(setup, tmp_path / "logs", domain)
        made.append(u)
        return u

    yield make
    for u in made:
        u.finish()


def test_up_restarts_a_crashed_node_and_shuts_down_cleanly(
    tmp_path: Path, a2_domain: int, up_factory, ros_client_factory
) -> None:
    from geometry_msgs.msg import TwistStamped
    from sensor_msgs.msg import Joy
    from std_msgs.msg import String

    from drivers.ros import qos

    up = up_factory(_write_setup(tmp_path, [TWIN, _teleop()]), a2_domain)
    up.wait(lambda: up.node("teleop").get("state") == "running", 30, "teleop running")
    first_pid = up.node("teleop")["pid"]

    client = ros_client_factory(a2_domain)
    client.subscribe(String, "/arm/task/status", qos.STATUS)
    client.subscribe(TwistStamped, "/arm/teleop/twist", qos.SENSOR)
    client.subscribe(Joy, "/arm/teleop/joy", qos.TELEOP_JOY)
    client.wait_for(lambda: "/arm/task/status" in client.latest, 60, "the twin's task status")
    client.wait_for(lambda: len(client.history["/arm/teleop/twist"]) > 3, 30, "teleop messages")

    os.kill(first_pid, signal.SIGKILL)  # the node crashes
    up.wait(
        lambda: (
            up.node("teleop").get("restarts") == 1
            and up.node("teleop").get("state") == "running"
            and up.node("teleop").get("pid") not in (None, first_pid)
        ),
        30,
        "teleop restarted once with a new pid",
    )
    assert up.node("teleop")["last_exit"] == -signal.SIGKILL
    assert up.node("twin")["state"] == "running"  # the arm is untouched
    client.history["/arm/teleop/twist"].clear()
    client.wait_for(lambda: len(client.history["/arm/teleop/twist"]) > 3, 30, "restarted teleop")
    log = (up.log_dir / "teleop.log").read_text()
    assert log.count("=== robot-rl up: start") == 2
    assert "killed by SIGKILL; restarting" in up.stderr()

    pids = {n["pid"] for n in up.state()["nodes"]}
    up.proc.send_signal(signal.SIGINT)  # Ctrl-C
    assert up.proc.wait(timeout=30) == 0, up.stderr()
    assert all(_gone(pid) for pid in pids | up.pids), "orphan node processes"
    final = up.state()
    assert {n["state"] for n in final["nodes"]} == {"stopped"}
    assert "received SIGINT" in up.stderr()


def test_up_gives_up_on_a_failing_required_node(tmp_path: Path, a2_domain: int, up_factory) -> None:
    broken = {
        "name": "broken_camera",
        "module": "drivers.no_such_camera_node",  # exits 1 at once: ModuleNotFoundError
        "restart": {"policy": "on-failure", "max_restarts": 2, "backoff_s": 0.1},
        "required": True,
    }
    up = up_factory(_write_setup(tmp_path, [broken, _teleop(policy="never")]), a2_domain)
    end = time.monotonic() + 60
    while up.proc.poll() is None and time.monotonic() < end:
        up.state()  # collects every pid it shows, for the orphan check
        time.sleep(0.02)
    assert up.proc.poll() == EXIT_NODE_DIED
    err = up.stderr()
    assert (
        "required node 'broken_camera' died: exited with code 1 (restarts used up); "
        f"log: {up.log_dir / 'broken_camera.log'}" in err
    ), err
    tail = err[err.index("last 6 lines of") :]  # the log's last lines follow
    assert tail.count("No module named drivers.no_such_camera_node") == 3, err
    log = (up.log_dir / "broken_camera.log").read_text()
    assert log.count("=== robot-rl up: start") == 3  # first start + 2 restarts
    assert "No module named drivers.no_such_camera_node" in log
    nodes = {n["name"]: n for n in up.state()["nodes"]}
    assert nodes["broken_camera"]["state"] == "failed"
    assert nodes["teleop"]["state"] in ("stopped", "exited", "failed")
    assert all(_gone(pid) for pid in up.pids)


def test_terminal_nodes_are_skipped_without_a_terminal(tmp_path: Path) -> None:
    from robot_rl.app.nodes.supervisor import SKIPPED, Supervisor

    raw = _valid()
    raw["nodes"] = [dict(_teleop(), args=["--device", "keyboard"], terminal=True)]
    events: list[str] = []
    sup = Supervisor(parse_setup(raw), tmp_path, dict(os.environ), on_event=events.append)
    sup.start(has_terminal=False)
    assert sup.nodes[0].state == SKIPPED and sup.nodes[0].pid is None
    assert "reads the terminal" in events[0]
    assert not sup.poll()  # nothing runs
    sup.stop()


def test_up_rejects_an_invalid_setup(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: reach\nnodes:\n  - {name: a}\n")
    out = subprocess.run(
        [sys.executable, "-m", "robot_rl.cli.up", str(bad), "--log-dir", str(tmp_path / "l")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "nodes[0] (a).module: missing: this key is required (a string)" in out.stderr


def _wait_exit(up: UpProcess, timeout_s: float) -> int:
    end = time.monotonic() + timeout_s
    while up.proc.poll() is None:
        up.state()  # collects every pid it shows, for the orphan check
        if time.monotonic() > end:
            raise TimeoutError(f"up still running after {timeout_s} s:\n{up.stderr()}")
        time.sleep(0.05)
    return up.proc.returncode


def test_up_reports_a_twin_that_refuses_its_parameter(
    tmp_path: Path, a2_domain: int, up_factory
) -> None:
    twin = dict(TWIN, parameters={"max_step_m": -0.5})  # the bridge refuses it and exits
    up = up_factory(_write_setup(tmp_path, [twin, _teleop()]), a2_domain)
    assert _wait_exit(up, 60) == EXIT_NODE_DIED
    err = up.stderr()
    log = up.log_dir / "twin.log"
    assert f"required node 'twin' died: exited with code 2 (restart policy never); log: {log}" in (
        err
    ), err
    assert "parameter 'max_step_m' is -0.5; it must be positive" in err  # the log's tail
    assert err.index("robot-rl up: required node 'twin' died") > err.index("setup down")
    assert all(_gone(pid) for pid in up.pids)


def test_up_reports_a_required_node_killed_while_it_runs(
    tmp_path: Path, a2_domain: int, up_factory
) -> None:
    node = dict(_teleop(policy="never"), required=True)
    up = up_factory(_write_setup(tmp_path, [node]), a2_domain)
    up.wait(lambda: up.node("teleop").get("state") == "running", 30, "teleop running")
    os.kill(up.node("teleop")["pid"], signal.SIGKILL)
    assert _wait_exit(up, 30) == EXIT_NODE_DIED
    err = up.stderr()
    log = up.log_dir / "teleop.log"
    assert f"required node 'teleop' died: killed by SIGKILL (restart policy never); log: {log}" in (
        err
    ), err
    assert "| === robot-rl up: start 1" in err  # the log's last lines follow
    assert up.node("teleop")["last_exit"] == -signal.SIGKILL
    assert all(_gone(pid) for pid in up.pids)


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (ended; whoever inherited it may not have reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux")
def test_nodes_end_when_up_is_sigkilled(tmp_path: Path, a2_domain: int, up_factory) -> None:
    """SIGKILL reaches no handler of `up`, and its nodes run in their own sessions: without the
    parent-death signal they would go on publishing to the robot's topics, supervised by no one.
    """
    up = up_factory(_write_setup(tmp_path, [_teleop()]), a2_domain)
    up.wait(lambda: up.node("teleop").get("state") == "running", 30, "teleop running")
    pid = up.node("teleop")["pid"]
    assert not _ended(pid)
    up.proc.send_signal(signal.SIGKILL)
    up.proc.wait(10)
    end = time.monotonic() + 30
    while not _ended(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert _ended(pid), "the node outlived its supervisor"
