"""The ``--part e2e`` runs of bench/distributed.py: real learner and actor processes.

What each run does and reports is in bench/distributed.py's docstring (the entry point; run
``python bench/distributed.py --part e2e``). The processes are started and watched with
bench/_distributed_procs.py. Imported by bench/distributed.py, which puts bench/ on sys.path;
not a script.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _distributed_common import CAMERAS, DistributedBenchConfig
from _distributed_procs import (
    POLL_S,
    Child,
    Children,
    Watch,
    WeightsProbe,
    poll_until,
    read_json,
    say,
    serving,
    wait_for,
)

SMALL_SAC = ("--sac.hidden-dims", "64", "64", "--batch-size", "64")


def env_args(obs: str, image_size: int) -> list[str]:
    """The env flags, the same for learner and actors."""
    args = ["--task", "pick_cube", "--obs", obs]
    if obs == "pixels":
        args += ["--cameras", *CAMERAS, "--image-size", str(image_size)]
    return args


def latency_ms(published: dict[int, float], arrivals: dict[int, float]) -> dict:
    lat = [1e3 * (arrivals[v] - t) for v, t in published.items() if v in arrivals]
    if not lat:
        return {"n": 0}
    return {
        "n": len(lat),
        "p50": round(float(np.percentile(lat, 50)), 2),
        "p95": round(float(np.percentile(lat, 95)), 2),
        "max": round(max(lat), 2),
    }


ACTOR_KEYS = ("env_steps", "episodes", "ticks", "tick_overruns", "max_tick_work_s",
              "weights_loaded", "weights_version", "weights_refused", "pushed_batches",
              "push_refused", "acked_through", "logged_transitions", "stopped_by",
              "feature_rows", "featureless_rows", "backbone")  # fmt: skip


def first_policy_version(actor_run: Path) -> int | None:
    """Weights version of the actor's first logged step (0: acted before any weights arrived,
    i.e. uniformly random for --random-steps), from its log's episode table."""
    from robot_rl.replay import EpisodeLog

    try:
        elog = EpisodeLog.open(actor_run / "log.zarr", mode="r")
    except (OSError, ValueError, RuntimeError):
        return None
    try:
        return elog.episodes[0].policy_version_min if elog.episodes else None
    finally:
        elog.close()


def actor_figures(res: dict | None, cfg: DistributedBenchConfig, run: Path) -> dict:
    if res is None:
        return {"result": None}
    out = {k: res.get(k) for k in ACTOR_KEYS}
    out["tick_budget_s"] = cfg.tick_budget_s
    out["overrun_fraction"] = round(res["tick_overruns"] / max(res["ticks"], 1), 4)
    out["random_steps"] = cfg.random_steps
    out["first_step_policy_version"] = first_policy_version(run)
    return out


def learner_figures(res: dict | None) -> dict:
    if res is None:
        return {"result": None}
    keys = ("env_steps", "updates", "weights_version", "stopped_by", "backbone")
    return {**{k: res.get(k) for k in keys}, "actors": res.get("actors")}


def contention(kids: list[Child]) -> dict:
    return {
        "cpu_cores": os.cpu_count(),
        "processes": {k.name: k.figures() for k in kids},
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
        "note": f"{len(kids)} robot-rl processes (+ this bench polling every {POLL_S} s) on "
        f"{os.cpu_count()} cores",
    }


def actor_cmd(
    cfg: DistributedBenchConfig, run: Path, addr: str, actor_id: str, seed: int, env: list[str]
) -> list[str]:
    return ["actor", "--run", str(run), "--learner", addr, "--actor-id", actor_id, "--seed",
            str(seed), "--random-steps", str(cfg.random_steps), "--tick-budget-s",
            str(cfg.tick_budget_s), *env, "--no-progress", "--json",
            # what is measured is the actor at full pace: it must not hold for a learner behind
            "--max-learner-backlog", "None"]  # fmt: skip


