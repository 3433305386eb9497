"""The best checkpoint: a run that learned and then lost it keeps what it had. The best
evaluation's checkpoint survives pruning, loads with its own weights, and ``robot-rl eval
--checkpoint best`` scores it; the latest stays what resume continues from."""

from __future__ import annotations

import json

import pytest
import torch
from learner_helpers import sac_factory, small_sac

from robot_rl.core.batch import ObsLayout
from robot_rl.learner.checkpoint import (
    BEST,
    CheckpointError,
    TrainerState,
    load_best_checkpoint,
    load_latest_checkpoint,
    mark_best,
    read_best,
    save_checkpoint,
)

LAYOUT = ObsLayout(4, {})


def _agent():
    return sac_factory(small_sac())(LAYOUT, 2)


def _weights(agent) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in agent.trainable_state().items()}


def _same(agent, want) -> bool:
    got = agent.trainable_state()
    return all(torch.equal(got[k], v) for k, v in want.items())


def test_the_best_evaluation_survives_later_worse_ones(tmp_path):
    run, agent = tmp_path / "run", _agent()
    curve = [(1000, 0.2, -50.0), (2000, 0.9, -10.0), (3000, 0.9, -12.0), (4000, 0.1, -80.0),
             (5000, 0.0, -90.0)]  # fmt: skip
    saved = {}
    for step, sr, ret in curve:
        with torch.no_grad():
            for p in agent.trainable_state().values():
                if p.is_floating_point():
                    p.add_(0.01)
        ckpt = save_checkpoint(run, agent, TrainerState(env_steps=step))
        mark_best(run, ckpt, {"env_steps": step, "success_rate": sr, "mean_return": ret})
        saved[step] = _weights(agent)
    best = read_best(run)
    # 0.9 twice: the higher return (2000) wins
    assert best == {"dir": "step_0000002000", "env_steps": 2000, "success_rate": 0.9,
                    "mean_return": -10.0}  # fmt: skip
    kept = sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir())
    assert kept == ["step_0000002000", "step_0000004000", "step_0000005000"]  # best + 2 newest
    got = load_best_checkpoint(run, fresh := _agent())
    assert got.state.env_steps == 2000 and _same(fresh, saved[2000])
    latest = load_latest_checkpoint(run, fresh := _agent())
    assert latest is not None and latest.state.env_steps == 5000 and _same(fresh, saved[5000])


def test_no_best_yet_and_a_damaged_best_are_clear_errors(tmp_path):
    run, agent = tmp_path / "run", _agent()
    ckpt = save_checkpoint(run, agent, TrainerState(env_steps=10))
    mark_best(run, ckpt, {"env_steps": 10})  # no success rate: not a candidate
    with pytest.raises(CheckpointError, match="no best checkpoint"):
        load_best_checkpoint(run, _agent())
    assert mark_best(run, ckpt, {"env_steps": 10, "success_rate": 0.5, "mean_return": 1.0})
    (ckpt / "weights.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="best checkpoint is unusable.*--checkpoint latest"):
        load_best_checkpoint(run, _agent())
    (run / "checkpoints" / BEST).write_text("{not json")
    assert read_best(run) is None  # (a warning; the next evaluation writes a new record)


def test_train_records_the_best_and_eval_scores_it(tmp_path, capsys):
    from robot_rl.cli.main import main

    run = tmp_path / "run"
    train = ["train", "--task", "reach", "--obs", "state", "--run", str(run), "--steps", "60"]
    train += ["--eval-every-steps", "20", "--eval-episodes", "2", "--random-steps", "60"]
    train += ["--learning-starts", "10", "--batch-size", "8", "--no-progress", "--json"]
    assert main(train) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    evals = [json.loads(s) for s in (run / "eval.jsonl").read_text().splitlines()]
    scores = [(e["success_rate"], e["mean_return"]) for e in evals]
    want = evals[scores.index(max(scores))]  # the first of the best
    best = read_best(run)
    assert best is not None and best["env_steps"] == want["env_steps"]
    assert out["best_eval"] == best
    assert (run / "checkpoints" / best["dir"]).is_dir()
    assert (
        main(["eval", "--run", str(run), "--episodes", "1", "--checkpoint", "best", "--json"]) == 0
    )
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["checkpoint"] == str(run / "checkpoints" / best["dir"])
    assert got["checkpoint_choice"] == "best" and got["env_steps"] == best["env_steps"]
    assert main(["eval", "--run", str(run), "--episodes", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["env_steps"] == 60 and got["checkpoint_choice"] == "latest"
