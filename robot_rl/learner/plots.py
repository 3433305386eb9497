"""The learning curve: eval success rate and return against env steps, as a PNG (Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def write_learning_curve(
    path: Path,
    env_steps: Sequence[int],
    success_rate: Sequence[float],
    mean_return: Sequence[float],
    title: str = "",
    best_index: int | None = None,
) -> None:
    """Write a two-panel PNG (success rate; mean return) vs env steps to ``path`` atomically.

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

    fig = Figure(figsize=(8, 3.2), dpi=100)
    ax_s, ax_r = fig.subplots(1, 2)
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
