"""Generative VLM judge: "is the task done?", read off the yes/no answer-token probabilities.

The judge never parses generated text. One forward pass gives the next-token logits after the
question; the success probability is the softmax restricted to the two answer-token sets::

    p = sum_{t in YES} e^{l_t} / (sum_{t in YES} e^{l_t} + sum_{t in NO} e^{l_t})

where each set holds the single-token spellings of the answer words (``"yes"``, ``" Yes"``, ...).
Backends: :class:`TransformersJudge` (in process, a transformers vision-language model from a
local directory) and ``rewards.vlm_judge_openai.OpenAIJudgeClient`` (any OpenAI-compatible
server, e.g. vLLM, through ``logprobs``). :class:`JudgeVLMReward` turns either into a
``RewardModel``: one judgement per camera image, probabilities averaged over cameras, reward
``p - 1``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
import torch

from rewards.hf_local import (
    check_cameras,
    check_dtype_device,
    check_model_dir,
    pretrained_kwargs,
    query_images,
    settings_digest,
    to_pil,
    weights_digest,
)
from robot_rl.core.protocols import RewardQuery, RewardResult


def yes_probability(
    logits: torch.Tensor, yes_ids: Sequence[int], no_ids: Sequence[int]
) -> torch.Tensor:
    """Probability of a yes answer among yes/no answers, from next-token logits.

    Args:
        logits: (B, V) next-token logits.
        yes_ids: Token ids that spell yes (their probabilities are summed).
        no_ids: Token ids that spell no (their probabilities are summed).

    Returns:
        (B,) float32 ``sigmoid(logsumexp(l[yes]) - logsumexp(l[no]))``.
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must be (B, V), got {tuple(logits.shape)}")
    if not yes_ids or not no_ids:
        raise ValueError("need at least one yes and one no token id")
    if set(yes_ids) & set(no_ids):
        raise ValueError(f"yes and no token ids overlap: {sorted(set(yes_ids) & set(no_ids))}")
    vocab = logits.shape[1]
    if max(*yes_ids, *no_ids) >= vocab or min(*yes_ids, *no_ids) < 0:
        raise ValueError(f"answer token ids must be in [0, {vocab})")
    logits = logits.float()
    lse_yes = torch.logsumexp(logits[:, list(yes_ids)], dim=1)  # (B,)
    lse_no = torch.logsumexp(logits[:, list(no_ids)], dim=1)  # (B,)
    return torch.sigmoid(lse_yes - lse_no)


def spellings(word: str) -> set[str]:
    """Case and leading-space variants of an answer word: yes, Yes, YES, ' yes', ..."""
    cases = {word, word.lower(), word.capitalize(), word.upper()}
    return cases | {" " + c for c in cases}


def answer_token_ids(tokenizer: Any, words: Sequence[str]) -> tuple[int, ...]:
    """Ids of the single-token spellings of ``words`` in a Hugging Face tokenizer.

    Raises:
        ValueError: If no spelling of any word is a single known token.
    """
    ids: set[int] = set()
    for word in words:
        for text in spellings(word):
            tokens = tokenizer.encode(text, add_special_tokens=False)
            if len(tokens) == 1 and tokens[0] != tokenizer.unk_token_id:
                ids.add(int(tokens[0]))
    if not ids:
        raise ValueError(f"no spelling of {list(words)} is a single token of this tokenizer")
    return tuple(sorted(ids))


def format_question(template: str, task_text: str) -> str:
    """Insert the task text at ``{task}`` in ``template``."""
    return template.replace("{task}", task_text.strip())


class JudgeBackend(Protocol):
    """Something that answers one yes/no question about each image of a batch."""

    @property
    def version(self) -> str:
        """Which model answers (weights digest, or server model name)."""
        ...

    def yes_probability(
        self,
        images: np.ndarray,
        question: str,
        yes_words: tuple[str, ...],
        no_words: tuple[str, ...],
    ) -> np.ndarray:
        """(B, H, W, 3) uint8 images + question -> (B,) float32 P(yes | yes or no)."""
        ...


@dataclass(frozen=True)
class JudgeConfig:
    """What the judge is asked and how answers become a reward."""

    cameras: tuple[str, ...]
    """Cameras judged, one image per question; probabilities are averaged over cameras."""
    question_template: str = (
        "The robot's task is: {task}. Look at the image. Is the task complete? Answer yes or no."
    )
    """Question text; ``{task}`` is replaced by the query's task text."""
    task_text: str | None = None
    """Task text used when a query carries none (a query's own task text wins)."""
    yes_words: tuple[str, ...] = ("yes",)
    """Answer words meaning success; case and leading-space variants are included."""
    no_words: tuple[str, ...] = ("no",)
    """Answer words meaning failure; case and leading-space variants are included."""

    def __post_init__(self) -> None:
        check_cameras(self.cameras)
        if "{task}" not in self.question_template:
            raise ValueError("question_template must contain '{task}' where the task goes")
        if not self.yes_words or not self.no_words:
            raise ValueError("yes_words and no_words must be non-empty tuples")
        overlap = {w.lower() for w in self.yes_words} & {w.lower() for w in self.no_words}
        if overlap:
            raise ValueError(f"yes_words and no_words overlap: {sorted(overlap)}")


