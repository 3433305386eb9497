"""Stage 6 end to end: `robot-rl learner` and `robot-rl actor` as real processes on 127.0.0.1.

- two actors feed one learner on the twin: each transition arrives once, weights versions rise
  at the actors, the learner's evaluations improve;
- fault injection: SIGKILL the learner and restart it, SIGKILL an actor and restart it, cut an
  actor's TCP connection (a real forwarder, tcp_proxy.py): afterwards the learner holds every
  actor transition exactly once (logs and replay), and no actor tick overran its budget;
- security at the command line: a wrong token is refused with a clear error while the learner
  keeps serving; a non-loopback bind is refused unless asked.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from distributed_helpers import (
    FIFO,
    SMALL_AGENT,
    STARTUP_S,
    acked,
    actor_steps,
    assert_same_rows,
    finish,
    last_json,
    learner_address,
    log_rows,
    read_json,
    start,
)
from polling import poll_until

from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect

REACH = ("--task", "reach", "--obs", "state")


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
        p.wait()


@pytest.fixture
def procs():
    """Processes started by a test, killed at its end whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        _kill(p)


def test_two_actors_feed_one_learner_and_it_learns(tmp_path, procs):
    demos = tmp_path / "demos.zarr"
    env = LearnerEnvConfig(task="reach", obs="state")
    got = run_collect(CollectConfig(env=env, out=demos, episodes=10), progress=False)
    assert got["episodes_written"] == 10
    run = tmp_path / "learner"
    learner = start(
        tmp_path, "learner", "learner", "--run", str(run), *REACH, "--demos", str(demos),
        "--bind", "127.0.0.1:0", "--steps", "2000", "--eval-every-steps", "500",
        "--eval-episodes", "10", *SMALL_AGENT, "--no-progress", "--json",
    )  # fmt: skip
    procs.append(learner)
    address = learner_address(run)
    actors = {}
    for i in (1, 2):
        actors[i] = start(
            tmp_path, f"a{i}", "actor", "--run", str(tmp_path / f"a{i}"), "--learner", address,
            *REACH, "--seed", str(i), "--control-hz", "25", "--max-learner-backlog", "100",
            "--no-progress", "--json",
        )  # fmt: skip
        procs.append(actors[i])
    for i, p in actors.items():
        assert finish(p) == 0, (tmp_path / f"a{i}.err").read_text()[-3000:]
    assert finish(learner) == 0, (tmp_path / "learner.err").read_text()[-3000:]

    res = last_json(tmp_path, "learner")
    assert res["stopped_by"] == "steps" and res["env_steps"] >= 2000
    total = 0
    for i in (1, 2):
        a = last_json(tmp_path, f"a{i}")
        assert a["stopped_by"] == "learner", a
        assert a["reward_warnings"] == []  # reach's cost: no reward trap
        assert a["acked_through"] == a["logged_transitions"] - 1, a
        # Each transition arrived once: the learner's log of this actor is the actor's log.
        n = assert_same_rows(tmp_path / f"a{i}" / "log.zarr", run / "actors" / f"a{i}" / "log.zarr")
        assert n == a["logged_transitions"] == res["actors"][f"a{i}"]["transitions"]
        assert res["actors"][f"a{i}"]["duplicates_dropped"] == 0
        total += n
        # Weights versions increased at the actor, and its steps record which one acted.
        assert a["weights_loaded"] >= 3 and a["weights_version"] > 10, a
        versions = log_rows(tmp_path / f"a{i}" / "log.zarr", learner_side=False)["policy_version"]
        assert (versions[1:] >= versions[:-1]).all() and versions[-1] > versions[0]
    assert res["replay_size"] == total  # nothing twice in replay either
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    assert evals[0]["env_steps"] == 0 and evals[0]["success_rate"] <= 0.2, evals
    assert res["final_eval"]["success_rate"] >= 0.6, evals
    assert (run / "learning_curve.png").exists()


