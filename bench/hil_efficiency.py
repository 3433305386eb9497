"""Human-in-the-loop sample efficiency on the twin: no-HIL vs HIL-SERL routing vs RLIF.

For each task x mode x seed: (optionally) record ``--demos`` scripted demonstrations (shared by
the modes of a task and seed), train with the embedded loop (`robot-rl train`, state or
pixel observations) for ``--steps`` env steps with an evaluation every ``--eval-every`` steps, and
report the env steps at which the eval success rate first reached ``--target`` (null if never
within the budget), with the human interventions (takeovers) and intervened steps spent by
then. Modes: ``none`` (no human: the baseline), ``hil-serl``, ``rlif``, ``online`` (the
simulated human of :mod:`sim.human` takes over when the policy stalls; the learner uses the
interventions as :mod:`robot_rl.learner.routing` describes). Env steps count every step,
human-driven ones included.

Prints one JSON object per run as it finishes, then one summary object (per task and mode: the
median steps to target over the seeds that reached it, how many did, the median interventions;
and whether each HIL mode reached the target on a task in fewer than half the median env steps
of no-HIL, counting an unreached baseline as the budget). Writes everything to ``--out``.

Issue target: HIL reaches 90% on peg_insert in fewer than half the env steps of no-HIL.

    python bench/hil_efficiency.py                                   # the full run (hours)
    python bench/hil_efficiency.py --tasks reach --seeds 1 --steps 400 --eval-every 200
    python bench/hil_efficiency.py --tasks peg_insert --obs pixels --modes hil-serl \
        --seeds 1 --num-threads 2 --eval-every 1000      # from 2 cameras 128x128 (~20 min)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_efficiency import machine_info  # noqa: E402

MODES = ("none", "hil-serl", "rlif", "online")


@dataclass(frozen=True)
class HilBenchConfig:
    """What to measure."""

    tasks: tuple[str, ...] = ("pick_cube", "peg_insert")
    """Twin tasks."""
    obs: Literal["state", "pixels"] = "state"
    """Observations: privileged state, or 2 cameras + proprioception (pixels: the frozen
    EfficientNet-Lite0 with cached features, the `robot-rl train` default)."""
    image_size: int = 128
    """Camera image side for pixels."""
    modes: tuple[str, ...] = ("none", "hil-serl", "rlif")
    """none (no human), hil-serl, rlif, online."""
    seeds: int = 3
    """Seeds first_seed .. first_seed + seeds - 1."""
    first_seed: int = 0
    """The first seed (to run seeds in separate invocations)."""
    steps: int = 10_000
    """Env steps per run (the budget)."""
    demos: int = 10
    """Scripted demos per task and seed (0: none; random_steps then explore first)."""
    eval_every: int = 500
    """Evaluate every this many env steps."""
    eval_episodes: int = 20
    """Episodes per evaluation."""
    target: float = 0.9
    """Success rate that counts as reached."""
    patience_steps: int = 10
    """Simulated human: steps without progress before taking over."""
    takeover_steps: int = 20
    """Simulated human: steps per takeover."""
    max_interventions: int = 2
    """Simulated human: takeovers per episode at most."""
    trust_patience_steps: int = 0
    """Simulated human: extra patience earned by the policy's recent unaided successes
    (`train --human-trust-patience-steps`; 0: off)."""
    trust_episodes: int = 20
    """Simulated human: the recent episodes that earn it."""
    utd: int | None = None
    """Critic updates per env step (None: the CLI default)."""
    num_threads: int = 1
    """torch threads of the training process (2 for pixels on this 2-core machine)."""
    out: Path = Path("bench/results/hil_efficiency.json")
    """Where to write the runs and the summary."""
    work_dir: Path | None = None
    """Keep demos and runs here (None: a temporary directory, removed afterwards)."""

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise ValueError(f"unknown modes {unknown}; choose from {MODES}")
        if self.seeds < 1 or self.steps < 1 or self.eval_every < 1 or self.demos < 0:
            raise ValueError("seeds, steps and eval_every must be >= 1 and demos >= 0")


def run_one(cfg: HilBenchConfig, task: str, mode: str, seed: int, root: Path) -> dict:
    """Train one (task, mode, seed) and read its eval log."""
    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
    from robot_rl.app.training.train import TrainCmdConfig, run_train
    from robot_rl.run.rundir import EFFORT_JSON

    env = LearnerEnvConfig(task=task, obs=cfg.obs, image_size=cfg.image_size)
    demos = None
    if cfg.demos:
        demos = root / f"demos_{task}_{seed}.zarr"
        if not demos.exists():
            run_collect(
                CollectConfig(env=env, out=demos, episodes=cfg.demos, seed=2_000_000 + 1000 * seed),
                progress=False,
            )
    run = root / f"run_{task}_{mode}_{seed}"
    t0 = time.perf_counter()
    res = run_train(
        TrainCmdConfig(
            run=run,
            env=env,
            demos=demos,
            steps=cfg.steps,
            seed=seed,
            utd=cfg.utd,
            num_threads=cfg.num_threads,
            eval_every_steps=cfg.eval_every,
            eval_episodes=cfg.eval_episodes,
            progress=False,
            human="none" if mode == "none" else "sim",
            intervention_mode="hil-serl" if mode == "none" else mode,
            human_patience_steps=cfg.patience_steps,
            human_takeover_steps=cfg.takeover_steps,
            human_max_interventions=cfg.max_interventions,
            human_trust_patience_steps=cfg.trust_patience_steps,
            human_trust_episodes=cfg.trust_episodes,
        )
    )
    wall = time.perf_counter() - t0
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines() if s.strip()]
    hit = next((e for e in evals if e["success_rate"] >= cfg.target), None)
    return {
        "task": task,
        "mode": mode,
        "seed": seed,
        "demos": cfg.demos,
        "env_steps": res["env_steps"],
        "updates": res["updates"],
        "steps_to_target": None if hit is None else hit["env_steps"],
        "interventions_to_target": None if hit is None else hit["interventions"],
        "intervened_steps_to_target": None if hit is None else hit["intervened_steps"],
        "interventions_total": res["interventions"],
        "intervened_steps_total": res["intervened_steps"],
        "final_success": evals[-1]["success_rate"],
        "best_success": max(e["success_rate"] for e in evals),
        "curve": [
            (e["env_steps"], e["success_rate"], e["interventions"], e["intervened_steps"])
            for e in evals
        ],
        "train_wall_s": wall,
        # the run's human effort (robot_rl.run.effort; corrections over robot time), if any
        "human_effort": json.loads((run / EFFORT_JSON).read_text())
        if (run / EFFORT_JSON).exists()
        else None,
    }


def _mean_last(runs: list[dict]) -> float | None:
    import numpy as np

    got = [
        (r.get("human_effort") or {}).get("last_minutes", {}).get("corrections_per_episode")
        for r in runs
    ]
    got = [g for g in got if g is not None]
    return float(np.mean(got)) if got else None


def summarize(cfg: HilBenchConfig, runs: list[dict]) -> dict:
    """Per task and mode: medians over the seeds that reached the target; the 2x check."""
    import numpy as np

    def med(xs: list) -> float | None:
        return float(np.median(xs)) if xs else None

    out: dict = {}
    for task in cfg.tasks:
        per_mode = {}
        for mode in cfg.modes:
            rs = [r for r in runs if r["task"] == task and r["mode"] == mode]
            hit = [r for r in rs if r["steps_to_target"] is not None]
            per_mode[mode] = {
                "seeds": len(rs),
                "reached": len(hit),
                "median_steps_to_target": med([r["steps_to_target"] for r in hit]),
                "median_interventions_to_target": med([r["interventions_to_target"] for r in hit]),
                "median_intervened_steps_to_target": med(
                    [r["intervened_steps_to_target"] for r in hit]
                ),
                "mean_final_success": float(np.mean([r["final_success"] for r in rs]))
                if rs
                else None,
                # the human's work at the end: corrections per episode, last 10 robot minutes
                "mean_last_corrections_per_episode": _mean_last(rs),
            }
        base = per_mode.get("none")
        if base is not None:
            # An unreached baseline counts as the budget (a lower bound of its true cost).
            base_steps = base["median_steps_to_target"] or cfg.steps
            for mode, m in per_mode.items():
                if mode != "none":
                    s = m["median_steps_to_target"]
                    m["under_half_of_no_hil"] = None if s is None else s < 0.5 * base_steps
        out[task] = per_mode
    return out


def main(argv: list[str] | None = None) -> int:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    import tyro

    cfg = tyro.cli(HilBenchConfig, args=argv)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(cfg.work_dir) if cfg.work_dir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for task in cfg.tasks:
            for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds):
                for mode in cfg.modes:
                    r = run_one(cfg, task, mode, seed, root)
                    runs.append(r)
                    print(json.dumps(r), flush=True)
    record = {
        "benchmark": "hil_efficiency",
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "machine": machine_info(),
        "summary": summarize(cfg, runs),
    }
    print(json.dumps(record), flush=True)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**record, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