class JudgeVLMReward:
    """``RewardModel`` from a yes/no VLM judge (see module docstring); reward ``p - 1``."""

    def __init__(self, config: JudgeConfig, backend: JudgeBackend) -> None:
        self.config = config
        self._backend = backend
        self._version = f"{backend.version}-{settings_digest(asdict(config))}"

    @property
    def model_id(self) -> str:
        return "vlm_judge"

    @property
    def model_version(self) -> str:
        return self._version

    def predict(self, query: RewardQuery) -> RewardResult:
        task = query.task_text if query.task_text is not None else self.config.task_text
        if task is None or not task.strip():
            raise ValueError("the judge needs a task: set query.task_text or JudgeConfig.task_text")
        question = format_question(self.config.question_template, task)
        per_camera, batch = query_images(query, self.config.cameras)
        probs = [
            np.asarray(
                self._backend.yes_probability(
                    images, question, self.config.yes_words, self.config.no_words
                ),
                dtype=np.float32,
            )
            for images in per_camera
        ]
        for p in probs:
            if p.shape != (batch,):
                raise RuntimeError(f"judge backend returned shape {p.shape}, expected ({batch},)")
        p = np.mean(probs, axis=0).astype(np.float32)
        return RewardResult(
            success_prob=p,
            reward=p - np.float32(1.0),
            model_id=self.model_id,
            model_version=self.model_version,
        )


@dataclass(frozen=True)
class TransformersJudgeConfig:
    """An in-process transformers vision-language model (e.g. LLaVA, Qwen2-VL, PaliGemma)."""

    model_dir: str
    """Local ``save_pretrained`` directory with the model (``AutoModelForImageTextToText``) and
    its processor (``AutoProcessor``); never downloaded."""
    device: str = "cpu"
    """Torch device of the model, e.g. ``"cuda:0"``."""
    dtype: str = "float32"
    """Model weights dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``."""
    batch_size: int = 8
    """Images per forward pass."""
    use_chat_template: bool = True
    """Build the prompt with the processor's chat template when it has one."""
    raw_prompt_format: str = "USER: {image}\n{question} ASSISTANT:"
    """Prompt when no chat template is used: ``{image}`` becomes the processor's image token,
    ``{question}`` the question."""
    version: str | None = None
    """Model version label; None = digest of the weights files (reads every weight byte)."""

    def __post_init__(self) -> None:
        check_dtype_device(self.dtype, self.device)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if "{image}" not in self.raw_prompt_format or "{question}" not in self.raw_prompt_format:
            raise ValueError("raw_prompt_format must contain '{image}' and '{question}'")


class TransformersJudge:
    """In-process judge: one forward pass (no ``generate``) per batch, next-token logits.

    All rows of a batch share one prompt and one image size, so no padding is involved and the
    next token follows the last prompt position.
    """

    def __init__(self, config: TransformersJudgeConfig) -> None:
        import transformers

        self.config = config
        path = check_model_dir(config.model_dir)
        self._device = torch.device(config.device)
        self.processor = transformers.AutoProcessor.from_pretrained(path, local_files_only=True)
        self.tokenizer = getattr(self.processor, "tokenizer", None)
        if self.tokenizer is None:
            raise ValueError(f"the processor in {str(path)!r} has no tokenizer")
        auto_cls = getattr(transformers, "AutoModelForImageTextToText", None)
        auto_cls = auto_cls or transformers.AutoModelForVision2Seq
        self.model = auto_cls.from_pretrained(path, **pretrained_kwargs(config.dtype))
        self.model.to(self._device).eval()
        params = inspect.signature(self.model.forward).parameters
        self._keep_kw = next(
            (k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None
        )
        self._chat = config.use_chat_template and bool(
            getattr(self.processor, "chat_template", None)
        )
        if not self._chat and not getattr(self.processor, "image_token", None):
            raise ValueError(
                f"the processor in {str(path)!r} has neither a chat template nor an image_token; "
                "cannot place the image in the prompt"
            )
        self._ids: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._version = config.version or weights_digest(path)

    @property
    def version(self) -> str:
        return self._version

    def prompt(self, question: str) -> str:
        """The full text prompt (image placeholder included) for ``question``."""
        if self._chat:
            messages = [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}
            ]
            return self.processor.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        return self.config.raw_prompt_format.replace("{image}", self.processor.image_token).replace(
            "{question}", question
        )

    def answer_ids(self, words: tuple[str, ...]) -> tuple[int, ...]:
        """Token ids of ``words`` (cached)."""
        if words not in self._ids:
            self._ids[words] = answer_token_ids(self.tokenizer, words)
        return self._ids[words]

    @torch.inference_mode()
    def next_token_logits(self, images: np.ndarray, question: str) -> torch.Tensor:
        """(B, H, W, 3) uint8 images + question -> (B, V) float32 next-token logits."""
        prompt = self.prompt(question)
        out = []
        for start in range(0, len(images), self.config.batch_size):
            pil = to_pil(images[start : start + self.config.batch_size])
            inputs = self.processor(images=pil, text=[prompt] * len(pil), return_tensors="pt")
            inputs = {
                k: v.to(self._device, self.model.dtype)
                if v.is_floating_point()
                else v.to(self._device)
                for k, v in inputs.items()
                if isinstance(v, torch.Tensor)
            }
            mask = inputs.get("attention_mask")
            if mask is not None and not bool(mask.all()):
                raise RuntimeError("judge prompts were padded; the last position is not the answer")
            kwargs = {self._keep_kw: 1} if self._keep_kw else {}
            logits = self.model(**inputs, **kwargs).logits  # (b, T or 1, V)
            out.append(logits[:, -1, :].float())
        return torch.cat(out)

    def yes_probability(
        self,
        images: np.ndarray,
        question: str,
        yes_words: tuple[str, ...],
        no_words: tuple[str, ...],
    ) -> np.ndarray:
        logits = self.next_token_logits(images, question)
        p = yes_probability(logits, self.answer_ids(yes_words), self.answer_ids(no_words))
        return p.cpu().numpy().astype(np.float32)
