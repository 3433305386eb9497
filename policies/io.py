"""Save / load an agent's weights, optimiser states, counters and RNG: safetensors + JSON only.

Directory layout written by :func:`save_agent`::

    weights.safetensors     agent.trainable_state() (frozen pretrained weights are not saved:
                            they come from the encoder's weights_path)
    optim.safetensors       every tensor of every optimiser state, "<opt>/<param idx>/<key>"
    meta.json               format version, agent class, counters, optimiser param_groups and
                            non-tensor state entries

Never pickle: loading cannot execute code. Works for any agent exposing ``trainable_state``,
``load_trainable_state``, ``optimizers``, ``counters``, ``load_counters`` and ``gen``
(:class:`policies.sac.SACAgent`, :class:`policies.bc.BCAgent`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file

FORMAT_VERSION = 1
WEIGHTS_FILE = "weights.safetensors"
OPTIM_FILE = "optim.safetensors"
META_FILE = "meta.json"


class SavableAgent(Protocol):
    gen: torch.Generator

    def trainable_state(self) -> dict[str, torch.Tensor]: ...
    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None: ...
    def optimizers(self) -> dict[str, torch.optim.Optimizer]: ...
    def counters(self) -> dict[str, int]: ...
    def load_counters(self, counters: dict[str, int]) -> None: ...


def _flatten_optim(name: str, opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}/{idx}/{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _unflatten_optim(name: str, tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        opt_name, idx, k = key.split("/", 2)
        if opt_name == name:
            state.setdefault(int(idx), {})[k] = value
    for idx, entry in meta["scalars"].items():
        state.setdefault(int(idx), {}).update(entry)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_agent(agent: SavableAgent, directory: str | Path) -> None:
    """Write weights, optimiser states, counters and RNG state of ``agent`` into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in agent.trainable_state().items()}
    weights["__rng__"] = agent.gen.get_state().cpu()
    save_file(weights, str(d / WEIGHTS_FILE))
    optim_tensors: dict[str, torch.Tensor] = {}
    optim_meta: dict[str, dict] = {}
    for name, opt in agent.optimizers().items():
        t, m = _flatten_optim(name, opt)
        optim_tensors.update(t)
        optim_meta[name] = m
    save_file(optim_tensors, str(d / OPTIM_FILE))
    meta = {
        "format_version": FORMAT_VERSION,
        "agent": type(agent).__name__,
        "counters": agent.counters(),
        "optimizers": optim_meta,
    }
    (d / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))


def load_agent(agent: SavableAgent, directory: str | Path) -> None:
    """Restore what :func:`save_agent` wrote into an agent built with the same config."""
    d = Path(directory)
    meta = json.loads((d / META_FILE).read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{d}: unsupported format_version {meta.get('format_version')}")
    if meta["agent"] != type(agent).__name__:
        raise ValueError(f"{d} holds a {meta['agent']}, not a {type(agent).__name__}")
    weights = load_file(str(d / WEIGHTS_FILE))
    rng = weights.pop("__rng__")
    agent.load_trainable_state(weights)
    agent.gen.set_state(rng)
    optim_tensors = load_file(str(d / OPTIM_FILE))
    for name, opt in agent.optimizers().items():
        sd = _unflatten_optim(name, optim_tensors, meta["optimizers"][name])
        opt.load_state_dict(sd)  # moves state tensors to the params' device
    agent.load_counters(meta["counters"])
