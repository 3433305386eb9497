"""Sample efficiency of `robot-rl train` (embedded SAC + RLPD demo mixing) on the twin.

For each seed: record ``--demos`` scripted demonstrations, train for ``--steps`` env steps with
an evaluation every ``--eval-every`` steps, and report the env steps at which the eval success
rate first reached ``--target`` (None if never), the final and best success rates, and the
wall-clock time. Prints ONE JSON object (config, machine, per-seed figures and aggregates).

Targets: state <= 10k env steps with 10 demos (stage 2); pixels (stage 8): two 128x128
cameras + proprioception, the frozen EfficientNet-Lite0 with features cached in replay, 10
demos, >= 90% within 20k env steps on 3 of 3 seeds, each run <= 45 min on 2 CPU cores. After
training, the final policy is scored on ``--final-eval-episodes`` (50) episodes
(``robot-rl eval``). ``--plot`` writes every seed's curve into one PNG. ``--stop-after-target
N`` ends a seed once N evaluations in a row reached the target (long pixel runs: the figure is
the steps to the target; the final score is the stopped policy's, ``stopped_at_target`` says
where).

    python bench/sample_efficiency.py --task pick_cube --obs state --seeds 3
    python bench/sample_efficiency.py --task pick_cube --obs pixels --seeds 3 --plot curves.png
    python bench/sample_efficiency.py --task reach --obs state --seeds 3 --steps 3000
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class BenchConfig:
    """What to measure."""

    task: str = "pick_cube"
    """Twin task."""
    arm: str = "fr3"
    """The twin's arm kind (fr3, ur5e)."""
    obs: Literal["state", "pixels"] = "state"
    """Observation mode."""
    seeds: int = 3
    """Seeds first_seed .. first_seed + seeds - 1 (each: own demos, own training run)."""
    first_seed: int = 0
    """The first seed (to run seeds in separate invocations)."""
    steps: int | None = None
    """Env steps per run (None: 10000 for state, 20000 for pixels)."""
    demos: int = 10
    """Scripted demo episodes."""
    eval_every: int = 1000
    """Evaluate every this many env steps."""
    final_eval_episodes: int = 50
    """Episodes of the final score (robot-rl eval on the last checkpoint); 0: none."""
    num_threads: int = 2
    """torch threads of the training process."""
    plot: Path | None = None
    """Write the seeds' learning curves into this PNG."""
    eval_episodes: int = 20
    """Episodes per evaluation."""
    target: float = 0.9
    """Success rate that counts as solved."""
    utd: int | None = None
    """Critic updates per env step (None: the agent default)."""
    encoder: Literal["conv", "efficientnet"] = "efficientnet"
    """Image encoder for pixels."""
    image_size: int = 128
    """Camera image side for pixels, pixels."""
    feature_shift: int = 0
    """Pixels with efficientnet: random shift of the cached feature maps by up to this many
    cells in the update (``EncoderConfig.feature_shift``)."""
    feature_dropout: float = 0.0
    """Pixels with efficientnet: channel dropout of the cached feature maps in the update
    (``EncoderConfig.feature_dropout``)."""
    batch_size: int = 256
    """Batch size."""
    task_reward: Literal["shaped", "sparse"] = "shaped"
    """The twin's shaped cost (privileged) or the sparse success reward (1 on success)."""
    reward_offset: float = 0.0
    """Added to sampled rewards (-1 turns pick_cube's [0, 1] dense reward into a cost)."""
    out_dir: Path | None = None
    """Keep the runs here (None: a temporary directory, removed afterwards)."""
    stop_after_target: int = 0
    """End a seed's training once this many evaluations in a row reached ``--target`` (STOP in
    the run's control file, as a person would end a run that is done); its final score is then
    that policy's. 0: train for all ``--steps``. Steps-to-target is the same either way."""

    def __post_init__(self) -> None:
        if self.stop_after_target < 0:
            raise ValueError("--stop-after-target must be >= 0 (0: never stop early)")


def machine_info() -> dict:
    """CPU model, core count, Python and torch versions."""
    import torch

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": cpu,
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


