"""Sparse-reward suite: tasks x agent configs x seeds, the learner where the robot is.

Every task here learns from a binary success reward and a few scripted demos, with no shaped
reward and (unless named ``+human``) no human:

- twin ``pick_cube``, ``reach``, ``peg_insert``, ``cable_route`` with ``--task-reward sparse``
  (1 on success, else 0), through ``robot-rl train``'s application functions (collect, train);
  ``peg_insert+human`` adds the simulated human (HIL-SERL interventions);
- a twin task with the suffix ``@<arm>`` (``pick_cube@ur5e``) runs on that arm kind of the twin
  (``--arm``: the 6-DoF UR5e-class arm under joint control); default the FR3-class arm;
- a twin task with the suffix ``:shaped`` (``pick_cube:shaped``) learns from the twin's shaped,
  privileged reward instead: the regression check that an agent chosen for sparse rewards does
  not lose the shaped-reward figures;
- ``fetch_pick_place`` (gymnasium-robotics), ``metaworld_pick_place_fresh`` and
  ``metaworld_push_fresh`` (Meta-World, a fresh object / goal layout every episode, as a robot
  meets them), envs we did not write, through the Python ``Trainer`` API
  (``bench/_external_envs.py``). ``metaworld_pick_place`` and ``metaworld_push`` are the same
  tasks on Meta-World MT1's 50 fixed layouts per env (train, eval and demo envs each drew their
  own 50), as the older records measured them.

Configs are named agent settings (``CONFIGS``): ``previous`` is the agent ``robot-rl train``
used before stage 9, ``default`` whatever it uses now; the others are the candidates measured.
Each run appends one JSON record to ``--jsonl`` as soon as it ends (config, machine, curve,
steps to 80% / 90%, best and final success, wall time), so a long suite survives interruption;
``--summarize`` reads the records and prints one JSON object per (task, config) with the
aggregates, writes ``--plot`` (one panel per task) and prints a markdown table on stderr.

    python bench/sparse_suite.py --tasks pick_cube --configs previous default --seeds 3 \
        --jsonl bench/results/sparse_suite.jsonl --jobs 2
    python bench/sparse_suite.py --summarize --jsonl bench/results/sparse_suite.jsonl \
        --plot bench/results/sparse_suite.png
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _suite_configs import (  # noqa: E402
    CONFIGS,
    DEMO_ENV_SEED_OFFSET,
    EVAL_ENV_SEED_OFFSET,
    TWIN_TASKS,
    curve_figures,
    env_settings,
    loop_settings,
    sac_for,
    split_arm,
    steps_for,
    task_reward,
)
from sample_efficiency import machine_info  # noqa: E402

__all__ = ["CONFIGS", "EVAL_ENV_SEED_OFFSET", "SuiteConfig", "run_one", "summarize"]


@dataclass(frozen=True)
class SuiteConfig:
    """What to run (or, with --summarize, what to report)."""

    tasks: tuple[str, ...] = ("pick_cube",)
    """Twin tasks (pick_cube, reach, peg_insert, peg_insert+human; add ``:shaped`` for the
    shaped reward) and external ones (fetch_pick_place, metaworld_pick_place_fresh,
    metaworld_push_fresh; bench/_external_envs.py lists the rest)."""
    configs: tuple[str, ...] = ("previous", "default")
    """Agent configs by name (CONFIGS)."""
    seeds: int = 3
    """Seeds first_seed .. first_seed + seeds - 1 per task and config."""
    first_seed: int = 0
    steps: int | None = None
    """Env steps per run (None: per task, STEPS)."""
    demos: int = 20
    """Scripted demo episodes per run."""
    eval_every: int = 2000
    eval_episodes: int = 10
    jobs: int = 1
    """Runs in parallel (each in its own process with --num-threads torch threads)."""
    num_threads: int = 1
    jsonl: Path = Path("sparse_suite.jsonl")
    """Append one record per finished run here (and read them with --summarize)."""
    summarize: bool = False
    """Only read --jsonl and report (JSON per task and config, markdown table, --plot)."""
    plot: Path | None = None
    keep_runs: Path | None = None
    """Keep the run directories here (None: temporary)."""
    via: str = "api"
    """External tasks: api (the Python Trainer, as bench/_external_envs.py builds them) or cli
    (`robot-rl collect` and `robot-rl train` with `--env _external_envs:robot_rl_bench/<task>-v0`,
    as a user would; fetch_pick_place and the *_fresh tasks, configs default and
    default_offset*-like ones). Use another --jsonl for each."""
    single: str | None = None
    """Internal: run one "task,config,seed" and print its record."""


def run_twin(task: str, config: str, seed: int, cfg: SuiteConfig, root: Path) -> dict:
    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
    from robot_rl.app.training.train import TrainCmdConfig, run_train

    plain, arm = split_arm(task)
    base = plain.partition(":")[0]
    name, human = base.split("+")[0], "sim" if base.endswith("+human") else "none"
    env = LearnerEnvConfig(
        task=name, obs="state", task_reward=task_reward(task), arm=arm, **env_settings(config)
    )
    demos = root / "demos.zarr"
    run_collect(
        CollectConfig(env=env, out=demos, episodes=cfg.demos, seed=2_000_000 + 1000 * seed),
        progress=False,
    )
    cmd = TrainCmdConfig(
        run=root / "run", env=env, demos=demos, steps=cfg.steps or steps_for(task), seed=seed,
        eval_every_steps=cfg.eval_every, eval_episodes=cfg.eval_episodes,
        num_threads=cfg.num_threads, progress=False, human=human, sac=sac_for(config),
        **loop_settings(config),
    )  # fmt: skip
    res = run_train(cmd)
    evals = [json.loads(s) for s in (root / "run" / "eval.jsonl").read_text().splitlines()]
    out = curve_figures([(e["env_steps"], e["success_rate"]) for e in evals])
    out.update(updates=res["updates"], reward_warnings=res["reward_warnings"])
    if human != "none":
        out.update(interventions=res["interventions"], intervened_steps=res["intervened_steps"])
    return out


def run_external(task: str, config: str, seed: int, cfg: SuiteConfig, root: Path) -> dict:
    import _external_envs as ext

    from robot_rl.app.training.compose import agent_factory
    from robot_rl.learner.config import TrainConfig
    from robot_rl.learner.loop import Trainer

    spec = ext.TASKS[task]
    make = spec.make
    if env_settings(config).get("gripper_discretize"):
        if not task.startswith("metaworld"):
            raise SystemExit(f"{config} discretises a gripper whose +1 closes: Meta-World's")
        from robot_rl.wrappers import GripperDiscretize

        def make(s: int):  # the expert's open (0.0) keeps the hand as the reset left it: open
            return GripperDiscretize(spec.make(s))

    env, eval_env = make(seed), make(seed + EVAL_ENV_SEED_OFFSET)
    demo_env = make(seed + DEMO_ENV_SEED_OFFSET)
    demos = ext.expert_demos(spec, demo_env, cfg.demos, seed=2_000_000 + seed)
    sac = sac_for(config)
    tcfg = TrainConfig(
        total_env_steps=cfg.steps or steps_for(task), seed=seed, eval_every_steps=cfg.eval_every,
        eval_episodes=cfg.eval_episodes, num_threads=cfg.num_threads, progress=False,
        eval_seed=1_000_000, **loop_settings(config),
    )  # fmt: skip

    make_agent = agent_factory(sac, seed, "cpu")  # the builder train and learner use
    res = Trainer(env, eval_env, tcfg, make_agent, root / "run", demos=demos).run()
    evals = [json.loads(s) for s in (root / "run" / "eval.jsonl").read_text().splitlines()]
    out = curve_figures([(e["env_steps"], e["success_rate"]) for e in evals])
    out.update(updates=res.updates, reward_warnings=res.reward_warnings, reward=spec.reward)
    return out


CLI_TASKS = ("fetch_pick_place", "metaworld_push_fresh", "metaworld_pick_place_fresh")
"""External tasks whose CLI run is the API run's equal: their make seed does not matter (Fetch
ignores it; a fresh layout comes from each reset's seed), so one ``--env-kwargs`` seed for the
train, evaluation and demo envs gives the episodes the API's three make seeds give."""


