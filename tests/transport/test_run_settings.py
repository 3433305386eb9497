"""The learner owns the run's env settings; actors take them at connect (issue "Stage 7", item 4).

In process, against a real LearnerServer on 127.0.0.1: the settings-only Hello, the rules for
settings given on the actor's command line, the cache for a restart while the learner is down.
As real processes (`robot-rl learner --task reach` and `robot-rl actor` without --task): the
actor builds a reach env and streams its transitions, its startup line shows the learner's
settings, an actor with a conflicting --task is refused naming both values, and a restarted
actor acts on its cached settings while the learner is down, and says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from distributed_helpers import (
    STARTUP_S,
    assert_same_rows,
    finish,
    last_json,
    learner_address,
    read_json,
    start,
)
from polling import poll_until

from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.app.training.run_settings import (
    RUN_SETTINGS_JSON,
    ActorEnvFlags,
    SettingsConflictError,
    actor_settings,
    resolve_env,
    run_settings_json,
)
from robot_rl.core.batch import ObsLayout
from robot_rl.transport.client import LearnerClientConfig, LearnerError
from robot_rl.transport.run_info import ask_learner
from robot_rl.transport.server import LearnerServer, LearnerServerConfig
from robot_rl.transport.sink import MemorySink

REACH = LearnerEnvConfig(task="reach", obs="state")
POLICY = '{"normalize_state": true, "sac": {}}'


def _learner(env: LearnerEnvConfig = REACH, token: str | None = None) -> LearnerServer:
    cfg = LearnerServerConfig(run_id="run-x", policy_json=POLICY, token=token,
                              run_settings_json=run_settings_json(env))  # fmt: skip
    return LearnerServer(MemorySink(), ObsLayout(state_dim=4, images={}), 3, cfg)


def _cfg(address: str, **kw) -> LearnerClientConfig:
    return LearnerClientConfig(target=address, actor_id="a1", reconnect_max_s=0.2, **kw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_actor_flags_are_the_learner_env_settings():
    # a new env setting of the learner needs its actor flag (else actors could not insist on it)
    names = [f.name for f in dataclasses.fields(ActorEnvFlags)]
    assert names == [f.name for f in dataclasses.fields(LearnerEnvConfig)]
    assert all(getattr(ActorEnvFlags(), n) is None for n in names)
    with pytest.raises(ValueError, match="image_size 8 must be >= 16"):
        ActorEnvFlags(image_size=8)  # the learner's own checks


def test_an_actor_cannot_act_with_another_latency_than_the_learners():
    assert resolve_env(ActorEnvFlags(action_delay_ms=0.0), REACH) == REACH
    with pytest.raises(SettingsConflictError, match="action_delay_ms|action-delay-ms"):
        resolve_env(ActorEnvFlags(action_delay_ms=50.0), REACH)
    late = dataclasses.replace(REACH, action_delay_ms=50.0)
    assert resolve_env(ActorEnvFlags(action_delay_ms=50.0), late) == late


def test_settings_left_off_are_the_learners_and_given_ones_must_equal_them():
    assert resolve_env(ActorEnvFlags(), REACH) == REACH
    # consistent, also once the task's defaults are resolved (reach lets the policy grip)
    same = ActorEnvFlags(task="reach", obs="state", gripper="policy", max_episode_steps=40,
                         action_scale_m=0.02)  # fmt: skip
    assert resolve_env(same, REACH) == REACH
    with pytest.raises(SettingsConflictError) as e:
        resolve_env(ActorEnvFlags(task="pick_cube"), REACH)
    assert str(e.value) == (
        "--task pick_cube on this actor, but the learner runs task reach: drop --task or start "
        "the learner with --task pick_cube"
    )
    with pytest.raises(SettingsConflictError) as e:
        resolve_env(ActorEnvFlags(control_rotation=True, max_episode_steps=50, obs="pixels"),
                    REACH)  # fmt: skip
    said = str(e.value)
    assert "--obs pixels on this actor, but the learner runs obs state" in said
    assert "--control-rotation on this actor, but the learner runs control_rotation False" in said
    assert (
        "--max-episode-steps 50 on this actor, but the learner runs max_episode_steps 40 (the "
        "task's default)" in said
    )
    peg = LearnerEnvConfig(task="peg_insert")  # holds the gripper closed: "fixed" is the same
    assert resolve_env(ActorEnvFlags(gripper="fixed"), peg) == peg
    with pytest.raises(SettingsConflictError, match="--gripper policy on this actor, but the "
                       "learner runs gripper task"):  # fmt: skip
        resolve_env(ActorEnvFlags(gripper="policy"), peg)


def test_a_settings_only_hello_answers_and_registers_nothing():
    srv = _learner()
    try:
        info = ask_learner(_cfg(srv.address), timeout_s=10.0)
        assert info is not None and info.run_id == "run-x" and info.policy_json == POLICY
        assert LearnerEnvConfig.from_json(json.loads(info.run_settings_json)) == REACH
        assert srv.actor_stats() == {}  # not an actor of the run until it says Hello with a layout
    finally:
        srv.stop(0)
    srv = _learner(token="s3cret")
    try:
        with pytest.raises(LearnerError, match="UNAUTHENTICATED.*token"):
            ask_learner(_cfg(srv.address, token="wrong"), timeout_s=10.0)
    finally:
        srv.stop(0)
    assert ask_learner(_cfg(f"127.0.0.1:{_free_port()}"), timeout_s=0.3) is None  # no learner


def test_a_restart_while_the_learner_is_down_uses_the_cached_settings(tmp_path):
    run = tmp_path / "a1"
    srv = _learner()
    address = srv.address
    ask = lambda t: ask_learner(_cfg(address), t)  # noqa: E731
    try:
        with pytest.raises(SettingsConflictError, match="--task pick_cube"):
            actor_settings(run, ActorEnvFlags(task="pick_cube"), ask, address, 10.0)
        assert not run.exists()  # refused before anything was written
        got = actor_settings(run, ActorEnvFlags(), ask, address, 10.0)
        assert got.from_learner and got.env == REACH
        assert got.startup_line.startswith(f"settings from the learner at {address} (run run-x)")
        assert "task=reach obs=state" in got.startup_line
    finally:
        srv.stop(0)
    got = actor_settings(run, ActorEnvFlags(), ask, address, 10.0, cached_wait_s=0.3)
    assert not got.from_learner and got.env == REACH and got.policy["normalize_state"] is True
    assert got.startup_line.startswith(f"settings cached in {run / RUN_SETTINGS_JSON}")
    assert "no learner answered" in got.startup_line and "task=reach" in got.startup_line
    with pytest.raises(SettingsConflictError, match="cached in .* say task reach"):
        actor_settings(run, ActorEnvFlags(task="pick_cube"), ask, address, 10.0, cached_wait_s=0.3)
    # a learner of another run at the same address: the actor's log would mix the two
    other = _learner(LearnerEnvConfig(task="pick_cube"))
    try:
        ask_other = lambda t: ask_learner(_cfg(other.address), t)  # noqa: E731
        with pytest.raises(ValueError, match="holds an actor of another run .*new --run"):
            actor_settings(run, ActorEnvFlags(), ask_other, other.address, 10.0)
    finally:
        other.stop(0)
    with pytest.raises(TimeoutError, match="no learner answered.*start `robot-rl learner`"):
        actor_settings(tmp_path / "new", ActorEnvFlags(), ask, address, 0.3)


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
        p.wait()


def test_actor_without_task_builds_the_learners_env(tmp_path):
    run = tmp_path / "learner"
    learner = start(
        tmp_path, "learner", "learner", "--run", str(run), "--task", "reach", "--obs", "state",
        "--bind", "127.0.0.1:0", "--eval-episodes", "0", "--steps", "100000", "--no-progress",
    )  # fmt: skip
    procs = [learner]
    try:
        address = learner_address(run)
        common = ("--learner", address, "--control-hz", "50", "--no-progress", "--json")
        good = start(tmp_path, "a1", "actor", "--run", str(tmp_path / "a1"), "--steps", "30",
                     *common)  # fmt: skip
        bad = start(tmp_path, "bad", "actor", "--run", str(tmp_path / "bad"), "--task",
                    "pick_cube", *common)  # fmt: skip
        procs += [good, bad]
        assert finish(bad, STARTUP_S) == 2
        err = (tmp_path / "bad.err").read_text()
        refusal = (
            "--task pick_cube on this actor, but the learner runs task reach: drop --task or "
            "start the learner with --task pick_cube"
        )
        assert refusal in " ".join(err.split()), err
        assert not (tmp_path / "bad").exists()
        assert finish(good, STARTUP_S) == 0, (tmp_path / "a1.err").read_text()[-3000:]
        a1 = last_json(tmp_path, "a1")
        assert a1["settings"]["task"] == "reach" and a1["settings_from"] == "learner"
        assert a1["acked_through"] == a1["logged_transitions"] - 1 >= 29
        # the learner accepted every row (its layout is reach's): each arrived, once
        assert_same_rows(tmp_path / "a1" / "log.zarr", run / "actors" / "a1" / "log.zarr")
        line = (tmp_path / "a1.err").read_text().splitlines()[0]
        assert line.startswith(f"[a1] settings from the learner at {address} (run learner):")
        assert "task=reach obs=state" in line, line
        # the learner rewrites actors.json every stats period (2 s, later under load): wait for
        # the one that has seen a1; the refused one must not be in it
        assert poll_until(lambda: "a1" in read_json(run / "actors.json"), STARTUP_S)
        assert set(read_json(run / "actors.json")) == {"a1"}  # the refused one never joined
        # the learner goes away; the actor restarts on its cached settings and says so
        learner.kill()
        learner.wait()
        again = start(tmp_path, "a1", "actor", "--run", str(tmp_path / "a1"), "--steps", "40",
                      "--drain-timeout-s", "0.5", *common)  # fmt: skip
        procs.append(again)
        assert finish(again, STARTUP_S) == 0, (tmp_path / "a1.err").read_text()[-3000:]
        a1 = last_json(tmp_path, "a1")
        assert a1["settings_from"] == "cache" and a1["env_steps"] == 40, a1
        assert a1["settings"]["task"] == "reach"
        assert "[a1] settings cached in" in (tmp_path / "a1.err").read_text()
    finally:
        for p in procs:
            _kill(p)


def test_a_learner_on_a_foreign_env_serves_it_to_its_actors(tmp_path):
    """`robot-rl learner --env module:ID`: the actor, told nothing but the learner's address,
    builds the same foreign env (the module imported on its side too) and streams to it; an
    actor stating another --env is refused naming both."""
    tests_dir = str(Path(__file__).resolve().parents[1])
    path = {"PYTHONPATH": os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")])}
    env = "toy_foreign_envs:ToyPointGoal-v0"
    run = tmp_path / "learner"
    learner = start(
        tmp_path, "learner", "learner", "--run", str(run), "--env", env, "--obs", "state",
        "--bind", "127.0.0.1:0", "--eval-episodes", "0", "--steps", "100000", "--no-progress",
        **path,
    )  # fmt: skip
    procs = [learner]
    try:
        address = learner_address(run)
        common = ("--learner", address, "--control-hz", "50", "--no-progress", "--json")
        good = start(tmp_path, "a1", "actor", "--run", str(tmp_path / "a1"), "--steps", "30",
                     *common, **path)  # fmt: skip
        bad = start(tmp_path, "bad", "actor", "--run", str(tmp_path / "bad"), "--env",
                    "toy_foreign_envs:ToyPointPixels-v0", *common, **path)  # fmt: skip
        procs += [good, bad]
        assert finish(bad, STARTUP_S) == 2
        assert "ToyPointPixels-v0" in (tmp_path / "bad.err").read_text()
        assert finish(good, STARTUP_S) == 0, (tmp_path / "a1.err").read_text()[-3000:]
        a1 = last_json(tmp_path, "a1")
        assert a1["settings"]["env"] == env and a1["settings_from"] == "learner"
        assert a1["acked_through"] == a1["logged_transitions"] - 1 >= 29
        assert_same_rows(tmp_path / "a1" / "log.zarr", run / "actors" / "a1" / "log.zarr")
    finally:
        for p in procs:
            _kill(p)
