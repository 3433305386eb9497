"""What each command prints for a person (``--json`` prints the result dict instead): one
``print_<command>`` per command, over the result dict that :mod:`robot_rl.app`'s ``run_*``
function returns. Here the twin and learning commands; the data commands (record, label,
dataset, reward) in :mod:`robot_rl.cli.data_reports`."""

from __future__ import annotations

import sys

from robot_rl.run.effort import describe_effort


def _gripper_text(fixed: float | None) -> str:
    if fixed is None:
        return "the policy's last action dimension"
    return f"held at {fixed:+.1f} (closed)" if fixed > 0 else f"held at {fixed:+.1f}"


def print_rollout(result: dict) -> None:
    """Human-readable summary (rich table) of :func:`run_rollout`'s result on stdout."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"rollout: {result['task']} / {result['policy']}")
    for col in ("episode", "seed", "return", "length", "success", "failure"):
        table.add_column(col, justify="right")
    for ep in result["per_episode"]:
        table.add_row(
            str(ep["episode"]),
            str(ep["seed"]),
            f"{ep['return']:.2f}",
            str(ep["length"]),
            "yes" if ep["success"] else "no",
            "yes" if ep["failure"] else "no",
        )
    console = Console()
    console.print(table)
    console.print(
        f"success rate {result['success_rate']:.2f} over {result['episodes']} episodes; "
        f"mean return {result['mean_return']:.2f} (std {result['std_return']:.2f}); "
        f"mean length {result['mean_length']:.1f}; "
        f"{result['env_steps_per_s']:.0f} env steps/s",
        soft_wrap=True,
    )
    if result["video"]:
        console.print(f"video: {result['video']} ({result['video_frames']} frames)", soft_wrap=True)


def print_collect(result: dict) -> None:
    """One human-readable line about what was written."""
    print(
        f"wrote {result['episodes_written']} {result['policy']} episodes of "
        f"{result['task'] or result.get('env')} "
        f"({result['obs']}) to {result['out']} in {result['attempts']} attempts; the dataset "
        f"now holds {result['dataset_episodes']} episodes / {result['dataset_steps']} steps"
    )


def print_train(result: dict) -> None:
    """Where the plot is and the final evaluation."""
    ev = result.get("final_eval") or {}
    print(
        f"trained {result['task']} ({result['obs']}): {result['env_steps']} env steps, "
        f"{result['updates']} updates, {result['episodes']} episodes"
    )
    if ev:
        print(
            f"final eval: success rate {ev['success_rate']:.2f} over {ev['eval_episodes']} "
            f"episodes, mean return {ev['mean_return']:.2f}"
        )
    best = result.get("best_eval")
    if best and ev and best.get("env_steps") != ev.get("env_steps"):
        print(
            f"best eval: success rate {best['success_rate']:.2f} at {best['env_steps']} env "
            f"steps (robot-rl eval --run {result.get('run_dir', 'RUN')} --checkpoint best)"
        )
    for w in result.get("reward_warnings") or []:
        print(f"WARNING {w['message']}")
    if line := describe_effort(result.get("human_effort")):
        print(line)
    print(f"learning curve: {result['learning_curve']}")
    print(f"checkpoint: {result['checkpoint']}", file=sys.stdout)


def print_learner(result: dict) -> None:
    ev = result.get("final_eval") or {}
    print(
        f"learner {result['run_dir']}: {result['env_steps']} env steps from "
        f"{len(result['actors'])} actor(s), {result['updates']} updates, weights version "
        f"{result['weights_version']} (stopped by {result['stopped_by']})"
    )
    for a, s in sorted(result["actors"].items()):
        print(
            f"  {a}: {s['transitions']} transitions, {s['episodes']} episodes, "
            f"{s['duplicates_dropped']} duplicates dropped, {s['batches_rejected']} rejected"
        )
    if "success_rate" in ev:
        print(f"final eval: success rate {ev['success_rate']:.2f}, return {ev['mean_return']:.2f}")
    if line := describe_effort(result.get("human_effort")):
        print(line)
    if "success_rate" in ev:
        print(f"learning curve: {result['learning_curve']}")


def print_actor(result: dict) -> None:
    print(
        f"actor {result['actor_id']}: {result['env_steps']} env steps, {result['episodes']} "
        f"episodes, weights v{result['weights_version']}, acked through "
        f"{result['acked_through']} of {result['logged_transitions']} logged, "
        f"{result['tick_overruns']} tick overruns (stopped by {result['stopped_by']})"
    )
    for w in result.get("reward_warnings") or []:
        print(f"WARNING {w['message']}")


def print_eval(result: dict) -> None:
    """One human-readable summary line."""
    for why in result.get("checkpoints_skipped", []):
        print(f"skipped a damaged checkpoint: {why}")
    print(
        f"eval {result['task']} ({result['obs']}) from the "
        f"{result.get('checkpoint_choice', 'latest')} checkpoint {result['checkpoint']} "
        f"({result['env_steps']} env steps): success rate {result['success_rate']:.2f} over "
        f"{result['episodes']} episodes, mean return {result['mean_return']:.2f}, "
        f"mean length {result['mean_length']:.1f}"
    )
    if result.get("video"):
        print(f"video: {result['video']}")


def print_envs(result: dict) -> None:
    """Human-readable listing of :func:`list_envs`'s result on stdout."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    console = Console()
    if "mapping" in result:  # --env: a foreign env's mapping
        m = result["mapping"]
        state = "\n".join(f"  {p['path']} ({p['size']})" for p in m["state"]) or "  none"
        cams = "\n".join(f"  {k}: {v}" for k, v in m["cameras"].items()) or "  none"
        left = "\n".join(f"  {p['path']}: {p['why']}" for p in m["left_out"]) or "  nothing"
        body = (
            f"max_episode_steps: {result['max_episode_steps']}\n"
            f"state ({m['state_dim']} values), in order:\n{state}\n"
            f"cameras (with --obs pixels):\n{cams}\n"
            f"left out:\n{left}\n"
            f"action: {m['action_dim']} values in [-1, 1] onto {m['action_low']} .. "
            f"{m['action_high']}\n"
            f"observation:\n{result['observation']}"
        )
        console.print(Panel(Text(body), title=result["env"], expand=False))
        return
    for t in result["tasks"]:
        body = (
            f"{t['description']}\n\n"
            f"max_episode_steps: {t['max_episode_steps']}\n"
            f"action {t['action_layout']}: {t['action']}\n"
            f"action scale: {1000 * t['action_scale_m']:g} mm per step at 1.0\n"
            f"learner (train/collect/record) gripper: "
            f"{_gripper_text(t['learner_fixed_gripper'])}\n"
            f"observation:\n{t['observation']}\n"
            f"object state observed by learners with --obs state: "
            f"{', '.join(t['state_objects']) or 'none (the robot state suffices)'}\n"
            f"rewards (--task-reward):\n"
            + "\n".join(f"  {k}: {v}" for k, v in t["rewards"].items())
        )
        console.print(Panel(Text(body), title=t["name"], expand=False))


