"""RL with a learned reward on the twin: success after N steps, classifier vs ground truth.

Arms (same demos, seeds, steps and human for each):

- ``dense``: the twin's dense shaped cost (the default of ``robot-rl train``);
- ``truth``: the twin's ground-truth success as the binary cost (``--reward sim``) through the
  same wrapper and k-of-n detector as the classifier: the reference a classifier can at best
  match;
- ``classifier``: a success classifier trained on twin frames (``robot-rl reward frames`` +
  ``reward train``, unless ``--model`` is given), run in process (``--reward rm/``).

Per run: the eval success curve (eval uses the twin's truth), the final and best success, and
what the reward wrapper counted during training: confirmations, false confirmations (the
detector said success, the twin said no) and missed episodes (the twin succeeded, the detector
never confirmed). Summary per arm: mean final success (the issue's "success after N steps"), and
the mean over seeds of the success averaged over the last three evaluations (stricter, less
noisy); the classifier's is compared with the truth's and the dense reward's on both (issue
target: within ``--tolerance`` = 10 points).

Prints one JSON object per run, then the summary object; writes everything to ``--out``.

    python bench/reward_rl.py                                  # 3 seeds x 3 arms (hours)
    python bench/reward_rl.py --seeds 1 --steps 600 --eval-every 300 --arms truth classifier
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sample_efficiency import machine_info  # noqa: E402

ARMS = ("dense", "truth", "classifier")


@dataclass(frozen=True)
class RewardRlBenchConfig:
    """What to measure."""

    task: str = "pick_cube"
    """Twin task (state observations; the classifier reads front + wrist at 64 x 64)."""
    arms: tuple[str, ...] = ARMS
    """dense, truth, classifier."""
    seeds: int = 3
    """Seeds 0 .. seeds-1."""
    steps: int = 6_000
    """Env steps per run."""
    demos: int = 10
    """Scripted demos per seed."""
    eval_every: int = 500
    """Evaluate every this many env steps."""
    eval_episodes: int = 10
    """Episodes per evaluation."""
    human: str = "sim"
    """none, or sim (the simulated human takes over when the policy stalls; HIL-SERL)."""
    model: Path | None = None
    """A trained classifier directory (None: render frames and train one here)."""
    frame_episodes: int = 60
    """Episodes of twin frames for the classifier (without --model)."""
    tolerance: float = 0.1
    """Classifier vs truth: final success within this many points counts as met."""
    out: Path = Path("bench/results/reward_rl.json")
    """Where to write the runs and the summary."""
    work_dir: Path | None = None
    """Keep frames, model, demos and runs here (None: a temporary directory)."""

    def __post_init__(self) -> None:
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"unknown arms {unknown}; choose from {ARMS}")
        if self.human not in ("none", "sim"):
            raise ValueError(f"human must be none or sim, got {self.human!r}")
        if self.seeds < 1 or self.steps < 1 or self.eval_every < 1 or self.demos < 1:
            raise ValueError("seeds, steps, eval_every and demos must be >= 1")


def train_classifier(cfg: RewardRlBenchConfig, root: Path) -> tuple[Path, dict]:
    """Render twin frames and train a classifier on them; returns (model dir, its eval)."""
    from robot_rl.app.rewards.reward import (
        RewardEvalConfig,
        RewardTrainConfig,
        run_reward_eval,
        run_reward_train,
    )
    from robot_rl.app.rewards.reward_frames import RewardFramesConfig, run_reward_frames

    frames, model = root / "frames.zarr", root / "rm"
    if not frames.exists():
        run_reward_frames(
            RewardFramesConfig(out=frames, task=cfg.task, episodes=cfg.frame_episodes),
            progress=False,
        )
    if not (model / "card.json").exists():
        run_reward_train(RewardTrainConfig(frames=frames, out=model), progress=False)
    return model, run_reward_eval(RewardEvalConfig(model=model))


def run_one(cfg: RewardRlBenchConfig, arm: str, seed: int, model: Path, root: Path) -> dict:
    """Train one (arm, seed) and read its eval log."""
    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
    from robot_rl.app.training.train import TrainCmdConfig, run_train

    env = LearnerEnvConfig(task=cfg.task, obs="state")
    demos = root / f"demos_{seed}.zarr"
    if not demos.exists():
        run_collect(
            CollectConfig(env=env, out=demos, episodes=cfg.demos, seed=2_000_000 + 1000 * seed),
            progress=False,
        )
    reward = {"dense": None, "truth": Path("sim"), "classifier": model}[arm]
    run = root / f"run_{arm}_{seed}"
    t0 = time.perf_counter()
    res = run_train(
        TrainCmdConfig(
            run=run,
            env=env,
            demos=demos,
            steps=cfg.steps,
            seed=seed,
            eval_every_steps=cfg.eval_every,
            eval_episodes=cfg.eval_episodes,
            progress=False,
            human=cfg.human,  # type: ignore[arg-type]
            reward=reward,
        )
    )
    wall = time.perf_counter() - t0
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines() if s.strip()]
    stats = res.get("reward_stats", {})
    conf = stats.get("confirmations", 0)
    return {
        "arm": arm,
        "seed": seed,
        "env_steps": res["env_steps"],
        "episodes": res["episodes"],
        "final_success": evals[-1]["success_rate"],
        "last3_success": sum(e["success_rate"] for e in evals[-3:]) / len(evals[-3:]),
        "best_success": max(e["success_rate"] for e in evals),
        "curve": [(e["env_steps"], e["success_rate"]) for e in evals],
        "interventions": res["interventions"],
        "reward_stats": stats,
        "false_success_rate": (stats.get("false_confirmations", 0) / conf) if conf else None,
        "train_wall_s": wall,
    }


def summarize(cfg: RewardRlBenchConfig, runs: list[dict]) -> dict:
    """Mean final success per arm; the classifier's gap to the truth and to the dense reward."""
    import numpy as np

    per_arm = {}
    for arm in cfg.arms:
        rs = [r for r in runs if r["arm"] == arm]
        fs = [r["final_success"] for r in rs]
        l3 = [r["last3_success"] for r in rs]
        conf = sum(r["reward_stats"].get("confirmations", 0) for r in rs)
        false = sum(r["reward_stats"].get("false_confirmations", 0) for r in rs)
        per_arm[arm] = {
            "seeds": len(rs),
            "mean_final_success": float(np.mean(fs)) if fs else None,
            "mean_last3_success": float(np.mean(l3)) if l3 else None,
            "mean_best_success": float(np.mean([r["best_success"] for r in rs])) if rs else None,
            "confirmations": conf,
            "false_confirmations": false,
            "false_success_rate": false / conf if conf else None,
        }
    out: dict = {"per_arm": per_arm}
    # The measure is the success after N steps (the final evaluation); the mean of the
    # last three evaluations is stricter and less noisy (one evaluation of 10 episodes jumps by
    # 0.3-0.5 between neighbours while a policy is being learned). Both are reported.
    for measure in ("final", "last3"):
        c = per_arm.get("classifier", {}).get(f"mean_{measure}_success")
        for ref in ("truth", "dense"):
            r = per_arm.get(ref, {}).get(f"mean_{measure}_success")
            if c is not None and r is not None:
                out[f"classifier_minus_{ref}_{measure}"] = c - r
                out[f"within_tolerance_of_{ref}_{measure}"] = c >= r - cfg.tolerance - 1e-9
    return out


def main(argv: list[str] | None = None) -> int:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    import tyro

    cfg = tyro.cli(RewardRlBenchConfig, args=argv)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(cfg.work_dir) if cfg.work_dir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        model, model_eval = (Path(cfg.model), None) if cfg.model else (None, None)
        if "classifier" in cfg.arms:
            if model is None:
                model, model_eval = train_classifier(cfg, root)
            else:
                from robot_rl.app.rewards.reward import RewardEvalConfig, run_reward_eval

                model_eval = run_reward_eval(RewardEvalConfig(model=model))
            print(json.dumps({"classifier": model_eval}), flush=True)
        for seed in range(cfg.seeds):
            for arm in cfg.arms:
                r = run_one(cfg, arm, seed, model or Path(), root)
                runs.append(r)
                print(json.dumps(r), flush=True)
    record = {
        "benchmark": "reward_rl",
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "machine": machine_info(),
        "classifier_eval": model_eval,
        "summary": summarize(cfg, runs),
    }
    print(json.dumps(record), flush=True)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**record, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
