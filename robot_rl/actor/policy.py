"""What an actor acts with, and what a learner sends it: the policy snapshot.

A snapshot is one flat name -> tensor dict (sent as safetensors by
:mod:`robot_rl.transport.weights`, saved as safetensors on the actor's disk):

- the trainable state of the agent's acting networks (``agent.acting_modules()``: encoder, actor
  and gripper critic, e.g. ``actor.trunk.0.weight``); frozen pretrained encoders are never in it:
  the actor builds them from the same config and its own local weights file;
- with a state vector in the layout and normalisation on, the learner's frozen state normaliser
  (:mod:`robot_rl.run.normalize`): ``obs_norm.mean`` (S,), ``obs_norm.std`` (S,),
  ``obs_norm.clip`` () and ``obs_norm.fitted`` () (0 until the learner fits it when learning
  starts: the actor then feeds the raw state, as the embedded trainer does).

:class:`ActingPolicy` is the actor's side: it owns its own copy of the agent (built from the
learner's policy settings), loads snapshots by version and acts. The embedded trainer needs no
snapshot: its actor reads the learner's agent directly (same process, no transport).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robot_rl.core.batch import ObsLayout
from robot_rl.run.normalize import StateNormalizer
from robot_rl.transport.codec import PayloadError
from robot_rl.transport.weights import load_trainable_state, trainable_state

NORM_PREFIX = "obs_norm."
"""Names of the normaliser's tensors in a snapshot."""


def policy_snapshot(
    agent: Any, layout: ObsLayout, norm: StateNormalizer | None, normalize_state: bool
) -> dict[str, torch.Tensor]:
    """The snapshot a learner publishes (see the module docstring).

    Args:
        agent: The learner's agent (``acting_modules()``, e.g. a ``policies.sac.SACAgent``).
        layout: Its observation layout.
        norm: The fitted state normaliser, or None while it is not fitted.
        normalize_state: ``TrainConfig.normalize_state`` (no normaliser tensors when off).

    Returns:
        Name -> tensor (sharing the agent's memory: encode it before the next update).
    """
    out = dict(trainable_state(agent.acting_modules()))
    if layout.state_dim > 0 and normalize_state:
        s = layout.state_dim
        fitted = norm is not None
        mean = norm.mean if fitted else np.zeros(s, np.float32)
        std = norm.std if fitted else np.ones(s, np.float32)
        out[NORM_PREFIX + "mean"] = torch.as_tensor(np.asarray(mean, np.float32))
        out[NORM_PREFIX + "std"] = torch.as_tensor(np.asarray(std, np.float32))
        out[NORM_PREFIX + "clip"] = torch.tensor(float(norm.clip if fitted else 10.0))
        out[NORM_PREFIX + "fitted"] = torch.tensor(int(fitted), dtype=torch.uint8)
    return out


class ActingPolicy:
    """The actor's policy: its own agent copy, the learner's normaliser, a weights version.

    Args:
        agent: A freshly built agent of the learner's policy settings (``act`` and
            ``acting_modules``); its initial weights act until the first snapshot arrives.
        layout: The learner layout of the observations :meth:`act` gets.
        normalize_state: The learner's ``TrainConfig.normalize_state``.
        seed: Seed of the exploration noise.
    """

    def __init__(self, agent: Any, layout: ObsLayout, normalize_state: bool, seed: int) -> None:
        self.agent, self.layout = agent, layout
        self.normalize_state = bool(normalize_state)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.norm: StateNormalizer | None = None
        self.version = 0
        """Version of the loaded snapshot (0: the initial weights)."""

    def act(self, obs_learner: Mapping[str, Any], deterministic: bool = False) -> np.ndarray:
        """Learner-layout observation -> policy action (A,) in [-1, 1]."""
        o = self.norm.obs(obs_learner) if self.norm is not None else obs_learner
        a = self.agent.act(o, deterministic=deterministic, generator=self.generator)
        return np.asarray(a, dtype=np.float32)

    def load(self, version: int, snapshot: Mapping[str, torch.Tensor]) -> None:
        """Copy a snapshot in (all or nothing).

        Raises:
            PayloadError: Names, shapes or dtypes that do not fit this policy (learner and actor
                built different policies), or a normaliser of another size.
        """
        nets = {k: v for k, v in snapshot.items() if not k.startswith(NORM_PREFIX)}
        norm_t = {
            k[len(NORM_PREFIX) :]: v for k, v in snapshot.items() if k.startswith(NORM_PREFIX)
        }
        norm = self._norm_from(norm_t)
        load_trainable_state(self.agent.acting_modules(), nets)
        self.norm, self.version = norm, int(version)

    def _norm_from(self, t: Mapping[str, torch.Tensor]) -> StateNormalizer | None:
        wants = self.layout.state_dim > 0 and self.normalize_state
        if not wants:
            if t:
                raise PayloadError("obs_norm", "unexpected: this actor normalises no state")
            return None
        missing = sorted({"mean", "std", "clip", "fitted"} - set(t))
        if missing:
            raise PayloadError("obs_norm", f"missing {missing}: the learner sent no normaliser")
        if not int(t["fitted"]):
            return None
        s = self.layout.state_dim
        if tuple(t["mean"].shape) != (s,) or tuple(t["std"].shape) != (s,):
            raise PayloadError(
                "obs_norm", f"mean/std of shape {tuple(t['mean'].shape)}, this state has ({s},)"
            )
        try:
            return StateNormalizer(t["mean"].numpy(), t["std"].numpy(), float(t["clip"]))
        except ValueError as e:
            raise PayloadError("obs_norm", str(e)) from e

    def snapshot(self) -> dict[str, torch.Tensor]:
        """This policy's current snapshot (what :meth:`load` took last, or the initial one)."""
        return policy_snapshot(self.agent, self.layout, self.norm, self.normalize_state)

    def save(self, path: Path) -> None:
        """Write the current snapshot and its version (safetensors; replaced atomically)."""
        tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in self.snapshot().items()}
        tmp = Path(path).with_name(Path(path).name + ".tmp")
        save_file(tensors, str(tmp), metadata={"version": str(self.version)})
        tmp.replace(path)

    def restore(self, path: Path) -> bool:
        """Load a snapshot written by :meth:`save` (False if there is none).

        Raises:
            PayloadError: The file does not fit this policy.
        """
        path = Path(path)
        if not path.exists():
            return False
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            version = int((f.metadata() or {}).get("version", "0"))
        self.load(version, load_file(str(path)))
        return True
