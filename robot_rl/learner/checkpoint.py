"""Checkpoints of a run: agent (``policies.io``: safetensors + JSON) plus the trainer's counters
and RNG states (JSON). No pickle anywhere.

Layout under ``run/checkpoints/``::

    step_0000002000/            one checkpoint (agent files from policies.io.save_agent,
        trainer_state.json       plus the trainer's counters and RNG states,
        checksums.json           and the size and sha256 of each of those files, written last)
    latest.json                 {"dir": "step_0000002000"}, replaced atomically last
    best.json                   {"dir": ..., "env_steps", "success_rate", "mean_return"}: the
                                checkpoint with the best evaluation so far (:func:`mark_best`)

A checkpoint directory is complete before ``latest.json`` points at it, so a crash while
writing leaves the previous checkpoint in force. The newest ``keep`` (2) complete ones are kept:
the latest and the one before it (a damaged one is never deleted, nor counted), and the best.

The best checkpoint is the one whose evaluation had the highest success rate (ties: the higher
mean return, then the earlier one): a run that learned and then lost it keeps what it had,
and ``robot-rl eval --checkpoint best`` scores it on fresh episodes. It is chosen on the
periodic evaluations' episodes, so its own evaluation figure is optimistic; the fresh episodes
of ``robot-rl eval`` are not.

Loading (:func:`load_latest_checkpoint`, used by resume and ``robot-rl eval``) verifies every
file against ``checksums.json``; a truncated or altered file (a disk error, an interrupted copy)
is reported with its path and the previous complete checkpoint is used instead, with a warning
that says which. No complete checkpoint left: :class:`CheckpointError`. Checkpoints written
before checksums existed still load (an info line says "no checksum"); for those, damage is
found only where safetensors or JSON cannot parse the file (then the same fallback applies).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from robot_rl.run.rundir import write_json_atomic

CHECKPOINTS = "checkpoints"
LATEST = "latest.json"
BEST = "best.json"
TRAINER_STATE = "trainer_state.json"
CHECKSUMS = "checksums.json"
CHECKSUMS_FORMAT = 1
_STEP_DIR = re.compile(r"step_\d+")

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A run has no usable checkpoint; the message says what is missing."""


class CorruptCheckpointError(CheckpointError):
    """One checkpoint is incomplete or damaged; the message names the file and what differs."""


@dataclass
class TrainerState:
    """Counters and RNG states of the trainer (JSON-able).

    Attributes:
        env_steps: Online env steps taken (over all resumes).
        updates: Learner updates (``agent.update`` calls).
        episodes: Online episodes started.
        evals: Evaluations done.
        np_rngs: Name -> ``numpy.random.Generator.bit_generator.state`` (dicts of ints).
        torch_rngs: Name -> ``torch.Generator.get_state()`` as a list of byte values.
        state_norm: The frozen state normaliser (``StateNormalizer.to_json()``) or None.
    """

    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    evals: int = 0
    np_rngs: dict[str, Any] = field(default_factory=dict)
    torch_rngs: dict[str, list[int]] = field(default_factory=dict)
    state_norm: dict[str, Any] | None = None

    def capture(
        self, np_rngs: dict[str, np.random.Generator], torch_rngs: dict[str, torch.Generator]
    ) -> None:
        """Record the current states of the given generators."""
        self.np_rngs = {k: g.bit_generator.state for k, g in np_rngs.items()}
        self.torch_rngs = {k: g.get_state().tolist() for k, g in torch_rngs.items()}

    def restore(
        self, np_rngs: dict[str, np.random.Generator], torch_rngs: dict[str, torch.Generator]
    ) -> None:
        """Set the given generators to the recorded states (names must match)."""
        for k, g in np_rngs.items():
            if k in self.np_rngs:
                g.bit_generator.state = self.np_rngs[k]
        for k, g in torch_rngs.items():
            if k in self.torch_rngs:
                g.set_state(torch.tensor(self.torch_rngs[k], dtype=torch.uint8))