def pixel_capacity(cfg: DistributedBenchConfig, obs: str) -> tuple[list[str], dict]:
    """(learner flags, report) for the pixel learners' replay capacity (the default 1M
    transitions of two 128x128 cameras would not fit in RAM here)."""
    if obs != "pixels":
        return [], {"value": "default"}
    n = cfg.pixel_buffer_capacity
    return ["--buffer-capacity", str(n)], {"value": n, "set_by": "--buffer-capacity"}


def code_state() -> dict:
    """HEAD and the files modified in robot_rl/ (the processes run the working tree)."""

    def git(*args: str) -> str:
        root = Path(__file__).resolve().parent.parent
        try:
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    modified = [s[3:] for s in git("status", "--porcelain", "robot_rl").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD"), "robot_rl_modified": modified}


def run_e2e(
    cfg: DistributedBenchConfig,
    root: Path,
    variant: str,
    obs: str,
    actors: int,
    steps: int,
    learner_extra: list[str],
) -> dict:
    """Learner + ``actors`` actor processes until the learner's ``steps``; see
    bench/distributed.py's docstring."""
    work, k = root / variant, 1
    while work.exists():  # a variant named twice in --e2e-runs (repeats, interleaved)
        work, k = root / f"{variant}_{k}", k + 1
    (work / "logs").mkdir(parents=True)
    lrun = work / "learner"
    env = env_args(obs, cfg.image_size)
    cap_args, cap_report = pixel_capacity(cfg, obs)
    largs = ["learner", "--run", str(lrun), "--bind", "127.0.0.1:0", *env, "--steps", str(steps),
             "--eval-episodes", "0", "--no-progress", "--json", *learner_extra,
             *cap_args]  # fmt: skip
    ids = [f"actor-{i}" for i in range(actors)]
    watch = Watch(lrun, {a: work / a for a in ids})
    probe = None
    with Children(work / "logs") as kids:
        try:
            t0 = time.monotonic()
            learner = kids.start("learner", largs)
            addr = wait_for(
                lambda: serving(lrun, learner.pid), 180, "learner serving", kids, learner
            )
            startup = time.monotonic() - t0
            say(f"learner serving on {addr} after {startup:.1f} s")
            probe = WeightsProbe(addr)
            acts = [
                kids.start(a, actor_cmd(cfg, work / a, addr, a, i + 1, env))
                for i, a in enumerate(ids)
            ]
            deadline = time.monotonic() + cfg.run_timeout_s
            next_say = 0.0
            while any(a.alive() for a in acts):
                held, logs = watch.sample(learner, *acts)
                if time.monotonic() > next_say:
                    say(
                        f"{variant}: learner holds {sum(held.values())}/{steps}, actors logged "
                        f"{sum(logs.values())}"
                    )
                    next_say = time.monotonic() + 10.0
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{variant}: actors still running after {cfg.run_timeout_s:.0f} s"
                    )
                time.sleep(POLL_S)
            watch.sample(learner)
            t_actors_done = time.monotonic()
            say(f"{variant}: actors done; waiting for the learner")
            learner_end = learner.stop(cfg.learner_exit_timeout_s)
            watch.sample()
            say(f"{variant}: learner {learner_end}")
        finally:
            if probe is not None:
                probe.close()
        lres = learner.result()
        ares = {a.name: a.result() for a in acts}
        for a in acts:
            if ares[a.name] is None:
                raise RuntimeError(f"{a.name} printed no result ({a.how_ended}):\n{a.tail()}")
    stats = probe.stats if probe is not None else None
    return {
        "benchmark": "e2e",
        "variant": variant,
        "obs": obs,
        "cameras": list(CAMERAS) if obs == "pixels" else [],
        "image_size": cfg.image_size if obs == "pixels" else None,
        "actors": actors,
        "learner_args": largs[5:],
        "transitions_per_s_into_learner": watch.rate(1, until=steps),
        "actor_env_steps_per_s": {
            a: watch.rate(2, a, until=r["logged_transitions"]) for a, r in ares.items()
        },
        "max_backlog_transitions": watch.max_backlog(),
        "learner_startup_s": round(startup, 2),
        "learner_buffer_capacity": cap_report,
        "learner": {
            **learner_figures(lres),
            "exit": learner_end,
            "exit_after_actors_s": round((learner.t_end or time.monotonic()) - t_actors_done, 2),
            "last_stats": None
            if stats is None
            else {"updates": stats.updates, "replay_size": stats.replay_size},
        },
        "actor": {a: actor_figures(r, cfg, work / a) for a, r in ares.items()},
        "weights": {
            "published_versions_seen": len(watch.published),
            "received_by_bench": len(probe.arrivals) + len(probe.initial) if probe else 0,
            "bytes_per_broadcast": max(probe.bytes.values(), default=None) if probe else None,
            "latency_ms": latency_ms(watch.published, probe.arrivals if probe else {}),
            "actor_weights_version": {a: r["weights_version"] for a, r in ares.items()},
            "actor_weights_loaded": {a: r["weights_loaded"] for a, r in ares.items()},
        },
        "held_equals_logged": {a: watch.held(a) == ares[a]["logged_transitions"] for a in ids},
        "timeline_s_held_logged": watch.timeline(t0),
        "contention": contention(kids.all),
        "code": code_state(),
    }


