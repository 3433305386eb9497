"""Checkpoints of a run: agent (``policies.io``: safetensors + JSON) plus the trainer's counters
and RNG states (JSON). No pickle anywhere.

Layout under ``run/checkpoints/``::

    step_0000002000/            one checkpoint (agent files from policies.io.save_agent,
        trainer_state.json       plus the trainer's counters and RNG states)
    latest.json                 {"dir": "step_0000002000"}, replaced atomically last

A checkpoint directory is complete before ``latest.json`` points at it, so a crash while
writing leaves the previous checkpoint in force. Older checkpoints beyond ``keep`` are removed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.learner.rundir import write_json_atomic

CHECKPOINTS = "checkpoints"
LATEST = "latest.json"
TRAINER_STATE = "trainer_state.json"


class CheckpointError(RuntimeError):
    """A run has no usable checkpoint; the message says what is missing."""


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
    """Save ``agent`` (policies.io.save_agent) and ``state`` as a new checkpoint of ``run_dir``.

    Returns:
        The checkpoint directory.
    """
    from policies.io import save_agent

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
    if ckpt.exists():
        shutil.rmtree(ckpt)
    os.replace(tmp, ckpt)
    write_json_atomic(root / LATEST, {"dir": name}, fsync=True)
    old = sorted(p for p in root.glob("step_*") if p.is_dir() and p.name != name)
    for p in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return ckpt


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``latest.json`` points at, or None if the run has none yet."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / LATEST
    if not pointer.exists():
        return None
    name = json.loads(pointer.read_text())["dir"]
    ckpt = root / name
    if not (ckpt / TRAINER_STATE).exists():
        raise CheckpointError(
            f"{pointer} points at {ckpt}, which is missing or incomplete; delete {pointer} to "
            "fall back to an older checkpoint, or start a new run"
        )
    return ckpt


def load_checkpoint(ckpt: Path, agent: Any) -> TrainerState:
    """Load the agent's weights and optimiser state from ``ckpt``; return the trainer state."""
    from policies.io import load_agent

    load_agent(agent, Path(ckpt))
    data = json.loads((Path(ckpt) / TRAINER_STATE).read_text())
    return TrainerState(**data)
