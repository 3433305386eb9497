"""The sparse suite's agent configs, task names and per-task settings (``bench/sparse_suite.py``
runs them; ``bench/learner_throughput.py`` and ``bench/goal_map.py`` read them)."""

from __future__ import annotations

import dataclasses

EVAL_ENV_SEED_OFFSET, DEMO_ENV_SEED_OFFSET = 10_000, 20_000
"""An external task's eval env and demo env are made with the run's seed plus these
(``bench/goal_map.py`` rebuilds the eval env with it)."""

TWIN_TASKS = ("pick_cube", "reach", "peg_insert", "peg_insert+human", "cable_route")
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


STEPS = {"pick_cube": 20_000, "reach": 5_000, "peg_insert": 10_000, "peg_insert+human": 10_000,
         "fetch_pick_place": 30_000, "metaworld_pick_place": 30_000, "metaworld_push": 30_000,
         "metaworld_push_noterm": 30_000, "metaworld_push_fresh": 20_000,
         "metaworld_pick_place_fresh": 20_000,
         "pick_cube:shaped": 10_000, "cable_route": 20_000}  # fmt: skip


def split_arm(task: str) -> tuple[str, str]:
    """``pick_cube@ur5e:shaped`` -> (``pick_cube:shaped``, ``ur5e``); no ``@``: the FR3."""
    head, _, variant = task.partition(":")
    name, _, arm = head.partition("@")
    return name + (f":{variant}" if variant else ""), arm or "fr3"


def steps_for(task: str) -> int:
    task = split_arm(task)[0]
    return STEPS.get(task) or STEPS[task.partition(":")[0]]


def task_reward(task: str) -> str:
    """``sparse`` unless the twin task is named ``task:shaped``."""
    base, _, variant = split_arm(task)[0].partition(":")
    if variant not in ("", "shaped") or (variant and base not in TWIN_TASKS):
        raise SystemExit(f"unknown task {task!r}: only twin tasks take ':shaped'")
    return variant or "sparse"


LOOP_KEYS = ("reward_offset", "normalize_state", "normalize_refit", "batch_size")
"""Config keys that set the training loop (TrainConfig), not the agent."""
ENV_KEYS = ("gripper_discretize",)
"""Config keys that set the env (LearnerEnvConfig; external tasks: a wrapper), not the agent."""


def sac_for(name: str):
    """The agent of config ``name``: robot-rl train's for "default" (and "default_*", with the
    config's overrides), else plain SACConfig() with the config's overrides."""
    from policies.config import SACConfig
    from robot_rl.app.training.train import TRAIN_SAC

    if name not in CONFIGS:
        raise SystemExit(f"unknown config {name!r}; known: {', '.join(CONFIGS)}")
    base = TRAIN_SAC if name == "default" or name.startswith("default_") else SACConfig()
    agent = {k: v for k, v in CONFIGS[name].items() if k not in LOOP_KEYS + ENV_KEYS}
    return dataclasses.replace(base, **agent)


def loop_settings(name: str) -> dict:
    """The config's training-loop settings (TrainConfig / TrainCmdConfig fields)."""
    return {k: v for k, v in CONFIGS[name].items() if k in LOOP_KEYS}


def env_settings(name: str) -> dict:
    """The config's env settings (LearnerEnvConfig fields)."""
    return {k: v for k, v in CONFIGS[name].items() if k in ENV_KEYS}


def curve_figures(curve: list[tuple[int, float]]) -> dict:
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