def log_rows(path: Path, learner_side: bool) -> dict[str, np.ndarray]:
    """Every transition of a log in the codec's format: an actor's (its outbox) or the learner's
    log of one actor (rows as sent, see LogSink.iter_transitions), read-only."""
    from robot_rl.replay import EpisodeLog
    from robot_rl.transport.outbox import LogOutbox, concat_rows, episode_transitions

    elog = EpisodeLog.open(path, mode="r")
    try:
        if not learner_side:
            end = LogOutbox(elog).end_seq
            return LogOutbox(elog).read(0, end) if end else {}
        parts = [
            episode_transitions(
                elog.read_episode(em.index, 0, em.length),
                elog.layout,
                int(em.extra["actor_episode"]),
                int(em.extra["first_step"]),
            )
            for em in elog.durable_episodes()
            if em.length
        ]
        return concat_rows(parts) if parts else {}
    finally:
        elog.close()


def compare_logs(actor_log: Path, learner_log: Path) -> dict:
    """The learner's copy vs the actor's log: missing / duplicated / extra rows by (episode,
    step), and fields that differ row by row (``truncated`` apart: an episode cut by a learner
    crash reads truncated at the learner, by design)."""
    from robot_rl.transport.codec import EPISODE, STEP

    a, lrn = log_rows(actor_log, False), log_rows(learner_log, True)
    ka = list(zip(a[EPISODE].tolist(), a[STEP].tolist(), strict=True)) if a else []
    kl = list(zip(lrn[EPISODE].tolist(), lrn[STEP].tolist(), strict=True)) if lrn else []
    out: dict[str, Any] = {
        "actor_rows": len(ka),
        "learner_rows": len(kl),
        "missing": len(set(ka) - set(kl)),
        "duplicated": len(kl) - len(set(kl)),
        "extra": len(set(kl) - set(ka)),
    }
    if ka == kl and ka:
        out["fields_differing"] = sorted(
            k for k in a if k != "truncated" and not np.array_equal(a[k], lrn[k])
        )
        out["truncated_flags_differing"] = int(np.sum(a["truncated"] != lrn["truncated"]))
    out["identical"] = bool(ka == kl and not out.get("fields_differing") and not out["missing"])
    return out


