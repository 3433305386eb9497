"""Sparse-reward suite: tasks x agent configs x seeds, the learner where the robot is.

Every task here learns from a binary success reward and a few scripted demos, with no shaped
reward and (unless named ``+human``) no human:

- twin ``pick_cube``, ``reach``, ``peg_insert`` with ``--task-reward sparse`` (1 on success,
  else 0), through ``robot-rl train``'s application functions (collect, train); ``peg_insert+human``
  adds the simulated human (HIL-SERL interventions);
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

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sample_efficiency import machine_info  # noqa: E402

EVAL_ENV_SEED_OFFSET, DEMO_ENV_SEED_OFFSET = 10_000, 20_000
"""An external task's eval env and demo env are made with the run's seed plus these
(``bench/goal_map.py`` rebuilds the eval env with it)."""

TWIN_TASKS = ("pick_cube", "reach", "peg_insert", "peg_insert+human")
"""Twin tasks (sparse reward); each also as ``task:shaped``."""

_NBE = {"init_temperature": 0.01, "backup_entropy": False}
"""No entropy bonus in the critic's target and a small initial temperature (HIL-SERL's real-robot
setting: backup_entropy False, temperature_init 1e-2)."""
_BC = {"bc_weight": 1.0, "bc_q_filter": True}
"""Behaviour cloning on demo and intervened rows, Q-filtered (policies.config.SACConfig)."""

CONFIGS: dict[str, dict] = {
    # Every config but "default" overrides plain SACConfig(), so that it stays the same agent
    # whatever robot-rl train's default becomes.
    # robot-rl train's agent before stage 9 (SACConfig with init_temperature 0.1).
    "previous": {"init_temperature": 0.1, "backup_entropy": True, "num_critics": 2},
    "no_backup_entropy": {**_NBE, "num_critics": 2},
    # the same with RLPD's / HIL-SERL's 10-critic ensemble (min over a random 2)
    "ensemble10": {**_NBE, "num_critics": 10},
    "no_backup_entropy_bc": {**_NBE, "num_critics": 2, **_BC},
    "ensemble10_bc": {**_NBE, "num_critics": 10, **_BC},
    # + 3-step returns (SACConfig.n_step; DrQ-v2's setting): sparse rewards reach back faster
    "no_backup_entropy_n3": {**_NBE, "num_critics": 2, "n_step": 3},
    "ensemble10_n3": {**_NBE, "num_critics": 10, "n_step": 3},
    "no_backup_entropy_bc_n3": {**_NBE, "num_critics": 2, **_BC, "n_step": 3},
    # + the reward shifted by +1 per step (TrainConfig.reward_offset, not an agent setting):
    # Fetch's -1/0 cost without termination becomes 0/1, so a failing state is worth 0, where a
    # fresh critic starts, instead of -1 / (1 - gamma) = -100
    "no_backup_entropy_bc_offset1": {**_NBE, "num_critics": 2, **_BC, "reward_offset": 1.0},
    # the default without the Q filter: cloning never stops as the critic comes to rate the
    # policy above the demos
    "no_backup_entropy_bc_noqf": {**_NBE, "num_critics": 2, "bc_weight": 1.0},
    # no Q filter and the Q term normalised (TD3+BC as published: it clones every demo row)
    "no_backup_entropy_bc_noqf_norm": {
        **_NBE,
        "num_critics": 2,
        "bc_weight": 1.0,
        "bc_normalize": True,
    },
    # strong cloning on every demo row (10x the default's weight, no Q filter)
    "no_backup_entropy_bc10_noqf": {**_NBE, "num_critics": 2, "bc_weight": 10.0},
    # the default with the temperature held at >= its initial 0.01 (SACConfig.min_temperature)
    "no_backup_entropy_bc_tfloor": {**_NBE, "num_critics": 2, **_BC, "min_temperature": 0.01},
    # the default with the actor's Q term divided by mean |Q| when above 1 (TD3+BC)
    "no_backup_entropy_bc_norm": {**_NBE, "num_critics": 2, **_BC, "bc_normalize": True},
    # the default with gamma 0.98 (the HER papers' setting for Fetch)
    "no_backup_entropy_bc_g98": {**_NBE, "num_critics": 2, **_BC, "gamma": 0.98},
    # the default with gamma 0.97 (HIL-SERL's and SERL's discount)
    "no_backup_entropy_bc_g97": {**_NBE, "num_critics": 2, **_BC, "gamma": 0.97},
    # the default with the actor maximising the critics' min instead of their mean (a
    # pessimistic actor: less room to exploit an overrating critic)
    "no_backup_entropy_bc_amin": {**_NBE, "num_critics": 2, **_BC, "actor_q": "min"},
    # bc_normalize with gamma 0.98 (Fetch: the two settings that each held 0.8 on seed 0)
    "no_backup_entropy_bc_norm_g98": {
        **_NBE,
        "num_critics": 2,
        **_BC,
        "bc_normalize": True,
        "gamma": 0.98,
    },
    # the default with 2 critic updates per actor update (a critic that keeps up with the
    # policy it rates; RLPD uses 20 with 10 critics)
    "no_backup_entropy_bc_utd2": {**_NBE, "num_critics": 2, **_BC, "utd": 2},
    # bc_normalize with 2 critic updates per actor update
    "no_backup_entropy_bc_norm_utd2": {
        **_NBE,
        "num_critics": 2,
        **_BC,
        "bc_normalize": True,
        "utd": 2,
    },
    # the default with a conservative critic (SACConfig.cql_weight: Q pushed down at the
    # policy's sampled actions, up at the data's), against the critic overrating the policy
    "no_backup_entropy_bc_cql01": {**_NBE, "num_critics": 2, **_BC, "cql_weight": 0.1},
    "no_backup_entropy_bc_cql1": {**_NBE, "num_critics": 2, **_BC, "cql_weight": 1.0},
    # the default with 3x the cloning weight, still Q-filtered
    "no_backup_entropy_bc3": {**_NBE, "num_critics": 2, "bc_weight": 3.0, "bc_q_filter": True},
    # whatever robot-rl train uses today (no overrides)
    "default": {},
    # the default with Cal-QL: the conservative critic, floored at the data's Monte-Carlo
    # returns-to-go (configs named default_* override robot-rl train's agent)
    "default_calql1": {"cql_weight": 1.0, "calql": True},
    "default_calql01": {"cql_weight": 0.1, "calql": True},
    # the default with a third of the actor's learning rate, against the policy oscillating
    # between evaluations (push: 0.9 -> 0.2 -> 0.9 within 6k updates)
    "default_alr1e4": {"actor_lr": 1e-4},
    # the default acting with a running average of the actor's weights (~1000 updates)
    "default_avg1e3": {"policy_average": 1e-3},
    # the default on raw states (TrainConfig.normalize_state off): Meta-World push's puck
    # quaternion barely moves in the demos the normaliser is fitted on, and online it sits
    # 10-300 fitted stds away (clipped at 10) in 17% of states
    "default_nonorm": {"normalize_state": False},
    # the default refitting the normaliser whenever the data has doubled since the last fit
    "default_refit": {"normalize_refit": True},
    # against policy churn (the greedy policy changing on many states per update): the
    # 10-critic ensemble (REDQ: min over 2 drawn per target), a batch twice as large, a third
    # of the critic's learning rate
    "default_e10": {"num_critics": 10},
    "default_b512": {"batch_size": 512},
    "default_clr1e4": {"critic_lr": 1e-4},
    # the actor maximising the min of the critics (not their mean): on push the Q filter kept
    # fewer demo actions as runs fell (0.43 -> 0.14), i.e. the critics rated the policy's own
    # actions above the demos' while it failed
    "default_amin": {"actor_q": "min"},
    # a higher entropy target (0 nats instead of -A/2 = -2 on push): in the runs that fell the
    # entropy was still falling toward -2, the temperature at ~5e-4
    "default_ent0": {"target_entropy": 0.0},
    # a categorical critic (HL-Gauss, Farebrother et al. 2024: cross-entropy on a histogram
    # of the target instead of MSE, reported to keep value networks plastic and stable) on
    # the 0/1 reward's range: Q in [0, 1], support [-0.5, 1.5] in 51 bins
    "default_hlg": {
        "critic_loss": "hl_gauss",
        "hl_v_min": -0.5,
        "hl_v_max": 1.5,
        "hl_num_bins": 51,
    },
    # the default with SimBa's residual critic (pre-LayerNorm residual blocks; BRO's is alike),
    # 256 wide: 2 blocks 4x wide inside as SimBa (~7x the MLP critic's cost per update on this
    # CPU), and a lighter 1 block 2x wide (~2x)
    "default_simba": {"critic_arch": "residual", "critic_blocks": 2, "critic_expand": 4},
    "default_simba_small": {"critic_arch": "residual", "critic_blocks": 1, "critic_expand": 2},
    # SimBa's critic with the blocks' products in bfloat16 (float32 weights, LayerNorms and
    # residual sums): the same networks at a lower cost on a CPU with bfloat16 units
    "default_simba_bf16": {
        "critic_arch": "residual",
        "critic_blocks": 2,
        "critic_expand": 4,
        "critic_block_precision": "bfloat16",
    },
    # the default with CHAIN's churn reduction (Tang & Berseth 2024): each update also pays for
    # moving Q (weight 0.1, CHAIN's MuJoCo setting) and the policy (KL, weight 1) on a second
    # batch away from the networks of one update earlier (~1.5x the default's update cost)
    "default_chain": {"churn_value": 0.1, "churn_policy": 1.0},
    # the same held 10x harder
    "default_chain_strong": {"churn_value": 1.0, "churn_policy": 10.0},
    # the default with CrossQ's critic (batch-renormalised, no target network, one pass over
    # (s, a) and (s', a')): 256 wide (~1.7x the default's update cost on this CPU), and with the
    # published optimiser setting on sb3-contrib's 1024-wide critics (Adam beta1 0.5, learning
    # rates 1e-3; ~10x the cost). Not the policy delay of 3: an update here is one actor update.
    "default_crossq": {"crossq": True},
    "default_crossq_wide": {
        "crossq": True,
        "critic_hidden_dims": (1024, 1024),
        "adam_beta1": 0.5,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
    },
    # the default with the gripper dimension discretised (LearnerEnvConfig.gripper_discretize,
    # an env setting: above 0.5 closes, below -0.5 opens, between keeps the last command), as
    # HIL-SERL and SERL act: a policy's gripper output spread over [-1, 1] is a half-closed hand
    # (the pixel pick_cube rehearsal went 0.28 -> 0.94 with it). Meta-World and twin tasks only
    # (their +1 closes); on a twin task that holds the gripper train refuses it.
    "default_discretize": {"gripper_discretize": True},
}


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


STEPS = {"pick_cube": 20_000, "reach": 5_000, "peg_insert": 10_000, "peg_insert+human": 10_000,
         "fetch_pick_place": 30_000, "metaworld_pick_place": 30_000, "metaworld_push": 30_000,
         "metaworld_push_noterm": 30_000, "metaworld_push_fresh": 20_000,
         "metaworld_pick_place_fresh": 20_000,
         "pick_cube:shaped": 10_000}  # fmt: skip


def _split_arm(task: str) -> tuple[str, str]:
    """``pick_cube@ur5e:shaped`` -> (``pick_cube:shaped``, ``ur5e``); no ``@``: the FR3."""
    head, _, variant = task.partition(":")
    name, _, arm = head.partition("@")
    return name + (f":{variant}" if variant else ""), arm or "fr3"


def _steps(task: str) -> int:
    task = _split_arm(task)[0]
    return STEPS.get(task) or STEPS[task.partition(":")[0]]


def _task_reward(task: str) -> str:
    """``sparse`` unless the twin task is named ``task:shaped``."""
    base, _, variant = _split_arm(task)[0].partition(":")
    if variant not in ("", "shaped") or (variant and base not in TWIN_TASKS):
        raise SystemExit(f"unknown task {task!r}: only twin tasks take ':shaped'")
    return variant or "sparse"


LOOP_KEYS = ("reward_offset", "normalize_state", "normalize_refit", "batch_size")
"""Config keys that set the training loop (TrainConfig), not the agent."""
ENV_KEYS = ("gripper_discretize",)
"""Config keys that set the env (LearnerEnvConfig; external tasks: a wrapper), not the agent."""


def _sac(name: str):
    """The agent of config ``name``: robot-rl train's for "default" (and "default_*", with the
    config's overrides), else plain SACConfig() with the config's overrides."""
    from policies.config import SACConfig
    from robot_rl.app.training.train import TRAIN_SAC

    if name not in CONFIGS:
        raise SystemExit(f"unknown config {name!r}; known: {', '.join(CONFIGS)}")
    base = TRAIN_SAC if name == "default" or name.startswith("default_") else SACConfig()
    agent = {k: v for k, v in CONFIGS[name].items() if k not in LOOP_KEYS + ENV_KEYS}
    return dataclasses.replace(base, **agent)


def _loop(name: str) -> dict:
    """The config's training-loop settings (TrainConfig / TrainCmdConfig fields)."""
    return {k: v for k, v in CONFIGS[name].items() if k in LOOP_KEYS}


