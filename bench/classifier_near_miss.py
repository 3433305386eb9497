"""How close to success the labelled near misses must come for a classifier to refuse a
near-threshold lift: the recipe the rehearsal's label step follows (front camera, the arm's
gripper gates), trained on twin-rendered frames with near misses capped below ``margin`` of the
success threshold, scored on one shared test store of near misses capped up to 0.97 of it.

The SO-101's robot days found the gap this measures: the label step's near misses stopped at
most at 0.6 of the lift threshold (1.2 cm of 2 cm on that arm's layout), the policy learned to
lift 1.5-2 cm, and the classifier confirmed those as success (``rehearsal_arms.jsonl``, seed 1).

    python bench/classifier_near_miss.py --arm so101 --episodes 20 60 --margins 0.6 0.95 \
        --jsonl bench/results/classifier_near_miss_so101.jsonl

``--extra-gates "tcp_pose[2]>=0.04"`` adds a state gate on the TCP's height (the SO-101's hand
4 cm up: a 2 cm lift and a little more), which the learned reward then checks live too.

One JSON object per (episodes, margin, seed): the config, the machine, and on the test store
the near-miss episodes the classifier called success (``false_successes``), false-positive
frames, precision, recall and the successes it detected.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_efficiency import machine_info  # noqa: E402

GATES = {
    "so101": ("gripper_pos>=0.6", "gripper_pos<=0.85"),
    "ur5e": ("gripper_pos>=0.45", "gripper_pos<=0.7"),
}
"""The rehearsal's documented reward gates per arm (docs/arms.md)."""
TEST_NEAR_FRACTION, TEST_SEED = 0.75, 777
"""The shared test store: this share of near-miss episodes (the rest successes), this seed."""


def frames(out: Path, arm: str, episodes: int, near: float, margin: float, seed: int) -> dict:
    from robot_rl.app.rewards.reward_frames import RewardFramesConfig, run_reward_frames

    cfg = RewardFramesConfig(
        out=out, task="pick_cube", arm=arm, episodes=episodes, cameras=("front",),
        image_size=128, near_miss_fraction=near, near_miss_margin=margin,
        noisy_fraction=0.0, wander_fraction=0.0, seed=seed,
    )  # fmt: skip
    return run_reward_frames(cfg, progress=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", default="so101", choices=sorted(GATES))
    p.add_argument("--episodes", type=int, nargs="+", default=[20, 60])
    p.add_argument("--margins", type=float, nargs="+", default=[0.6, 0.95])
    p.add_argument("--near-fraction", type=float, default=0.5)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--test-episodes", type=int, default=40)
    p.add_argument("--test-margin", type=float, default=0.97)
    p.add_argument(
        "--extra-gates", nargs="*", default=[],
        help="gates added to the arm's gripper gates, e.g. tcp_pose[2]>=0.04 (the TCP's height)",
    )  # fmt: skip
    p.add_argument("--jsonl", type=Path, default=None, help="also append the records here")
    args = p.parse_args(argv)

    from rewards.train import ClassifierTrainConfig
    from robot_rl.app.rewards.reward import (
        RewardEvalConfig,
        RewardTrainConfig,
        run_reward_eval,
        run_reward_train,
    )
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        test = root / "test.zarr"
        frames(test, args.arm, args.test_episodes, TEST_NEAR_FRACTION, args.test_margin, TEST_SEED)
        test_near_misses = round(TEST_NEAR_FRACTION * args.test_episodes)
        for episodes in args.episodes:
            for margin in args.margins:
                for seed in range(args.seeds):
                    name = f"e{episodes}_m{margin}_s{seed}"
                    store = root / f"{name}.zarr"
                    frames(store, args.arm, episodes, args.near_fraction, margin, 100 + seed)
                    gates = (*GATES[args.arm], *args.extra_gates)
                    train = ClassifierTrainConfig(gates=gates, seed=seed)
                    card = run_reward_train(
                        RewardTrainConfig(frames=store, out=root / name, cameras=("front",),
                                          train=train),
                        progress=False,
                    )  # fmt: skip
                    ev = run_reward_eval(RewardEvalConfig(model=root / name, frames=test))
                    rec = {
                        "benchmark": "classifier_near_miss",
                        "config": {
                            "arm": args.arm,
                            "task": "pick_cube",
                            "camera": "front",
                            "image_size": 128,
                            "gates": list(gates),
                            "train_episodes": episodes,
                            "near_miss_fraction": args.near_fraction,
                            "near_miss_margin": margin,
                            "seed": seed,
                            "test": {
                                "episodes": args.test_episodes,
                                "near_miss_fraction": TEST_NEAR_FRACTION,
                                "near_miss_margin": args.test_margin,
                                "seed": TEST_SEED,
                            },
                        },  # fmt: skip
                        "machine": machine_info(),
                        "figures": {
                            "test_near_miss_episodes": test_near_misses,
                            "false_successes": ev["false_successes"],
                            "false_positive_frames": ev["false_positives"],
                            "precision": round(ev["precision"], 3),
                            "recall": round(ev["recall"], 3),
                            "successes_detected": ev["detected"],
                            "successes_missed": ev["missed"],
                            "threshold": round(card["threshold"], 3),
                        },
                    }
                    line = json.dumps(rec)
                    print(line, flush=True)
                    if args.jsonl is not None:
                        with open(args.jsonl, "a") as f:
                            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
