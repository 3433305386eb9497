"""Bad checkpoints on disk: a truncated, altered or missing file is found by its checksum,
reported with its path, and resume / eval fall back to the previous complete checkpoint (saying
which); none complete is a clear error; checkpoints from before checksums still load. Every
stored file is hashed before and after: nothing is lost or changed. Tiny real agents and the
real embedded trainer on a foreign env; the damage is done to the files."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from learner_helpers import PointEnv, sac_factory, small_sac

from robot_rl.core.batch import ObsLayout
from robot_rl.learner.checkpoint import (
    CHECKSUMS,
    CheckpointError,
    TrainerState,
    latest_checkpoint,
    load_latest_checkpoint,
    read_best,
    save_checkpoint,
)
from robot_rl.learner.config import TrainConfig
from robot_rl.learner.loop import Trainer

LAYOUT = ObsLayout(4, {})
CKPT_LOG = "robot_rl.learner.checkpoint"


def tree_digest(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path``, by relative path."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _agent(seed: int = 0):
    return sac_factory(small_sac(), seed=seed)(LAYOUT, 2)


def _weights(agent) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in agent.trainable_state().items()}


@pytest.fixture()
def run(tmp_path):
    """A run with checkpoints at env steps 100, 200, 300 (two are kept), each with its own
    weights. Returns (run dir, {step: weights saved at that step})."""
    run = tmp_path / "run"
    agent = _agent()
    saved = {}
    for step in (100, 200, 300):
        with torch.no_grad():
            for p in agent.trainable_state().values():
                if p.is_floating_point():
                    p.add_(0.01)
        save_checkpoint(run, agent, TrainerState(env_steps=step, updates=step // 2))
        saved[step] = _weights(agent)
    return run, saved


def _dir(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step_{step:010d}"


def _assert_weights(agent, want: dict[str, torch.Tensor]) -> None:
    got = agent.trainable_state()
    assert set(got) == set(want)
    for k, v in want.items():
        assert torch.equal(got[k], v), k


def test_two_complete_checkpoints_are_kept_with_checksums(run):
    run, saved = run
    dirs = sorted(p.name for p in (run / "checkpoints").iterdir() if p.is_dir())
    assert dirs == ["step_0000000200", "step_0000000300"]
    sums = json.loads((_dir(run, 300) / CHECKSUMS).read_text())["files"]
    on_disk = {p.name for p in _dir(run, 300).iterdir()} - {CHECKSUMS}
    assert set(sums) == on_disk and {"weights.safetensors", "trainer_state.json"} <= on_disk
    assert all(len(v["sha256"]) == 64 and v["bytes"] > 0 for v in sums.values())
    agent = _agent(seed=1)
    got = load_latest_checkpoint(run, agent)
    assert got.path == _dir(run, 300) and got.verified and got.skipped == ()
    assert got.state.env_steps == 300 and got.state.updates == 150
    _assert_weights(agent, saved[300])
    with pytest.raises(ValueError, match="keep must be >= 2"):
        save_checkpoint(run, agent, TrainerState(env_steps=400), keep=1)


def _truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip(f: Path) -> None:
    b = bytearray(f.read_bytes())
    b[len(b) - 5] ^= 0x01  # one bit, inside the tensor data (the header is at the start)
    f.write_bytes(bytes(b))


DAMAGE = {
    "truncated weights": ("weights.safetensors", _truncate, "bytes but"),
    "flipped bit in optimiser": ("optim.safetensors", _flip, "differs from what was written"),
    "flipped bit in trainer state": ("trainer_state.json", _flip, "differs from what"),
    "deleted meta": ("meta.json", Path.unlink, "is missing"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_latest_falls_back_to_the_previous(run, caplog, damage):
    run, saved = run
    fname, do, what = DAMAGE[damage]
    do(_dir(run, 300) / fname)
    before = tree_digest(run)
    agent = _agent(seed=1)
    with caplog.at_level(logging.WARNING, logger=CKPT_LOG):
        got = load_latest_checkpoint(run, agent)
    assert got.path == _dir(run, 200) and got.state.env_steps == 200
    _assert_weights(agent, saved[200])
    (why,) = got.skipped
    assert str(_dir(run, 300) / fname) in why and what in why, why
    assert f"using checkpoint {_dir(run, 200)} (env step 200)" in caplog.text
    assert str(_dir(run, 300) / fname) in caplog.text
    assert latest_checkpoint(run) == _dir(run, 200)
    assert tree_digest(run) == before  # the damaged checkpoint is left as it is


def test_pointer_to_a_missing_or_garbled_checkpoint(run, caplog):
    run, saved = run
    (run / "checkpoints" / "latest.json").write_text('{"dir": "step_00')  # torn write
    with caplog.at_level(logging.WARNING, logger=CKPT_LOG):
        got = load_latest_checkpoint(run, _agent())
    assert got.path == _dir(run, 300) and "latest.json is damaged" in caplog.text
    (run / "checkpoints" / "latest.json").write_text('{"dir": "step_0000000400"}')
    got = load_latest_checkpoint(run, _agent())
    assert got.path == _dir(run, 300)
    assert got.skipped == (f"checkpoint {_dir(run, 400)} is missing",)


def test_no_complete_checkpoint_is_a_clear_error(run):
    run, _ = run
    _truncate(_dir(run, 300) / "weights.safetensors")
    _flip(_dir(run, 200) / "optim.safetensors")
    before = tree_digest(run)
    with pytest.raises(CheckpointError) as err:
        load_latest_checkpoint(run, _agent())
    msg = str(err.value)
    assert f"{run / 'checkpoints'} has no complete checkpoint" in msg
    assert str(_dir(run, 300) / "weights.safetensors") in msg
    assert str(_dir(run, 200) / "optim.safetensors") in msg
    assert "Nothing was changed" in msg and "start a new run" in msg
    assert tree_digest(run) == before
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        latest_checkpoint(run)


def test_checkpoints_without_checksums_still_load(run, caplog):
    """Runs from before checksums: loaded unverified, said at info level; a file that no longer
    parses is still caught (the previous one is used)."""
    run, saved = run
    for step in (200, 300):
        (_dir(run, step) / CHECKSUMS).unlink()
    agent = _agent(seed=1)
    with caplog.at_level(logging.INFO, logger=CKPT_LOG):
        got = load_latest_checkpoint(run, agent)
    assert got.path == _dir(run, 300) and not got.verified
    assert f"{_dir(run, 300)}: no checksum" in caplog.text
    _assert_weights(agent, saved[300])
    _truncate(_dir(run, 300) / "weights.safetensors")
    before = tree_digest(run)
    got = load_latest_checkpoint(run, agent)
    assert got.path == _dir(run, 200)
    assert got.skipped[0].startswith(f"{_dir(run, 300) / 'weights.safetensors'} cannot be parsed")
    _assert_weights(agent, saved[200])
    assert tree_digest(run) == before


def test_resume_falls_back_and_keeps_a_complete_fallback(tmp_path, caplog):
    """The embedded trainer: resume past a damaged latest checkpoint, train on, and the next
    checkpoints never delete the damaged one nor leave only it as the fallback."""
    run = tmp_path / "run"

    def trainer(total: int, resume: bool) -> Trainer:
        cfg = TrainConfig(
            total_env_steps=total,
            batch_size=16,
            random_steps=40,
            learning_starts=32,
            eval_every_steps=50,
            eval_episodes=1,
            progress=False,
        )
        return Trainer(PointEnv(), PointEnv(), cfg, sac_factory(small_sac()), run, resume=resume)

    trainer(100, False).run()
    assert latest_checkpoint(run) == _dir(run, 100)
    _flip(_dir(run, 100) / "weights.safetensors")
    damaged = tree_digest(_dir(run, 100))
    prev = tree_digest(_dir(run, 50))
    t = trainer(150, True)
    with caplog.at_level(logging.WARNING, logger=CKPT_LOG):
        t.open()
    assert t.core.restored_from == _dir(run, 50)
    assert (
        t.state.updates == json.loads((_dir(run, 50) / "trainer_state.json").read_text())["updates"]
    )
    assert f"using checkpoint {_dir(run, 50)}" in caplog.text
    assert t.state.env_steps == 100  # the log holds every step: the counters follow it
    res = t.run()
    assert res.env_steps == 150 and res.checkpoint == str(_dir(run, 150))
    assert tree_digest(_dir(run, 100)) == damaged and tree_digest(_dir(run, 50)) == prev
    assert latest_checkpoint(run) == _dir(run, 150)
    shutil.rmtree(_dir(run, 150))  # the newest lost too: the complete fallback is still there
    assert load_latest_checkpoint(run, _agent_like(t)).path == _dir(run, 50)


def _agent_like(t: Trainer):
    return sac_factory(small_sac())(t.layout, t.action_dim)


def test_eval_cli_uses_the_previous_checkpoint_and_says_so(tmp_path, capsys):
    from robot_rl.cli.main import main

    run = tmp_path / "run"
    train = ["train", "--task", "reach", "--obs", "state", "--run", str(run), "--steps", "20"]
    train += ["--eval-every-steps", "10", "--eval-episodes", "1", "--random-steps", "20"]
    assert main([*train, "--learning-starts", "10", "--batch-size", "8", "--no-progress"]) == 0
    _flip(_dir(run, 20) / "weights.safetensors")
    before = tree_digest(run / "checkpoints")
    assert main(["eval", "--run", str(run), "--episodes", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["checkpoint"] == str(_dir(run, 10)) and got["env_steps"] == 10
    (why,) = got["checkpoints_skipped"]
    assert str(_dir(run, 20) / "weights.safetensors") in why
    _flip(_dir(run, 10) / "optim.safetensors")
    # the best evaluation's checkpoint is kept too (checkpoint.mark_best): damage it as well
    best = run / "checkpoints" / read_best(run)["dir"]
    if best not in (_dir(run, 10), _dir(run, 20)):
        _flip(best / "optim.safetensors")
    assert main(["eval", "--run", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "CheckpointError" in err and "has no complete checkpoint" in err
    assert str(_dir(run, 10) / "optim.safetensors") in err
    _flip(_dir(run, 10) / "optim.safetensors")  # flipped back: as before the test
    if best not in (_dir(run, 10), _dir(run, 20)):
        _flip(best / "optim.safetensors")
    assert tree_digest(run / "checkpoints") == before