def test_learner_and_actor_crashes_and_a_dropped_link_lose_and_duplicate_nothing(tmp_path, procs):
    run = tmp_path / "learner"
    learner_args = (
        "learner", "--run", str(run), *REACH, "--steps", "1000000", "--learning-starts", "200",
        "--eval-episodes", "0", *SMALL_AGENT, "--no-progress", "--json",
    )  # fmt: skip
    learner = start(tmp_path, "learner", *learner_args, "--bind", "127.0.0.1:0")
    procs.append(learner)
    address = learner_address(run)
    port_file = tmp_path / "proxy.port"
    proxy = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("tcp_proxy.py")), address,
         "--port-file", str(port_file), "--down-s", "3"],
    )  # fmt: skip
    procs.append(proxy)
    assert poll_until(port_file.exists, 30)
    via_proxy = f"127.0.0.1:{port_file.read_text()}"

    def actor(i: int, target: str) -> subprocess.Popen:
        p = start(
            tmp_path, f"a{i}", "actor", "--run", str(tmp_path / f"a{i}"), "--learner", target,
            *REACH, "--seed", str(i), "--random-steps", "300", "--control-hz", "40",
            "--tick-budget-s", "2.0", "--no-progress", "--json",
        )  # fmt: skip
        procs.append(p)
        return p

    a1, a2 = actor(1, via_proxy), actor(2, address)

    def both_acked(n: int) -> bool:
        return acked(run, "a1") >= n and acked(run, "a2") >= n

    assert poll_until(lambda: both_acked(100), STARTUP_S), read_json(run / "actors.json")

    # 1. The learner dies; the actors keep acting (and logging) while it is away.
    learner.kill()
    learner.wait()
    old_pid = learner.pid
    steps_at_kill = actor_steps(tmp_path / "a2")
    assert poll_until(lambda: actor_steps(tmp_path / "a2") >= steps_at_kill + 80, 60)
    learner = start(
        tmp_path, "learner", *learner_args, "--bind", address, "--resume"
    )  # same port: the actors (and the proxy) find it again
    procs.append(learner)
    learner_address(run, not_pid=old_pid)
    after = max(acked(run, "a1"), acked(run, "a2"))
    assert poll_until(lambda: both_acked(after + 100), STARTUP_S), read_json(run / "actors.json")

    # 2. An actor dies mid-episode and restarts from its own log.
    a2.kill()
    a2.wait()
    a2_acked = acked(run, "a2")
    a2 = actor(2, address)
    assert poll_until(lambda: acked(run, "a2") >= a2_acked + 100, STARTUP_S)

    # 3. The network between actor 1 and the learner drops for 3 s.
    a1_steps, a1_acked = actor_steps(tmp_path / "a1"), acked(run, "a1")
    proxy.send_signal(signal.SIGUSR1)
    assert poll_until(lambda: actor_steps(tmp_path / "a1") >= a1_steps + 80, 60)
    assert poll_until(lambda: acked(run, "a1") >= a1_acked + 150, 60)

    # 4. Stop the run from the learner side; the actors drain their logs and exit.
    (run / "control").write_text("STOP")
    for name, p in (("a1", a1), ("a2", a2), ("learner", learner)):
        assert finish(p) == 0, (tmp_path / f"{name}.err").read_text()[-3000:]

    res = last_json(tmp_path, "learner")
    total = 0
    for i in (1, 2):
        a = last_json(tmp_path, f"a{i}")
        assert a["stopped_by"] == "learner" and a["acked_through"] == a["logged_transitions"] - 1
        # Nothing lost, nothing twice: the learner's log of each actor is the actor's own log.
        n = assert_same_rows(tmp_path / f"a{i}" / "log.zarr", run / "actors" / f"a{i}" / "log.zarr")
        assert res["actors"][f"a{i}"]["transitions"] == n  # counted over the restart
        total += n
        # Whether a tick overran its wall-clock budget depends on the machine's load, not on
        # this code: no timed assertion here. The push never waits by construction (it only
        # queues); bench/distributed_e2e.py reports the overruns under these faults.
    assert res["replay_size"] == total, res  # rebuilt after the restart, then added to: once each
    # A STOP ends the run where it is: its steps are the transitions that arrived (the final
    # evaluation and checkpoint are at that step, not at the --steps budget).
    assert res["env_steps"] == res["final_eval"]["env_steps"] == total, res


