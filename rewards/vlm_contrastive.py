"""Contrastive VLM reward (CLIP / SigLIP) with goal-baseline regularisation.

Rocamonde, Montesinos, Nava, Perez, Lindner, "Vision-Language Models are Zero-Shot Reward Models
for Reinforcement Learning", ICLR 2024 (arXiv:2310.12921), Definition 1 (goal-baseline
regularisation). With unit-normalised embeddings ``s`` (image), ``g`` (goal prompt) and ``b``
(baseline prompt), and ``L`` the line through ``b`` and ``g``::

    R(s) = 1 - 1/2 * || alpha * proj_L(s) + (1 - alpha) * s - g ||^2          (paper, eq. 3)

Since ``g`` lies on ``L``, ``proj_L(s) - g = P (s - g)`` with ``P = d d^T / |d|^2``, ``d = g - b``,
so ``R(s) = 1 - 1/2 |(alpha P + (1 - alpha) I)(s - g)|^2``, the form computed here. ``alpha = 0``
is the plain CLIP reward ``1 - 1/2 |s - g|^2 = cos(s, g)``; ``alpha = 1`` keeps only the
component of ``s - g`` along the baseline-to-goal direction.

The projected reward ``R`` is not a probability. :class:`ContrastiveVLMReward` maps it through a
logistic calibration ``p = sigmoid((R - offset) / scale)`` (monotone increasing in ``R``;
``offset`` is the ``R`` at which ``p = 1/2``, ``scale`` the ``R`` change per unit of log-odds),
fitted on labelled frames with :func:`fit_calibration`. Reward is ``p - 1`` (in [-1, 0]).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from rewards.hf_local import (
    check_cameras,
    check_dtype_device,
    check_model_dir,
    pooled,
    pretrained_kwargs,
    query_images,
    settings_digest,
    to_pil,
    weights_digest,
)
from robot_rl.core.protocols import RewardQuery, RewardResult


def goal_baseline_reward(
    state_emb: torch.Tensor, goal_emb: torch.Tensor, baseline_emb: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Goal-baseline regularised CLIP reward (Rocamonde et al. 2024, Definition 1).

    Args:
        state_emb: (B, D) image embeddings (normalised here).
        goal_emb: (D,) goal-prompt embedding (normalised here).
        baseline_emb: (D,) baseline-prompt embedding (normalised here).
        alpha: Regularisation strength in [0, 1]; 0 = cosine similarity to the goal, 1 = only
            the component along ``g - b`` counts.

    Returns:
        (B,) float32 reward ``1 - 1/2 |(alpha P + (1 - alpha) I)(s - g)|^2``, in [-1, 1].
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if state_emb.ndim != 2 or goal_emb.shape != (state_emb.shape[1],):
        raise ValueError(
            f"need state (B, D) and goal/baseline (D,), got {tuple(state_emb.shape)}, "
            f"{tuple(goal_emb.shape)}"
        )
    if baseline_emb.shape != goal_emb.shape:
        raise ValueError(f"baseline {tuple(baseline_emb.shape)} != goal {tuple(goal_emb.shape)}")
    s = F.normalize(state_emb.float(), dim=-1)  # (B, D)
    g = F.normalize(goal_emb.float(), dim=-1)  # (D,)
    b = F.normalize(baseline_emb.float(), dim=-1)  # (D,)
    direction = g - b  # (D,) baseline -> goal
    norm = torch.linalg.vector_norm(direction)
    if norm < 1e-6:
        raise ValueError("goal and baseline prompts embed to the same direction; reword one")
    d_hat = direction / norm  # (D,)
    diff = s - g  # (B, D)
    along = (diff @ d_hat)[:, None] * d_hat  # (B, D) = P (s - g)
    residual = alpha * along + (1.0 - alpha) * diff
    return 1.0 - 0.5 * residual.square().sum(dim=-1)


def calibrated_probability(raw: np.ndarray, offset: float, scale: float) -> np.ndarray:
    """``sigmoid((raw - offset) / scale)`` as float32; monotone increasing for ``scale > 0``."""
    if scale <= 0:
        raise ValueError(f"calibration scale must be > 0, got {scale}")
    z = (np.asarray(raw, dtype=np.float64) - offset) / scale
    return (0.5 * (1.0 + np.tanh(0.5 * z))).astype(np.float32)


def fit_calibration(
    raw: np.ndarray, success: np.ndarray, l2: float = 1e-2, iters: int = 100
) -> tuple[float, float]:
    """Fit ``(offset, scale)`` of :func:`calibrated_probability` by logistic regression.

    Args:
        raw: (N,) projected rewards (e.g. from :meth:`ContrastiveVLMReward.raw_reward`).
        success: (N,) bool labels (True = task solved in that frame).
        l2: Ridge penalty on the standardised slope (keeps separable data finite).
        iters: Newton iterations.

    Returns:
        (offset, scale) with ``scale > 0``.

    Raises:
        ValueError: If labels are all one class or the fitted slope is not positive (the raw
            reward does not increase with success: check the prompts).
    """
    x = np.asarray(raw, dtype=np.float64)
    y = np.asarray(success, dtype=bool).astype(np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"raw and success must be (N,) each, got {x.shape} and {y.shape}")
    if y.min() == y.max():
        raise ValueError("calibration needs both successful and unsuccessful frames")
    mean, std = x.mean(), x.std()
    if std == 0:
        raise ValueError("raw rewards are all equal; nothing to calibrate")
    features = np.stack([(x - mean) / std, np.ones_like(x)], axis=1)  # (N, 2)
    theta = np.zeros(2)
    ridge = np.diag([l2 * len(x), 0.0])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-features @ theta))
        grad = features.T @ (p - y) + ridge @ theta
        hess = features.T @ (features * (p * (1 - p))[:, None]) + ridge + 1e-9 * np.eye(2)
        theta -= np.linalg.solve(hess, grad)
    slope, intercept = theta
    if slope <= 0:
        raise ValueError("raw reward does not increase with success on these labels")
    scale = std / slope
    return float(mean - intercept * scale), float(scale)


@dataclass(frozen=True)
class ContrastiveVLMConfig:
    """Contrastive VLM reward settings."""

    model_dir: str
    """Local ``save_pretrained`` directory of a CLIP or SigLIP model with its tokenizer and image
    processor (``AutoModel`` / ``AutoTokenizer`` / ``AutoImageProcessor``); never downloaded."""
    goal_prompt: str
    """Text describing the solved task, e.g. ``"a robot gripper holding a red cube"``."""
    baseline_prompt: str
    """Text describing the scene irrespective of the goal, e.g. ``"a robot gripper"``."""
    cameras: tuple[str, ...]
    """Cameras scored; the projected reward is averaged over them before calibration."""
    prob_offset: float
    """Projected reward at which the success probability is 1/2 (fit with fit_calibration on
    labelled frames; no default, since it depends on the model, prompts, alpha and scene)."""
    prob_scale: float
    """Projected-reward change per unit of success log-odds, > 0 (fit with fit_calibration)."""
    alpha: float = 0.5
    """Goal-baseline regularisation strength in [0, 1] (0 = plain cosine similarity)."""
    device: str = "cpu"
    """Torch device of the model, e.g. ``"cuda:0"``."""
    dtype: str = "float32"
    """Model weights dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``."""
    batch_size: int = 32
    """Images per forward pass."""
    version: str | None = None
    """Model version label; None = digest of the weights files (reads every weight byte)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.prob_scale <= 0:
            raise ValueError(f"prob_scale must be > 0, got {self.prob_scale}")
        if not self.goal_prompt.strip() or not self.baseline_prompt.strip():
            raise ValueError("goal_prompt and baseline_prompt must be non-empty")
        if self.goal_prompt.strip() == self.baseline_prompt.strip():
            raise ValueError("goal_prompt and baseline_prompt must differ")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        check_cameras(self.cameras)
        check_dtype_device(self.dtype, self.device)


