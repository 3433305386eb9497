"""A required node that dies under a ``--launch`` command is reported as the cause.

- ``rollout --setup ... --launch`` (real CLI process, real twin over DDS): a twin SIGKILLed once
  the episodes run, and a twin that refuses an invalid parameter at start-up, end the command
  with exit code 3 and a message naming the node, its exit status, its log file and the log's
  last lines (not a StaleSensorError traceback);
- the supervisor and the env wrapper (real node processes): an env error raised while a
  required node dies names the node whichever was noticed first; a node that died between
  steps stops the run at the next step; a call blocked on a dead node is interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from robot_rl.app.nodes.supervision import EXIT_NODE_DIED, NodeDiedError, SupervisedEnv, explain
from robot_rl.core.types import StaleSensorError

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")

TWIN = {
    "name": "twin",
    "module": "sim.ros_node",
    "args": ["--task", "${task}", "--ns", "${namespace}", "--mode", "${clock}",
             "--control-hz", "${control_hz}"],
    "restart": {"policy": "never"},
}  # fmt: skip


def _setup(tmp_path: Path, **twin_extra) -> Path:
    raw = {
        "name": "dead",
        "namespace": "arm",
        "robot": "twin",
        "task": "reach",
        "clock": "lockstep",  # no stale data from a loaded machine: only the kill stops it
        "control_hz": 10.0,
        "nodes": [dict(TWIN, **twin_extra)],
    }
    path = tmp_path / "setup.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _rollout(tmp_path: Path, setup: Path, domain: int, episodes: int) -> subprocess.Popen:
    from drivers.ros.env import ros_env

    env = ros_env(domain, extra={"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")})
    env["PYTHONPATH"] = str(REPO)
    args = ["rollout", "--setup", str(setup), "--launch", "--policy", "zero", "--json"]
    args += ["--log-dir", "nodes"]  # under cwd: where _up_json reads the nodes' state
    return subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli.main", *args, "--episodes", str(episodes)],
        cwd=tmp_path,  # the node logs go to nodes/ under it
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout_s: float) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running after {timeout_s} s:\n{err}") from None
    return proc.returncode, err


def _up_json(tmp_path: Path) -> dict:
    for path in tmp_path.glob("nodes/up.json"):
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:  # written atomically; never half, but be safe
            pass
    return {"nodes": []}


def test_rollout_reports_a_twin_killed_mid_run(
    tmp_path: Path, a2_domain: int, ros_client_factory
) -> None:
    from std_msgs.msg import String

    from drivers.ros import qos

    proc = _rollout(tmp_path, _setup(tmp_path), a2_domain, episodes=1000)
    pid = None
    try:
        client = ros_client_factory(a2_domain)
        client.subscribe(String, "/arm/task/status", qos.STATUS)
        # The twin publishes its task status after each reset and step: 10 mean episodes run.
        client.wait_for(
            lambda: len(client.history["/arm/task/status"]) >= 10 or proc.poll() is not None,
            120,
            "rollout steps",
        )
        assert proc.poll() is None, proc.communicate()[1]
        twin = _up_json(tmp_path)["nodes"][0]
        assert twin["name"] == "twin" and twin["state"] == "running", twin
        pid = twin["pid"]
        os.kill(pid, signal.SIGKILL)
        code, err = _finish(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == EXIT_NODE_DIED, err
    head = "robot-rl: error: required node 'twin' died: killed by SIGKILL (restart policy never); "
    assert f"{head}log: nodes/twin.log\n" in err, err
    assert "twin ready: task=reach mode=lockstep" in err  # the log's last lines
    assert "Traceback" not in err, err
    assert _up_json(tmp_path)["nodes"][0]["last_exit"] == -signal.SIGKILL


def test_rollout_reports_a_twin_that_refuses_its_parameter(tmp_path: Path, a2_domain: int) -> None:
    setup = _setup(tmp_path, parameters={"max_step_m": -0.5})
    code, err = _finish(_rollout(tmp_path, setup, a2_domain, episodes=2), 120)
    assert code == EXIT_NODE_DIED, err
    assert "required node 'twin' died: exited with code 2 (restart policy never); log: " in err
    assert "| [FATAL]" in err and "parameter 'max_step_m' is -0.5; it must be positive" in err
    assert "Traceback" not in err, err


# -- the supervisor and the env wrapper, with a real node process --------------------------------


class _WaitingEnv(gym.Env):
    """Stands in for an env whose call waits on a node (a fake: the real env's waits end at a
    timeout and are then reported through :func:`explain`, which would hide whether the watch
    interrupts a blocked call; this one returns only after a minute)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, block: bool) -> None:
        self.block = block
        self.steps = 0
        self.entered = threading.Event()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        self.entered.set()
        if self.block:
            threading.Event().wait(60.0)  # a signal interrupts this wait
        return np.zeros(2, np.float32), 0.0, False, False, {}