def run_recovery(cfg: DistributedBenchConfig, root: Path) -> dict:
    """SIGKILL the learner mid-run, restart it with --resume on the same port; see
    bench/distributed.py's docstring."""
    work = root / "recovery"
    (work / "logs").mkdir(parents=True)
    lrun, arun, aid = work / "learner", work / "actor-0", "actor-0"
    env = env_args("state", cfg.image_size)
    tail = ["--steps", str(cfg.recovery_steps), "--no-progress", "--json"]
    largs = ["learner", "--run", str(lrun), "--bind", "127.0.0.1:0", *env, "--eval-episodes", "0",
             "--learning-starts", "200", *tail]  # fmt: skip
    watch = Watch(lrun, {aid: arun})
    with Children(work / "logs") as kids:
        learner = kids.start("learner", largs)
        addr = wait_for(lambda: serving(lrun, learner.pid), 180, "learner serving", kids, learner)
        actor = kids.start(aid, actor_cmd(cfg, arun, addr, aid, 1, env))
        wait_for(
            lambda: watch.sample(learner, actor)[0][aid] >= cfg.kill_after,
            cfg.run_timeout_s,
            f"learner holding {cfg.kill_after} transitions",
            kids,
            learner,
            actor,
        )
        held_kill, logged_kill = (d[aid] for d in watch.sample(learner, actor))
        version_kill = (read_json(lrun / "weights_version.json") or {}).get("version")
        say(f"recovery: SIGKILL the learner (holds {held_kill}, actor logged {logged_kill})")
        learner.signal(signal.SIGKILL)  # the crash
        learner.proc.wait(30)
        learner.alive()
        time.sleep(cfg.away_s)  # the learner is away
        kids.check(actor)
        logged_restart = watch.sample(actor)[1][aid]
        say(f"recovery: restart (actor logged {logged_restart} meanwhile)")
        t_restart = time.monotonic()
        learner2 = kids.start(
            "learner-resumed", ["learner", "--run", str(lrun), "--resume", "--bind", addr, *tail]
        )
        marks: dict[str, float] = {}

        def progress() -> bool:
            held, logs = watch.sample(learner2, actor)
            now = time.monotonic() - t_restart
            if "serving" not in marks and serving(lrun, learner2.pid):
                marks["serving"] = now
            if "first_ack" not in marks and held[aid] > held_kill:
                marks["first_ack"] = now
            if "caught_up" not in marks and held[aid] >= logged_restart:
                marks["caught_up"] = now
            if "caught_up_live" not in marks and held[aid] >= logs[aid] and "caught_up" in marks:
                marks["caught_up_live"] = now
            return len(marks) == 4

        wait_for(
            progress, cfg.run_timeout_s, "the resumed learner catching up", kids, learner2, actor
        )
        say(f"recovery: caught up {marks['caught_up']:.1f} s after the restart; run to the end")
        poll_until(lambda: not actor.alive() or (watch.sample(), False)[1], cfg.run_timeout_s)
        if actor.alive():
            raise TimeoutError(f"recovery: actor still running after {cfg.run_timeout_s:.0f} s")
        learner_end = learner2.stop(cfg.learner_exit_timeout_s)
        lres, ares = learner2.result(), actor.result()
        if ares is None:
            raise RuntimeError(f"actor printed no result ({actor.how_ended}):\n{actor.tail()}")
        check = compare_logs(arun / "log.zarr", lrun / "actors" / aid / "log.zarr")
    la = ((lres or {}).get("actors") or {}).get(aid, {})
    # learner ingest vs actor production between the first new ack and the live catch-up
    win = [
        (t, h[aid], lg[aid])
        for t, h, lg in watch.samples
        if marks["first_ack"] <= t - t_restart <= marks["caught_up_live"]
    ]
    dt = win[-1][0] - win[0][0] if len(win) > 1 else 0.0
    catch_up = {
        "window_s": round(dt, 2),
        "learner_ingest": round((win[-1][1] - win[0][1]) / dt, 1) if dt else None,
        "actor_production": round((win[-1][2] - win[0][2]) / dt, 1) if dt else None,
    }
    return {
        "benchmark": "e2e_recovery",
        "obs": "state",
        "actors": 1,
        "learner_args": largs[5:],
        "kill_after": cfg.kill_after,
        "away_s": cfg.away_s,
        "at_kill": {
            "learner_held": held_kill,
            "actor_logged": logged_kill,
            "weights_version": version_kill,
        },
        "actor_logged_while_away": logged_restart - logged_kill,
        "at_restart_actor_logged": logged_restart,
        "restart_to_serving_s": round(marks["serving"], 2),
        "restart_to_first_ack_s": round(marks["first_ack"], 2),
        "restart_to_caught_up_s": round(marks["caught_up"], 2),
        "restart_to_caught_up_live_s": round(marks["caught_up_live"], 2),
        "reconnect_after_serving_s": round(marks["first_ack"] - marks["serving"], 2),
        "catch_up_per_s": catch_up,
        "learner": {**learner_figures(lres), "exit": learner_end},
        "actor": actor_figures(ares, cfg, arun),
        "final": {
            "learner_log_transitions": watch.held(aid),
            "actor_logged_transitions": ares["logged_transitions"],
            "actor_acked_through": ares["acked_through"],
            "learner_reported_transitions": la.get("transitions"),
            "learner_reported_acked_through_seq": la.get("acked_through_seq"),
            "learner_reported_duplicates_dropped": la.get("duplicates_dropped"),
            "learner_env_steps": (lres or {}).get("env_steps"),
        },
        "log_comparison": check,
        "timeline_s_held_logged": watch.timeline(t_restart),
        "no_loss_no_duplicates": bool(
            check["identical"] and ares["acked_through"] + 1 == ares["logged_transitions"]
        ),
        "contention": contention(kids.all),
        "code": code_state(),
    }


