"""Behaviour cloning baseline on the same encoders and :class:`~robot_rl.core.batch.Batch`.

Loss ``"mse"``: ||tanh(mean(s)) - a||^2; ``"nll"``: -log pi(a|s) of the tanh-Gaussian policy
(actions clipped to +-(1 - 1e-4) before atanh). The encoder is trained end to end (DrQ shift
on the observation when images are present). Saved and loaded with :mod:`policies.io`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from policies.config import BCConfig
from policies.encoders import ObsEncoder, obs_to_torch, trainable_state_dict
from policies.networks import TanhGaussianActor, tanh_gaussian_log_prob
from robot_rl.core.batch import Batch, ObsLayout


class BCAgent:
    """Encoder + tanh-Gaussian policy trained by regression on demonstration actions."""

    def __init__(
        self, layout: ObsLayout, action_dim: int, cfg: BCConfig, seed: int = 0, device: str = "cpu"
    ) -> None:
        self.layout, self.action_dim, self.cfg = layout, action_dim, cfg
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.num_updates = 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = ObsEncoder(layout, cfg.encoder, device=device)
            self.actor = TanhGaussianActor(
                self.encoder.out_dim, action_dim, cfg.hidden_dims, cfg.log_std_min, cfg.log_std_max
            )
        self.encoder.to(self.device)
        self.actor.to(self.device)
        params = [p for p in self.encoder.parameters() if p.requires_grad]
        self.opt = torch.optim.Adam(params + list(self.actor.parameters()), lr=cfg.lr)

    @torch.no_grad()
    def act(
        self, obs: Mapping[str, Any], deterministic: bool, generator: torch.Generator | None = None
    ) -> np.ndarray:
        """One observation (learner layout, numpy, no batch dim) -> (A,) float32 in [-1, 1]."""
        z = self.encoder(obs_to_torch(obs, self.device, self.layout))
        if deterministic:
            a = self.actor.mode(z)
        else:
            a, _ = self.actor.sample(z, generator if generator is not None else self.gen)
        return a[0].clamp(-1.0, 1.0).cpu().numpy().astype(np.float32)

    def loss(self, batch: Batch) -> torch.Tensor:
        """BC loss (scalar) on one batch."""
        z = self.encoder(self.encoder.augment(batch.obs, self.gen))  # (B, E)
        action = batch.action.float()  # (B, A)
        if self.cfg.loss == "mse":
            return F.mse_loss(self.actor.mode(z), action)
        mean, log_std = self.actor.dist_params(z)
        u = torch.atanh(action.clamp(-1.0 + 1e-4, 1.0 - 1e-4))
        return -tanh_gaussian_log_prob(u, mean, log_std).mean()

    def update(self, sample: Callable[[], Batch]) -> dict[str, float]:
        """One gradient step on one batch from ``sample()``."""
        self.encoder.train()
        self.actor.train()
        loss = self.loss(sample())
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.grad_clip_norm is not None:
            params = [p for g in self.opt.param_groups for p in g["params"]]
            nn.utils.clip_grad_norm_(params, self.cfg.grad_clip_norm)
        self.opt.step()
        self.num_updates += 1
        return {"bc_loss": loss.item()}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        out = trainable_state_dict(self.encoder, "encoder.")
        out.update(trainable_state_dict(self.actor, "actor."))
        return {k: v.detach().clone() for k, v in out.items()}

    def load_trainable_state(self, state: Mapping[str, torch.Tensor]) -> None:
        if set(state) != set(self.trainable_state()):
            raise KeyError("trainable state does not match this BC agent")
        for name, m in (("encoder", self.encoder), ("actor", self.actor)):
            sub = {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(name + ".")}
            m.load_state_dict(sub, strict=False)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"bc": self.opt}

    def counters(self) -> dict[str, int]:
        return {"num_updates": self.num_updates}

    def load_counters(self, counters: Mapping[str, int]) -> None:
        self.num_updates = int(counters["num_updates"])

    def save(self, directory) -> None:
        """Same as ``policies.io.save_agent(self, directory)``."""
        from policies.io import save_agent

        save_agent(self, directory)

    def load(self, directory) -> None:
        """Same as ``policies.io.load_agent(self, directory)``."""
        from policies.io import load_agent

        load_agent(self, directory)
