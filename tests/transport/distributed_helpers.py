"""Real `robot-rl learner` / `robot-rl actor` processes on 127.0.0.1, and reading their logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from polling import poll_until

from robot_rl.replay import EpisodeLog

CLI = (sys.executable, "-m", "robot_rl.cli.main")
SMALL_AGENT = ("--batch-size", "128", "--utd", "2", "--sac.hidden-dims", "64", "64")
"""A small, fast agent (the learning test's embedded twin uses the same)."""
STARTUP_S = 120.0  # a process imports torch and MuJoCo on a loaded 2-core machine


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("MUJOCO_GL", "osmesa")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("ROBOT_RL_TOKEN", None)
    env.update(extra)
    return env


def fifo_allowed() -> bool:
    """Whether a process here may use SCHED_FIFO (root, or an rtprio limit), asked of a child."""
    probe = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


FIFO = fifo_allowed()
"""`robot-rl actor --realtime-priority` can run here (test_realtime.py)."""


def start(tmp: Path, name: str, *args: str, **env: str) -> subprocess.Popen:
    """Run ``robot-rl ARGS`` with stdout/stderr appended to tmp/name.out|.err."""
    out = open(tmp / f"{name}.out", "ab")  # noqa: SIM115 - owned by the child
    err = open(tmp / f"{name}.err", "ab")  # noqa: SIM115
    return subprocess.Popen([*CLI, *args], stdout=out, stderr=err, env=child_env(**env))


def finish(p: subprocess.Popen, timeout_s: float = 240.0) -> int:
    try:
        return p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise


def last_json(tmp: Path, name: str) -> dict:
    """The last JSON line a process printed on stdout."""
    lines = [s for s in (tmp / f"{name}.out").read_text().splitlines() if s.startswith("{")]
    assert lines, (tmp / f"{name}.err").read_text()[-3000:]
    return json.loads(lines[-1])


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def learner_address(run: Path, not_pid: int | None = None, timeout_s: float = STARTUP_S) -> str:
    """The address in run/server.json once the learner (a new one, if ``not_pid``) serves."""

    def ready() -> bool:
        d = read_json(run / "server.json")
        return bool(d) and d.get("pid") != not_pid

    assert poll_until(ready, timeout_s), f"no learner serving in {run}"
    return read_json(run / "server.json")["address"]


def acked(run: Path, actor_id: str) -> int:
    """The learner's acked_through for an actor, from run/actors.json (-1 if not yet)."""
    return int(read_json(run / "actors.json").get(actor_id, {}).get("acked_through_seq", -1))


def actor_steps(actor_run: Path) -> int:
    """Env steps an actor reported at its last episode end (actor.json)."""
    return int(read_json(actor_run / "actor.json").get("env_steps", 0))


def log_rows(path: Path, *, learner_side: bool) -> dict[str, np.ndarray]:
    """Every row of an episode log (an episode left open included), in order, with the actor's
    (episode, step) of each row: the actor's own log numbers them by log episode; the learner's
    per-actor log records them in each episode's metadata."""
    cols: dict[str, list] = {k: [] for k in ("state", "action", "reward", "policy_version")}
    episode, step = [], []
    with EpisodeLog.open(path, unfinished="truncate", mode="r") as elog:
        for em in elog.episodes:
            ep = elog.read_episode(em.index)
            n = em.length
            if learner_side:
                e0, s0 = int(em.extra["actor_episode"]), int(em.extra["first_step"])
            else:
                e0, s0 = em.index, 0
            episode += [e0] * n
            step += list(range(s0, s0 + n))
            cols["state"].append(np.asarray(ep["obs"]["state"]))
            for k in ("action", "reward", "policy_version"):
                cols[k].append(np.asarray(ep[k]))
    out = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    out["episode"], out["step"] = np.asarray(episode), np.asarray(step)
    return out


def assert_same_rows(actor_log: Path, learner_log: Path) -> int:
    """The learner holds exactly the actor's transitions, once each, in order; returns N."""
    a = log_rows(actor_log, learner_side=False)
    b = log_rows(learner_log, learner_side=True)
    assert len(a["action"]) == len(b["action"]), (len(a["action"]), len(b["action"]))
    keys = list(zip(b["episode"].tolist(), b["step"].tolist(), strict=True))
    assert len(set(keys)) == len(keys), "a transition is in the learner's log twice"
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    return len(a["action"])
