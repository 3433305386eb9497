"""Tiny, randomly initialised Hugging Face models for the VLM reward tests (no downloads).

Imported as ``vlm_tiny`` (the test directory is on sys.path). Each builder writes a complete
``save_pretrained`` directory (config, safetensors weights, tokenizer, image processor) that the
reward models load with ``local_files_only=True``. The tokenizers are word-level vocabularies
built with the ``tokenizers`` library.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # any attempt to reach the Hub fails instead of downloading
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402

transformers = pytest.importorskip("transformers", reason="the vlm extra is not installed")
import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, processors  # noqa: E402

CLIP_WORDS = (
    "[PAD] [UNK] <s> </s> a robot gripper holding red cube on the table empty scene photo of"
).split()
"""Vocabulary of the tiny dual encoders (ids are positions)."""

JUDGE_WORDS = (
    "[PAD] [UNK] <s> </s> <image> yes Yes no No USER: ASSISTANT: task: pick place cube done? is the"
).split()
"""Vocabulary of the tiny judge: under 20 tokens, so top-20 logprobs cover all of it."""


def _tokenizer(words: list[str], append_eos: bool) -> transformers.PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    single = "<s> $A </s>" if append_eos else "<s> $A"
    special = [("<s>", vocab["<s>"])] + ([("</s>", vocab["</s>"])] if append_eos else [])
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=special)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=16,
    )


def _encoder_configs() -> tuple[dict, dict]:
    text = dict(
        vocab_size=len(CLIP_WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
    )
    vision = dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    return text, vision


def build_clip(path: Path, seed: int = 0) -> Path:
    """A tiny CLIP (ViT 32 px, 8 px patches, 8-d projection) with tokenizer and processor."""
    text, vision = _encoder_configs()
    text.update(bos_token_id=2, eos_token_id=3, pad_token_id=0)
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=8)
    torch.manual_seed(seed)
    transformers.CLIPModel(config).save_pretrained(path)
    _tokenizer(CLIP_WORDS, append_eos=True).save_pretrained(path)
    transformers.CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(path)
    return path


def build_siglip(path: Path, seed: int = 0) -> Path:
    """A tiny SigLIP (text padded to max_length 16) with tokenizer and processor."""
    text, vision = _encoder_configs()
    text.update(pad_token_id=0, bos_token_id=2, eos_token_id=3)
    config = transformers.SiglipConfig(text_config=text, vision_config=vision)
    torch.manual_seed(seed)
    transformers.SiglipModel(config).save_pretrained(path)
    _tokenizer(CLIP_WORDS, append_eos=True).save_pretrained(path)
    transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


def build_dinov2(
    path: Path,
    seed: int = 0,
    image_mean: tuple[float, float, float] = (0.485, 0.456, 0.406),
    image_std: tuple[float, float, float] = (0.229, 0.224, 0.225),
) -> Path:
    """A tiny DINOv2 (ViT 32 px, 8 px patches, 16-d) with DINOv2's processor type (resize the
    short edge to 36, centre-crop 32) and the given normalisation."""
    config = transformers.Dinov2Config(**_encoder_configs()[1])
    torch.manual_seed(seed)
    transformers.Dinov2Model(config).save_pretrained(path)
    transformers.BitImageProcessor(
        size={"shortest_edge": 36},
        crop_size={"height": 32, "width": 32},
        do_center_crop=True,
        image_mean=list(image_mean),
        image_std=list(image_std),
    ).save_pretrained(path)
    return path


def build_siglip_vision(path: Path, seed: int = 0) -> Path:
    """A tiny SigLIP vision tower alone (``SiglipVisionModel``, 32 px), no image processor."""
    config = transformers.SiglipVisionConfig(**_encoder_configs()[1])
    torch.manual_seed(seed)
    transformers.SiglipVisionModel(config).save_pretrained(path)
    return path


CHAT_TEMPLATE = (
    "{% for m in messages %}USER: {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endfor %}{% if add_generation_prompt %} ASSISTANT:{% endif %}"
)
"""A chat template that renders the same prompt as the judge's default raw format."""


def build_llava(path: Path, seed: int = 0, chat_template: str | None = None) -> Path:
    """A tiny LLaVA judge: CLIP vision tower (16 px, 4 image tokens) + 1-layer Llama."""
    vision = transformers.CLIPVisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=16,
        patch_size=8,
    )
    text = transformers.LlamaConfig(
        vocab_size=len(JUDGE_WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.5,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    config = transformers.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=JUDGE_WORDS.index("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    transformers.LlavaForConditionalGeneration(config).save_pretrained(path)
    tokenizer = _tokenizer(JUDGE_WORDS, append_eos=False)
    tokenizer.add_tokens(["<image>"], special_tokens=True)  # kept whole, never split
    processor = transformers.LlavaProcessor(
        image_processor=transformers.CLIPImageProcessor(
            size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}
        ),
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=chat_template,
    )
    processor.save_pretrained(path)
    return path
