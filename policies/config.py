"""Typed, frozen configuration of the encoders, SAC (with RLPD ingredients) and BC.

RLPD's ingredients are fields here, not subclasses: ``num_critics=10``, ``critic_layer_norm``,
``utd`` (high update-to-data ratio) and ``num_min_qs`` (REDQ-style random subset in the
target). Symmetric demo/online sampling lives in the replay mixer, not in the agent.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class EncoderConfig:
    """How observations become one feature vector (shared by actor and critic).

    One image encoder per camera; their features are concatenated with the (optionally
    MLP-embedded) state vector.
    """

    kind: Literal["conv", "efficientnet"] = "conv"
    """Image encoder: ``"conv"`` (small CNN trained end to end by the critic loss, DrQ
    augmentation) or ``"efficientnet"`` (frozen pretrained EfficientNet-Lite0 run once per
    frame, its features cached in replay, + a trainable head). Ignored for state-only
    observations."""
    weights_path: str | None = None
    """Local path of the EfficientNet-Lite0 ImageNet weights (``.pth``, loaded with
    ``weights_only=True``). Required for ``kind="efficientnet"``; never downloaded."""
    feature_dim: int = 64
    """Output features per camera."""
    conv_channels: tuple[int, ...] = (32, 32, 32, 32)
    """Conv encoder: output channels per 3x3 conv layer."""
    conv_strides: tuple[int, ...] = (2, 2, 2, 1)
    """Conv encoder: stride per conv layer (same length as ``conv_channels``)."""
    bottleneck_channels: int = 64
    """EfficientNet head: a trainable 1x1 convolution (+ ReLU) reduces the backbone's 1280
    channels to this many at each position of the feature map, which is then flattened
    (``policies.encoders.FeatureHead``; ``bench/learner_throughput.py`` measures the sizes)."""
    drq_pad_px: int = 4
    """Conv encoder: DrQ random-shift padding in pixels, applied to obs and next_obs in the
    update only (never at act time). 0 disables augmentation."""
    feature_shift: int = 0
    """EfficientNet head: DrQ's random shift applied to the cached feature map, by up to this
    many cells per axis (replicate padding), obs and next_obs independently, in the update
    only. One cell of the 4x4 map of a 128x128 frame spans 32 pixels. 0: none (the measured
    default, README "Pixels")."""
    feature_dropout: float = 0.0
    """EfficientNet head: drop this fraction of the cached feature channels (whole channels,
    per sample and camera; the rest scaled by 1 / (1 - p)), in the update only. 0: none."""
    bottleneck_precision: Literal["auto", "float32", "bfloat16"] = "auto"
    """EfficientNet head: the dtype of the 1x1 bottleneck's matrix products on the CPU, the
    update's largest cost (batch x 2 x positions x 1280 channels, for obs and next_obs).
    ``bfloat16`` converts the cached uint8 features straight to bfloat16 (exact: 0-255 fit its
    8-bit mantissa) and multiplies by a bfloat16 copy of the float32 weights, with float32
    accumulation and float32 weights, gradients and optimiser state (mixed precision on one
    layer); the rest of the networks stay float32. ``auto``: bfloat16 where the CPU multiplies
    bfloat16 natively (AMX or AVX512-BF16), float32 elsewhere and on GPUs (see
    ``bench/learner_throughput.py --only cached``)."""
    state_hidden_dims: tuple[int, ...] = ()
    """State MLP hidden sizes; empty = pass the state vector through unchanged."""
    state_feature_dim: int = 64
    """State MLP output size (used only when ``state_hidden_dims`` is non-empty)."""

    def __post_init__(self) -> None:
        if self.kind not in ("conv", "efficientnet"):
            raise ValueError(f"encoder kind must be 'conv' or 'efficientnet', got {self.kind!r}")
        if len(self.conv_channels) != len(self.conv_strides) or not self.conv_channels:
            raise ValueError("conv_channels and conv_strides need the same non-zero length")
        if self.feature_dim < 1 or self.bottleneck_channels < 1 or self.state_feature_dim < 1:
            raise ValueError("feature sizes (feature_dim, bottleneck_channels, ...) must be >= 1")
        if self.drq_pad_px < 0:
            raise ValueError("drq_pad_px must be >= 0 (0 disables DrQ augmentation)")
        if self.feature_shift < 0:
            raise ValueError("feature_shift must be >= 0 cells (0 disables the shift)")
        if self.bottleneck_precision not in ("auto", "float32", "bfloat16"):
            raise ValueError(
                "bottleneck_precision must be 'auto', 'float32' or 'bfloat16', got "
                f"{self.bottleneck_precision!r}"
            )
        if not 0.0 <= self.feature_dropout < 1.0:
            raise ValueError(
                f"feature_dropout must be in [0, 1) (0 disables it), got {self.feature_dropout}"
            )


@dataclass(frozen=True)
class SACConfig:
    """Soft actor-critic with RLPD ingredients (see module docstring)."""

    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    """Observation encoder (shared by actor and critic; trained by the critic loss only)."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of actor and each critic."""
    num_critics: int = 2
    """Critic ensemble size (RLPD uses 10)."""
    num_min_qs: int = 2
    """Target = min over a random subset of this many target critics (REDQ; RLPD: 2)."""
    critic_layer_norm: bool = True
    """LayerNorm after each critic hidden layer (RLPD)."""
    critic_arch: Literal["auto", "mlp", "residual"] = "mlp"
    """mlp: ``hidden_dims`` layers (RLPD); residual: SimBa's residual critic (BRO's is alike),
    ``hidden_dims[0]`` wide with ``critic_blocks`` pre-LayerNorm residual blocks, each
    ``critic_expand`` times wider inside (SimBa: 2 blocks, 4x, 512 wide); auto: residual where
    the agent runs on an accelerator (CUDA, MPS), mlp on the CPU (where the residual critic
    costs ~6x per state update) and with ``crossq``. The agent resolves it once, from its
    device (:meth:`on_device`); a run stores the resolved value, so that its weights load on
    any device."""
    critic_blocks: int = 2
    """Residual critic: number of blocks."""
    critic_expand: int = 4
    """Residual critic: inner width of a block over its width."""
    critic_block_precision: Literal["auto", "float32", "bfloat16"] = "float32"
    """Residual critic: the dtype of each block's two matrix products (the wide inner layer,
    the residual critic's largest cost) on the CPU. ``bfloat16`` casts the LayerNorm's output
    and bfloat16 copies of the float32 weights into the products (float32 weights, gradients,
    optimiser state, LayerNorms and the residual sum: mixed precision inside the blocks, as
    ``EncoderConfig.bottleneck_precision`` does on the pixel bottleneck); ``auto``: bfloat16
    where the CPU multiplies bfloat16 natively (AMX or AVX512-BF16), float32 elsewhere and on
    GPUs. The mlp critic is always float32."""
    critic_hidden_dims: tuple[int, ...] | None = None
    """Hidden sizes of each critic when they differ from the actor's; None = ``hidden_dims``
    (CrossQ's critics are 2048 wide, sb3-contrib's 1024, its actor 256)."""
    crossq: bool = False
    """CrossQ (Bhatt et al. 2024): batch-renormalised mlp critics (a batch renormalisation
    before every critic layer instead of LayerNorm) and no target network: (s, a) and
    (s', pi(s')) go through the critics in one pass, so that one set of batch statistics covers
    both, and the target is that pass's detached Q(s', a') (``tau`` is unused). The actor's loss,
    the Q filter and the conservative term read the critics with their running statistics.
    The published setting adds wide critics (``critic_hidden_dims``), ``adam_beta1`` 0.5,
    learning rates 1e-3 and an actor update every 3 critic updates (not built: ``utd`` 3 would
    also take 3 critic updates per env step, CrossQ takes 1). A discrete
    gripper critic (``hybrid_gripper``) keeps its LayerNorm and target network."""
    crossq_momentum: float = 0.01
    """CrossQ: fraction of a batch's statistics the running ones take per training pass."""
    crossq_warmup: int = 100_000
    """CrossQ: training passes of plain batch normalisation before the renormalisation
    (correction toward the running statistics) starts (sb3-contrib's and SBX's 100k)."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay for the actor's and critics' optimisers (CrossQ: 0.5)."""
    actor_q: Literal["mean", "min"] = "mean"
    """How the actor loss reduces the ensemble's Q-values (RLPD: mean)."""
    gamma: float = 0.99
    """Discount per control step."""
    n_step: int = 1
    """Rewards summed per critic target (n-step returns, e.g. DrQ-v2: 3): the target
    bootstraps from the observation up to n steps later, with gamma ** (steps summed); the
    replay stops a sum at the episode's end. 1: one-step SAC (RLPD, HIL-SERL)."""
    tau: float = 0.005
    """Polyak coefficient: target <- tau * online + (1 - tau) * target."""
    utd: int = 1
    """Critic updates (each on a fresh batch) per actor/temperature update (RLPD: 20)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of critics and encoder."""
    temperature_lr: float = 3e-4
    """Adam learning rate of log(temperature)."""
    init_temperature: float = 1.0
    """Initial entropy temperature alpha."""
    target_entropy: float | None = None
    """Target entropy in nats; None = -A/2 (A = continuous action dims)."""
    min_temperature: float = 0.0
    """Floor of the temperature alpha (log alpha is clamped after each step). 0: none. With a
    sparse reward the temperature can decay to ~1e-3, where entropy no longer matters."""
    backup_entropy: bool = True
    """Subtract alpha * log pi(a'|s') in the critic target (RLPD turns this off)."""
    bc_weight: float = 0.0
    """Behaviour cloning in the actor loss: + bc_weight * mean squared error between the
    policy's deterministic action and the batch's action on its demonstration and intervened
    rows (the arm dims; 0 = off). Anchors the policy to what the demos and the person did."""
    bc_q_filter: bool = False
    """With bc_weight: clone a row only where the critics rate its action at least as high as
    the policy's own (Q filter, Nair et al. 2018), so that the policy may outgrow the demos."""
    bc_normalize: bool = False
    """With bc_weight: divide the actor's SAC term (alpha * log pi - Q) by the batch's mean |Q|
    (detached) when that exceeds 1, as TD3+BC does, so that cloning keeps its weight where
    returns are large (a -1 per-step cost: |Q| up to 1 / (1 - gamma)). Rewards in [0, 1] with
    termination on success (|Q| <= 1) are unaffected."""
    cql_weight: float = 0.0
    """Conservative critic (CQL(rho) with the current policy as the proposal, Kumar et al.
    2020): + cql_weight * (mean Q at actions the policy samples - mean Q at the batch's
    actions) in each critic's loss, so that the critics stop rating actions the data never
    tried above those it did and the actor has no overrated action to climb to. 0 = off.
    Without Cal-QL's calibration every Q drifts down (Meta-World push, 0/1 reward: to -5 at
    weight 0.1, -67 at 1, in 20k steps): the target bootstraps from the actions pushed down."""
    calql: bool = False
    """With cql_weight: Cal-QL's calibration (Nakamoto et al. 2023): Q at the policy's sampled
    actions is pushed down only while it is above the batch row's Monte-Carlo return-to-go
    (the discounted rewards its episode went on to collect; rows of an episode still running
    have none), so that conservatism stops at a value the data has shown and Q does not drift
    below what the data achieves. The learner's replay keeps those returns when this is on."""
    policy_average: float = 0.0
    """Act with a running average of the actor's weights (Polyak, this fraction of the live
    actor per actor update; 0 = off, act with the live actor). The averaged actor is the
    policy: evaluation, checkpoints' ``eval``, distributed actors and training episodes all
    use it, while the live actor is the one the loss trains and the critic's target samples.
    Against a policy that swings between evaluations as the actor chases a moving critic
    (Nikishin et al. 2018 average weights for the same reason). Averages the actor's MLP only:
    a trained pixel encoder is shared as it is."""
    churn_value: float = 0.0
    """Value churn reduction (CHAIN, Tang & Berseth 2024): + this weight x the mean squared
    change of every arm critic's Q on a reference batch (a second batch drawn per update, its
    own (s, a)) from the critics as they were one update earlier, in the critic loss. Against
    the chain of churn: an update meant for one batch moving Q (and so the greedy action) on
    states it never saw. 0 = off. CHAIN's MuJoCo SAC uses 0.1. On pixels the reference reads
    the current encoder's features (the encoder's own change is not held)."""
    churn_policy: float = 0.0
    """Policy churn reduction (CHAIN): + this weight x the KL divergence of the actor's
    Gaussian (before the tanh) on the reference batch's states from the actor one update
    earlier, in the actor loss (whose Q term is O(1) with 0/1 rewards or ``bc_normalize``).
    0 = off."""
    log_std_min: float = -5.0
    """Lower clamp of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper clamp of the actor's log standard deviation."""
    grad_clip_norm: float | None = None
    """Clip each optimiser's gradient norm to this value; None = no clipping."""
    critic_loss: Literal["mse", "hl_gauss"] = "mse"
    """Critic regression loss: MSE or HL-Gauss (categorical, histogram loss)."""
    hl_num_bins: int = 101
    """HL-Gauss: number of bins."""
    hl_v_min: float = -100.0
    """HL-Gauss: lower edge of the value support (return units)."""
    hl_v_max: float = 100.0
    """HL-Gauss: upper edge of the value support (return units)."""
    hl_sigma: float | None = None
    """HL-Gauss: Gaussian smoothing std (return units); None = 0.75 * bin width."""
    hybrid_gripper: bool = False
    """Continuous SAC for the arm dims and a discrete 3-way DQN critic (open/stay/close,
    act() returns -1/0/+1) for the last action dim."""
    gripper_state_index: int = -1
    """Index in the state vector of ``gripper_pos`` (0 open, 1 closed): the previous gripper
    state used for the toggle penalty. -1: the last state element."""
    gripper_toggle_penalty: float = 0.1
    """Reward penalty for the gripper critic when an action toggles the gripper."""
    gripper_epsilon: float = 0.0
    """Epsilon-greedy exploration of the gripper in stochastic act() (0 = always greedy)."""
    gripper_threshold: float = 0.5
    """|a_gripper| above this in stored actions counts as close (+) / open (-); else stay."""

    def __post_init__(self) -> None:
        if self.num_critics < 1:
            raise ValueError("num_critics must be >= 1")
        if not 1 <= self.num_min_qs <= self.num_critics:
            raise ValueError(
                f"num_min_qs={self.num_min_qs} must be in [1, num_critics={self.num_critics}]"
            )
        if self.cql_weight < 0:
            raise ValueError(f"cql_weight must be >= 0 (0 disables it), got {self.cql_weight}")
        if self.calql and self.cql_weight == 0:
            raise ValueError("calql calibrates the conservative term: also set cql_weight > 0")
        if self.utd < 1:
            raise ValueError("utd must be >= 1")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError("tau must be in (0, 1]")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError("gamma must be in [0, 1]")
        if self.n_step < 1:
            raise ValueError(f"n_step must be >= 1 (1: one-step returns), got {self.n_step}")
        if not self.hidden_dims:
            raise ValueError("hidden_dims needs at least one layer")
        if self.log_std_min >= self.log_std_max:
            raise ValueError("log_std_min must be < log_std_max")
        if self.init_temperature <= 0:
            raise ValueError("init_temperature must be > 0")
        if not 0.0 <= self.min_temperature <= self.init_temperature:
            raise ValueError(
                f"min_temperature must be in [0, init_temperature={self.init_temperature}] "
                f"(0: no floor), got {self.min_temperature}"
            )
        if self.critic_loss not in ("mse", "hl_gauss"):
            raise ValueError("critic_loss must be 'mse' or 'hl_gauss'")
        if self.critic_arch not in ("auto", "mlp", "residual"):
            raise ValueError(
                f"critic_arch must be 'auto', 'mlp' or 'residual', got {self.critic_arch!r}"
            )
        if self.critic_blocks < 1 or self.critic_expand < 1:
            raise ValueError("critic_blocks and critic_expand must be >= 1")
        if self.critic_block_precision not in ("auto", "float32", "bfloat16"):
            raise ValueError(
                "critic_block_precision must be 'auto', 'float32' or 'bfloat16', got "
                f"{self.critic_block_precision!r}"
            )
        if self.critic_hidden_dims is not None and not self.critic_hidden_dims:
            raise ValueError("critic_hidden_dims needs at least one layer (None: hidden_dims)")
        if self.crossq and self.critic_arch == "residual":
            raise ValueError("crossq batch-renormalises the mlp critic: use critic_arch 'mlp'")
        if not 0.0 < self.crossq_momentum <= 1.0 or self.crossq_warmup < 0:
            raise ValueError("crossq_momentum must be in (0, 1] and crossq_warmup >= 0")
        if not 0.0 <= self.adam_beta1 < 1.0:
            raise ValueError(f"adam_beta1 must be in [0, 1), got {self.adam_beta1}")
        if self.actor_q not in ("mean", "min"):
            raise ValueError("actor_q must be 'mean' or 'min'")
        if self.hl_num_bins < 2 or self.hl_v_min >= self.hl_v_max:
            raise ValueError("HL-Gauss needs hl_num_bins >= 2 and hl_v_min < hl_v_max")
        if self.hl_sigma is not None and self.hl_sigma <= 0:
            raise ValueError("hl_sigma must be > 0 (or None for 0.75 * bin width)")
        if self.bc_weight < 0:
            raise ValueError(
                f"bc_weight must be >= 0 (0 turns behaviour cloning off), got {self.bc_weight}"
            )
        if self.grad_clip_norm is not None and self.grad_clip_norm <= 0:
            raise ValueError("grad_clip_norm must be > 0 or None")
        if not 0.0 <= self.gripper_epsilon <= 1.0:
            raise ValueError("gripper_epsilon must be in [0, 1]")
        if self.churn_value < 0 or self.churn_policy < 0:
            raise ValueError(
                f"churn_value and churn_policy must be >= 0 (0 turns them off), got "
                f"{self.churn_value} and {self.churn_policy}"
            )

    def on_device(self, device: str) -> SACConfig:
        """This config with ``critic_arch="auto"`` resolved for an agent on ``device`` ("cpu",
        "cuda", "cuda:1", "mps"): residual on an accelerator, mlp on the CPU or with crossq.
        Other values are returned as they are."""
        if self.critic_arch != "auto":
            return self
        kind = device.split(":", 1)[0]
        arch = "mlp" if kind == "cpu" or self.crossq else "residual"
        return dataclasses.replace(self, critic_arch=arch)


@dataclass(frozen=True)
class BCConfig:
    """Behaviour cloning on the same encoders and Batch format."""

    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    """Observation encoder (trained end to end by the BC loss)."""
    hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden sizes of the policy MLP."""
    loss: Literal["mse", "nll"] = "mse"
    """``"mse"`` on tanh(mean) or ``"nll"``: tanh-Gaussian negative log-likelihood."""
    lr: float = 3e-4
    """Adam learning rate."""
    log_std_min: float = -5.0
    """Lower clamp of the log standard deviation."""
    log_std_max: float = 2.0
    """Upper clamp of the log standard deviation."""
    grad_clip_norm: float | None = None
    """Gradient norm clip; None = none."""

    def __post_init__(self) -> None:
        if self.loss not in ("mse", "nll"):
            raise ValueError("BC loss must be 'mse' or 'nll'")
        if not self.hidden_dims:
            raise ValueError("hidden_dims needs at least one layer")
        if self.lr <= 0:
            raise ValueError("lr must be > 0")