class ContrastiveVLMReward:
    """CLIP / SigLIP image-text reward with goal-baseline projection (see module docstring).

    ``predict`` ignores ``query.task_text`` (the prompts are fixed at construction) and
    ``query.state``. Cameras are combined by the mean of their projected rewards.
    """

    def __init__(self, config: ContrastiveVLMConfig) -> None:
        from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

        self.config = config
        path = check_model_dir(config.model_dir)
        self._device = torch.device(config.device)
        self._model = AutoModel.from_pretrained(path, **pretrained_kwargs(config.dtype))
        self._model.to(self._device).eval()
        if not (
            hasattr(self._model, "get_image_features") and hasattr(self._model, "get_text_features")
        ):
            raise ValueError(
                f"{type(self._model).__name__} in {str(path)!r} is not a dual-encoder "
                "(needs get_image_features and get_text_features, as CLIP and SigLIP have)"
            )
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._image_processor = AutoImageProcessor.from_pretrained(path, local_files_only=True)
        model_type = getattr(self._model.config, "model_type", "")
        self._padding: str | bool = "max_length" if model_type.startswith("siglip") else True
        goal, baseline = self._embed_text([config.goal_prompt, config.baseline_prompt])
        self._goal, self._baseline = goal, baseline  # (D,) each
        digest = config.version or weights_digest(path)
        settings = {k: v for k, v in asdict(config).items() if k not in ("device", "batch_size")}
        self._version = f"{digest}-{settings_digest(settings)}"

    @property
    def model_id(self) -> str:
        return "vlm_contrastive"

    @property
    def model_version(self) -> str:
        return self._version

    @torch.inference_mode()
    def _embed_text(self, texts: list[str]) -> torch.Tensor:
        tokens = self._tokenizer(texts, padding=self._padding, truncation=True, return_tensors="pt")
        inputs = {k: v.to(self._device) for k, v in tokens.items() if k != "token_type_ids"}
        return pooled(self._model.get_text_features(**inputs)).float()  # (N, D)

    @torch.inference_mode()
    def embed_images(self, images: np.ndarray) -> torch.Tensor:
        """(B, H, W, 3) uint8 RGB -> (B, D) float32 image embeddings (not normalised)."""
        out = []
        for start in range(0, len(images), self.config.batch_size):
            batch = to_pil(images[start : start + self.config.batch_size])
            features = self._image_processor(images=batch, return_tensors="pt")
            inputs = {k: v.to(self._device) for k, v in features.items()}
            inputs["pixel_values"] = inputs["pixel_values"].to(self._model.dtype)
            out.append(pooled(self._model.get_image_features(**inputs)).float())
        return torch.cat(out)

    def raw_reward(self, query: RewardQuery) -> np.ndarray:
        """(B,) projected reward ``R`` averaged over the configured cameras (uncalibrated)."""
        per_camera, _ = query_images(query, self.config.cameras)
        rewards = [
            goal_baseline_reward(
                self.embed_images(images), self._goal, self._baseline, self.config.alpha
            )
            for images in per_camera
        ]
        return torch.stack(rewards).mean(dim=0).cpu().numpy().astype(np.float32)

    def predict(self, query: RewardQuery) -> RewardResult:
        """Success probability ``sigmoid((R - offset) / scale)`` and reward ``p - 1``."""
        p = calibrated_probability(
            self.raw_reward(query), self.config.prob_offset, self.config.prob_scale
        )
        return RewardResult(
            success_prob=p,
            reward=p - np.float32(1.0),
            model_id=self.model_id,
            model_version=self.model_version,
        )