def print_arm_calibrate(result: dict) -> None:
    """The calibration :func:`run_arm_calibrate` wrote, one line per joint, on stdout."""
    print(f"wrote {result['out']} ({result['samples']} samples over {result['seconds']} s)")
    for name, j in result["joints"].items():
        print(
            f"  {name:14s} servo {j['servo_id']}: ticks {j['min_ticks']}..{j['max_ticks']} "
            f"({j['range_deg']} deg), zero {j['offset_ticks']}, direction {j['direction']:+d}"
        )


def print_arm_check(result: dict) -> None:
    """What :func:`robot_rl.app.arms.arm_check.run_arm_check` measured, and its verdict."""
    print(
        f"{result['setup']}: arm {result['arm']} ({len(result['joint_names'])} joints: "
        f"{', '.join(result['joint_names'])})"
    )
    if result.get("state_rate_hz") is not None:
        rate, control = result["state_rate_hz"], result["control_hz"]
        print(f"  state rate {rate:.1f} Hz (control {control:g} Hz)")
    for m in result["moves"]:
        out, back = m["out"], m["back"]
        print(
            f"  {m['axis']}: out {out['error_mm']:.1f} mm, back {back['error_mm']:.1f} mm from "
            f"target; half-way {out['half_way_s'] or float('nan'):.2f} s; largest TCP step "
            f"{max(out['max_tcp_step_mm'], back['max_tcp_step_mm']):.1f} mm"
        )
    if result["ok"]:
        print("ok: the arm answers, moves where it is told and comes back")
    else:
        print("FAILED:\n" + "\n".join(f"  {p}" for p in result["problems"]))