def _env_settings(name: str) -> dict:
    """The config's env settings (LearnerEnvConfig fields)."""
    return {k: v for k, v in CONFIGS[name].items() if k in ENV_KEYS}


def _curve_figures(curve: list[tuple[int, float]]) -> dict:
    def first(t: float) -> int | None:
        return next((s for s, r in curve if r >= t), None)

    rates = [r for _, r in curve]
    return {
        "curve": curve,
        "steps_to_80": first(0.8),
        "steps_to_90": first(0.9),
        "best_success": max(rates),
        "final_success": rates[-1],
    }


def run_twin(task: str, config: str, seed: int, cfg: SuiteConfig, root: Path) -> dict:
    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
    from robot_rl.app.training.train import TrainCmdConfig, run_train

    plain, arm = _split_arm(task)
    base = plain.partition(":")[0]
    name, human = base.split("+")[0], "sim" if base.endswith("+human") else "none"
    env = LearnerEnvConfig(
        task=name, obs="state", task_reward=_task_reward(task), arm=arm, **_env_settings(config)
    )
    demos = root / "demos.zarr"
    run_collect(
        CollectConfig(env=env, out=demos, episodes=cfg.demos, seed=2_000_000 + 1000 * seed),
        progress=False,
    )
    cmd = TrainCmdConfig(
        run=root / "run", env=env, demos=demos, steps=cfg.steps or _steps(task), seed=seed,
        eval_every_steps=cfg.eval_every, eval_episodes=cfg.eval_episodes,
        num_threads=cfg.num_threads, progress=False, human=human, sac=_sac(config),
        **_loop(config),
    )  # fmt: skip
    res = run_train(cmd)
    evals = [json.loads(s) for s in (root / "run" / "eval.jsonl").read_text().splitlines()]
    out = _curve_figures([(e["env_steps"], e["success_rate"]) for e in evals])
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
    if _env_settings(config).get("gripper_discretize"):
        if not task.startswith("metaworld"):
            raise SystemExit(f"{config} discretises a gripper whose +1 closes: Meta-World's")
        from robot_rl.wrappers import GripperDiscretize

        def make(s: int):  # the expert's open (0.0) keeps the hand as the reset left it: open
            return GripperDiscretize(spec.make(s))

    env, eval_env = make(seed), make(seed + EVAL_ENV_SEED_OFFSET)
    demo_env = make(seed + DEMO_ENV_SEED_OFFSET)
    demos = ext.expert_demos(spec, demo_env, cfg.demos, seed=2_000_000 + seed)
    sac = _sac(config)
    tcfg = TrainConfig(
        total_env_steps=cfg.steps or _steps(task), seed=seed, eval_every_steps=cfg.eval_every,
        eval_episodes=cfg.eval_episodes, num_threads=cfg.num_threads, progress=False,
        eval_seed=1_000_000, **_loop(config),
    )  # fmt: skip

    make_agent = agent_factory(sac, seed, "cpu")  # the builder train and learner use
    res = Trainer(env, eval_env, tcfg, make_agent, root / "run", demos=demos).run()
    evals = [json.loads(s) for s in (root / "run" / "eval.jsonl").read_text().splitlines()]
    out = _curve_figures([(e["env_steps"], e["success_rate"]) for e in evals])
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
    loop = _loop(config)
    args = [*env, "--demos", str(demos), "--steps", str(cfg.steps or _steps(task)),
            "--seed", str(seed), "--eval-every-steps", str(cfg.eval_every),
            "--eval-episodes", str(cfg.eval_episodes), "--num-threads", str(cfg.num_threads),
            "--learning-starts", str(TrainConfig.learning_starts), "--run", str(root / "run"),
            "--no-progress"]  # fmt: skip
    if "reward_offset" in loop:
        args += ["--reward-offset", str(loop["reward_offset"])]
    res = cli("train", *args)
    evals = [json.loads(s) for s in (root / "run" / "eval.jsonl").read_text().splitlines()]
    out = _curve_figures([(e["env_steps"], e["success_rate"]) for e in evals])
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
        twin = _split_arm(task)[0].partition(":")[0] in TWIN_TASKS
        fn = run_twin if twin else run_external_cli if cfg.via == "cli" else run_external
        figures = fn(task, config, seed, cfg, root)
    return {
        "benchmark": "sparse_suite",
        "task": task,
        "config": config,
        "seed": seed,
        "agent_overrides": CONFIGS[config],
        "settings": {
            "steps": cfg.steps or _steps(task),
            "demos": cfg.demos,
            "eval_every": cfg.eval_every,
            "eval_episodes": cfg.eval_episodes,
            "num_threads": cfg.num_threads,
            "task_reward": _task_reward(task),
            "arm": _split_arm(task)[1],
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
        _task_reward(t)
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
        ax.set_title(f"{task.partition(':')[0]} ({_task_reward(task)} reward)")
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
