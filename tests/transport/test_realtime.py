"""`robot-rl actor --realtime-priority`: the acting process under SCHED_FIFO.

Every thread, those running when it is set and those started after, is changed (Linux
schedules threads); a process without the right is refused before it acts, with what to do;
a priority SCHED_FIFO lacks is refused at the command line. The actor's report says how its
threads ran (test_distributed.py's token test runs a real actor with it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_helpers import CLI, FIFO, child_env

from robot_rl.app.training.actor_cmd import ActorCmdConfig

_THREADS = """
import json, os, threading
from robot_rl.actor.realtime import set_realtime_priority
from robot_rl.core.realtime import thread_scheduling
before, stop = threading.Event(), threading.Event()
def wait(started):
    started.set()
    stop.wait()
old = threading.Thread(target=wait, args=(before,))
old.start()
before.wait()
changed = set_realtime_priority(7)
after = threading.Event()
new = threading.Thread(target=wait, args=(after,))
new.start()
after.wait()
print(json.dumps({"changed": len(changed), "scheduling": thread_scheduling()}))
stop.set()
"""


@pytest.mark.skipif(not FIFO, reason="no process here may use SCHED_FIFO (not root, no rtprio)")
def test_every_thread_runs_under_fifo_those_before_and_those_after():
    out = subprocess.run(
        [sys.executable, "-c", _THREADS], capture_output=True, text=True, env=child_env()
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["changed"] >= 2  # this thread and the one already waiting
    assert got["scheduling"] == {"SCHED_FIFO 7": 3}, got  # + the one started after


def _without_fifo_right() -> list[str] | None:
    """A command prefix under which a child may not use SCHED_FIFO: as root, without the
    CAP_SYS_NICE capability (util-linux's setpriv); otherwise as it is, if its limit is 0."""
    if os.geteuid() == 0:
        return ["setpriv", "--bounding-set", "-sys_nice"] if shutil.which("setpriv") else None
    return [] if not FIFO else None


def test_an_actor_without_the_right_is_refused_before_it_acts_saying_what_to_do(tmp_path):
    prefix = _without_fifo_right()
    if prefix is None:
        pytest.skip("no way here to run a child without the right to SCHED_FIFO")
    # no learner listens on this port: the refusal must come first
    out = subprocess.run(
        [*prefix, *CLI, "actor", "--run", str(tmp_path / "a"), "--learner", "127.0.0.1:9",
         "--realtime-priority", "5", "--no-progress"],
        capture_output=True, text=True, env=child_env(), timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert "--realtime-priority 5" in out.stderr and "rtprio" in out.stderr, out.stderr[-2000:]
    assert "refused this actor" not in out.stderr  # it never reached for the learner
    assert not (Path(tmp_path) / "a" / "log.zarr").exists()


@pytest.mark.parametrize("priority", [-1, 100])
def test_a_priority_fifo_lacks_is_refused_at_the_command_line(tmp_path, priority):
    with pytest.raises(ValueError, match="--realtime-priority must be a SCHED_FIFO priority"):
        ActorCmdConfig(run=tmp_path / "a", realtime_priority=priority)
