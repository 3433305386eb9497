"""Which evaluation episodes a run wins or loses, evaluation after evaluation.

    python bench/goal_map.py RUN_DIR [RUN_DIR ...] [--png bench/results/x.png]
        [--jsonl bench/results/x.jsonl] [--from-step 10000]

Every evaluation of a run resets episode i with ``eval_seed + i``, so on a task whose reset is a
function of its seed (the twin, Meta-World through ``bench/_external_envs.py``) column i is the
same initial state (object and goal layout) at every evaluation. ``eval.jsonl`` keeps which
episodes were won (``episode_success``). This reads it and tells two kinds of fall apart:

- the policy trading layouts: successes churn between evaluations, every layout is won some of
  the time, a drop loses layouts that were won just before (instability of the policy);
- a coverage gap: the same layouts are lost at every evaluation (generalisation from the
  layouts seen in training), the others always won.

Prints one JSON object per run (figures over the evaluations from ``--from-step`` on): the
flips between consecutive evaluations (won -> lost, lost -> won), the share of episodes always
won / never won / mixed, and for the largest drop how many of the episodes it lost had been won
at each of the three evaluations before. Writes a PNG: one panel per run, rows evaluations,
columns episodes ordered by how often they were won, green won, grey lost. With ``--task``
(an external task of ``bench/_external_envs.py``) a second row of panels places each
evaluation episode at its object (o) and goal (x) position, coloured by how often it was won
from ``--from-step`` on: lost layouts in one region are a coverage gap, scattered ones churn.
The eval env is rebuilt as ``bench/sparse_suite.py`` builds it (``EVAL_ENV_SEED_OFFSET``, the
run's seed and eval seed from its ``config.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def read_map(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """(env_steps (E,), won (E, N) 0/1) of a run directory's evaluations with episode data."""
    rows = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines() if s.strip()]
    rows = [r for r in rows if "episode_success" in r]
    if not rows:
        raise ValueError(
            f"{run}/eval.jsonl has no episode_success (written since the per-episode record was "
            "added to the trainer's evaluation rows): re-run the training"
        )
    n = {len(r["episode_success"]) for r in rows}
    if len(n) != 1:
        raise ValueError(f"{run}: evaluations of different sizes {sorted(n)}")
    steps = np.array([r["env_steps"] for r in rows])
    return steps, np.array([r["episode_success"] for r in rows], dtype=np.int8)


def figures(steps: np.ndarray, won: np.ndarray, from_step: int) -> dict:
    """The JSON figures of one run (see the module docstring)."""
    keep = steps >= from_step
    s, w = steps[keep], won[keep]
    if len(s) < 2:
        raise ValueError(f"fewer than 2 evaluations from step {from_step}")
    lost_after_win = ((w[:-1] == 1) & (w[1:] == 0)).sum(axis=1)
    won_after_loss = ((w[:-1] == 0) & (w[1:] == 1)).sum(axis=1)
    freq = w.mean(axis=0)
    rates = w.mean(axis=1)
    drop = int(np.argmin(np.diff(rates)))  # the largest fall: evaluation drop -> drop + 1
    lost = (w[drop] == 1) & (w[drop + 1] == 0)
    before = w[max(0, drop - 2) : drop + 1]
    return {
        "from_step": int(from_step),
        "evaluations": int(len(s)),
        "episodes": int(w.shape[1]),
        "success": [round(float(r), 3) for r in rates],
        "env_steps": [int(x) for x in s],
        "flips_won_to_lost": [int(x) for x in lost_after_win],
        "flips_lost_to_won": [int(x) for x in won_after_loss],
        "mean_flip_share": round(float((lost_after_win + won_after_loss).mean() / w.shape[1]), 3),
        "always_won": round(float((freq == 1).mean()), 3),
        "never_won": round(float((freq == 0).mean()), 3),
        "mixed": round(float(((freq > 0) & (freq < 1)).mean()), 3),
        "largest_drop": {
            "from_step": int(s[drop]),
            "to_step": int(s[drop + 1]),
            "success": [round(float(rates[drop]), 3), round(float(rates[drop + 1]), 3)],
            "episodes_lost": int(lost.sum()),
            "lost_won_at_each_of_3_before": int((before[:, lost] == 1).all(axis=0).sum()),
        },
    }


