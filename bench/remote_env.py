"""What ``--env-python`` costs: env steps per second of the same env in process and behind the
worker pipe (robot_rl.envs.remote_env), measured as a ratio in one run, interleaved.

    python bench/remote_env.py                           # both toy envs, this interpreter
    python bench/remote_env.py --python .venv-foreign-env/bin/python

Benchmarks (one JSON object each):
    state:   tests/toy_foreign_envs ToyPointGoal-v0 (a 4 + 2 + 2 float observation);
    pixels:  ToyPointPixels-v0 (one 48x64x3 uint8 image and a 2-float state per step);
    mujoco:  tests/toy_mujoco_env ToyMjSlider-v0 (20 MuJoCo substeps per step), remote in
             --python (default this interpreter; the conflicting-pins venv is the point).

Figures: steps_per_s in process and remote, remote_overhead_us_per_step (the wall time a step
gains by the pipe), ratio (remote / in-process step time). Rounds alternate in-process and
remote blocks so that machine load hits both alike. Printed, never asserted.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import tyro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import toy_foreign_envs  # noqa: E402,F401  (registers the toy envs)

from robot_rl.envs.remote_env import RemoteEnv  # noqa: E402


@dataclass(frozen=True)
class BenchConfig:
    """Remote env overhead benchmark."""

    steps: int = 2000
    """Env steps per block."""
    rounds: int = 5
    """Alternating in-process / remote blocks per env (the median block counts)."""
    python: str | None = None
    """Interpreter of the remote MuJoCo env (default: this one)."""


def machine_info() -> dict:
    return {
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def _block(env: gym.Env, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    low, high = env.action_space.low, env.action_space.high
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(rng.uniform(low, high).astype(np.float32))
        if term or trunc:
            env.reset()
    return time.perf_counter() - t0


def bench(name: str, env_id: str, module: str, cfg: BenchConfig, python: str) -> dict:
    import importlib

    importlib.import_module(module)
    local = gym.make(env_id)
    remote = RemoteEnv(python, f"{module}:{env_id}", env_vars={"PYTHONPATH": str(REPO / "tests")})
    t_local, t_remote = [], []
    try:
        _block(local, 100, 0), _block(remote, 100, 0)  # warm up
        for r in range(cfg.rounds):
            t_local.append(_block(local, cfg.steps, r))
            t_remote.append(_block(remote, cfg.steps, r))
        versions = remote.versions
    finally:
        local.close()
        remote.close()
    lo, re = float(np.median(t_local)), float(np.median(t_remote))
    return {
        "benchmark": f"remote_env_{name}",
        "config": {"env": env_id, "steps": cfg.steps, "rounds": cfg.rounds, "python": python},
        "machine": machine_info(),
        "remote_versions": versions,
        "steps_per_s_in_process": round(cfg.steps / lo, 1),
        "steps_per_s_remote": round(cfg.steps / re, 1),
        "remote_overhead_us_per_step": round((re - lo) / cfg.steps * 1e6, 1),
        "ratio": round(re / lo, 2),
    }


def main(cfg: BenchConfig) -> None:
    cases = [
        ("state", "ToyPointGoal-v0", "toy_foreign_envs", sys.executable),
        ("pixels", "ToyPointPixels-v0", "toy_foreign_envs", sys.executable),
        ("mujoco", "ToyMjSlider-v0", "toy_mujoco_env", cfg.python or sys.executable),
    ]
    for name, env_id, module, python in cases:
        print(json.dumps(bench(name, env_id, module, cfg, python)), flush=True)


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
