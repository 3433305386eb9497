"""An env in another interpreter (``--env-python``): the wire format, the worker, and the path
for an env whose pins conflict with ours (MuJoCo 3.2.7 and numpy 1.26 in .venv-foreign-env,
made by scripts/foreign_env_venv.sh, against our pinned MuJoCo and numpy 2)."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.envs import env_wire
from robot_rl.envs.remote_env import RemoteEnv, RemoteEnvError

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import toy_foreign_envs  # noqa: E402,F401  (registers the toy envs here too)
from cli_helpers import run_cli  # noqa: E402

FOREIGN_PY = REPO / ".venv-foreign-env" / "bin" / "python"
WORKER_ENV = {"PYTHONPATH": str(HERE)}


def _roundtrip(message: dict) -> dict:
    buf = io.BytesIO(env_wire.encode(message))
    out = env_wire.read(buf)
    assert env_wire.read(buf) is None  # exactly one frame
    return out


def test_the_wire_carries_nested_arrays_bit_identical_and_refuses_malformed_frames() -> None:
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    msg = {"obs": {"pixels": {"top": img}, "pos": np.array([0.1, np.nan], np.float32)},
           "flags": (np.bool_(True), np.int64(7)), "info": {"who": object(), "n": 3}}  # fmt: skip
    out = _roundtrip(msg)
    np.testing.assert_array_equal(out["obs"]["pixels"]["top"], img)
    assert out["obs"]["pixels"]["top"].dtype == np.uint8
    pos = out["obs"]["pos"]
    assert pos.dtype == np.float32 and pos[0] == np.float32(0.1) and np.isnan(pos[1])
    assert out["flags"] == [True, 7] and out["info"]["n"] == 3
    assert out["info"]["who"].startswith("<object object")  # no pickle: its repr
    frame = env_wire.encode({"a": np.zeros(3)})

    def bad(data: bytes, match: str) -> None:
        with pytest.raises(env_wire.WireError, match=match):
            env_wire.read(io.BytesIO(data))

    bad(frame[:-5], "closed the stream inside the payload")
    bad(frame[:6], "inside the header")
    stream = io.BytesIO(frame + b"x")  # a stray byte after a frame: the next one is cut
    assert env_wire.read(stream) is not None
    with pytest.raises(env_wire.WireError, match="inside the header length"):
        env_wire.read(stream)
    h = json.dumps({"a": {"__nd__": 0}, "__arrays__": [{"dtype": "|O", "shape": [1],
                    "nbytes": 8}]}).encode()  # fmt: skip
    bad(struct.pack(">I", len(h)) + h + struct.pack(">Q", 8) + bytes(8), "not numeric")
    h = json.dumps({"a": {"__nd__": 0}, "__arrays__": [{"dtype": "<f8", "shape": [2],
                    "nbytes": 8}]}).encode()  # fmt: skip
    bad(struct.pack(">I", len(h)) + h + struct.pack(">Q", 8) + bytes(8), "does not match")
    h = json.dumps({"a": {"__nd__": 3}, "__arrays__": []}).encode()
    bad(struct.pack(">I", len(h)) + h + struct.pack(">Q", 0), "not one of the 0 arrays")
    bad(struct.pack(">I", 3) + b"{x}" + struct.pack(">Q", 0), "not UTF-8 JSON")
    h = json.dumps({"__arrays__": []}).encode()
    bad(struct.pack(">I", len(h)) + h + struct.pack(">Q", 2) + b"ab", "beyond its arrays")


def test_a_remote_env_steps_exactly_as_the_same_env_in_process() -> None:
    """The worker in this interpreter (the wire and the worker, without the pin conflict):
    spaces, observations, rewards and info equal the in-process env's, seed for seed."""
    local = gym.make("ToyPointPixels-v0")
    remote = RemoteEnv(sys.executable, "toy_foreign_envs:ToyPointPixels-v0", env_vars=WORKER_ENV)
    try:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        assert remote.spec.max_episode_steps == 20
        for seed in (0, 1):
            (o1, i1), (o2, i2) = local.reset(seed=seed), remote.reset(seed=seed)
            np.testing.assert_array_equal(o1["pixels"]["top"], o2["pixels"]["top"])
            assert i1 == i2
            for _ in range(20):
                a = local.action_space.sample()
                s1, s2 = local.step(a), remote.step(a)
                np.testing.assert_array_equal(s1[0]["agent"]["pos"], s2[0]["agent"]["pos"])
                assert s1[1:] == s2[1:]
                if s1[2] or s1[3]:
                    break
    finally:
        remote.close()
        local.close()


