"""The learning curve: eval success rate and return against env steps, and the human's effort
against robot time when a person (or the simulated one) corrected the policy, as a PNG (Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_learning_curve(
    path: Path,
    env_steps: Sequence[int],
    success_rate: Sequence[float],
    mean_return: Sequence[float],
    title: str = "",
    best_index: int | None = None,
    effort: Any = None,
) -> None:
    """Write a two-panel PNG (success rate; mean return) vs env steps to ``path`` atomically;
    with ``effort`` a third panel: corrections per episode and human-controlled steps per
    robot minute over robot time (:class:`robot_rl.run.effort.HumanEffort`).

    Args:
        path: Output .png.
        env_steps: (N,) env steps at each evaluation.
        success_rate: (N,) eval success rate in [0, 1].
        mean_return: (N,) eval mean episode return.
        title: Figure title (e.g. task and run name).
        best_index: The evaluation of the best checkpoint (``eval --checkpoint best``), marked
            with a star beside the final one (``--checkpoint latest``); None: no marks.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure  # the OO API: no pyplot global state

    panels = 3 if effort is not None else 2
    fig = Figure(figsize=(4 * panels, 3.2), dpi=100)
    ax_s, ax_r, *ax_e = fig.subplots(1, panels)
    if ax_e:
        plot_effort(ax_e[0], effort)
    ax_s.plot(env_steps, success_rate, marker="o")
    if best_index is not None and len(env_steps) > 0:
        b = int(best_index)
        ax_s.plot(
            [env_steps[b]], [success_rate[b]], marker="*", markersize=16, color="tab:green",
            linestyle="none", label=f"best {success_rate[b]:.2f} @ {env_steps[b]}",
        )  # fmt: skip
        ax_s.plot(
            [env_steps[-1]], [success_rate[-1]], marker="s", markersize=9, color="tab:red",
            linestyle="none", label=f"latest {success_rate[-1]:.2f} @ {env_steps[-1]}",
        )  # fmt: skip
        ax_s.legend(loc="lower right", fontsize=8)
    ax_s.set_ylim(-0.02, 1.02)
    ax_s.set_xlabel("env steps")
    ax_s.set_ylabel("eval success rate")
    ax_s.grid(alpha=0.3)
    ax_r.plot(env_steps, mean_return, marker="o", color="tab:orange")
    ax_r.set_xlabel("env steps")
    ax_r.set_ylabel("eval mean return")
    ax_r.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, format="png")
    tmp.replace(path)


def plot_effort(ax: Any, effort: Any, bin_minutes: float | None = None) -> None:
    """Corrections per episode (left axis) and human-controlled steps per robot minute (right
    axis) against robot minutes, in bins (None: about 20 over the run, at least 1 minute), with
    the robot minutes until ``window`` episodes in a row needed no correction marked."""
    if bin_minutes is None:
        bin_minutes = max(1.0, round(effort.robot_minutes / 20.0))
    t = effort.over_time(bin_minutes)
    ax.plot(t["robot_minutes"], t["corrections_per_episode"], marker="o", color="tab:purple")
    ax.set_xlabel("robot minutes")
    ax.set_ylabel("corrections per episode", color="tab:purple")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(
        t["robot_minutes"], t["human_steps_per_robot_minute"], marker=".", color="tab:gray",
        linestyle="--",
    )  # fmt: skip
    ax2.set_ylabel("human steps per robot minute", color="tab:gray")
    ax2.set_ylim(bottom=0)
    done = effort.minutes_until_no_correction()
    if done is not None:
        ax.axvline(done, color="tab:green", linestyle=":")
        ax.set_title(f"no correction from {done:.1f} robot min", fontsize=9)
    else:
        ax.set_title("human effort", fontsize=9)