def test_the_actor_warns_of_a_reward_trap_made_by_the_learners_offset(tmp_path, procs):
    """The learner's --reward-offset 1 turns reach's cost (in (-1, 0], 0 on the success step,
    which ends the episode) into a bonus near success: carrying on is worth more than
    finishing. The actor, which has the episodes, judges them with the learner's discount and
    offset, and warns once the simulated human has finished one."""
    run = tmp_path / "learner"
    learner = start(
        tmp_path, "learner", "learner", "--run", str(run), *REACH, "--bind", "127.0.0.1:0",
        "--eval-episodes", "0", "--steps", "100000", "--reward-offset", "1", "--no-progress",
        "--json",
    )  # fmt: skip
    procs.append(learner)
    actor = start(
        tmp_path, "a", "actor", "--run", str(tmp_path / "a"), "--learner", learner_address(run),
        *REACH, "--human", "sim", "--steps", "300", "--no-progress", "--json",
    )  # fmt: skip
    procs.append(actor)
    assert finish(actor) == 0, (tmp_path / "a.err").read_text()[-3000:]
    a = last_json(tmp_path, "a")
    assert a["episodes"] >= 2, a
    assert [w["trap"] for w in a["reward_warnings"]] == ["bonus_with_termination_on_success"], a
    assert "--reward-offset" in a["reward_warnings"][0]["message"]
    assert "--reward-offset" in (tmp_path / "a.err").read_text()  # logged where one watches
    learner.send_signal(signal.SIGTERM)
    assert finish(learner) == 0


def test_wrong_token_is_refused_and_the_learner_keeps_serving(tmp_path, procs):
    run = tmp_path / "learner"
    learner = start(
        tmp_path, "learner", "learner", "--run", str(run), *REACH, "--bind", "127.0.0.1:0",
        "--eval-episodes", "0", "--steps", "100000", "--no-progress", "--json",
        ROBOT_RL_TOKEN="s3cret",
    )  # fmt: skip
    procs.append(learner)
    address = learner_address(run)
    bad = start(
        tmp_path, "bad", "actor", "--run", str(tmp_path / "bad"), "--learner", address, *REACH,
        "--token", "wrong", "--connect-timeout-s", "60", "--no-progress",
    )  # fmt: skip
    procs.append(bad)
    assert finish(bad) == 2
    err = (tmp_path / "bad.err").read_text()
    assert "token" in err and "refused" in err, err
    # The good actor rewards its steps with a learned reward (`--reward sim`: the twin's truth as
    # the classifier's binary cost, through the same hook a classifier uses), and runs under
    # SCHED_FIFO where this machine allows it (test_realtime.py).
    fifo = ("--realtime-priority", "3") if FIFO else ()
    good = start(
        tmp_path, "good", "actor", "--run", str(tmp_path / "good"), "--learner", address, *REACH,
        "--steps", "60", "--reward", "sim", *fifo, "--no-progress", "--json",
        ROBOT_RL_TOKEN="s3cret",
    )  # fmt: skip
    procs.append(good)
    assert finish(good) == 0, (tmp_path / "good.err").read_text()[-3000:]
    g = last_json(tmp_path, "good")
    # every thread it ran, gRPC's and torch's included, at the priority asked (else none
    # real-time: a library's worker may put itself under SCHED_BATCH or SCHED_IDLE)
    if FIFO:
        assert set(g["scheduling"]) == {"SCHED_FIFO 3"}, g["scheduling"]
    else:
        assert not any(k.startswith(("SCHED_FIFO", "SCHED_RR")) for k in g["scheduling"])
    assert g["stopped_by"] == "steps" and g["acked_through"] == g["logged_transitions"] - 1 >= 59
    rows = assert_same_rows(tmp_path / "good" / "log.zarr", run / "actors" / "good" / "log.zarr")
    assert rows == g["logged_transitions"]
    rewards = log_rows(run / "actors" / "good" / "log.zarr", learner_side=True)["reward"]
    assert set(np.unique(rewards).tolist()) <= {0.0, -1.0}  # not the twin's dense reward
    assert "bad" not in read_json(run / "actors.json")
    learner.send_signal(signal.SIGTERM)  # a clean stop: STOP to the actors, checkpoint
    assert finish(learner) == 0
    assert last_json(tmp_path, "learner")["stopped_by"] == "signal"
    assert (run / "checkpoints" / "latest.json").exists()


def test_learner_refuses_a_non_loopback_bind_unless_asked(tmp_path, capsys):
    from robot_rl.cli.main import main

    run = tmp_path / "learner"
    with pytest.raises(SystemExit) as e:  # tyro reports a config's ValueError and exits 2
        main(["learner", "--run", str(run), "--bind", "0.0.0.0:0", "--no-progress"])
    assert e.value.code == 2
    said = capsys.readouterr()
    text = re.sub(r"[\s│╭╮╰╯─]+", " ", said.out + said.err)
    assert "is not a loopback address" in text and "allow_non_loopback" in text, text
    assert not run.exists()  # refused before anything was created or bound
