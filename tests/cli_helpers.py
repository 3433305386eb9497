"""``robot-rl`` as a real process for the tests of envs robot_rl did not write (this folder on
PYTHONPATH, where ``toy_foreign_envs`` and ``toy_mujoco_env`` live)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m robot_rl.cli.main ARGS`` (stdout, stderr, exit code); wide COLUMNS so that
    tyro's boxed refusals keep their message on one line."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, COLUMNS="400")
    env.setdefault("MUJOCO_GL", "osmesa")
    return subprocess.run(
        [sys.executable, "-m", "robot_rl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def flat(text: str) -> str:
    """An error message as one line (tyro draws a box around a config's refusal)."""
    return " ".join(text.replace("│", " ").split())
