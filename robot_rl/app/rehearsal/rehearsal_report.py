"""The report of ``robot-rl rehearse`` (:mod:`robot_rl.app.rehearsal.rehearse`): figures, PNGs,
summary.

Training episodes are joined in order: the actor's log (``<out>/actor/log.zarr``: the
classifier's verdict as ``success``, the corrections as ``extra["interventions"]``, the length)
with the twin's own scores of the episodes that started after the training did
(``<out>/scores.jsonl``; each actor episode begins with one scene reset). The actor's last,
unfinished episode is not in its log; its score is left out.

Per episode: robot time at its end (actor steps so far / control rate), the twin's success, the
classifier's, the corrections. Figures: the policy's unaided success over the last
``target_episodes`` episodes (the twin's score; an episode someone corrected counts as a
failure, since the policy needed help), robot minutes until the target was first met (over a
moving window of that many episodes), the classifier's online false positives (it confirmed,
the twin says no) and false negatives (the twin saw success, it never confirmed), the actor's
tick overruns, worst tick and observation age (mean, max), the learner's updates and updates
per second of training wall time.

The target (``target_met``) is judged on the final evaluation over ROS 2
(:func:`ros_eval_figures`): the deterministic policy, without the human, on the real-time twin
as the robot day ran, over ``target_episodes`` episodes as the twin scored them, as HIL-SERL
and SERL report a trained policy (without that evaluation: the direct twin's). The rolling
unaided success of the training episodes is the in-loop early stop. It is a conservative
estimate: the human corrects the exploring policy whenever it stalls for ``patience_steps``
(1 s at 10 Hz), and a stochastic policy stalls in most episodes even when its deterministic
version succeeds. (Until 2026-11-29 the stop counted only the uncorrected episodes, which
succeed almost by construction, so it fired early: the 60-minute rehearsal stopped at "0.92"
when the policy finished 25% of its last 40 episodes on its own and its final evaluation
scored 0.60.)
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.run.effort import HumanEffort, describe_effort


def training_episodes(out: Path, control_hz: float, since: float) -> list[dict[str, Any]]:
    """The joined training episodes (see the module docstring)."""
    from robot_rl.replay import EpisodeLog
    from sim.scoring import read_scores

    log_path = out / "actor" / "log.zarr"
    metas = []
    if (log_path / "zarr.json").exists():  # read while the actor writes: committed episodes
        with EpisodeLog.open(log_path, unfinished="drop", mode="r") as log:
            metas = list(log.episodes)
    scores_path = out / "scores.jsonl"
    scores = [r for r in read_scores(scores_path) if r["wall_start"] >= since] if (
        scores_path.exists()
    ) else []  # fmt: skip
    rows, steps = [], 0
    for meta, score in zip(metas, scores, strict=False):
        steps += int(meta.length)
        extra = meta.extra or {}
        rows.append(
            {
                "episode": int(meta.index),
                "robot_s": steps / control_hz,
                "length": int(meta.length),
                "twin_success": bool(score["success"]),
                "classifier_success": bool(meta.success),
                "interventions": int(extra.get("interventions", 0)),
                "intervened_steps": int(extra.get("intervened_steps", 0)),
                "truth_end": dict(score.get("truth_end") or {}),
                "truth_max": dict(score.get("truth_max") or {}),
            }
        )
    return rows


def uncorrected(rows: list[dict]) -> list[dict]:
    """The episodes nobody corrected, in order."""
    return [r for r in rows if r["interventions"] == 0]


def unaided_successes(rows: list[dict]) -> list[bool]:
    """Per episode, in order: the policy succeeded on its own (the twin's score, and nobody
    corrected it). A corrected episode counts as a failure of the policy: it needed help."""
    return [bool(r["twin_success"]) and r["interventions"] == 0 for r in rows]


def _window_success(rows: list[dict], n: int) -> list[tuple[float, float]]:
    """(robot_s, unaided success over the last n episodes) after each episode from the n-th."""
    ok = unaided_successes(rows)
    return [
        (r["robot_s"], float(np.mean(ok[i + 1 - n : i + 1])))
        for i, r in enumerate(rows)
        if i + 1 >= n
    ]


def _after_target(f: dict) -> str:
    """The window that met the target, when episodes ended after it (they finish after the
    stop is asked and move the last window)."""
    after = f.get("episodes_after_target")
    if not after:
        return ""
    return (
        f" (the window that met it: {_fmt(f.get('success_unaided_at_target'))}; {after} "
        "episodes ended after it)"
    )


def figures(
    rows: list[dict],
    target: float,
    n: int,
    control_hz: float = 10.0,
    task: str | None = None,
    arm: str | None = None,
) -> dict[str, Any]:
    """The report's figures from the joined episodes (``task`` and ``arm``: what the last
    ``n`` failed at, by the twin's truth)."""
    last = unaided_successes(rows)[-n:]
    window = _window_success(rows, n)
    met_at = next((i for i, (_, rate) in enumerate(window) if rate >= target), None)
    met = None if met_at is None else window[met_at][0]
    fp = sum(r["classifier_success"] and not r["twin_success"] for r in rows)
    fn = sum(r["twin_success"] and not r["classifier_success"] for r in rows)
    return {
        "episodes": len(rows),
        "uncorrected_episodes": len(uncorrected(rows)),
        "robot_minutes": rows[-1]["robot_s"] / 60.0 if rows else 0.0,
        "success_unaided_last": float(np.mean(last)) if last else None,
        "success_unaided_last_n": len(last),
        "success_all": float(np.mean([r["twin_success"] for r in rows])) if rows else None,
        "target": target,
        "target_episodes": n,
        "robot_minutes_to_target": None if met is None else met / 60.0,
        "success_unaided_at_target": None if met_at is None else window[met_at][1],
        "episodes_after_target": None if met_at is None else len(window) - 1 - met_at,
        "classifier_false_positives": int(fp),
        "classifier_false_negatives": int(fn),
        "classifier_false_positives_truth_end": false_positive_truth(rows),
        "interventions": int(sum(r["interventions"] for r in rows)),
        "interventions_first_half": _mean_interventions(rows[: len(rows) // 2]),
        "interventions_second_half": _mean_interventions(rows[len(rows) // 2 :]),
        "human_effort": effort_of(rows, control_hz).summary(),
        "failed_at_last": training_failures(rows[-n:], task, arm),
    }


def training_failures(rows: list[dict], task: str | None, arm: str | None) -> dict | None:
    """The training episodes the policy did not succeed in on its own: those the person
    corrected (``corrected``), the others by the stage they never reached."""
    own = [
        {"success": r["twin_success"], "truth_max": r.get("truth_max") or {}}
        for r in rows
        if not r["interventions"]
    ]
    counts = failed_at(own, task, arm)
    if counts is None:
        return None
    corrected = sum(1 for r in rows if r["interventions"])
    return {**counts, **({"corrected": corrected} if corrected else {})}


def failed_at(scores: list[dict], task: str | None, arm: str | None) -> dict[str, int] | None:
    """Failed episodes counted by the task's first stage they never reached, from the twin's
    truth (:mod:`sim.diagnosis`); None without a task that has stages."""
    from sim.diagnosis import failures_by_stage, task_stages
    from sim.twin_arms import TWIN_ARMS, twin_arm

    if not task or not task_stages(task):
        return None
    scale = twin_arm(arm).layout.scale if arm in TWIN_ARMS else 1.0
    return failures_by_stage(task, scores, scale)


def effort_of(rows: list[dict], control_hz: float) -> HumanEffort:
    """The training episodes' human effort (their logged corrections and human steps)."""
    effort = HumanEffort(control_hz)
    for r in rows:
        effort.add_episode(r["length"], r["interventions"], r["intervened_steps"])
    return effort


def false_positive_truth(rows: list[dict]) -> dict[str, list[float]]:
    """What the scene was when the classifier confirmed a success the twin did not score: per
    one-number truth field of the task (the twin's ``truth_end``: pick_cube's ``grasped``,
    ``cube_lift_m``), its [min, median, max] over those episodes' last state updates (the
    episode ends at the classifier's confirmation). Empty without false positives."""
    ends = [
        r.get("truth_end") or {} for r in rows if r["classifier_success"] and not r["twin_success"]
    ]
    names = sorted({k for e in ends for k in e})
    out = {}
    for k in names:
        v = np.array([e[k] for e in ends if k in e], dtype=np.float64)
        out[k] = [round(float(x), 4) for x in (v.min(), np.median(v), v.max())]
    return out


def target_met(final_eval: dict | None, target: float, n: int) -> bool | None:
    """Whether the final evaluation met the target: at least ``n`` episodes, success rate at
    least ``target``; None without an evaluation (a rehearsal that failed before it)."""
    if not final_eval or final_eval.get("success_rate") is None:
        return None
    return int(final_eval.get("episodes") or 0) >= n and final_eval["success_rate"] >= target


def ros_eval_figures(
    out: Path,
    result: dict | None,
    window: dict | None,
    task: str | None = None,
    arm: str | None = None,
) -> dict[str, Any]:
    """The final evaluation over ROS 2: the classifier's verdicts (``result``, the JSON of
    ``robot-rl eval --setup``) joined in order with the twin's scores of the episodes that
    started in its wall-time ``window``. The join needs one score per evaluated episode: an
    episode a stale sensor ended is run again with the same seed, and the twin scores both
    attempts, so of consecutive scores with one scene seed only the last (the attempt the
    evaluation counted) is joined; if the counts still differ, the twin's figure is left out
    (None) rather than shifted. ``task`` and ``arm``: the failed episodes counted by the stage
    they never reached (:func:`failed_at`)."""
    from sim.scoring import read_scores

    none = {
        "final_eval_ros_episodes": None,
        "final_eval_ros_success": None,
        "final_eval_ros_classifier_success": None,
        "final_eval_ros_classifier_false_positives": None,
        "final_eval_ros_classifier_false_negatives": None,
        "final_eval_ros_missed_max_success_prob": None,
        "final_eval_ros_sensor_faults": None,
        "final_eval_ros_mean_action_age_s": None,
        "final_eval_ros_max_action_age_s": None,
        "final_eval_ros_failed_at": None,
    }
    if not result or not window:
        return none
    per = result.get("per_episode") or []
    path = out / "scores.jsonl"
    scores = [
        r
        for r in (read_scores(path) if path.exists() else [])
        if window["wall_start"] <= r["wall_start"] <= window["wall_end"]
    ]
    scores = [r for r, nxt in zip(scores, [*scores[1:], None], strict=True) if not _retried(r, nxt)]
    fig = dict(none)
    fig.update(
        final_eval_ros_episodes=len(per),
        final_eval_ros_classifier_success=result.get("success_rate"),
        final_eval_ros_sensor_faults=result.get("sensor_faults"),
        final_eval_ros_mean_action_age_s=result.get("mean_action_age_s"),
        final_eval_ros_max_action_age_s=result.get("max_action_age_s"),
    )
    if per and len(scores) == len(per):
        twin = [bool(r["success"]) for r in scores]
        mine = [bool(e["success"]) for e in per]
        pairs = list(zip(mine, twin, strict=True))
        fig.update(
            final_eval_ros_success=float(np.mean(twin)),
            final_eval_ros_classifier_false_positives=sum(m and not t for m, t in pairs),
            final_eval_ros_classifier_false_negatives=sum(t and not m for m, t in pairs),
            # why the classifier missed them: its highest probability in each (threshold?)
            final_eval_ros_missed_max_success_prob=sorted(
                e["max_success_prob"]
                for e, (m, t) in zip(per, pairs, strict=True)
                if t and not m and e.get("max_success_prob") is not None
            ),
            final_eval_ros_failed_at=failed_at(scores, task, arm),
        )
    return fig


def _retried(score: dict, following: dict | None) -> bool:
    """The episode of ``score`` was run again at once (a stale sensor ended it): the next
    score is of the same scene seed."""
    seed = score.get("seed")
    return following is not None and seed is not None and following.get("seed") == seed


def _mean_interventions(rows: list[dict]) -> float | None:
    return float(np.mean([r["interventions"] for r in rows])) if rows else None


def _rolling(values: list[float], k: int) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - k)
    return (c[idx] - c[lo]) / (idx - lo)


def plot(rows: list[dict], out: Path, title: str, control_hz: float = 10.0) -> list[str]:
    """success.png (the twin's score of all episodes, the policy's unaided success, the
    classifier's verdict) and interventions.png (corrections per episode, human-controlled
    steps per robot minute, when the corrections stopped), over robot minutes; the paths
    written."""
    import matplotlib

    from robot_rl.learner.plots import plot_effort

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["robot_s"] / 60.0 for r in rows]
    k = 10
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(t, _rolling([r["twin_success"] for r in rows], k), label="success (twin's score)")
    ax.plot(t, _rolling([r["classifier_success"] for r in rows], k), "--",
            label="success (classifier's verdict)")  # fmt: skip
    ax.plot(t, _rolling(unaided_successes(rows), k),
            label="unaided success (no correction, twin's score)")  # fmt: skip
    ax.set(xlabel="robot time (min)", ylabel=f"rate (last {k} episodes)", ylim=(-0.02, 1.02))
    ax.set_title(title)
    ax.legend(loc="lower right")
    paths.append(_save(plt, fig, ax, out / "success.png"))
    fig, ax = plt.subplots(figsize=(7, 3))
    plot_effort(ax, effort_of(rows, control_hz))
    paths.append(_save(plt, fig, ax, out / "interventions.png"))
    return paths


def _save(plt: Any, fig: Any, ax: Any, path: Path) -> str:
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def write_report(
    out: Path, cfg: Any, steps: dict[str, dict[str, float]], results: dict[str, Any]
) -> dict[str, Any]:
    """``report.json``, the PNGs and ``summary.md`` in ``out``; the report dict."""
    since = steps.get("train", {}).get("wall_start", float("inf"))
    rows = training_episodes(out, cfg.control_hz, since)
    fig = figures(rows, cfg.target_success, cfg.target_episodes, cfg.control_hz, cfg.task, cfg.arm)
    actor = results.get("actor") or {}
    learner = results.get("learner") or {}
    train_wall = steps.get("train", {})
    wall_s = train_wall.get("wall_end", 0.0) - train_wall.get("wall_start", 0.0)
    fig.update(
        actor_steps=actor.get("env_steps"),
        actor_tick_overruns=actor.get("tick_overruns"),
        actor_max_tick_work_s=actor.get("max_tick_work_s"),
        actor_overrun_work_s=actor.get("overrun_work_s"),
        actor_overrun_thread_cpu_s=actor.get("overrun_thread_cpu_s"),
        actor_overrun_push_s=actor.get("overrun_push_s"),
        actor_overrun_cpu_wait_s=actor.get("overrun_cpu_wait_s"),
        actor_overrun_gc_s=actor.get("overrun_gc_s"),
        actor_mean_obs_age_s=actor.get("mean_obs_age_s"),
        actor_max_obs_age_s=actor.get("max_obs_age_s"),
        actor_mean_action_age_s=actor.get("mean_action_age_s"),
        actor_max_action_age_s=actor.get("max_action_age_s"),
        actor_mean_act_s=actor.get("mean_act_s"),
        actor_mean_tick_work_s=actor.get("mean_tick_work_s"),
        actor_scheduling=actor.get("scheduling"),
        actor_backlog_holds=actor.get("backlog_holds"),
        actor_backlog_held_s=actor.get("backlog_held_s"),
        learner_updates=learner.get("updates"),
        learner_updates_per_s=(learner["updates"] / wall_s)
        if learner.get("updates") and wall_s
        else None,  # fmt: skip
        train_wall_s=wall_s,
    )
    final = results.get("eval") or {}
    direct = [e for e in final.get("per_episode") or [] if e.get("truth_max") is not None]
    fig.update(
        final_eval_success=final.get("success_rate"),
        final_eval_episodes=final.get("episodes"),
        final_eval_env_steps=final.get("env_steps"),
        final_eval_failed_at=failed_at(direct, cfg.task, cfg.arm) if direct else None,
    )
    fig.update(
        ros_eval_figures(out, results.get("eval_ros"), steps.get("eval_ros"), cfg.task, cfg.arm)
    )
    judged = final
    if fig["final_eval_ros_success"] is not None:  # the robot day's own path, the twin's truth
        judged = {"success_rate": fig["final_eval_ros_success"],
                  "episodes": fig["final_eval_ros_episodes"]}  # fmt: skip
    fig.update(
        target_met=target_met(judged, cfg.target_success, cfg.target_episodes),
        target_judged_on="eval_ros" if judged is not final else "eval",
    )
    ev = results.get("reward_eval") or {}
    report = {
        "benchmark": "rehearsal",
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "machine": {"cpus": _cpus(), "platform": platform.platform()},
        "steps": {k: {**v, "wall_s": v["wall_end"] - v["wall_start"]} for k, v in steps.items()},
        "arm": cfg.arm,
        "record": _pick(results.get("record"), "kept", "successes", "dataset_steps", "arm"),
        "label": _pick(results.get("label"), "kept", "positives", "negatives"),
        "classifier": {
            "threshold": ev.get("threshold"),
            "precision": ev.get("precision"),
            "recall": ev.get("recall"),
            "held_out_frames": ev.get("frames"),
            "held_out_episodes": ev.get("episodes"),
            "successes_confirmed": ev.get("detected"),
            "successes_missed": ev.get("missed"),
            "false_successes": ev.get("false_successes"),
            "mean_latency_steps": ev.get("mean_latency_steps"),
        },
        "train": results.get("train"),
        "figures": fig,
        "episodes": rows,
    }
    if rows:
        report["plots"] = plot(
            rows, out, f"rehearsal: {cfg.task} from {cfg.obs} on the {cfg.arm} twin", cfg.control_hz
        )
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "summary.md").write_text(summary(report))
    return report


def _failures(task: str, f: dict[str, Any]) -> str:
    """The failed episodes of the final evaluations (over ROS 2, on the direct twin) and of the
    last training episodes, by the stage they never reached."""
    from sim.diagnosis import describe

    parts = []
    for key, what in (("final_eval_ros_failed_at", "final evaluation over ROS 2"),
                      ("final_eval_failed_at", "on the direct twin"),
                      ("failed_at_last", f"last {f.get('success_unaided_last_n')} training "
                                         "episodes")):  # fmt: skip
        counts = f.get(key)
        if counts is None:
            continue
        parts.append(f"{what}: {describe(task, counts) if counts else 'none failed'}")
    return "; ".join(parts) if parts else "no stages for this task"


def _cores(cores: dict[str, float] | None) -> str:
    """``learner 1.02, actor 0.45, ...`` (``up/ros_node``: the twin, ``actor/human_node``: the
    simulated human); "not measured" for a report from before the meter."""
    if not cores:
        return "not measured"
    return ", ".join(f"{k} {v:.2f}" for k, v in sorted(cores.items(), key=lambda kv: -kv[1]))


def _pick(d: Any, *keys: str) -> dict | None:
    return None if not isinstance(d, dict) else {k: d.get(k) for k in keys}


def _cpus() -> int | None:
    import os

    return os.cpu_count()


def _cpu_share(f: dict[str, Any]) -> str:
    work, cpu = f.get("actor_overrun_work_s"), f.get("actor_overrun_thread_cpu_s")
    if not work or cpu is None:
        return "no overrun time measured"
    said = f"the acting thread was on a CPU for {cpu / work:.0%} of the overrun ticks' time"
    push = f.get("actor_overrun_push_s")
    if push is not None:  # actors since the flush left the tick
        said += f", pushed {push / work:.0%}"
    wait = f.get("actor_overrun_cpu_wait_s")
    if wait is not None:  # actors since the run delay was read
        blocked = max(0.0, work - cpu - wait)
        said += (
            f", waited for a CPU {wait / work:.0%}, blocked (GIL, lock, IO) {blocked / work:.0%}"
        )
    gc_s = f.get("actor_overrun_gc_s")
    if gc_s is not None:  # actors since garbage collections were timed
        said += f", collected garbage (any thread) {gc_s / work:.0%}"
    return said


def _behind(f: dict[str, Any]) -> str:
    """Whether the learner fell behind the robot: the actor's holds before episodes while the
    learner owed more updates than its bound (``actor --max-learner-backlog``)."""
    holds = f.get("actor_backlog_holds")
    if holds is None:
        return "learner backlog not reported"
    if not holds:
        return "the learner kept pace (the actor never waited for it)"
    held = f.get("actor_backlog_held_s") or 0.0
    return (
        f"**the learner fell behind the robot**: the actor held {holds} times, "
        f"{held / 60.0:.1f} min in all, for it to catch up"
    )


def _missed(f: dict[str, Any], threshold: float | None) -> str:
    """Why the final evaluation's missed successes were missed: the classifier's highest
    probability in each against its threshold."""
    probs = f.get("final_eval_ros_missed_max_success_prob")
    if not probs or threshold is None:
        return ""
    below = sum(p < threshold for p in probs)
    return (
        f"; of the final evaluation's {len(probs)} missed successes, {below} never reached the "
        f"threshold (highest probability {min(probs):.2f}-{max(probs):.2f}), {len(probs) - below}"
        " did and were held back by its gates or k-of-n"
    )


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("met" if met else "not met")


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "n/a" if v is None else format(v, spec)


def summary(report: dict[str, Any]) -> str:
    """A short markdown summary of a report."""
    f, c, cfg = report["figures"], report["classifier"], report["config"]
    train = report.get("train") or {}
    lines = [
        f"# Rehearsal: {cfg['task']} from {cfg['obs']} on the {report['arm']} twin",
        "",
        f"- The final policy (deterministic, no human) on the real-time twin over ROS 2, "
        f"{f.get('final_eval_ros_episodes')} episodes ended by the classifier: "
        f"**{_fmt(f.get('final_eval_ros_success'))}** success as the twin scored them "
        f"(classifier: {_fmt(f.get('final_eval_ros_classifier_success'))}, false positives "
        f"{f.get('final_eval_ros_classifier_false_positives')}, false negatives "
        f"{f.get('final_eval_ros_classifier_false_negatives')}); on the direct twin, "
        f"{f['final_eval_episodes']} episodes: **{_fmt(f['final_eval_success'])}**. The target "
        f"(at least {cfg['target_success']} over {cfg['target_episodes']} episodes, judged on "
        f"{f.get('target_judged_on')}) is **{_verdict(f.get('target_met'))}**.",
        f"- Unaided success over the last {f['success_unaided_last_n']} training episodes (the "
        f"twin's score, a corrected episode counts as a failure; the in-loop early stop): "
        f"**{_fmt(f['success_unaided_last'])}**"
        f" (stops at {cfg['target_success']} over {cfg['target_episodes']}); robot minutes to it: "
        f"{_fmt(f['robot_minutes_to_target'], '.1f')}{_after_target(f)}; stopped by "
        f"{train.get('stopped_by')}.",
        f"- Robot time {f['robot_minutes']:.1f} min, {f['episodes']} episodes, corrections "
        f"{f['interventions']} (per episode: first half "
        f"{_fmt(f['interventions_first_half'])}, second half "
        f"{_fmt(f['interventions_second_half'])}).",
        f"- What failed, by the twin's truth: {_failures(cfg['task'], f)}.",
        f"- {describe_effort(f.get('human_effort')) or 'human effort: no correction'}.",
        f"- Classifier: precision {_fmt(c['precision'])}, recall {_fmt(c['recall'])} held out "
        f"(threshold {_fmt(c['threshold'], '.3f')}); held-out successes confirmed "
        f"{c.get('successes_confirmed')}, missed {c.get('successes_missed')}, false "
        f"{c.get('false_successes')}; online false positives "
        f"{f['classifier_false_positives']}, false negatives {f['classifier_false_negatives']}"
        f"{_missed(f, c.get('threshold'))}.",
        f"- Actor tick overruns {f['actor_tick_overruns']} (worst tick "
        f"{_fmt(f['actor_max_tick_work_s'], '.3f')} s; {_cpu_share(f)}); observation age mean "
        f"{_fmt(f['actor_mean_obs_age_s'], '.3f')} s, max {_fmt(f['actor_max_obs_age_s'], '.3f')}"
        f" s; when its action was sent (the latency the policy acts with) mean "
        f"{_fmt(f.get('actor_mean_action_age_s'), '.3f')} s, max "
        f"{_fmt(f.get('actor_max_action_age_s'), '.3f')} s, of it the policy "
        f"{_fmt(f.get('actor_mean_act_s'), '.3f')} s (actor work per step "
        f"{_fmt(f.get('actor_mean_tick_work_s'), '.3f')} s; final evaluation over ROS 2: mean "
        f"{_fmt(f.get('final_eval_ros_mean_action_age_s'), '.3f')} s); "
        f"learner {f['learner_updates']} updates, "
        f"{_fmt(f['learner_updates_per_s'])} updates/s; {_behind(f)}.",
        f"- CPU during training, in cores (2.0: both cores all along): "
        f"{_cores(train.get('cpu_cores'))}.",
        f"- Readers of the twin's truth (task/status) during training: "
        f"{train.get('privileged_readers')}.",
        "",
        "![success](success.png)",
        "",
        "![corrections](interventions.png)",
        "",
    ]
    return "\n".join(lines)
