"""The hard tasks' scripted experts and degenerate policies (stage 14): success from randomised
starts, per task and twin arm, with the default scene randomisation and with friction scaled
per episode. Prints one JSON object per (task, arm, friction, policy).

    python bench/hard_tasks.py                       # plug_insert, assemble, cable_route; fr3
    python bench/hard_tasks.py --arms fr3 ur5e --episodes 50 --jsonl bench/results/hard_tasks.jsonl

Policies: ``scripted`` (the task's expert: what demonstrations and the simulated human do),
``hover`` (zero actions), ``random`` (uniform actions): the last two must never succeed (with
the gripper where the learner env holds it on a task that fixes it: cable_route's closed). Figures:
success rate, failure rate, mean episode length, and for the expert the episodes' lengths
(min, median, max). No timing is asserted anywhere; wall time is reported for the record.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro
from sim_speed import machine_info  # bench/ is the script's directory

from robot_rl.core import keys

HARD_TASKS = ("plug_insert", "assemble", "cable_route")


@dataclass(frozen=True)
class Config:
    tasks: tuple[str, ...] = HARD_TASKS
    """Tasks to run."""
    arms: tuple[str, ...] = ("fr3",)
    """Twin arms to run them on."""
    episodes: int = 50
    """Episodes per scripted row (seeds 0..episodes-1)."""
    baseline_episodes: int = 10
    """Episodes per hover / random row."""
    frictions: tuple[str, ...] = ("1,1", "0.6,1.4")
    """Friction scale ranges (low,high) drawn per episode: the default (none) and a spread."""
    jsonl: Path | None = None
    """Append the rows to this file too."""


def run(task: str, arm: str, friction: tuple[float, float], policy: str, episodes: int) -> dict:
    from robot_rl.app.envs.build import make_env
    from robot_rl.core.config import EnvConfig
    from sim.backend import task_info
    from sim.config import RandomizationConfig, SimConfig

    info = task_info(task, arm)
    env_cfg = EnvConfig(
        control_rotation=True,
        action_scale_m=info.action_scale_m,
        max_episode_steps=info.max_episode_steps,
    )
    sim_cfg = SimConfig(
        cameras=(), arm=arm, randomization=RandomizationConfig(friction_scale=friction)
    )
    env, backend = make_env(task, env_cfg, sim_cfg)
    expert = backend.make_expert()
    rng = np.random.default_rng(0)
    wins = fails = 0
    lengths = []
    t0 = time.perf_counter()
    try:
        for seed in range(episodes):
            obs, inf = env.reset(seed=seed)
            expert.reset(np.random.default_rng(seed))
            steps = 0
            for _ in range(info.max_episode_steps):
                steps += 1
                if policy == "scripted":
                    a = expert.act(obs, inf)
                elif policy == "hover":
                    a = np.zeros(env_cfg.action_dim, np.float32)
                else:
                    a = rng.uniform(-1, 1, env_cfg.action_dim).astype(np.float32)
                if policy != "scripted" and info.fixed_gripper is not None:
                    a[-1] = 2.0 * info.fixed_gripper - 1.0  # as the learner env holds it
                obs, _, term, trunc, inf = env.step(a)
                if term or trunc:
                    break
            wins += bool(inf[keys.INFO_SUCCESS])
            fails += bool(term and not inf[keys.INFO_SUCCESS])
            lengths.append(steps)
    finally:
        env.close()
        backend.close()
    return {
        "benchmark": "hard_task_policy",
        "config": {
            "task": task,
            "arm": arm,
            "policy": policy,
            "episodes": episodes,
            "friction_scale": list(friction),
            "max_episode_steps": info.max_episode_steps,
            "control_rotation": True,
        },
        "machine": machine_info(),
        "success_rate": wins / episodes,
        "failure_rate": fails / episodes,
        "mean_length": float(np.mean(lengths)),
        "length_min_median_max": [int(min(lengths)), float(np.median(lengths)), int(max(lengths))],
        "wall_s": time.perf_counter() - t0,
    }


def main(cfg: Config) -> None:
    for task in cfg.tasks:
        for arm in cfg.arms:
            for fr in cfg.frictions:
                lo, hi = (float(x) for x in fr.split(","))
                rows = [run(task, arm, (lo, hi), "scripted", cfg.episodes)]
                if fr == cfg.frictions[0]:
                    for policy in ("hover", "random"):
                        rows.append(run(task, arm, (lo, hi), policy, cfg.baseline_episodes))
                for row in rows:
                    line = json.dumps(row)
                    print(line, flush=True)
                    if cfg.jsonl is not None:
                        with open(cfg.jsonl, "a") as f:
                            f.write(line + "\n")
                    print(
                        f"{task} {arm} friction {fr} {row['config']['policy']}: "
                        f"{row['success_rate']:.2f}",
                        file=sys.stderr,
                    )


if __name__ == "__main__":
    main(tyro.cli(Config))