def save_checkpoint(run_dir: Path, agent: Any, state: TrainerState, keep: int = 2) -> Path:
    """Save ``agent`` (policies.io.save_agent) and ``state`` as a new checkpoint of ``run_dir``,
    with the size and sha256 of every file in ``checksums.json`` (written last, fsynced).

    Args:
        run_dir: The run directory.
        agent: The agent to save.
        state: The trainer's counters and RNG states.
        keep: Checkpoints kept: this one and the ``keep - 1`` newest older ones (at least 2, so
            that a damaged latest one has a fallback).

    Returns:
        The checkpoint directory.
    """
    from policies.io import save_agent

    if keep < 2:
        raise ValueError(f"keep must be >= 2 (the latest and a fallback), got {keep}")
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{state.env_steps:010d}"
    ckpt = root / name
    tmp = root / (name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_agent(agent, tmp)
    write_json_atomic(tmp / TRAINER_STATE, asdict(state), fsync=True)
    files = {}
    for f in sorted(p for p in tmp.iterdir() if p.is_file()):
        with open(f, "rb+") as fh:  # the agent's files reach the disk before the manifest
            os.fsync(fh.fileno())
        files[f.name] = _digest(f)
    write_json_atomic(tmp / CHECKSUMS, {"format": CHECKSUMS_FORMAT, "files": files}, fsync=True)
    if ckpt.exists():
        shutil.rmtree(ckpt)
    os.replace(tmp, ckpt)
    write_json_atomic(root / LATEST, {"dir": name}, fsync=True)
    _prune(root, name, keep)
    return ckpt


def _prune(root: Path, name: str, keep: int) -> None:
    """Remove complete checkpoints older than ``name`` beyond the ``keep - 1`` newest. Damaged
    ones are never removed nor counted (a resume skipped them, see load_latest_checkpoint), so
    the fallback kept is always a complete one; newer ones and the best one are left alone."""
    best = read_best(root.parent)
    spared = best["dir"] if best else None
    complete = []
    for p in sorted(p for p in _step_dirs(root) if p.name < name and p.name != spared):
        try:
            verify_checkpoint(p)
            complete.append(p)
        except CorruptCheckpointError as e:
            log.warning("%s; left in place (delete it once you no longer need it)", e)
    for p in complete[: max(0, len(complete) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)


def eval_score(row: dict[str, Any]) -> tuple[float, float]:
    """How evaluations rank for the best checkpoint: success rate, then mean return."""
    return float(row["success_rate"]), float(row.get("mean_return", float("-inf")))


def read_best(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``best.json`` record, or None (no evaluation yet, or the record is damaged:
    then a warning, and the next evaluation writes a new one)."""
    path = Path(run_dir) / CHECKPOINTS / BEST
    if not path.exists():
        return None
    try:
        best = json.loads(path.read_text())
        eval_score(best)
        str(best["dir"])
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s is damaged (%s); the next evaluation records a new best", path, e)
        return None
    return best


def mark_best(run_dir: Path, ckpt: Path, row: dict[str, Any]) -> bool:
    """Record ``ckpt`` (just saved, evaluated as ``row``) as the best checkpoint if its
    evaluation beats the recorded best's (:func:`eval_score`; a tie keeps the earlier one).

    Returns:
        Whether ``ckpt`` is now the best.
    """
    if "success_rate" not in row:
        return False
    best = read_best(run_dir)
    if best is not None and eval_score(row) <= eval_score(best):
        if (Path(run_dir) / CHECKPOINTS / str(best["dir"])).is_dir():
            return False  # (a best whose directory was deleted by hand is replaced)
    record = {
        "dir": Path(ckpt).name,
        "env_steps": int(row["env_steps"]),
        "success_rate": float(row["success_rate"]),
        "mean_return": float(row.get("mean_return", float("nan"))),
    }
    write_json_atomic(Path(run_dir) / CHECKPOINTS / BEST, record, fsync=True)
    return True


def load_best_checkpoint(run_dir: Path, agent: Any) -> Restored:
    """Load the run's best checkpoint (:func:`mark_best`) into ``agent``.

    Raises:
        CheckpointError: No best recorded yet (no evaluation with a success rate), or the best
            checkpoint is damaged (the message says which file; ``--checkpoint latest`` still
            works).
    """
    best = read_best(run_dir)
    if best is None:
        raise CheckpointError(
            f"{Path(run_dir) / CHECKPOINTS} records no best checkpoint ({BEST}): the run has "
            "no evaluation with a success rate yet. Use the latest checkpoint instead"
        )
    ckpt = Path(run_dir) / CHECKPOINTS / str(best["dir"])
    try:
        verified = verify_checkpoint(ckpt)
        state = load_checkpoint(ckpt, agent, verified=verified)
    except CorruptCheckpointError as e:
        raise CheckpointError(
            f"the best checkpoint is unusable: {e}. The latest checkpoint may still be "
            "(--checkpoint latest)"
        ) from e
    return Restored(ckpt, state, verified)


def _digest(path: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def _step_dirs(root: Path) -> list[Path]:
    """Complete-looking checkpoint directories (``step_<n>``, not ``.partial``), any order."""
    return [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.fullmatch(p.name)]


def verify_checkpoint(ckpt: Path) -> bool:
    """Check every file of ``ckpt`` against its ``checksums.json``.

    Returns:
        True if every file matches; False if the checkpoint has no ``checksums.json`` (written
        before checksums existed: then its files are only checked to parse).

    Raises:
        CorruptCheckpointError: The directory or a file is missing, a file is shorter or longer
            than when it was written (truncated), or its sha256 differs (altered bytes);
            without checksums, a file does not parse.
    """
    ckpt = Path(ckpt)
    if not ckpt.is_dir():
        raise CorruptCheckpointError(f"checkpoint {ckpt} is missing")
    sums = ckpt / CHECKSUMS
    if not sums.exists():
        if not (ckpt / TRAINER_STATE).exists():
            raise CorruptCheckpointError(f"checkpoint {ckpt} is incomplete (no {TRAINER_STATE})")
        _check_parses(ckpt)
        return False
    try:
        files = dict(json.loads(sums.read_text())["files"])
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise CorruptCheckpointError(f"{sums} is damaged ({e})") from e
    for fname, want in files.items():
        f = ckpt / fname
        if not f.is_file():
            raise CorruptCheckpointError(f"{f} is missing")
        got = _digest(f)
        if got["bytes"] != want["bytes"]:
            raise CorruptCheckpointError(
                f"{f} is {got['bytes']} bytes but {want['bytes']} were written (truncated or "
                "damaged copy)"
            )
        if got["sha256"] != want["sha256"]:
            raise CorruptCheckpointError(
                f"{f} differs from what was written (sha256 {got['sha256'][:12]}..., recorded "
                f"{want['sha256'][:12]}...: altered bytes, a disk or copy error)"
            )
    return True


def _check_parses(ckpt: Path) -> None:
    """Without checksums, the one sign of damage left: a file that no longer parses."""
    for f in sorted(ckpt.iterdir()):
        try:
            if f.suffix == ".safetensors":
                with safe_open(str(f), "pt"):  # checks the header and that it spans the file
                    pass
            elif f.suffix == ".json":
                json.loads(f.read_text())
        except (SafetensorError, ValueError) as e:  # JSONDecodeError, UnicodeDecodeError
            raise CorruptCheckpointError(
                f"{f} cannot be parsed ({type(e).__name__}: {e}; no checksum to say more)"
            ) from e


def checkpoint_candidates(run_dir: Path) -> list[Path]:
    """The checkpoints to try, in order: the one ``latest.json`` points at, then every other
    ``step_*`` directory, newest first. Empty if the run has none."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    others = sorted(_step_dirs(root), reverse=True)
    pointer = root / LATEST
    if not pointer.exists():
        return others
    try:
        first = root / str(json.loads(pointer.read_text())["dir"])
    except (ValueError, KeyError, TypeError) as e:
        log.warning("%s is damaged (%s); trying the checkpoints newest first", pointer, e)
        return others
    return [first, *(p for p in others if p != first)]


@dataclass(frozen=True)
class Restored:
    """What :func:`load_latest_checkpoint` loaded.

    Attributes:
        path: The checkpoint used.
        state: Its trainer state.
        verified: Its files matched their checksums (False: an older checkpoint without them).
        skipped: One message per newer checkpoint that was skipped (path and what is wrong).
    """

    path: Path
    state: TrainerState
    verified: bool
    skipped: tuple[str, ...] = ()


def load_latest_checkpoint(run_dir: Path, agent: Any) -> Restored | None:
    """Load the newest complete checkpoint of ``run_dir`` into ``agent`` (see module doc).

    A checkpoint that fails its checksums (or, without checksums, cannot be parsed) is logged
    as a warning with its path and skipped; the files are left as they are.

    Returns:
        What was loaded, or None if the run has no checkpoint at all.

    Raises:
        CheckpointError: Checkpoints exist but none is complete (every one is listed).
    """
    candidates = checkpoint_candidates(run_dir)
    if not candidates:
        return None
    skipped: list[str] = []
    for ckpt in candidates:
        try:
            verified = verify_checkpoint(ckpt)
            if not verified:
                log.info("%s: no checksum (written before checksums); loaded unverified", ckpt)
            state = load_checkpoint(ckpt, agent, verified=verified)
        except CorruptCheckpointError as e:
            log.warning("%s; trying the previous checkpoint", e)
            skipped.append(str(e))
            continue
        if skipped:
            log.warning(
                "using checkpoint %s (env step %d), the newest complete one; skipped: %s",
                ckpt, state.env_steps, "; ".join(skipped),
            )  # fmt: skip
        return Restored(ckpt, state, verified, tuple(skipped))
    raise CheckpointError(
        f"{Path(run_dir) / CHECKPOINTS} has no complete checkpoint: {'; '.join(skipped)}. "
        "Nothing was changed. Restore the checkpoints from a backup, or start a new run "
        "(--run NEW_DIR; the demos and this run's log.zarr are intact)"
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint :func:`load_latest_checkpoint` would use (the newest that passes
    :func:`verify_checkpoint`), or None if the run has none yet.

    Raises:
        CheckpointError: Checkpoints exist but none is complete.
    """
    candidates = checkpoint_candidates(run_dir)
    problems = []
    for ckpt in candidates:
        try:
            verify_checkpoint(ckpt)
            return ckpt
        except CorruptCheckpointError as e:
            problems.append(str(e))
    if problems:
        raise CheckpointError(f"no complete checkpoint in {run_dir}: {'; '.join(problems)}")
    return None


def load_checkpoint(ckpt: Path, agent: Any, verified: bool = True) -> TrainerState:
    """Load the agent's weights and optimiser state from ``ckpt``; return the trainer state.

    Args:
        ckpt: The checkpoint directory.
        agent: An agent built with the run's config.
        verified: ``ckpt`` passed its checksums. If False, a file that safetensors or JSON
            cannot read raises :class:`CorruptCheckpointError` (the only sign of damage left).
    """
    from policies.io import load_agent

    try:
        load_agent(agent, Path(ckpt))
        data = json.loads((Path(ckpt) / TRAINER_STATE).read_text())
    except (SafetensorError, json.JSONDecodeError, UnicodeDecodeError, FileNotFoundError) as e:
        if verified:
            raise
        raise CorruptCheckpointError(f"{ckpt} cannot be read ({type(e).__name__}: {e})") from e
    return TrainerState(**data)
