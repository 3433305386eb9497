"""What the data commands print for a person (``record``, ``label``, ``dataset``, ``reward``;
``--json`` prints the result dict instead); see :mod:`robot_rl.cli.reports`."""

from __future__ import annotations

from typing import Any


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def print_record(result: dict) -> None:
    """One human-readable summary."""
    print(
        f"recorded {result['kept']} episodes ({result['successes']} successes, "
        f"{result['discarded']} discarded) of {result['task']} into {result['out']}; it now "
        f"holds {result['dataset_episodes']} episodes / {result['dataset_steps']} steps"
        + (f"; stopped by {result['stopped_by']}" if result["stopped_by"] else "")
    )


def print_label(result: dict) -> None:
    """One human-readable summary."""
    print(
        f"labelled {result['kept']} episodes ({result['positives']} positive, "
        f"{result['negatives']} negative frames) into {result['out']}; it now holds "
        f"{result['store_frames']} frames ({result['store_positives']} positive) in "
        f"{result['store_episodes']} episodes"
        + (f"; stopped by {result['stopped_by']}" if result["stopped_by"] else "")
    )


def print_dataset_info(r: dict) -> None:
    """Rich tables of :func:`run_info`'s result on stdout."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    env = (r["meta"] or {}).get("env") or {}
    title = f"{r['path']}  ({env.get('task', 'unknown task')}, {_size(r['size_bytes'])})"
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    succ, iv = r["success"], r["intervention"]
    lengths = r["episode_length"]
    t.add_row("episodes", str(r["episodes"]))
    t.add_row("steps", str(r["steps"]))
    if r["episodes"]:
        t.add_row("episode length", f"{lengths['min']} / {lengths['mean']:.1f} / {lengths['max']}")
    t.add_row(
        "success rate", f"{_pct(succ['rate'])} ({succ['successes']} of {succ['known']} known)"
    )
    t.add_row("intervened steps", f"{iv['steps']} ({_pct(iv['step_rate'])})")
    t.add_row("episodes with interventions", f"{iv['episodes']} ({_pct(iv['episode_rate'])})")
    t.add_row(
        "ended by the task / time limit", f"{r['terminated_episodes']} / {r['truncated_episodes']}"
    )
    if r["unfinished_episodes"]:
        t.add_row("unfinished (crash) episodes", str(r["unfinished_episodes"]))
    if bads := r["nonfinite"]:
        bad = "; ".join(f"episode {b['episode']}: {b['key']} row {b['row']}" for b in bads)
        t.add_row("[red]NaN / inf (loading refuses)[/red]", f"{bad} (fix: dataset salvage)")
    cams = ", ".join(f"{c} {'x'.join(map(str, s))}" for c, s in r["cameras"].items())
    t.add_row("cameras", cams or "none")
    t.add_row("state dim / action dim", f"{r['state_dim']} / {r['action_dim']}")
    fps = r["fps"] if r["fps"] is not None else r["fps_from_stamps"]
    how = "recorded" if r["fps"] is not None else "from stamps"
    t.add_row("control rate", "-" if fps is None else f"{fps:.2f} Hz ({how})")
    if r["policy_versions"] is not None:
        t.add_row("policy versions", "{} .. {}".format(*r["policy_versions"]))
    console.print(t)
    if r["by_source"]:
        s = Table(title="by source", title_justify="left")
        for col in ("source", "episodes", "steps", "success", "intervened steps", "episodes w/ iv"):
            s.add_column(col, justify="left" if col == "source" else "right")
        for name, v in r["by_source"].items():
            s.add_row(
                name,
                str(v["episodes"]),
                str(v["steps"]),
                _pct(v["success_rate"]),
                str(v["intervened_steps"]),
                str(v["intervened_episodes"]),
            )
        console.print(s)


def print_dataset_export(r: dict) -> None:
    """One line about what was written."""
    cams = ", ".join(r["cameras"]) or "no cameras"
    print(
        f"wrote LeRobot dataset {r['codebase_version']} to {r['out']}: {r['episodes']} episodes, "
        f"{r['frames']} frames at {r['fps']} fps, task {r['task']!r}, {cams}"
    )


def print_dataset_salvage(r: dict) -> None:
    """What was copied, and each skipped episode with the reason."""
    print(f"copied {r['copied']} of {r['episodes']} episodes of {r['path']} to {r['out']}")
    for s in r["skipped"]:
        print(f"skipped episode {s['episode']}: {s['why']}")


def print_reward_frames(result: dict[str, Any]) -> None:
    """Human-readable summary on stdout."""
    print(
        f"wrote {result['episodes']} episodes of {result['task']} to {result['out']}: "
        f"{result['frames']} frames ({result['positives']} positive, {result['negatives']} "
        f"negative); episodes by kind {result['episodes_by_kind']}, successful "
        f"{result['successful_episodes_by_kind']}"
    )


def print_reward_train(result: dict[str, Any]) -> None:
    v, m = result["metrics"]["val"], result["metrics"]
    if m.get("calibration", "frames") == "episodes":
        c = m.get("episode_choice") or {}
        how = (
            f"calibrated on {c.get('episodes')} validation episodes, {v['confirm_k']} of "
            f"{v['confirm_n']} frames: no false success above {c.get('negative_bound', 0):.3f}, "
            f"{c.get('hits')} of {c.get('positive_episodes')} successes confirmed in time"
            f"{'' if m['target_met'] else '; NOT separable: label more episodes'}"
        )
    else:
        how = (
            f"target precision {result['target_precision']}{'' if m['target_met'] else ', NOT met'}"
        )
    print(
        f"saved {result['out']}: encoder {result['encoder']}, cameras {result['cameras']}, "
        f"threshold {result['threshold']:.3f} ({how}); validation precision "
        f"{v['precision']:.3f} recall {v['recall']:.3f} PR-AUC {v['pr_auc']}; run "
        f"`robot-rl reward eval --model {result['out']}` for the held-out test episodes"
    )


def print_reward_eval(result: dict[str, Any]) -> None:
    r = result
    print(
        f"{r['model_id']} on {r['frames_path']} ({r['held_out']}: {r['episodes']} episodes, "
        f"{r['frames']} frames): precision {r['precision']:.3f} recall {r['recall']:.3f} "
        f"PR-AUC {r['pr_auc']}; {r['confirm_k']} of {r['confirm_n']} frames: "
        f"{r['detected']} of {r['positive_episodes']} successes confirmed, {r['missed']} missed, "
        f"{r['false_successes']} false (episode false-success rate "
        f"{r['episode_false_success_rate']:.3f}), mean latency "
        f"{'n/a' if r['mean_latency_steps'] is None else format(r['mean_latency_steps'], '.1f')}"
        " steps"
    )


def print_dataset_import(result: dict) -> None:
    """What ``dataset import`` read and how it mapped the features."""
    m = result["mapping"]
    print(
        f"imported {result['episodes']} episodes ({result['frames']} frames, "
        f"{result['fps']:g} fps, LeRobot {result['codebase_version']}) from {result['source']} "
        f"into {result['out']}"
    )
    print("  state: " + (", ".join(f"{s['feature']} ({s['size']})" for s in m["state"]) or "none"))
    print("  cameras: " + (", ".join(f"{k} <- {v}" for k, v in m["cameras"].items()) or "none"))
    print(f"  action: {m['action']['feature']} ({m['action']['size']}), {result['action_norm']}")
    for lo in m["left_out"]:
        print(f"  left out: {lo['feature']}: {lo['why']}")
