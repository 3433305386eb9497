"""Run the `robot-rl` CLI in a subprocess, as a user runs it (shared by the reward tests)."""

from __future__ import annotations

import os
import subprocess
import sys

EPISODES = 60
"""Episodes of twin frames the shared classifier is trained on."""


def robot_rl(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    return subprocess.run(
        [sys.executable, "-m", "robot_rl.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