def bench_e2e(cfg: DistributedBenchConfig) -> list[dict]:
    """The e2e runs named in ``cfg.e2e_runs``; a run that fails is reported as an error."""
    root = Path(cfg.e2e_dir) if cfg.e2e_dir is not None else Path(tempfile.mkdtemp(prefix="e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    idle = [*SMALL_SAC, "--learning-starts", "100000"]
    learning = [*SMALL_SAC, "--learning-starts", "100", "--publish-every-updates", "5"]
    table: dict[str, tuple] = {  # variant -> (obs, actors, learner --steps, learner flags)
        "pixels_idle_learner": ("pixels", 1, cfg.pixel_steps, idle),
        "pixels_idle_learner_2_actors": ("pixels", 2, cfg.pixel_steps, idle),
        "pixels_learning": ("pixels", 1, cfg.pixel_learning_steps, learning),
        # the same, the learner encoding every arriving frame itself (before the actors sent
        # the features they computed to act)
        "pixels_learning_frames": (
            "pixels",
            1,
            cfg.pixel_learning_steps,
            [*learning, "--no-actor-features"],
        ),
        "state_learning": ("state", 1, cfg.state_steps, ["--learning-starts", "200"]),
    }
    unknown = set(cfg.e2e_runs) - {*table, "recovery"}
    if unknown:
        raise ValueError(f"e2e_runs: unknown {sorted(unknown)}; use {[*table, 'recovery']}")
    runs: list[tuple[str, Callable[[], dict]]] = [
        (name, (lambda: run_recovery(cfg, root)) if name == "recovery"
         else (lambda name=name: run_e2e(cfg, root, name, *table[name])))
        for name in cfg.e2e_runs
    ]  # fmt: skip
    results = []
    try:
        for name, run in runs:
            say(f"--- {name}")
            t0 = time.monotonic()
            try:
                r = run()
            except Exception as e:  # one failed run is reported, the others still run
                say(f"{name} failed: {e}")
                r = {"benchmark": "e2e", "variant": name, "error": f"{type(e).__name__}: {e}"}
            r["bench_wall_s"] = round(time.monotonic() - t0, 1)
            results.append(r)
    finally:
        if cfg.e2e_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return results