def run_external_cli(task: str, config: str, seed: int, cfg: SuiteConfig, root: Path) -> dict:
    """``run_external`` as a user would run it: ``robot-rl collect`` with the task's scripted
    expert (``--policy _external_envs:expert_<task>``), then ``robot-rl train``, both with
    ``--env _external_envs:robot_rl_bench/<task>-v0``, and the API run's settings as flags."""
    import _external_envs as ext

    from robot_rl.learner.config import TrainConfig

    if task not in CLI_TASKS:
        raise SystemExit(f"--via cli runs {', '.join(CLI_TASKS)}, not {task}")
    extra = {k: v for k, v in CONFIGS[config].items() if k != "reward_offset"}
    if not config.startswith("default") or extra:
        raise SystemExit(f"--via cli runs the default agent (+ reward_offset), not {config}")
    env = ["--env", f"_external_envs:{ext.CLI_ID.format(name=task)}",
           "--env-kwargs", json.dumps({"seed": seed})]  # fmt: skip
    if task == "fetch_pick_place":  # the API's ObsAdapter flattens the goal Dict by sorted key
        env += ["--env-state", "achieved_goal", "desired_goal", "observation"]
    here = str(Path(__file__).resolve().parent)
    penv = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH", "")) if p)}  # fmt: skip

    def cli(*args: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", *args, "--json"],
                              capture_output=True, text=True, env=penv)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"robot-rl {args[0]} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    demos = root / "demos.zarr"
    cli("collect", *env, "--policy", f"_external_envs:expert_{task}", "--episodes",
        str(cfg.demos), "--seed", str(2_000_000 + seed), "--out", str(demos))  # fmt: skip
    loop = loop_settings(config)
    args = [*env, "--demos", str(demos), "--steps", str(cfg.steps or steps_for(task)),
            "--seed", str(seed), "--eval-every-steps", str(cfg.eval_every),
            "--eval-episodes", str(cfg.eval_episodes), "--num-threads", str(cfg.num_threads),
            "--learning-starts", str(TrainConfig.learning_starts), "--run", str(root / "run"),
            "--no-progress"]  # fmt: skip
    if "reward_offset" in loop:
        args += ["--reward-offset", str(loop["reward_offset"])]
    res = cli("train", *args)
    evals = [json.loads(s) for s in (root / "run" / "eval.jsonl").read_text().splitlines()]
    out = curve_figures([(e["env_steps"], e["success_rate"]) for e in evals])
    out.update(updates=res["updates"], reward_warnings=res["reward_warnings"],
               reward=ext.TASKS[task].reward, cli_env=env)  # fmt: skip
    return out


