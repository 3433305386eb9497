"""Actor and critic networks: tanh-Gaussian actor, vectorised critic ensemble, HL-Gauss support.

The critic ensemble is one module whose Linear/LayerNorm weights carry a leading ensemble
dimension (N, ...), evaluated with batched matmuls: N critics cost one kernel per layer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from policies.encoders import mlp, use_bfloat16


def _params(
    layer: nn.Module, detach_params: bool, members: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of an ensemble layer, optionally detached and/or indexed by members."""
    w, b = layer.weight, layer.bias
    if members is not None:
        w, b = w[members], b[members]
    return (w.detach(), b.detach()) if detach_params else (w, b)


class EnsembleLinear(nn.Module):
    """N independent Linear layers: (N, B, in) -> (N, B, out)."""

    def __init__(self, n: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(n, 1, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # torch.nn.Linear's default init, per member
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(
        self, x: torch.Tensor, detach_params: bool = False, members: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(N', B, in) -> (N', B, out); ``members`` (N',) selects a subset of the N layers."""
        w, b = _params(self, detach_params, members)
        return torch.baddbmm(b, x, w)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with per-member affine parameters: (N, B, D)."""

    def __init__(self, n: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n, 1, dim))

    def forward(
        self, x: torch.Tensor, detach_params: bool = False, members: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(N', B, D) -> (N', B, D); ``members`` (N',) selects a subset of the N members."""
        w, b = _params(self, detach_params, members)
        return F.layer_norm(x, x.shape[-1:]) * w + b


class EnsembleBatchRenorm(nn.Module):
    """Batch renormalisation (Ioffe 2017) over the batch dim for N members: (N, B, D).

    With ``batch_stats`` (the critic's training pass) rows are normalised by the batch's own
    statistics, corrected toward the running ones by ``r`` and ``d`` (clipped to 3 and 5) once
    ``warmup`` passes have updated them (before that, plain batch normalisation), and the running
    statistics move by ``momentum`` toward the batch's; otherwise they are normalised by the
    running statistics, which do not change. CrossQ (Bhatt et al. 2024) places one before each
    critic layer.
    """

    r_max, d_max = 3.0, 5.0

    def __init__(self, n: int, dim: int, momentum: float, warmup: int, eps: float = 1e-3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n, 1, dim))
        self.register_buffer("running_mean", torch.zeros(n, 1, dim))
        self.register_buffer("running_var", torch.ones(n, 1, dim))
        self.register_buffer("passes", torch.zeros((), dtype=torch.long))
        self.momentum, self.warmup, self.eps = momentum, warmup, eps

    def forward(
        self,
        x: torch.Tensor,
        detach_params: bool = False,
        members: torch.Tensor | None = None,
        batch_stats: bool = False,
    ) -> torch.Tensor:
        """(N', B, D) -> (N', B, D); ``batch_stats`` needs all N members."""
        w, b = _params(self, detach_params, members)
        if not batch_stats:
            mean, var = self.running_mean, self.running_var
            if members is not None:
                mean, var = mean[members], var[members]
            return (x - mean) * torch.rsqrt(var + self.eps) * w + b
        if members is not None:
            raise ValueError("batch statistics are computed over all members (members=None)")
        mean = x.mean(1, keepdim=True)  # (N, 1, D)
        var = x.var(1, keepdim=True, unbiased=False)
        std = (var + self.eps).sqrt()
        with torch.no_grad():
            running_std = (self.running_var + self.eps).sqrt()
            on = self.passes >= self.warmup  # a tensor: no host sync per pass
            r = torch.where(on, (std / running_std).clamp(1 / self.r_max, self.r_max), 1.0)
            d = (mean - self.running_mean) / running_std
            d = torch.where(on, d.clamp(-self.d_max, self.d_max), 0.0)
            self.running_mean.lerp_(mean, self.momentum)
            n = x.shape[1]  # the running variance is the unbiased one, as torch's BatchNorm's
            self.running_var.lerp_(var * (n / max(n - 1, 1)), self.momentum)
            self.passes.add_(1)
        return ((x - mean) / std * r + d) * w + b


class EnsembleResidualBlock(nn.Module):
    """SimBa's block for N members: ``x + W2 relu(W1 LayerNorm(x))``, W1: D -> expand * D.

    ``precision`` (``SACConfig.critic_block_precision``): with bfloat16 (on a CPU) the two
    products run in bfloat16 from bfloat16 copies of the float32 weights (the casts carry the
    gradients back to them); the LayerNorm and the residual sum stay float32.
    """

    def __init__(self, n: int, dim: int, expand: int, precision: str = "float32") -> None:
        super().__init__()
        self.norm = EnsembleLayerNorm(n, dim)
        self.up = EnsembleLinear(n, dim, expand * dim)
        self.down = EnsembleLinear(n, expand * dim, dim)
        self.precision = precision

    def forward(
        self, x: torch.Tensor, detach_params: bool = False, members: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = self.norm(x, detach_params, members)
        if x.device.type == "cpu" and use_bfloat16(self.precision):
            w1, b1 = (t.to(torch.bfloat16) for t in _params(self.up, detach_params, members))
            w2, b2 = (t.to(torch.bfloat16) for t in _params(self.down, detach_params, members))
            h = F.relu(torch.baddbmm(b1, h.to(torch.bfloat16), w1))
            return x + torch.baddbmm(b2, h, w2).float()
        h = F.relu(self.up(h, detach_params, members))
        return x + self.down(h, detach_params, members)


class CriticEnsemble(nn.Module):
    """N critics Q_i(features, action) -> (N, B, out_dim) (out_dim 1: scalar Q; else logits).

    ``arch="mlp"``: Linear -> [LayerNorm] -> ReLU per ``hidden`` size, then the output layer
    (RLPD's critic). ``arch="residual"``: SimBa's critic (Lee et al. 2024; BRO's is alike): a
    Linear to ``hidden[0]`` wide, ``blocks`` pre-LayerNorm residual blocks (inner width
    ``expand`` times that), a final LayerNorm, then the output layer: the residual path keeps a
    near-linear function reachable however deep, which is reported to keep value networks
    stable as they grow; ``block_precision`` is its blocks' (:class:`EnsembleResidualBlock`).
    ``batch_renorm=(momentum, warmup)`` (mlp only, CrossQ's critic): an
    :class:`EnsembleBatchRenorm` before every Linear (the input's included) instead of
    LayerNorm; ``forward(..., batch_stats=True)`` is the pass that uses and updates batch
    statistics.
    """

    def __init__(
        self,
        feature_dim: int,
        action_dim: int,
        hidden: tuple[int, ...],
        num_critics: int,
        layer_norm: bool = True,
        out_dim: int = 1,
        arch: str = "mlp",
        blocks: int = 2,
        expand: int = 4,
        batch_renorm: tuple[float, int] | None = None,
        block_precision: str = "float32",
    ) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.arch = arch
        self.renorms = nn.ModuleList()
        if batch_renorm is not None and arch != "mlp":
            raise ValueError("batch renormalisation (CrossQ) is for the mlp critic")
        if arch == "residual":
            width = hidden[0]
            self.inp = EnsembleLinear(num_critics, feature_dim + action_dim, width)
            self.blocks = nn.ModuleList(
                EnsembleResidualBlock(num_critics, width, expand, block_precision)
                for _ in range(blocks)
            )
            self.final_norm = EnsembleLayerNorm(num_critics, width)
            self.out = EnsembleLinear(num_critics, width, out_dim)
            return
        if arch != "mlp":
            raise ValueError(f"critic arch must be 'mlp' or 'residual', got {arch!r}")
        dims = (feature_dim + action_dim, *hidden)
        self.linears = nn.ModuleList(
            EnsembleLinear(num_critics, a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        layer_norm = layer_norm and batch_renorm is None
        self.norms = nn.ModuleList(
            EnsembleLayerNorm(num_critics, h) for h in (hidden if layer_norm else ())
        )
        self.out = EnsembleLinear(num_critics, dims[-1], out_dim)
        if batch_renorm is not None:  # one before each Linear, the output layer's included
            momentum, warmup = batch_renorm
            self.renorms.extend(EnsembleBatchRenorm(num_critics, d, momentum, warmup) for d in dims)

    @property
    def first_layer(self) -> EnsembleLinear:
        """The layer that reads the input (features, action) first."""
        if self.arch == "residual":
            return self.inp
        return self.linears[0] if len(self.linears) else self.out

    def forward(
        self,
        features: torch.Tensor,
        action: torch.Tensor | None = None,
        detach_params: bool = False,
        members: torch.Tensor | None = None,
        batch_stats: bool = False,
    ) -> torch.Tensor:
        """Args: features (B, E); action (B, A) or None (state-only heads, e.g. DQN);
        members: optional (N',) critic indices to evaluate (default: all N); batch_stats:
        batch-renormalised critics normalise by (and update) this batch's statistics.

        Returns:
            (N', B, out_dim). With ``detach_params`` gradients reach the inputs only.
        """
        x = features if action is None else torch.cat([features, action], dim=-1)  # (B, E+A)
        n = self.num_critics if members is None else members.shape[0]
        x = x.unsqueeze(0).expand(n, *x.shape)  # (N', B, E+A)
        if self.arch == "residual":
            x = self.inp(x, detach_params, members)
            for block in self.blocks:
                x = block(x, detach_params, members)
            return self.out(self.final_norm(x, detach_params, members), detach_params, members)
        if len(self.renorms):
            return self._renorm_forward(x, detach_params, members, batch_stats)
        for i, linear in enumerate(self.linears):
            x = linear(x, detach_params, members)
            if len(self.norms):
                x = self.norms[i](x, detach_params, members)
            x = F.relu(x, inplace=True)  # safe: no backward saves the pre-activation
        return self.out(x, detach_params, members)

    def _renorm_forward(self, x, detach_params, members, batch_stats) -> torch.Tensor:
        """CrossQ's layers: (renorm -> Linear -> ReLU) per hidden layer, renorm -> output."""
        layers = [*self.linears, self.out]
        for i, (renorm, linear) in enumerate(zip(self.renorms, layers, strict=True)):
            x = F.relu(x) if i else x
            x = linear(renorm(x, detach_params, members, batch_stats), detach_params, members)
        return x


class TanhGaussianActor(nn.Module):
    """pi(a|s) = tanh(N(mu(s), sigma(s))), log-std squashed into [log_std_min, log_std_max]."""

    def __init__(
        self,
        feature_dim: int,
        action_dim: int,
        hidden: tuple[int, ...],
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
    ) -> None:
        super().__init__()
        self.net = mlp(feature_dim, hidden, 2 * action_dim)
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    def dist_params(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, E) -> mean (B, A), log_std (B, A) (pre-tanh)."""
        mean, log_std = self.net(features).chunk(2, dim=-1)
        log_std = torch.tanh(log_std)  # cleanrl: smooth clamp
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1)
        return mean, log_std

    def sample(
        self, features: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample. Returns action (B, A) in (-1, 1) and log-prob (B,).

        The noise is drawn on ``generator``'s device (e.g. a CPU generator for an actor loop
        while the networks sit on CUDA) and moved to the networks' device.
        """
        mean, log_std = self.dist_params(features)
        noise_device = generator.device if generator is not None else mean.device
        eps = torch.randn(mean.shape, generator=generator, device=noise_device).to(mean)
        u = mean + log_std.exp() * eps
        return torch.tanh(u), tanh_gaussian_log_prob(u, mean, log_std)

    def mode(self, features: torch.Tensor) -> torch.Tensor:
        """Deterministic action tanh(mean): (B, A)."""
        return torch.tanh(self.dist_params(features)[0])

    def sample_and_mode(
        self, features: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`sample` and :meth:`mode` from one pass of the network (the same values as
        the two calls): action (B, A), log-prob (B,), deterministic action (B, A)."""
        mean, log_std = self.dist_params(features)
        noise_device = generator.device if generator is not None else mean.device
        eps = torch.randn(mean.shape, generator=generator, device=noise_device).to(mean)
        u = mean + log_std.exp() * eps
        return torch.tanh(u), tanh_gaussian_log_prob(u, mean, log_std), torch.tanh(mean)


def tanh_gaussian_log_prob(
    u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """log pi(tanh(u)) for pre-tanh ``u`` (B, A) -> (B,), with the stable tanh Jacobian."""
    normal = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))  # log(1 - tanh(u)^2)
    return (normal - log_det).sum(-1)


class HLGauss:
    """HL-Gauss (Farebrother et al. 2024): scalar <-> histogram over fixed bins.

    Targets become the probability mass of N(y, sigma^2) in each bin (normalised over the
    support); predictions are ``sum(softmax(logits) * centres)``.
    """

    def __init__(
        self, v_min: float, v_max: float, num_bins: int, sigma: float | None, device
    ) -> None:
        self.edges = torch.linspace(v_min, v_max, num_bins + 1, device=device)  # (K+1,)
        self.centres = 0.5 * (self.edges[1:] + self.edges[:-1])  # (K,)
        self.sigma = sigma if sigma is not None else 0.75 * (v_max - v_min) / num_bins

    def target_probs(self, y: torch.Tensor) -> torch.Tensor:
        """(...,) scalar targets -> (..., K) probabilities."""
        y = y.clamp(self.edges[0], self.edges[-1])
        cdf = torch.special.erf((self.edges - y[..., None]) / (math.sqrt(2.0) * self.sigma))
        mass = cdf[..., 1:] - cdf[..., :-1]  # (..., K)
        return mass / (cdf[..., -1:] - cdf[..., :1]).clamp_min(1e-8)

    def value(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., K) logits -> (...,) expected value."""
        return (logits.softmax(-1) * self.centres).sum(-1)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of logits (..., K) against the smoothed target of y (...,): (...,)."""
        return -(self.target_probs(y) * logits.log_softmax(-1)).sum(-1)
