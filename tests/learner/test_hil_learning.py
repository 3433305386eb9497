"""Learning with a simulated human in the twin: with the human intervening (hil-serl routing),
success rises faster than without, same seed and budget. Through the CLI layer (`--human sim`).

CI: state reach, no demos, 1000 env steps (about a minute per run). Slow: pick_cube."""

from __future__ import annotations

import json

import pytest

from robot_rl.app.envs.collect import LearnerEnvConfig
from robot_rl.app.training.train import TrainCmdConfig, run_train


def _curve(tmp_path, name: str, task: str, human: str, steps: int, eval_every: int, **kw):
    run = tmp_path / name
    res = run_train(
        TrainCmdConfig(
            run=run,
            env=LearnerEnvConfig(task=task, obs="state"),
            steps=steps,
            seed=0,
            random_steps=300,
            eval_every_steps=eval_every,
            eval_episodes=10,
            progress=False,
            human=human,
            intervention_mode="hil-serl",
            **kw,
        )
    )
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    return res, [e["success_rate"] for e in evals]


def test_state_reach_learns_faster_with_a_simulated_human(tmp_path):
    res_h, hil = _curve(tmp_path, "hil", "reach", "sim", 1000, 250)
    res_n, base = _curve(tmp_path, "none", "reach", "none", 1000, 250)
    assert res_h["interventions"] > 0 and res_n["interventions"] == 0
    assert hil[-1] >= 0.6, (hil, base)
    assert sum(hil) > sum(base), (hil, base)


@pytest.mark.slow
def test_state_pick_cube_learns_faster_with_a_simulated_human(tmp_path):
    """No demos, 6k env steps each (about 5 min per run on 2 cores)."""
    res_h, hil = _curve(tmp_path, "hil", "pick_cube", "sim", 6000, 1000)
    _, base = _curve(tmp_path, "none", "pick_cube", "none", 6000, 1000)
    assert res_h["interventions"] > 0
    assert max(hil) >= 0.5, (hil, base)
    assert sum(hil) > sum(base) + 1.0, (hil, base)
