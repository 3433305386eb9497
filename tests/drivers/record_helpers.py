"""Helpers of the record / label ROS tests: a lockstep twin setup file, keyboard event files,
and the CLI in a subprocess with its stderr lines (the live view's event lines) in a queue."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from drivers.ros.env import ros_env

REPO = Path(__file__).resolve().parents[2]


def lockstep_setup(
    path: Path, cameras: tuple[str, ...] = (), image: int = 64, task: str = "pick_cube"
) -> Path:
    """A lockstep twin setup (pick_cube by default) with only the twin node."""
    raw = {
        "name": "test_record",
        "namespace": "arm",
        "robot": "twin",
        "task": task,
        "clock": "lockstep",
        "control_hz": 10.0,
        "cameras": [{"name": c, "height": image, "width": image} for c in cameras],
        "nodes": [
            {
                "name": "twin",
                "module": "sim.ros_node",
                "args": [
                    "--task",
                    "${task}",
                    "--ns",
                    "${namespace}",
                    "--cameras",
                    *cameras,
                    "--image-size",
                    str(image),
                    "--mode",
                    "${clock}",
                    "--control-hz",
                    "${control_hz}",
                ],
            }  # fmt: skip
        ],
    }
    path.write_text(yaml.safe_dump(raw))
    return path


def keyboard_file(path: Path, events: list[tuple[float, str]]) -> Path:
    """A recorded keyboard event file (drivers.teleop.recording format)."""
    header = {"format": "robot_rl.teleop_events", "version": 1, "device": "keyboard", "info": {}}
    lines = [json.dumps(header)] + [json.dumps({"t_s": t, "raw": k}) for t, k in sorted(events)]
    path.write_text("\n".join(lines) + "\n")
    return path


def held(key: str, t0: float, t1: float) -> list[tuple[float, str]]:
    """A key held from t0 to t1 (terminal autorepeat every 0.1 s)."""
    return [(round(t, 3), key) for t in np.arange(t0, t1, 0.1)]


class Cli:
    """`python -m robot_rl.cli.main <args>` in a subprocess; stderr lines in a queue."""

    def __init__(self, args: list[str], domain: int) -> None:
        env = ros_env(domain, extra={"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "robot_rl.cli.main", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.stdout: list[str] = []
        self._q: queue.Queue[str] = queue.Queue()
        self._pumps = [
            threading.Thread(target=self._pump_err, daemon=True),
            threading.Thread(target=self._pump_out, daemon=True),
        ]
        for t in self._pumps:
            t.start()

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._q.put(line.rstrip("\n"))

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        self.stdout.append(self.proc.stdout.read())

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match:
        """The first new stderr line matching ``pattern``; fails after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while True:
            try:
                line = self._q.get(timeout=max(0.0, min(0.5, end - time.monotonic())))
            except queue.Empty:
                if time.monotonic() > end:
                    raise AssertionError(
                        f"no line matching {pattern!r} within {timeout_s} s; got:\n"
                        + "\n".join(self.lines[-40:])
                    ) from None
                continue
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                return m

    def finish(self, timeout_s: float) -> tuple[int, str]:
        """Wait for exit; (return code, stdout)."""
        self.proc.wait(timeout=timeout_s)
        for t in self._pumps:
            t.join(timeout=10)
        while not self._q.empty():
            self.lines.append(self._q.get())
        return self.proc.returncode, "".join(self.stdout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def run_cli(args: list[str], domain: int, timeout_s: float, expect: int = 0) -> tuple[str, str]:
    """Run ``robot-rl *args`` to its end (killed if the test fails first) and check its exit
    code is ``expect``; returns (stdout, its stderr lines joined)."""
    cli = Cli(args, domain)
    try:
        code, stdout = cli.finish(timeout_s)
    finally:
        cli.kill()
    text = "\n".join(cli.lines)
    assert code == expect, text[-8000:]
    return stdout, text