def run_one(task: str, config: str, seed: int, cfg: SuiteConfig) -> dict:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if cfg.keep_runs is None else cfg.keep_runs / f"{task}_{config}_{seed}"
        root.mkdir(parents=True, exist_ok=True)
        twin = split_arm(task)[0].partition(":")[0] in TWIN_TASKS
        fn = run_twin if twin else run_external_cli if cfg.via == "cli" else run_external
        figures = fn(task, config, seed, cfg, root)
    return {
        "benchmark": "sparse_suite",
        "task": task,
        "config": config,
        "seed": seed,
        "agent_overrides": CONFIGS[config],
        "settings": {
            "steps": cfg.steps or steps_for(task),
            "demos": cfg.demos,
            "eval_every": cfg.eval_every,
            "eval_episodes": cfg.eval_episodes,
            "num_threads": cfg.num_threads,
            "task_reward": task_reward(task),
            "arm": split_arm(task)[1],
        },  # fmt: skip
        "via": cfg.via,
        "machine": machine_info(),
        "wall_s": time.perf_counter() - t0,
        **figures,
    }


def run_suite(cfg: SuiteConfig) -> None:
    """Every (task, config, seed) not yet in --jsonl, up to --jobs at a time."""
    done = {(r["task"], r["config"], r["seed"]) for r in _records(cfg.jsonl)}
    todo = [
        (t, c, s)
        for s in range(cfg.first_seed, cfg.first_seed + cfg.seeds)
        for t in cfg.tasks
        for c in cfg.configs
        if (t, c, s) not in done
    ]
    for t in cfg.tasks:
        task_reward(t)
    for c in cfg.configs:
        if c not in CONFIGS:
            raise SystemExit(f"unknown config {c!r}; known: {', '.join(CONFIGS)}")
    from rich.progress import Progress

    running: list[tuple[tuple, subprocess.Popen]] = []
    base = [sys.executable, __file__, "--jsonl", str(cfg.jsonl), "--demos", str(cfg.demos),
            "--eval-every", str(cfg.eval_every), "--eval-episodes", str(cfg.eval_episodes),
            "--num-threads", str(cfg.num_threads), "--via", cfg.via]  # fmt: skip
    if cfg.steps is not None:
        base += ["--steps", str(cfg.steps)]
    if cfg.keep_runs is not None:
        base += ["--keep-runs", str(cfg.keep_runs)]
    env = {**os.environ, "OMP_NUM_THREADS": str(cfg.num_threads)}
    with Progress(transient=False) as bar:
        job = bar.add_task(f"sparse suite ({len(todo)} runs)", total=len(todo))
        while todo or running:
            while todo and len(running) < cfg.jobs:
                key = todo.pop(0)
                argv = [*base, "--single", ",".join(map(str, key))]
                running.append((key, subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)))
            time.sleep(1.0)
            for item in list(running):
                key, proc = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                out = proc.stdout.read().decode() if proc.stdout else ""
                bar.advance(job)
                if proc.returncode != 0:
                    bar.console.print(f"{key}: FAILED (exit {proc.returncode})")
                    continue
                rec = json.loads(out.strip().splitlines()[-1])
                with open(cfg.jsonl, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                bar.console.print(
                    f"{key}: best {rec['best_success']:.2f} final {rec['final_success']:.2f} "
                    f"90% at {rec['steps_to_90']} ({rec['wall_s'] / 60:.1f} min)"
                )


def _records(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    return [json.loads(s) for s in Path(path).read_text().splitlines() if s.strip()]


def summarize(cfg: SuiteConfig) -> list[dict]:
    """One aggregate per (task, config) of the records in --jsonl; the table; the plot."""
    import numpy as np

    recs = _records(cfg.jsonl)
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in recs:
        groups.setdefault((r["task"], r["config"]), []).append(r)
    out = []
    for (task, config), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["seed"])
        to90 = [r["steps_to_90"] for r in rs]
        to80 = [r["steps_to_80"] for r in rs]
        out.append({
            "benchmark": "sparse_suite_summary",
            "task": task,
            "config": config,
            "via": sorted({r.get("via", "api") for r in rs}),
            "agent_overrides": rs[0]["agent_overrides"],
            "settings": rs[0]["settings"],
            "machine": rs[0]["machine"],
            "seeds": [r["seed"] for r in rs],
            "steps_to_90": to90,
            "steps_to_80": to80,
            "solved_90": sum(s is not None for s in to90),
            "best_success": [r["best_success"] for r in rs],
            "final_success": [r["final_success"] for r in rs],
            "final_within_0.1_of_best": all(
                r["final_success"] >= r["best_success"] - 0.1 for r in rs
            ),
            "mean_wall_min": float(np.mean([r["wall_s"] for r in rs]) / 60),
        })  # fmt: skip
    lines = ["| task | config | seeds | 90% at (env steps) | best | final | wall min |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for s in out:
        fmt = ", ".join("-" if x is None else f"{x / 1000:g}k" for x in s["steps_to_90"])
        lines.append(
            f"| {s['task']} | {s['config']} | {len(s['seeds'])} | {fmt} | "
            f"{', '.join(f'{x:.1f}' for x in s['best_success'])} | "
            f"{', '.join(f'{x:.1f}' for x in s['final_success'])} | {s['mean_wall_min']:.0f} |"
        )
    print("\n".join(lines), file=sys.stderr)
    if cfg.plot is not None:
        _plot(cfg.plot, recs)
    return out


def _plot(path: Path, recs: list[dict], cols: int = 4) -> None:
    """One panel per task (``cols`` a row): per config the mean success over its seeds, shaded
    from the worst seed to the best at each evaluation."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    tasks = sorted({r["task"] for r in recs})
    configs = sorted({r["config"] for r in recs})
    # one colour per config, the same in every panel (tab20's pairs are light / dark of a hue,
    # too close for two configs side by side: tab10 while it suffices)
    palette = matplotlib.colormaps["tab10" if len(configs) <= 10 else "tab20"]
    colors = {c: palette(i % palette.N) for i, c in enumerate(configs)}
    cols = min(cols, len(tasks))
    rows = -(-len(tasks) // cols)
    fig = Figure(figsize=(4.6 * cols, 4.0 * rows), dpi=100)
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    for ax, task in zip(axes, tasks, strict=False):
        for config in configs:  # mean over seeds, the band from the worst to the best seed
            curves = [dict(r["curve"]) for r in recs if (r["task"], r["config"]) == (task, config)]
            if not curves:
                continue
            xs = sorted(set.intersection(*(set(c) for c in curves)))
            ys = np.array([[c[x] for x in xs] for c in curves])  # (seeds, evals)
            label = f"{config} ({len(curves)} seed{'s' if len(curves) > 1 else ''})"
            single = len(curves) == 1  # a one-seed screen: thin and dashed
            ax.plot(
                xs, ys.mean(0), color=colors[config], marker="." if not single else None,
                linestyle="--" if single else "-", linewidth=1.0 if single else 1.8, label=label,
            )  # fmt: skip
            if len(curves) > 1:
                ax.fill_between(xs, ys.min(0), ys.max(0), color=colors[config], alpha=0.15)
        ax.axhline(0.9, color="grey", linestyle="--", linewidth=1)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{task.partition(':')[0]} ({task_reward(task)} reward)")
        ax.set_xlabel("env steps")
        ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}k")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    for row in grid:
        row[0].set_ylabel("eval success rate")
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    import tyro

    cfg = tyro.cli(SuiteConfig, args=argv)
    if cfg.single is not None:
        import torch

        torch.set_num_threads(cfg.num_threads)
        task, config, seed = cfg.single.split(",")
        print(json.dumps(run_one(task, config, int(seed), cfg)), flush=True)
        return 0
    if not cfg.summarize:
        run_suite(cfg)
    for s in summarize(cfg):
        print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
