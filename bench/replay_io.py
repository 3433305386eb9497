"""Replay I/O: zarr episode-log append rate and RAM-buffer rebuild time. JSON lines out.

    python bench/replay_io.py                      # 2000 transitions, two 128x128 cameras
    python bench/replay_io.py --steps 10000 --images noise

Benchmarks (one JSON object each: config, machine, figures):
    append:   EpisodeLog.append of transitions with two cameras (flush every 10 steps, episodes
              of ``episode_length``), the writes and commit records included.
              figures: transitions_per_s, flushes_per_s, disk_bytes_per_transition.
    rebuild:  EpisodeLog.open + rebuild_buffer into an empty ReplayBuffer (what resume does).
              figures: seconds for the run, and s_per_100k_transitions, linearly extrapolated
              from ``steps`` when steps < 100k (``extrapolated: true`` says so).
    sample:   Mixer.sample of batch 256 (half demo) from two rebuilt buffers.
              figures: batches_per_s.

Images: ``smooth`` frames (gradients, a moving block and mild noise, compressing roughly like
camera images) or ``noise`` (incompressible worst case). Frames are generated before timing.
Timings are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
import zarr

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.replay import EpisodeLog, Mixer, ReplayBuffer, rebuild_buffer


@dataclass(frozen=True)
class BenchConfig:
    """Replay I/O benchmark."""

    steps: int = 2000
    """Transitions written (and rebuilt)."""
    episode_length: int = 100
    """Steps per episode."""
    image_size: int = 128
    """Camera images are image_size x image_size pixels."""
    cameras: tuple[str, ...] = ("front", "wrist")
    """Camera names (one image array each)."""
    state_dim: int = 20
    """Length of the state vector."""
    action_dim: int = 7
    """Length of the action vector."""
    flush_every_steps: int = 10
    """EpisodeLog flush period in steps (1 s of control at 10 Hz)."""
    image_chunk_steps: int = 1
    """Observation rows per image chunk in the store (EpisodeLog.create)."""
    images: Literal["smooth", "noise"] = "smooth"
    """Synthetic frame content."""
    sample_batches: int = 50
    """Batches timed in the sample benchmark."""
    out_dir: str | None = None
    """Where to write the store (None: a temporary directory, removed afterwards)."""
    seed: int = 0
    """Seed of the synthetic data."""

    def __post_init__(self) -> None:
        if self.steps < self.episode_length or self.episode_length < 1:
            raise ValueError("need steps >= episode_length >= 1")


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "zarr": zarr.__version__,
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
    }


def frames(cfg: BenchConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, H, W, 3) uint8 synthetic frames."""
    h = w = cfg.image_size
    if cfg.images == "noise":
        return rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        base = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy + 3 * i) % 256], -1)
        x0 = (5 * i) % (w - 20)
        base[h // 3 : h // 3 + 20, x0 : x0 + 20] = (200, 30, 30)
        out[i] = np.clip(base + rng.normal(0, 4, base.shape), 0, 255).astype(np.uint8)
    return out


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(cfg: BenchConfig) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(cfg.seed)
    layout = ObsLayout(
        cfg.state_dim,
        {c: ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8") for c in cfg.cameras},
    )
    pool = {c: frames(cfg, 64, rng) for c in cfg.cameras}
    states = rng.normal(size=(cfg.steps + 1, cfg.state_dim)).astype(np.float32)
    actions = rng.uniform(-1, 1, (cfg.steps, cfg.action_dim)).astype(np.float32)

    def obs(k: int) -> dict:
        return {"state": states[k], "images": {c: p[k % 64] for c, p in pool.items()}}

    tmp = Path(cfg.out_dir or tempfile.mkdtemp(prefix="replay_io_"))
    path = tmp / "bench.zarr"
    n_eps = cfg.steps // cfg.episode_length
    steps = n_eps * cfg.episode_length
    try:
        t0 = time.perf_counter()
        with EpisodeLog.create(
            path,
            layout,
            cfg.action_dim,
            flush_every_steps=cfg.flush_every_steps,
            image_chunk_steps=cfg.image_chunk_steps,
        ) as log:
            k = 0
            for ep in range(n_eps):
                log.begin_episode("online", seed=ep)
                o = obs(k)
                for t in range(cfg.episode_length):
                    nxt = obs(k + 1)
                    log.append(o, actions[k], actions[k], 0.0, False,
                               t == cfg.episode_length - 1, False, 0, 0.1 * k, nxt)  # fmt: skip
                    o, k = nxt, k + 1
                log.end_episode(success=False)
        dt_append = time.perf_counter() - t0
        report("append", cfg, {
            "transitions": steps,
            "seconds": dt_append,
            "transitions_per_s": steps / dt_append,
            "flushes_per_s": steps / cfg.flush_every_steps / dt_append,
            "disk_bytes_per_transition": du(path) / steps,
            "raw_image_bytes_per_transition": len(cfg.cameras) * cfg.image_size**2 * 3,
        })  # fmt: skip

        t0 = time.perf_counter()
        with EpisodeLog.open(path) as log:
            online = ReplayBuffer(steps, layout, cfg.action_dim, obs_capacity=steps + n_eps + 1)
            rebuild_buffer(log, online)
        dt_rebuild = time.perf_counter() - t0
        report("rebuild", cfg, {
            "transitions": steps,
            "seconds": dt_rebuild,
            "s_per_100k_transitions": dt_rebuild * 100_000 / steps,
            "extrapolated": steps < 100_000,
            "buffer_ram_bytes_per_transition": online.nbytes / steps,
        })  # fmt: skip

        mixer = Mixer(online, online, 0.5)
        gen = np.random.default_rng(1)
        mixer.sample(256, gen)
        t0 = time.perf_counter()
        for _ in range(cfg.sample_batches):
            mixer.sample(256, gen)
        dt = time.perf_counter() - t0
        report("sample", cfg, {"batch_size": 256, "batches_per_s": cfg.sample_batches / dt})
    finally:
        if cfg.out_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def report(name: str, cfg: BenchConfig, figures: dict) -> None:
    print(
        json.dumps({"benchmark": name, "config": asdict(cfg), "machine": machine(), **figures}),
        flush=True,
    )


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
