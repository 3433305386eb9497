"""What acting late costs a trained policy: its success on the direct twin when each action
lands ``delay`` into its control period. One JSON object.

    MUJOCO_GL=osmesa python bench/action_latency.py --run runs/rehearsal/learner \
        --delays-ms 0 25 50 75 --episodes 50

Over ROS 2 in real time, an action is computed from an observation that is already some ms old
(render, transport), the policy's and the classifier's time is added, and the twin executes it
at its next state period; meanwhile the arm keeps moving toward the previous target. The direct
twin waits for the policy: the action acts for the whole period. The rehearsal's final policy
scored 47/50 on the direct twin and 35/50 over ROS 2; this bench asks how much of that gap the
latency alone explains, on the direct twin, with nothing else changed: ``eval
--action-delay-ms`` (:class:`sim.robot.SimRobot`'s ``action_delay_s``) applies each new target
after ``delay`` of physics under the previous one, and the period ends as usual.

Pass the rehearsal's ``final_eval_ros_mean_action_age_s`` (report.json) to compare: that age
includes the observation's own age, which here is 0.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_efficiency import machine_info  # noqa: E402


@dataclass(frozen=True)
class Config:
    run: Path
    """A run directory (a learner's or train's) with checkpoints."""
    delays_ms: tuple[float, ...] = (0.0, 25.0, 50.0, 75.0)
    """Action delays to evaluate, milliseconds (each below one control period)."""
    episodes: int = 50
    """Episodes per delay (the same seeds for every delay)."""
    seed: int = 3_000_000
    """Episode i resets with seed + i (eval's default)."""
    checkpoint: str = "latest"
    """latest or best."""
    out: Path | None = None
    """Append the JSON line here too."""
    notes: str = ""


def main(cfg: Config) -> dict:
    from robot_rl.app.training.evaluate import EvalCmdConfig, run_eval

    rows = []
    for d in cfg.delays_ms:
        t0 = time.perf_counter()
        ecfg = EvalCmdConfig(
            run=cfg.run,
            checkpoint=cfg.checkpoint,
            episodes=cfg.episodes,
            seed=cfg.seed,
            action_delay_ms=d,
        )
        res = run_eval(ecfg)
        rows.append(
            {
                "delay_ms": d,
                "success_rate": res["success_rate"],
                "successes": sum(e["success"] for e in res["per_episode"]),
                "mean_length": res["mean_length"],
                "wall_s": time.perf_counter() - t0,
            }
        )
        print(f"delay {d:g} ms: success {res['success_rate']:.2f}", file=sys.stderr)
    record = {
        "benchmark": "action_latency",
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "machine": machine_info(),
        "figures": {"by_delay": rows},
    }
    line = json.dumps(record)
    print(line)
    if cfg.out is not None:
        with open(cfg.out, "a") as f:
            f.write(line + "\n")
    return record


if __name__ == "__main__":
    main(tyro.cli(Config))