def test_the_workers_failures_are_clear_errors_and_a_dead_worker_is_reported() -> None:
    with pytest.raises(RemoteEnvError, match="No module named 'no_such_module'"):
        RemoteEnv(sys.executable, "no_such_module:Toy-v0", env_vars=WORKER_ENV)
    with pytest.raises(RemoteEnvError, match="does not exist"):
        RemoteEnv("/nonexistent/python", "ToyPointGoal-v0")
    remote = RemoteEnv(sys.executable, "toy_foreign_envs:ToyPointGoal-v0", env_vars=WORKER_ENV)
    try:
        remote.reset(seed=0)
        with pytest.raises(RemoteEnvError, match="step"):
            remote.step(np.zeros(5))  # the env's own error, with its traceback; still serving
        remote.step(np.zeros(2))
        remote._proc.kill()
        remote._proc.wait()
        with pytest.raises(RemoteEnvError, match="exited with code -9"):
            remote.step(np.zeros(2))
    finally:
        remote.close()


def _foreign_python() -> Path:
    usable = subprocess.run(["bash", str(REPO / "scripts" / "foreign_env_venv.sh"), "--check"])
    if usable.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("CI: .venv-foreign-env is missing (scripts/install.sh --dev makes it)")
        pytest.skip("no .venv-foreign-env here: bash scripts/foreign_env_venv.sh makes it")
    return FOREIGN_PY


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args)


def test_an_env_that_pins_another_mujoco_trains_behind_env_python(tmp_path: Path) -> None:
    """A MuJoCo env whose venv pins MuJoCo 3.2.7 and numpy 1.26 (ours: newer), run in that venv
    behind ``--env-python``: the mapping, demos from a scripted policy here, training on its
    sparse success, evaluation of the run (which remembers the interpreter)."""
    py = str(_foreign_python())
    env = ["--env", "toy_mujoco_env:ToyMjSlider-v0", "--env-python", py, "--task-reward", "sparse"]
    proc = _cli("envs", *env[:4], "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["versions"]["mujoco"] == "3.2.7" and out["versions"]["numpy"] == "1.26.4"
    import mujoco

    assert mujoco.__version__ != "3.2.7"  # the conflict is real: ours is another
    demos = tmp_path / "demos.zarr"
    proc = _cli("collect", *env, "--policy", "toy_foreign_envs:goal_expert", "--episodes", "10",
                "--out", str(demos), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["episodes_written"] == 10
    run = tmp_path / "run"
    proc = _cli("train", *env, "--demos", str(demos), "--steps", "1000", "--eval-every-steps",
                "250", "--run", str(run), "--no-progress", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    curve = [json.loads(s)["success_rate"] for s in (run / "eval.jsonl").read_text().splitlines()]
    assert curve[0] <= 0.4 and max(curve) >= 0.8, curve
    proc = _cli("eval", "--run", str(run), "--episodes", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["success_rate"] >= 0.6
    proc = _cli("envs", "--env", "toy_mujoco_env:ToyMjSlider-v0", "--env-python",
                "/nonexistent/python")  # fmt: skip
    assert proc.returncode == 2 and "does not exist" in proc.stderr
