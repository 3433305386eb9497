"""Reward model latency and throughput: in process vs through the gRPC reward server.

For batch 1, 8 and 32: frames/s and p50/p99 latency of ``model.predict`` in process, and of
``RewardClient.predict`` against a server in a subprocess on 127.0.0.1 (JPEG encode on the
client, gRPC, JPEG decode and micro-batching on the server, the model, the reply), one request
in flight. Then ``--concurrency`` clients sending batch-1 requests at once, which the server's
micro-batcher groups (its ``predict_calls`` tell how well). Prints ONE JSON object.

    python bench/reward_latency.py                      # ~30 s on 2 CPU cores
    python bench/reward_latency.py --duration-s 10 --image-size 224 --cameras front wrist
    python bench/reward_latency.py --model rm/                   # a trained reward classifier
    python bench/reward_latency.py --model weights.safetensors   # saved weights of BenchNet

The model is ``BenchNet``, a small conv net (3 conv layers, pooled, linear head) with seeded
weights, or with ``--model``: a directory from `robot-rl reward train` (its cameras and image
size replace ``--cameras`` / ``--image-size``), or BenchNet weights in a safetensors file.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import platform
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import tyro

from robot_rl.core.protocols import RewardQuery, RewardResult

if TYPE_CHECKING:
    from rewards.serve import RewardClient


@dataclass(frozen=True)
class BenchConfig:
    """What to measure."""

    batches: tuple[int, ...] = (1, 8, 32)
    """Batch sizes (frames per camera per request)."""
    duration_s: float = 3.0
    """Measuring time per (mode, batch), seconds (after a 0.5 s warm-up)."""
    image_size: int = 96
    """Square camera image side, pixels."""
    cameras: tuple[str, ...] = ("front",)
    """Camera names (each request carries every camera)."""
    state_dim: int = 8
    """Flat state width sent with each frame (0: none)."""
    concurrency: int = 8
    """Concurrent batch-1 clients for the micro-batching figure (0: skip)."""
    max_batch: int = 32
    """Server micro-batch limit, frames."""
    max_wait_ms: float = 2.0
    """Server micro-batch wait, milliseconds."""
    jpeg_quality: int = 95
    """Client JPEG quality (the client's default)."""
    torch_threads: int = 1
    """torch threads in the bench and in the server process (the client shares the cores)."""
    model: Path | None = None
    """A reward classifier directory (card.json), or safetensors weights of BenchNet (None:
    BenchNet with seeded random weights)."""

    def resolved(self) -> BenchConfig:
        """With a classifier: its cameras and image size."""
        if self.model is not None and (Path(self.model) / "card.json").is_file():
            from rewards.classifier import read_card

            card = read_card(self.model)
            return dataclasses.replace(
                self, cameras=tuple(card.cameras), image_size=int(card.image_size[0])
            )
        return self


def build_model(cfg: BenchConfig):
    """The model to measure (see :attr:`BenchConfig.model`)."""
    if cfg.model is not None and (Path(cfg.model) / "card.json").is_file():
        from rewards.classifier import load_classifier
        from robot_rl.app.rewards.reward import make_encoder

        return load_classifier(cfg.model, make_encoder)
    return BenchNet(cfg.cameras, cfg.state_dim, cfg.model)


class BenchNet:
    """A small conv-net reward model: per camera conv(3->16->32->32, stride 2) + mean pool,
    concatenated with the state, linear head -> success logit; reward = p - 1."""

    model_id = "bench-conv"

    def __init__(self, cameras: tuple[str, ...], state_dim: int, weights: Path | None) -> None:
        self.cameras = cameras
        self.state_dim = state_dim
        g = torch.Generator().manual_seed(0)
        self.net = torch.nn.ModuleDict(
            {
                "encoder": torch.nn.Sequential(
                    torch.nn.Conv2d(3, 16, 3, stride=2),
                    torch.nn.ReLU(),
                    torch.nn.Conv2d(16, 32, 3, stride=2),
                    torch.nn.ReLU(),
                    torch.nn.Conv2d(32, 32, 3, stride=2),
                    torch.nn.ReLU(),
                ),
                "head": torch.nn.Linear(32 * len(cameras) + state_dim, 1),
            }
        )
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
        self.model_version = "seed0"
        if weights is not None:
            from safetensors.torch import load_file

            self.net.load_state_dict(load_file(str(weights)))
            self.model_version = weights.name
        self.net.eval()

    def predict(self, query: RewardQuery) -> RewardResult:
        with torch.inference_mode():
            feats = []
            for cam in self.cameras:
                x = torch.from_numpy(query.images[cam]).permute(0, 3, 1, 2).float() / 255.0
                feats.append(self.net["encoder"](x).mean(dim=(2, 3)))  # (B, 32)
            if self.state_dim:
                feats.append(torch.from_numpy(query.state))  # (B, S)
            p = torch.sigmoid(self.net["head"](torch.cat(feats, dim=1)))[:, 0].numpy()
        return RewardResult(p, p - 1.0, self.model_id, self.model_version)


def make_query(cfg: BenchConfig, batch: int, rng: np.random.Generator) -> RewardQuery:
    """Smooth random images (JPEG-compressible like camera frames) and a random state."""
    small = rng.integers(0, 256, (batch, 12, 12, 3), dtype=np.uint8)
    reps = -(-cfg.image_size // 12)
    frames = np.repeat(np.repeat(small, reps, axis=1), reps, axis=2)
    frames = np.ascontiguousarray(frames[:, : cfg.image_size, : cfg.image_size])
    state = rng.standard_normal((batch, cfg.state_dim)).astype(np.float32)
    return RewardQuery(
        images={cam: frames for cam in cfg.cameras},
        state=state if cfg.state_dim else None,
        task_text="pick up the cube",
    )


def measure(call: Callable[[], object], duration_s: float) -> list[float]:
    """Latencies (s) of back-to-back calls for ``duration_s`` after a 0.5 s warm-up."""
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        call()
    lat = []
    end = time.perf_counter() + duration_s
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t0)
    return lat


def figures(lat_s: list[float], frames_per_call: int, wall_s: float | None = None) -> dict:
    wall_s = wall_s if wall_s is not None else sum(lat_s)
    return {
        "calls": len(lat_s),
        "frames_per_s": round(len(lat_s) * frames_per_call / wall_s, 1),
        "p50_ms": round(1000 * float(np.percentile(lat_s, 50)), 3),
        "p99_ms": round(1000 * float(np.percentile(lat_s, 99)), 3),
    }


def _serve_child(cfg: BenchConfig, conn: Connection) -> None:
    """Server process: send the port, then answer each "stats" with the server's counters
    until "stop"."""
    from rewards.serve import serve

    torch.set_num_threads(cfg.torch_threads)
    model = build_model(cfg)
    with serve(model, max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms) as srv:
        conn.send(srv.port)
        while conn.recv() == "stats":
            conn.send(srv.stats())


def concurrent(
    client: RewardClient, cfg: BenchConfig, query: RewardQuery
) -> tuple[list[float], float]:
    """``cfg.concurrency`` threads sending batch-1 requests back to back."""
    lat: list[float] = []
    lock = threading.Lock()
    start = time.perf_counter() + 0.5  # warm-up before
    end = start + cfg.duration_s

    def worker() -> None:
        mine = []
        while (now := time.perf_counter()) < end:
            client.predict(query)
            if now >= start:
                mine.append(time.perf_counter() - now)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(cfg.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, cfg.duration_s


def server_stats(conn: Connection) -> dict:
    conn.send("stats")
    if not conn.poll(30):
        raise RuntimeError("reward server subprocess stopped answering")
    return conn.recv()


def machine() -> dict:
    try:
        from sample_efficiency import machine_info  # bench/ is on sys.path when run as a script

        return machine_info()
    except ImportError:
        return {"cpu_cores": os.cpu_count(), "python": platform.python_version()}


def main(cfg: BenchConfig) -> dict:
    from rewards.serve import RewardClient
    from rewards.serve.codec import encode_images

    cfg = cfg.resolved()
    torch.set_num_threads(cfg.torch_threads)
    rng = np.random.default_rng(0)
    model = build_model(cfg)
    queries = {b: make_query(cfg, b, rng) for b in cfg.batches}
    out: dict = {
        "benchmark": "reward_latency",
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "machine": machine(),
        "model_id": model.model_id,
    }

    out["in_process"] = {
        str(b): figures(measure(lambda q=q: model.predict(q), cfg.duration_s), b)
        for b, q in queries.items()
    }
    out["client_jpeg_encode"] = {
        str(b): figures(measure(lambda q=q: encode_images(q.images), 0.5), b)
        for b, q in queries.items()
    }
    out["request_bytes"] = {
        str(b): sum(len(f) for fs in encode_images(q.images).values() for f in fs)
        for b, q in queries.items()
    }

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve_child, args=(cfg, child), daemon=True)
    proc.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("reward server subprocess did not start within 60 s")
        port = parent.recv()
        with RewardClient(f"127.0.0.1:{port}", timeout_s=30.0, jpeg_quality=cfg.jpeg_quality) as c:
            out["server"] = {
                str(b): figures(measure(lambda q=q: c.predict(q), cfg.duration_s), b)
                for b, q in queries.items()
            }
            if cfg.concurrency:
                before = server_stats(parent)
                lat, wall_s = concurrent(c, cfg, make_query(cfg, 1, rng))
                after = server_stats(parent)
                calls = after["predict_calls"] - before["predict_calls"]
                frames = after["frames_computed"] - before["frames_computed"]
                out[f"server_concurrent_{cfg.concurrency}x1"] = {
                    **figures(lat, 1, wall_s),
                    "mean_frames_per_model_call": round(frames / max(calls, 1), 2),
                }
        out["server_stats"] = server_stats(parent)
        parent.send("stop")
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
