"""Judge backend for any OpenAI-compatible chat-completions server (vLLM, SGLang, llama.cpp).

One request per image: ``POST {base_url}/chat/completions`` with the image as a base64 JPEG
data URL and the question, ``max_tokens=1``, ``temperature=0``, ``logprobs=true``,
``top_logprobs=20``. The answer probability is read from the first token's ``top_logprobs``
(never from the generated text)::

    p = sum_{yes spellings} e^logprob / (sum_{yes spellings} e^logprob + sum_{no ...} e^logprob)

A spelling missing from the top list counts as probability ~0 (it is below the 20th token); if
neither a yes nor a no spelling is there the call fails with the tokens the server offered.
Token text is matched after stripping whitespace (and SentencePiece's ``▁``), ignoring case.
vLLM serves up to 20 logprobs by default (``--max-logprobs``).
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np


def encode_jpeg_data_url(image: np.ndarray, quality: int = 90) -> str:
    """(H, W, 3) uint8 RGB -> ``data:image/jpeg;base64,...``."""
    from PIL import Image

    if image.ndim != 3 or image.shape[-1] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image must be (H, W, 3) uint8, got {image.shape} {image.dtype}")
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_jpeg_data_url(url: str) -> np.ndarray:
    """Inverse of :func:`encode_jpeg_data_url` (lossy: returns the decoded JPEG pixels)."""
    from PIL import Image

    prefix = "data:image/jpeg;base64,"
    if not url.startswith(prefix):
        raise ValueError(f"not a base64 JPEG data URL: {url[:40]!r}...")
    with Image.open(io.BytesIO(base64.b64decode(url[len(prefix) :]))) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


def _norm_token(token: str) -> str:
    return token.replace("\u2581", " ").strip().lower()


def top_logprobs_of(response: Any) -> list[tuple[str, float]]:
    """The first generated token's ``(token, logprob)`` alternatives from a chat completion.

    Raises:
        ValueError: If the response does not have ``choices[0].logprobs.content[0].top_logprobs``.
    """
    where = "choices[0].logprobs.content[0].top_logprobs"
    try:
        first = response["choices"][0]["logprobs"]["content"][0]
        entries = first["top_logprobs"]
        pairs = [(str(e["token"]), float(e["logprob"])) for e in entries]
        sampled = (str(first.get("token")), float(first.get("logprob", -math.inf)))
        if "token" in first and sampled[0] not in {tok for tok, _ in pairs}:
            pairs.append(sampled)  # the generated token, if top_logprobs left it out
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(
            f"chat completion has no usable {where} ({type(e).__name__}: {e}); does the server "
            "support logprobs (vLLM: --max-logprobs >= 20)?"
        ) from e
    if not pairs:
        raise ValueError(f"chat completion has an empty {where}")
    return pairs


def yes_probability_from_logprobs(
    pairs: Sequence[tuple[str, float]], yes_words: Sequence[str], no_words: Sequence[str]
) -> float:
    """P(yes | yes or no) from ``(token, logprob)`` pairs; absent spellings count as 0."""
    yes = {w.lower() for w in yes_words}
    no = {w.lower() for w in no_words}
    p_yes = sum(math.exp(lp) for tok, lp in pairs if _norm_token(tok) in yes)
    p_no = sum(math.exp(lp) for tok, lp in pairs if _norm_token(tok) in no)
    if p_yes + p_no <= 0.0:
        offered = [tok for tok, _ in sorted(pairs, key=lambda p: -p[1])]
        raise ValueError(
            f"neither {sorted(yes)} nor {sorted(no)} is among the server's top tokens {offered}; "
            "rephrase the question so that the model answers yes or no"
        )
    return p_yes / (p_yes + p_no)


@dataclass(frozen=True)
class OpenAIJudgeConfig:
    """Where and how to ask an OpenAI-compatible server."""

    base_url: str
    """API root including ``/v1``, e.g. ``"http://gpu-box:8000/v1"``."""
    model: str
    """Model name as the server knows it (vLLM: the ``--served-model-name`` or path)."""
    timeout_s: float = 30.0
    """Per-request timeout, seconds."""
    jpeg_quality: int = 90
    """JPEG quality of the uploaded images, 1..95."""
    top_logprobs: int = 20
    """Alternatives requested for the answer token (OpenAI and vLLM allow at most 20)."""
    max_concurrent: int = 4
    """Requests in flight at once (one per image)."""
    api_key_env: str | None = None
    """Name of an environment variable holding a bearer token; None = no Authorization."""

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must name the served model")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if not 1 <= self.jpeg_quality <= 95:
            raise ValueError(f"jpeg_quality must be in [1, 95], got {self.jpeg_quality}")
        if not 1 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in [1, 20], got {self.top_logprobs}")
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {self.max_concurrent}")


class OpenAIJudgeClient:
    """``JudgeBackend`` over HTTP (urllib); see the module docstring for the protocol."""

    def __init__(self, config: OpenAIJudgeConfig) -> None:
        self.config = config
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if config.api_key_env is not None:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise ValueError(f"environment variable {config.api_key_env} is unset or empty")
            self._headers["Authorization"] = f"Bearer {key}"

    @property
    def version(self) -> str:
        return f"openai:{self.config.model}"

    def request_body(self, image: np.ndarray, question: str) -> dict[str, Any]:
        """The chat-completions request for one (H, W, 3) uint8 image."""
        url = encode_jpeg_data_url(image, self.config.jpeg_quality)
        content = [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": question},
        ]
        return {
            "model": self.config.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": self.config.top_logprobs,
        }

    def complete(self, body: dict[str, Any]) -> Any:
        """POST ``body``; returns the decoded JSON answer."""
        data = json.dumps(body).encode()
        request = urllib.request.Request(self._url, data=data, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace")
            raise RuntimeError(f"judge server {self._url} answered HTTP {e.code}: {detail}") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise TimeoutError(
                    f"judge server {self._url} did not answer within {self.config.timeout_s} s"
                ) from e
            raise ConnectionError(f"cannot reach judge server {self._url}: {e.reason}") from e
        except TimeoutError as e:
            raise TimeoutError(
                f"judge server {self._url} did not answer within {self.config.timeout_s} s"
            ) from e
        try:
            return json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"judge server {self._url} sent non-JSON: {raw[:120]!r}") from e

    def yes_probability(
        self,
        images: np.ndarray,
        question: str,
        yes_words: tuple[str, ...],
        no_words: tuple[str, ...],
    ) -> np.ndarray:
        def one(image: np.ndarray) -> float:
            pairs = top_logprobs_of(self.complete(self.request_body(image, question)))
            return yes_probability_from_logprobs(pairs, yes_words, no_words)

        with ThreadPoolExecutor(max_workers=self.config.max_concurrent) as pool:
            return np.asarray(list(pool.map(one, images)), dtype=np.float32)