def layouts(task: str, run: Path, episodes: int) -> np.ndarray:
    """(N, 4) object xy and goal xy of the run's evaluation episodes (Meta-World state:
    object at [4:6], goal at [-3:-1])."""
    import _external_envs as ext
    from sparse_suite import EVAL_ENV_SEED_OFFSET

    train = json.loads((run / "config.json").read_text())["train"]
    env = ext.TASKS[task].make(int(train["seed"]) + EVAL_ENV_SEED_OFFSET)
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=int(train["eval_seed"]) + i)
        st = np.asarray(obs["state"])
        out.append([st[4], st[5], st[-3], st[-2]])
    env.close()
    return np.array(out)


def plot(runs: list[tuple[str, np.ndarray, np.ndarray, np.ndarray | None]], png: Path,
         from_step: int) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    rows = 2 if any(r[3] is not None for r in runs) else 1
    fig, axes = plt.subplots(rows, len(runs), figsize=(4.5 * len(runs), 4.5 * rows), squeeze=False)
    for ax, (_, steps, won, lay) in zip(axes[-1], runs, strict=True):
        if lay is None:
            ax.axis("off")
            continue
        freq = won[steps >= from_step].mean(axis=0)
        for xy, marker in ((lay[:, :2], "o"), (lay[:, 2:], "x")):
            sc = ax.scatter(xy[:, 0], xy[:, 1], c=freq, cmap="RdYlGn", vmin=0, vmax=1,
                            marker=marker, s=30)  # fmt: skip
        for row in lay:
            ax.plot([row[0], row[2]], [row[1], row[3]], color="#bbbbbb", lw=0.5, zorder=0)
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.set_title(f"o object, x goal: share won from {from_step // 1000}k", fontsize=9)
        fig.colorbar(sc, ax=ax, fraction=0.046)
    for ax, (name, steps, won, _) in zip(axes[0], runs, strict=True):
        order = np.argsort(-won.mean(axis=0), kind="stable")
        ax.imshow(
            won[:, order],
            aspect="auto",
            cmap=ListedColormap(["#d0d0d0", "#2a9d4b"]),
            vmin=0,
            vmax=1,
            interpolation="nearest",
        )
        ax.set_yticks(range(len(steps)), [f"{s // 1000}k {won[i].mean():.2f}" for i, s in
                                          enumerate(steps)], fontsize=7)  # fmt: skip
        ax.set_xlabel("evaluation episode (fixed layout), most often won first")
        ax.set_title(name, fontsize=9)
    axes[0][0].set_ylabel("evaluation (env steps, success)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (with eval.jsonl)")
    p.add_argument("--png", type=Path, default=None, help="write the map here")
    p.add_argument("--jsonl", type=Path, default=None, help="append the JSON objects here")
    p.add_argument("--from-step", type=int, default=0, help="figures from this env step on")
    p.add_argument("--task", default=None, help="external task: also map the layouts")
    args = p.parse_args(argv)
    drawn = []
    for run in args.runs:
        try:
            steps, won = read_map(run)
            out = {"benchmark": "goal_map", "run": str(run), "task": args.task}
            out.update(figures(steps, won, args.from_step))
        except (OSError, ValueError) as e:
            p.error(f"{run}: {e}")
        line = json.dumps(out)
        print(line)
        if args.jsonl is not None:
            with open(args.jsonl, "a") as f:
                f.write(line + "\n")
        lay = layouts(args.task, run, won.shape[1]) if args.task else None
        drawn.append((run.parent.name if run.name == "run" else run.name, steps, won, lay))
    if args.png is not None:
        plot(drawn, args.png, args.from_step)
        print(f"wrote {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