def _supervisor(log_dir: Path, domain: int, restart: dict):
    """A started supervisor of one required node (the teleop replay node)."""
    from drivers.ros.env import ros_env
    from drivers.setup import parse_setup
    from robot_rl.app.nodes.supervisor import Supervisor

    node = {
        "name": "teleop",
        "module": "drivers.teleop.node",
        "args": ["--device", "replay", "--file", str(DATA / "keyboard.jsonl"), "--ns", "arm",
                 "--start-timeout-s", "0.5"],
        "restart": restart,
    }  # fmt: skip
    setup = parse_setup({"task": "reach", "nodes": [node]}, source="test.yaml")
    sup = Supervisor(setup, log_dir, ros_env(domain))
    sup.start()
    return sup


@pytest.fixture
def node_supervisor(tmp_path: Path, a2_domain: int):
    """A supervisor running one required node with restart policy never."""
    sup = _supervisor(tmp_path / "logs", a2_domain, {"policy": "never"})
    yield sup
    sup.stop(5.0)


def _wait_zombie(pid: int, timeout_s: float = 30.0) -> None:
    """Wait until ``pid`` is dead and not yet reaped (state Z), i.e. waitpid would see it."""
    end = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < end, f"pid {pid} still alive after SIGKILL"
        time.sleep(0.01)


def test_env_errors_while_a_required_node_dies_name_the_node(node_supervisor) -> None:
    sup = node_supervisor
    pid = sup.nodes[0].pid
    assert pid is not None
    stale = StaleSensorError("camera 'front': newest frame is 0.3 s old")
    # Alive: the env's error stands (after the grace for the errors a dying node causes).
    assert explain(sup, ValueError("bad option")) is None
    assert explain(sup, stale, grace_s=0.2) is None
    inner = _WaitingEnv(block=False)
    env = SupervisedEnv(inner, sup, watch_interval_s=60.0)  # only the loop's own checks
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())

        os.kill(pid, signal.SIGKILL)
        # The env fails before anyone reaped the node: explain() reaps and names it.
        died = explain(sup, stale, grace_s=30.0)
        assert isinstance(died, NodeDiedError)
        log = sup.nodes[0].log_path
        text = str(died)
        assert text.startswith(
            f"required node 'teleop' died: killed by SIGKILL (restart policy never); log: {log}\n"
        ), text
        assert f"the env then failed with StaleSensorError: {stale}" in text
        assert "| === robot-rl up: start 1" in text and died.secondary is stale

        with pytest.raises(NodeDiedError, match="'teleop' died: killed by SIGKILL") as e:
            env.step(env.action_space.sample())  # the next step does not run
        assert inner.steps == 1 and e.value.secondary is None
    finally:
        env.close()


def test_node_dying_between_steps_stops_the_next_step(node_supervisor) -> None:
    sup = node_supervisor
    inner = _WaitingEnv(block=False)
    env = SupervisedEnv(inner, sup, watch_interval_s=60.0)
    try:
        env.reset(seed=0)
        pid = sup.nodes[0].pid
        os.kill(pid, signal.SIGKILL)
        _wait_zombie(pid)  # dead, not reaped: the step's own poll must find it
        with pytest.raises(NodeDiedError, match="'teleop' died: killed by SIGKILL"):
            env.step(env.action_space.sample())
        assert inner.steps == 0
    finally:
        env.close()


def test_a_call_blocked_on_a_dead_node_is_interrupted(node_supervisor) -> None:
    sup = node_supervisor
    inner = _WaitingEnv(block=True)
    env = SupervisedEnv(inner, sup, watch_interval_s=0.05)
    pid = sup.nodes[0].pid
    killer = threading.Thread(target=lambda: inner.entered.wait(60) and os.kill(pid, 9))
    killer.start()
    try:
        env.reset(seed=0)
        with pytest.raises(NodeDiedError, match="'teleop' died: killed by SIGKILL") as e:
            env.step(env.action_space.sample())  # blocks until the watch interrupts it
        assert e.value.secondary is None  # raised by the interrupt, not after a timeout
    finally:
        killer.join(10)
        env.close()


def test_a_required_node_being_restarted_is_named_too(tmp_path: Path, a2_domain: int) -> None:
    # A long backoff keeps it down for the whole test: what the env sees in the meantime.
    restart = {"policy": "on-failure", "max_restarts": 1, "backoff_s": 600.0}
    sup = _supervisor(tmp_path / "logs", a2_domain, restart)
    inner = _WaitingEnv(block=False)
    env = SupervisedEnv(inner, sup, watch_interval_s=0.05)
    try:
        env.reset(seed=0)
        os.kill(sup.nodes[0].pid, signal.SIGKILL)
        stale = StaleSensorError("robot state is 0.3 s old")
        died = explain(sup, stale, grace_s=30.0)
        assert isinstance(died, NodeDiedError)
        assert str(died).startswith(
            "required node 'teleop' died: killed by SIGKILL (restarting in 600 s (restart 1/1))"
        ), died
        assert not died.death.final and sup.nodes[0].state == "backoff"
        env.step(env.action_space.sample())  # not down for good: the run may go on
        assert inner.steps == 1
    finally:
        env.close()
        sup.stop(5.0)
