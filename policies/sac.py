"""Soft actor-critic with RLPD ingredients, the whole update in this file (STYLE.md #1).

One learner step (:meth:`SACAgent.update`)::

    repeat cfg.utd times:                              # UTD ratio (RLPD: high)
        batch = sample(); obs, next_obs = DrQ shift    # fresh batch per critic update
        z, z' = encoder(obs), encoder(next_obs)        # z' without gradient
        a', logp' = pi(z')
        y = r + gamma (1 - term) (min_{i in random subset of num_min_qs} Qtarg_i(z', a')
                                   - alpha logp' [if backup_entropy])
                                               # n-step: r summed, gamma ** k (batch.discount)
        L_Q = mean_i (Q_i(z, a) - y)^2                 # or HL-Gauss cross-entropy
        step(critic + encoder);  Qtarg <- tau Q + (1 - tau) Qtarg
    a~, logp = pi(sg(z))                               # actor sees detached features
    L_pi = alpha logp - reduce_i Q_i(sg(z), a~)        # critic weights not updated
    L_alpha = -log(alpha) (logp + target_entropy)

Choices: next-observation features come from the online encoder without gradient (DrQ-v2),
so the target network is the critic heads only. With ``hybrid_gripper`` the last action dim
is handled by a discrete 3-way DQN ensemble (open/stay/close = -1/0/+1, double-DQN target,
toggle penalty computed from ``state[:, gripper_state_index]`` = gripper_pos) on the same
encoder features; continuous SAC covers the remaining dims. With ``crossq`` (CrossQ) there is
no Qtarg: the critics, batch-renormalised, read (z, a) and (z', a') in one pass and the target
takes that pass's detached Q(z', a'); every other critic read uses the running statistics.
With ``churn_value`` / ``churn_policy`` (CHAIN) a reference batch is drawn once per update and
L_Q / L_pi also pay for moving Q / pi on it away from the networks of one update earlier.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from policies.config import SACConfig
from policies.encoders import ObsEncoder, obs_to_torch, trainable_state_dict
from policies.networks import CriticEnsemble, HLGauss, TanhGaussianActor
from robot_rl.core import keys
from robot_rl.core.batch import Batch, ObsLayout
from robot_rl.core.features import FrameFeatures

GRIPPER_VALUES = (-1.0, 0.0, 1.0)  # discrete gripper actions: open, stay, close


class SACAgent:
    """SAC / RLPD agent. See the module docstring for the update."""

    def __init__(
        self,
        layout: ObsLayout,
        action_dim: int,
        cfg: SACConfig,
        seed: int = 0,
        device: str = "cpu",
        frame_features: FrameFeatures | None = None,
    ) -> None:
        cfg = cfg.on_device(str(device))  # critic_arch "auto" -> the device's
        if cfg.hybrid_gripper and (action_dim < 2 or layout.state_dim == 0):
            raise ValueError("hybrid_gripper needs action_dim >= 2 and a state vector")
        self.layout, self.action_dim, self.cfg = layout, action_dim, cfg
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.num_updates = 0  # learner steps (update() calls)
        self.num_critic_updates = 0
        self.arm_dim = action_dim - 1 if cfg.hybrid_gripper else action_dim
        out_dim = cfg.hl_num_bins if cfg.critic_loss == "hl_gauss" else 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # parameter init, isolated from the global RNG stream
            self.encoder = ObsEncoder(layout, cfg.encoder, frame_features, device)
            e = self.encoder.out_dim
            self.actor = TanhGaussianActor(
                e, self.arm_dim, cfg.hidden_dims, cfg.log_std_min, cfg.log_std_max
            )
            arch = {"arch": cfg.critic_arch, "blocks": cfg.critic_blocks,
                    "expand": cfg.critic_expand,
                    "block_precision": cfg.critic_block_precision}  # fmt: skip
            hidden = cfg.critic_hidden_dims or cfg.hidden_dims
            renorm = (cfg.crossq_momentum, cfg.crossq_warmup) if cfg.crossq else None
            self.critic = CriticEnsemble(
                e, self.arm_dim, hidden, cfg.num_critics, cfg.critic_layer_norm, out_dim,
                batch_renorm=renorm, **arch,
            )  # fmt: skip
            self.gripper_critic = (
                CriticEnsemble(e, 0, hidden, cfg.num_critics, cfg.critic_layer_norm, 3, **arch)
                if cfg.hybrid_gripper
                else None
            )
        # CrossQ has no target network: its target is the online critics' detached Q(s', a')
        self.critic_target = None if cfg.crossq else self._frozen_copy(self.critic)
        self.actor_average = self._frozen_copy(self.actor) if cfg.policy_average > 0 else None
        self.gripper_target = (
            self._frozen_copy(self.gripper_critic) if self.gripper_critic is not None else None
        )
        self.gripper_closed_at = 0.5
        """``gripper_pos`` at which the toggle penalty reads the gripper as closed, in the
        units of the state this agent is given (a learner that normalises the state sets it
        with :meth:`set_state_normalization`)."""
        self.log_alpha = torch.tensor(
            float(np.log(cfg.init_temperature)), device=self.device, requires_grad=True
        )
        self._bc_kept: torch.Tensor | None = None  # Q filter's pass rate in the last actor loss
        self.target_entropy = (
            cfg.target_entropy if cfg.target_entropy is not None else -self.arm_dim / 2.0
        )
        self.hl = (
            HLGauss(cfg.hl_v_min, cfg.hl_v_max, cfg.hl_num_bins, cfg.hl_sigma, self.device)
            if cfg.critic_loss == "hl_gauss"
            else None
        )
        for m in self.modules().values():
            m.to(self.device)
        # CHAIN's references: the critics / the actor as they were one update earlier (not in
        # modules(): never saved; after a load or a refit fold they start again from the live)
        self._churn_critic = self._frozen_copy(self.critic) if cfg.churn_value > 0 else None
        self._churn_actor = self._frozen_copy(self.actor) if cfg.churn_policy > 0 else None
        self._churn_ready = False
        critic_params = [p for p in self.encoder.parameters() if p.requires_grad]
        critic_params += list(self.critic.parameters())
        if self.gripper_critic is not None:
            critic_params += list(self.gripper_critic.parameters())
        self.critic_opt = self._adam(critic_params, cfg.critic_lr)
        self.actor_opt = self._adam(self.actor.parameters(), cfg.actor_lr)
        self.alpha_opt = self._adam([self.log_alpha], cfg.temperature_lr, beta1=0.9)

    @staticmethod
    def _frozen_copy(module: nn.Module) -> nn.Module:
        """A copy that no optimiser trains (targets, averages, CHAIN's references)."""
        return copy.deepcopy(module).requires_grad_(False)

    def _adam(self, params, lr: float, beta1: float | None = None) -> torch.optim.Adam:
        """Adam (beta1: ``cfg.adam_beta1`` unless given); the fused kernel (same update rule,
        one kernel per step) on CPU and CUDA."""
        fused = True if self.device.type in ("cpu", "cuda") else None
        betas = (self.cfg.adam_beta1 if beta1 is None else beta1, 0.999)
        return torch.optim.Adam(params, lr=lr, betas=betas, fused=fused)

    @property
    def frame_features(self) -> FrameFeatures | None:
        """The frozen image backbone whose cached features the update reads (None: the
        encoder reads frames). A learner gives it to its replay buffers."""
        return self.encoder.frame_features

    # ---------------------------------------------------------------- acting
    @torch.no_grad()
    def act(
        self,
        obs: Mapping[str, Any],
        deterministic: bool,
        generator: torch.Generator | None = None,
    ) -> np.ndarray:
        """One observation (learner layout, numpy, no batch dim) -> action (A,) float32 in [-1, 1].

        No augmentation. ``generator`` (any device) drives exploration noise (and gripper
        epsilon-greedy); None uses the agent's own generator.
        """
        z = self.encoder(obs_to_torch(obs, self.device, self.layout))  # (1, E)
        gen = generator if generator is not None else self.gen
        actor = self.policy_actor
        if deterministic:
            a = actor.mode(z)
        else:
            a, _ = actor.sample(z, gen)
        if self.gripper_critic is not None:
            g = self.gripper_critic(z).mean(0).argmax(-1)  # (1,) in {0, 1, 2}
            if not deterministic and self.cfg.gripper_epsilon > 0:
                u = torch.rand(2, generator=gen, device=gen.device)
                if u[0] < self.cfg.gripper_epsilon:
                    g = (u[1:] * 3).long().clamp(max=2).to(self.device)
            a = torch.cat([a, torch.tensor(GRIPPER_VALUES, device=self.device)[g, None]], -1)
        return a[0].clamp(-1.0, 1.0).cpu().numpy().astype(np.float32)

    @property
    def policy_actor(self) -> nn.Module:
        """The actor :meth:`act` reads: the weight average with ``policy_average``, else the
        live actor."""
        return self.actor_average if self.actor_average is not None else self.actor

    # ---------------------------------------------------------------- learning
    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def critic_loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Critic (+ encoder, + gripper DQN) loss on one batch.

        Returns:
            loss (scalar), detached obs features (B, E) for the actor, metrics.
        """
        loss, z, metrics = self._critic_loss(batch)
        return loss, z, _to_floats(metrics)

    def _critic_loss(
        self, batch: Batch
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`critic_loss` with detached 0-d tensor metrics (no host sync per update)."""
        cfg, n = self.cfg, self.cfg.num_critics
        obs = self.encoder.augment(batch.obs, self.gen)
        next_obs = self.encoder.augment(batch.next_obs, self.gen)
        z = self.encoder(obs)  # (B, E)
        reward, term = batch.reward.float(), batch.terminated.float()  # (B,)
        b = z.shape[0]
        if reward.shape != (b,) or term.shape != (b,) or batch.action.shape != (b, self.action_dim):
            raise ValueError(
                f"batch shapes: reward {tuple(reward.shape)}, terminated {tuple(term.shape)}, "
                f"action {tuple(batch.action.shape)}; expected ({b},), ({b},), ({b}, "
                f"{self.action_dim})"
            )
        arm_action = batch.action[:, : self.arm_dim].float()  # (B, A_arm)
        with torch.no_grad():
            z_next = self.encoder(next_obs)  # (B, E), online encoder (DrQ-v2)
            a_next, logp_next = self.actor.sample(z_next, self.gen)
            subset = torch.randperm(n, generator=self.gen, device=self.device)[: cfg.num_min_qs]
        if self.critic_target is None:  # CrossQ: one pass over (s, a) and (s', a'), shared stats
            both = self.critic(
                torch.cat([z, z_next]), torch.cat([arm_action, a_next]), batch_stats=True
            )  # (N, 2B, 1 | K)
            out = both[:, :b]  # (N, B, 1 | K)
            q_next = self._q_values(both[:, b:].detach())[subset]  # (num_min_qs, B)
        else:
            with torch.no_grad():
                # only the subset's target critics are evaluated (the min over all N is the same)
                members = subset if cfg.num_min_qs < n else None
                q_next = self._q_values(self.critic_target(z_next, a_next, members=members))
            out = self.critic(z, arm_action)  # (N, B, 1 | K)
        with torch.no_grad():
            v_next = q_next.min(0).values  # (B,), q_next (num_min_qs | N, B)
            if cfg.backup_entropy:
                v_next = v_next - self.alpha * logp_next
            y = reward + self._discount(batch) * (1.0 - term) * v_next  # (B,)
        if self.hl is None:
            q = out.squeeze(-1)
            loss = F.mse_loss(q, y.expand(n, -1))
        else:
            q = self.hl.value(out)
            loss = self.hl.loss(out, y.expand(n, -1)).mean()
        metrics = {
            "critic_loss": loss.detach(),
            "q_mean": q.mean().detach(),
            "target_q_mean": y.mean(),
        }
        if cfg.cql_weight > 0:
            with torch.no_grad():
                a_pi, _ = self.actor.sample(z.detach(), self.gen)  # (B, A_arm)
            q_pi = self._q_values(self.critic(z, a_pi))  # (N, B)
            if cfg.calql:  # Cal-QL: no push below the data's Monte-Carlo return
                if batch.mc_return is None:
                    raise ValueError(
                        "calql needs batches with mc_return: sample them through "
                        "robot_rl.replay.Mixer(..., returns=True) (the learner does)"
                    )
                floor = torch.nan_to_num(batch.mc_return.float(), nan=-torch.inf)  # (B,)
                metrics["calql_floored"] = (q_pi.detach() < floor).float().mean()
                q_pi = torch.maximum(q_pi, floor)
            gap = q_pi.mean() - q.mean()  # policy's actions over the data's, per critic mean
            loss = loss + cfg.cql_weight * gap
            metrics["cql_gap"] = gap.detach()
        if self.gripper_critic is not None:
            g_loss = self._gripper_loss(batch, z, z_next, reward, term)
            metrics["gripper_loss"] = g_loss.detach()
            loss = loss + g_loss
        return loss, z.detach(), metrics

    def _discount(self, batch: Batch) -> torch.Tensor | float:
        """The bootstrap's discount: gamma, or the batch's gamma ** k for n-step returns."""
        return self.cfg.gamma if batch.discount is None else batch.discount.float()

    def _q_values(self, out: torch.Tensor) -> torch.Tensor:
        """Critic output (N, B, 1 | K) -> Q (N, B)."""
        return out.squeeze(-1) if self.hl is None else self.hl.value(out)

    def _gripper_loss(self, batch: Batch, z, z_next, reward, term) -> torch.Tensor:
        """Double-DQN loss of the 3-way gripper ensemble with a toggle penalty."""
        cfg = self.cfg
        g = batch.action[:, -1].float()  # (B,)
        idx = (g > cfg.gripper_threshold).long() - (g < -cfg.gripper_threshold).long() + 1
        state_g = batch.obs[keys.STATE][:, cfg.gripper_state_index].float()  # (B,)
        closed = state_g > self.gripper_closed_at
        toggles = ((idx == 2) & ~closed) | ((idx == 0) & closed)
        r = reward - cfg.gripper_toggle_penalty * toggles.float()
        with torch.no_grad():
            best = self.gripper_critic(z_next).mean(0).argmax(-1)  # (B,)
            q_t = self.gripper_target(z_next).gather(
                -1, best.expand(cfg.num_critics, -1)[..., None]
            )
            y = r + self._discount(batch) * (1.0 - term) * q_t.squeeze(-1).min(0).values
        q = self.gripper_critic(z).gather(-1, idx.expand(cfg.num_critics, -1)[..., None])
        return F.mse_loss(q.squeeze(-1), y.expand(cfg.num_critics, -1))

    def actor_loss(
        self, z: torch.Tensor, batch: Batch | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor loss on detached features (B, E); critic weights get no gradient. With
        ``cfg.bc_weight`` and the ``batch`` that ``z`` encodes, plus the behaviour-cloning term
        on its demonstration and intervened rows.

        Returns:
            loss (scalar), log-probs (B,) detached (for the temperature loss).
        """
        z = z.detach()
        bc = self.cfg.bc_weight > 0 and batch is not None
        if bc:  # the BC term's deterministic action from the same pass of the actor
            a, logp, mode = self.actor.sample_and_mode(z, self.gen)
        else:
            a, logp = self.actor.sample(z, self.gen)
        q = self._q_values(self.critic(z, a, detach_params=True))  # (N, B)
        q = q.mean(0) if self.cfg.actor_q == "mean" else q.min(0).values
        loss = (self.alpha.detach() * logp - q).mean()
        if bc:
            if self.cfg.bc_normalize:  # TD3+BC: the Q term in units of the batch's |Q|
                loss = loss / q.detach().abs().mean().clamp_min(1.0)
            loss = loss + self.cfg.bc_weight * self._bc_loss(z, batch, mode)
        return loss, logp.detach()

    def _bc_loss(self, z: torch.Tensor, batch: Batch, mode: torch.Tensor) -> torch.Tensor:
        """Mean squared error of the deterministic arm action ``mode`` (B, A_arm) against the
        batch's on its demonstration and intervened rows (Q-filtered with
        ``cfg.bc_q_filter``); 0 if none."""
        target = batch.action[:, : self.arm_dim].float()  # (B, A_arm)
        rows = batch.is_demo.bool() | batch.intervened.bool()  # (B,)
        # No demo and no person in this batch: nothing to clone. On the CPU skip the work (the
        # Q filter's critic pass); on an accelerator the check would cost a host sync per
        # update, and the masked mean below is 0 anyway.
        if self.device.type == "cpu" and not bool(rows.any()):
            return z.new_zeros(())
        if self.cfg.bc_q_filter:
            with torch.no_grad():  # Q of the data's action and of the policy's, in one pass
                # On the CPU only the rows to clone (a demo-mixed batch is half demos): the
                # pass is the BC term's largest cost. On an accelerator the row count would
                # cost a host sync, so it rates the whole batch.
                idx = rows.nonzero().squeeze(1) if self.device.type == "cpu" else None
                zs, ts, ms = (z, target, mode) if idx is None else (z[idx], target[idx], mode[idx])
                b = zs.shape[0]
                both = self.critic(torch.cat([zs, zs]), torch.cat([ts, ms.detach()]))
                q = self._q_values(both).mean(0)  # (2b,)
                better = q[:b] >= q[b:]
            if idx is None:
                kept = rows & better
            else:
                kept = torch.zeros_like(rows).index_fill(0, idx[better], True)
            self._bc_kept = kept.sum() / rows.sum().clamp_min(1)  # logged: the filter's pass rate
            rows = kept
        err = ((mode - target) ** 2).sum(-1)  # (B,)
        w = rows.float()
        return (err * w).sum() / w.sum().clamp_min(1.0)

    def temperature_loss(self, logp: torch.Tensor) -> torch.Tensor:
        """Moves alpha up when entropy (-logp) is below target, down when above."""
        return -(self.log_alpha * (logp + self.target_entropy)).mean()

    @torch.no_grad()
    def polyak_update(self) -> None:
        """target <- tau * online + (1 - tau) * target, for every target network."""
        pairs = [(self.critic, self.critic_target)] if self.critic_target is not None else []
        if self.gripper_critic is not None:
            pairs.append((self.gripper_critic, self.gripper_target))
        for online, target in pairs:  # one multi-tensor kernel per network
            torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), self.cfg.tau)

    def _step(self, opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.grad_clip_norm is not None:
            params = [p for g in opt.param_groups for p in g["params"]]
            nn.utils.clip_grad_norm_(params, self.cfg.grad_clip_norm)
        opt.step()

    def update(self, sample: Callable[[], Batch]) -> dict[str, float]:
        """One learner step: cfg.utd critic updates (fresh batches), then actor + temperature."""
        for m in self.modules().values():
            m.train()
        ref = None  # CHAIN's reference batch: (features, arm actions), drawn before the rest
        if self._churn_critic is not None or self._churn_actor is not None:
            ref_batch = sample()
            with torch.no_grad():
                ref = (self.encoder(ref_batch.obs), ref_batch.action[:, : self.arm_dim].float())
        churn: dict[str, torch.Tensor] = {}
        for _ in range(self.cfg.utd):
            batch = sample()
            loss, z, metrics = self._critic_loss(batch)
            if ref is not None and self._churn_critic is not None:
                if self._churn_ready:
                    with torch.no_grad():
                        q_prev = self._q_values(self._churn_critic(*ref))  # (N, B)
                    churn["churn_value"] = F.mse_loss(self._q_values(self.critic(*ref)), q_prev)
                    loss = loss + self.cfg.churn_value * churn["churn_value"]
                self._copy_into(self._churn_critic, self.critic)  # params before this step
            self._step(self.critic_opt, loss)
            self.polyak_update()
            self.num_critic_updates += 1
        a_loss, logp = self.actor_loss(z, batch)
        if ref is not None and self._churn_actor is not None:
            if self._churn_ready:
                churn["churn_policy"] = self._policy_churn(ref[0])
                a_loss = a_loss + self.cfg.churn_policy * churn["churn_policy"]
            self._copy_into(self._churn_actor, self.actor)
        self._churn_ready = ref is not None
        self._step(self.actor_opt, a_loss)
        if self.actor_average is not None:
            with torch.no_grad():
                torch._foreach_lerp_(
                    list(self.actor_average.parameters()),
                    list(self.actor.parameters()),
                    self.cfg.policy_average,
                )
        self._step(self.alpha_opt, self.temperature_loss(logp))
        if self.cfg.min_temperature > 0:
            with torch.no_grad():
                self.log_alpha.clamp_(min=float(np.log(self.cfg.min_temperature)))
        self.num_updates += 1
        metrics.update(
            actor_loss=a_loss.detach(), temperature=self.alpha.detach(), entropy=-logp.mean()
        )
        if self._bc_kept is not None:
            metrics.update(bc_q_filter_kept=self._bc_kept.detach())
            self._bc_kept = None
        metrics.update({k: v.detach() for k, v in churn.items()})
        return _to_floats(metrics)

    def _policy_churn(self, z_ref: torch.Tensor) -> torch.Tensor:
        """Mean KL(pi || pi_prev) of the pre-tanh Gaussians on the reference features."""
        mean, log_std = self.actor.dist_params(z_ref)  # (B, A_arm) each
        with torch.no_grad():
            mean0, log_std0 = self._churn_actor.dist_params(z_ref)
        var_ratio = torch.exp(2.0 * (log_std - log_std0))
        kl = log_std0 - log_std + 0.5 * (var_ratio + (mean - mean0) ** 2 / torch.exp(2 * log_std0))
        return (kl - 0.5).sum(-1).mean()

    @staticmethod
    @torch.no_grad()
    def _copy_into(ref: nn.Module, live: nn.Module) -> None:
        """ref's parameters and buffers <- live's (in place)."""
        torch._foreach_copy_(list(ref.parameters()), list(live.parameters()))
        for b_ref, b_live in zip(ref.buffers(), live.buffers(), strict=True):
            b_ref.copy_(b_live)

    def set_state_normalization(self, mean: np.ndarray, std: np.ndarray) -> None:
        """The learner gives this agent states as ``(s - mean) / std``: read the gripper as
        closed where the raw ``gripper_pos`` is above 0.5 (the toggle penalty of
        ``hybrid_gripper``)."""
        i = self.cfg.gripper_state_index
        self.gripper_closed_at = float((0.5 - np.asarray(mean)[i]) / np.asarray(std)[i])

    @torch.no_grad()
    def rescale_state_inputs(self, scale: np.ndarray, shift: np.ndarray) -> None:
        """The normalised state this agent reads changes to ``x`` where it read
        ``scale * x + shift`` before (a refitted normaliser): fold that into the first layer
        that reads the state in every network, so each computes what it did (exactly, except
        where either normaliser clips).

        Args:
            scale: (S,) new std / old std.
            shift: (S,) (new mean - old mean) / old std.
        """
        s = self.layout.state_dim
        self._churn_ready = False  # CHAIN's references read the old normalisation
        k = torch.as_tensor(np.asarray(scale, np.float32), device=self.device)  # (S,)
        d = torch.as_tensor(np.asarray(shift, np.float32), device=self.device)  # (S,)
        if not isinstance(self.encoder.state_net, nn.Identity):  # a state MLP reads it first
            _fold_linear(self.encoder.state_net[0], k, d, s)
            return
        nets = [self.actor] + ([self.actor_average] if self.actor_average is not None else [])
        for actor in nets:
            _fold_linear(actor.net[0], k, d, s)
        for critic in (self.critic, self.critic_target, self.gripper_critic, self.gripper_target):
            if critic is not None and len(critic.renorms):  # CrossQ: a renorm reads it first
                _fold_renorm(critic.renorms[0], k, d, s)
            elif critic is not None:  # EnsembleLinear: weight (N, in, out), bias (N, 1, out)
                first = critic.first_layer
                w = first.weight[:, :s, :]  # (N, S, out)
                first.bias.add_(torch.einsum("s,nso->no", d, w).unsqueeze(1))
                w.mul_(k[None, :, None])

    # ---------------------------------------------------------------- state
    def modules(self) -> dict[str, nn.Module]:
        """Named networks (for device moves and saving)."""
        mods = {"encoder": self.encoder, "actor": self.actor, "critic": self.critic}
        if self.critic_target is not None:
            mods["critic_target"] = self.critic_target
        if self.actor_average is not None:
            mods["actor_average"] = self.actor_average
        if self.gripper_critic is not None:
            mods["gripper_critic"] = self.gripper_critic
            mods["gripper_target"] = self.gripper_target
        return mods

    def acting_modules(self) -> nn.ModuleDict:
        """The networks :meth:`act` reads (encoder, actor, gripper critic if any), by name; the
        actor is the weight average with ``policy_average``.

        A distributed learner publishes their trainable state
        (``robot_rl.transport.weights.trainable_state``) and an actor loads it into its own copy;
        critics, targets and optimisers never leave the learner.
        """
        mods = {"encoder": self.encoder, "actor": self.policy_actor}
        if self.gripper_critic is not None:
            mods["gripper_critic"] = self.gripper_critic
        return nn.ModuleDict(mods)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Every learned tensor (name -> tensor); the frozen backbone is not among them."""
        out: dict[str, torch.Tensor] = {}
        for name, m in self.modules().items():
            out.update(trainable_state_dict(m, prefix=f"{name}."))
        out["log_alpha"] = self.log_alpha.detach()
        return {k: v.detach().clone() for k, v in out.items()}

    def load_trainable_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """Inverse of :meth:`trainable_state` (strict on names and shapes)."""
        expected = self.trainable_state().keys()
        if set(state) != set(expected):
            diff = sorted(set(state) ^ set(expected))[:5]
            raise KeyError(f"trainable state does not match this agent: {diff}")
        with torch.no_grad():
            for name, m in self.modules().items():
                sub = {k[len(name) + 1 :]: v for k, v in state.items() if k.startswith(name + ".")}
                m.load_state_dict(sub)
            self.log_alpha.copy_(state["log_alpha"])
        self._churn_ready = False  # CHAIN's references are other weights now

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"critic": self.critic_opt, "actor": self.actor_opt, "alpha": self.alpha_opt}

    def counters(self) -> dict[str, int]:
        return {"num_updates": self.num_updates, "num_critic_updates": self.num_critic_updates}

    def load_counters(self, counters: Mapping[str, int]) -> None:
        self.num_updates = int(counters["num_updates"])
        self.num_critic_updates = int(counters["num_critic_updates"])

    def save(self, directory) -> None:
        """Same as ``policies.io.save_agent(self, directory)``."""
        from policies.io import save_agent

        save_agent(self, directory)

    def load(self, directory) -> None:
        """Same as ``policies.io.load_agent(self, directory)``."""
        from policies.io import load_agent

        load_agent(self, directory)


def _fold_linear(layer: nn.Linear, scale: torch.Tensor, shift: torch.Tensor, s: int) -> None:
    """``layer`` reads ``scale * x + shift`` in its first ``s`` inputs; make it read ``x``."""
    w = layer.weight[:, :s]  # (out, S)
    layer.bias.add_(w @ shift)
    w.mul_(scale[None, :])


def _fold_renorm(renorm, scale: torch.Tensor, shift: torch.Tensor, s: int) -> None:
    """A batch renorm reads ``scale * x + shift`` in its first ``s`` inputs; make its running
    statistics read ``x`` (exact in the running-statistics pass; the training pass normalises
    by each batch's own statistics anyway)."""
    mean, var = renorm.running_mean[..., :s], renorm.running_var[..., :s]  # (N, 1, S)
    mean.sub_(shift).div_(scale)
    var.add_(renorm.eps).div_(scale**2).sub_(renorm.eps).clamp_(min=0.0)


def _to_floats(metrics: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """0-d tensors -> floats with one device-to-host copy."""
    values = torch.stack(list(metrics.values())).tolist()
    return dict(zip(metrics, values, strict=True))
