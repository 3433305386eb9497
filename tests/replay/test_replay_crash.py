"""Crash safety: a writer process killed with SIGKILL mid-episode loses at most its unflushed
steps; the store reopens, finished episodes are intact, and the open episode is recovered or
dropped by flag."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import replay_data as rd

from robot_rl.replay import EpisodeLog, UnfinishedEpisodeError, load_demos

WRITER = Path(__file__).parent / "crash_writer.py"
N_FINISHED, LENGTH = 3, 8


def _run_and_kill(path: Path, min_flushes: int) -> int:
    """Start the writer, SIGKILL it after it reported ``min_flushes`` flushes of the open
    episode; return the number of steps it last reported durable."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(path), str(N_FINISHED), str(LENGTH)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    durable, flushes = 0, 0
    try:
        for line in proc.stdout:
            if line.startswith("flushed"):
                durable, flushes = int(line.split()[1]), flushes + 1
                if flushes >= min_flushes:
                    break
        else:
            pytest.fail(f"writer exited early: {proc.stderr.read()}")
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-episode, possibly mid-flush
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return durable


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    path = tmp_path_factory.mktemp("crash") / "log.zarr"
    durable = _run_and_kill(path, min_flushes=4)
    return path, durable


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _check_finished(log: EpisodeLog) -> None:
    ended = [m for m in log.episodes if m.recovered is None]
    assert [m.length for m in ended] == [LENGTH] * N_FINISHED
    assert all(m.finished for m in log.episodes)
    for ep in range(N_FINISHED):
        got = log.read_episode(ep)
        for t in range(LENGTH):
            want = rd.obs(log.layout, ep, t + 1)
            np.testing.assert_array_equal(got["next_obs"]["state"][t], want["state"])
            np.testing.assert_array_equal(
                got["next_obs"]["images"]["wrist"][t], want["images"]["wrist"]
            )


@pytest.mark.parametrize("mode", ["r", "a"])
def test_killed_writer_truncate_keeps_every_flushed_step(crashed, tmp_path, mode):
    src, durable = crashed
    path = _copy(src, tmp_path / "log.zarr")
    with EpisodeLog.open(path, unfinished="truncate", mode=mode) as log:
        assert log.num_episodes == N_FINISHED + 1
        _check_finished(log)
        m = log.episodes[-1]
        assert m.finished and m.recovered == "truncated" and m.source == "online"
        assert m.length >= durable  # nothing reported durable was lost
        ep = log.read_episode(N_FINISHED)
        assert ep["truncated"][-1] and not ep["truncated"][:-1].any()
        for t in range(m.length):  # every recovered step is exactly what was appended
            want = rd.step(log.layout, N_FINISHED, t, 10**9, pv=N_FINISHED)
            np.testing.assert_array_equal(ep["obs"]["state"][t], want["obs_learner"]["state"])
            np.testing.assert_array_equal(
                ep["next_obs"]["images"]["front"][t], want["next_obs_learner"]["images"]["front"]
            )
            np.testing.assert_array_equal(ep["action"][t], want["action"])
        if mode == "a":  # the recovered log accepts new episodes
            rd.write_episode(log, 10, 3)
    if mode == "a":
        with EpisodeLog.open(path, unfinished="error") as log:
            assert log.num_episodes == N_FINISHED + 2
            assert log.episodes[N_FINISHED].length >= durable


@pytest.mark.parametrize("mode", ["r", "a"])
def test_killed_writer_drop(crashed, tmp_path, mode):
    src, _ = crashed
    path = _copy(src, tmp_path / "log.zarr")
    with EpisodeLog.open(path, unfinished="drop", mode=mode) as log:
        assert log.num_episodes == N_FINISHED
        _check_finished(log)
    buf = load_demos(path)
    assert len(buf) == N_FINISHED * LENGTH


def test_killed_writer_error_flag(crashed):
    src, _ = crashed
    with pytest.raises(UnfinishedEpisodeError):
        EpisodeLog.open(src, unfinished="error")