class TargetWatcher:
    """Writes STOP into ``run``'s control file once the last ``count`` evaluations in its
    ``eval.jsonl`` reached ``target`` (the training loop polls the file every step)."""

    def __init__(self, run: Path, target: float, count: int, poll_s: float = 1.0) -> None:
        import threading

        self.run, self.target, self.count, self.poll_s = Path(run), target, count, poll_s
        self.stopped_at: int | None = None
        """Env steps of the evaluation that ended the run (None: it ran to the end)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="target-watcher", daemon=True)

    def start(self) -> TargetWatcher:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                lines = (self.run / "eval.jsonl").read_text().splitlines()
            except FileNotFoundError:
                continue
            evals = [json.loads(s) for s in lines if s.strip().endswith("}")]
            last = evals[-self.count :]
            if len(last) == self.count and all(e["success_rate"] >= self.target for e in last):
                self.stopped_at = int(last[-1]["env_steps"])
                (self.run / "control").write_text("STOP\n")
                return


def run_seed(cfg: BenchConfig, seed: int, root: Path) -> dict:
    """One seed: collect, train, read the eval log."""
    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
    from robot_rl.app.training.evaluate import EvalCmdConfig, run_eval
    from robot_rl.app.training.train import TrainCmdConfig, run_train

    pixels = cfg.obs == "pixels"
    steps = cfg.steps or (20_000 if pixels else 10_000)
    n_demos = cfg.demos
    env = LearnerEnvConfig(
        task=cfg.task,
        obs=cfg.obs,
        image_size=cfg.image_size,
        task_reward=cfg.task_reward,
        arm=cfg.arm,
    )
    demos = root / f"demos_{seed}.zarr"
    t0 = time.perf_counter()
    run_collect(
        CollectConfig(env=env, out=demos, episodes=n_demos, seed=2_000_000 + 1000 * seed),
        progress=False,
    )
    t1 = time.perf_counter()
    run = root / f"run_{seed}"
    cmd = TrainCmdConfig(
        run=run,
        env=env,
        demos=demos,
        steps=steps,
        seed=seed,
        utd=cfg.utd,
        encoder=cfg.encoder,
        batch_size=cfg.batch_size,
        reward_offset=cfg.reward_offset,
        eval_every_steps=cfg.eval_every,
        eval_episodes=cfg.eval_episodes,
        num_threads=cfg.num_threads,
        progress=False,
    )
    aug = {"feature_shift": cfg.feature_shift, "feature_dropout": cfg.feature_dropout}
    cmd = replace(cmd, sac=replace(cmd.sac, encoder=replace(cmd.sac.encoder, **aug)))
    watcher = None
    if cfg.stop_after_target:
        watcher = TargetWatcher(run, cfg.target, cfg.stop_after_target).start()
    try:
        res = run_train(cmd)
    finally:
        if watcher is not None:
            watcher.close()
    t2 = time.perf_counter()
    final = None
    if cfg.final_eval_episodes:
        final = run_eval(EvalCmdConfig(run=run, episodes=cfg.final_eval_episodes))
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines() if s.strip()]
    solved = next((e["env_steps"] for e in evals if e["success_rate"] >= cfg.target), None)
    return {
        "seed": seed,
        "demos": n_demos,
        "env_steps": res["env_steps"],
        "updates": res["updates"],
        "steps_to_target": solved,
        "final_success": evals[-1]["success_rate"],
        "best_success": max(e["success_rate"] for e in evals),
        "curve": [(e["env_steps"], e["success_rate"]) for e in evals],
        "final_score": None if final is None else final["success_rate"],
        "final_score_episodes": cfg.final_eval_episodes,
        "stopped_at_target": None if watcher is None else watcher.stopped_at,
        "collect_wall_s": t1 - t0,
        "train_wall_s": t2 - t1,
    }


def plot_curves(path: Path, per_seed: list[dict], title: str, target: float) -> None:
    """Every seed's eval success rate vs env steps, one PNG."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.4), dpi=100)
    ax = fig.subplots()
    for s in per_seed:
        xs, ys = zip(*s["curve"], strict=True)
        ax.plot(xs, ys, marker="o", label=f"seed {s['seed']}")
    ax.axhline(target, color="grey", linestyle="--", linewidth=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval success rate")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    import numpy as np
    import tyro

    cfg = tyro.cli(BenchConfig, args=argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(cfg.out_dir) if cfg.out_dir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        per_seed = []
        for seed in range(cfg.first_seed, cfg.first_seed + cfg.seeds):
            per_seed.append(run_seed(cfg, seed, root))
            print(
                f"seed {seed}: {per_seed[-1]['final_success']:.2f} final success", file=sys.stderr
            )
    solved = [s["steps_to_target"] for s in per_seed if s["steps_to_target"] is not None]
    record = {
        "benchmark": "sample_efficiency",
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "machine": machine_info(),
        "per_seed": per_seed,
        "solved_seeds": len(solved),
        "median_steps_to_target": float(np.median(solved)) if solved else None,
        "mean_final_success": float(np.mean([s["final_success"] for s in per_seed])),
        "mean_train_wall_s": float(np.mean([s["train_wall_s"] for s in per_seed])),
    }
    if cfg.plot is not None:
        title = f"{cfg.task} from {cfg.obs}" + (
            f" ({cfg.image_size} px)" if cfg.obs == "pixels" else ""
        )
        plot_curves(cfg.plot, per_seed, title, cfg.target)
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
