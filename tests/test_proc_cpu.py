"""CpuMeter: CPU seconds of real process trees by role, from /proc."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from robot_rl.app.nodes.proc_cpu import CpuMeter

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_busy_tree_and_an_idle_one_are_told_apart_and_named():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    # an idle root whose child runs `python -m json.tool` (waiting on its stdin)
    idle = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; subprocess.run([sys.executable, '-m', 'json.tool'])"],
        stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        meter = CpuMeter({"busy": busy.pid, "idle": idle.pid})
        end = time.monotonic() + 60
        while (meter.cpu_s().get("busy", 0.0) < 1.0 or "idle/tool" not in meter.cpu_s()) and (
            time.monotonic() < end
        ):
            time.sleep(0.1)
            meter.sample()
        used = meter.cpu_s()
        assert used["busy"] >= 1.0, used
        assert used["idle"] < 0.3 and used["idle/tool"] < 0.3, used
        shares = meter.shares()
        assert shares["busy"] > 10 * max(shares["idle"], 0.001), shares
        busy.kill()
        busy.wait()
        before = meter.cpu_s()["busy"]
        meter.sample()  # a process that is gone keeps what it used while seen
        assert meter.cpu_s()["busy"] == before
        assert shares["machine"] >= shares["busy"] - 0.05, shares  # the whole machine
    finally:
        idle.stdin.close()  # json.tool ends on EOF
        for p in (busy, idle):
            p.kill()
            p.wait()
