"""Actor -> learner over gRPC on 127.0.0.1: the transport alone, and real learner/actor processes.

This file is the entry point: the CLI and the transport part. The end-to-end part lives in
bench/distributed_e2e.py (its process harness in bench/_distributed_procs.py); the config and
cameras that both parts use are in bench/_distributed_common.py.

``--part transport`` (default; here) measures the transport (robot_rl/transport) in this process,
without the actor loop and the learner's updates. Per benchmark:

- ``transitions``: one or two actors (threads, each with its own LearnerClient) push
  ``--transitions`` transitions with two 128 x 128 cameras (frames rendered by the twin's
  scripted expert on pick_cube, cycled) in batches of ``--batch`` through a LearnerServer into a
  LogSink (zarr on disk, acked after flush, as the learner will run): acked transitions/s,
  payload bytes per transition (zlib and raw);
- ``weights``: the SAC actor's trainable parameters (state policy, and pixels with the conv
  encoder) published ``--weights-rounds`` times: bytes per broadcast and the latency from
  ``publish_weights`` to the client's callback, p50 / p95.

``--part e2e`` (bench/distributed_e2e.py) runs real processes (``python -m robot_rl.cli.main
learner ...`` and ``actor ...``, MuJoCo twin, MUJOCO_GL=osmesa, unpaced actors: the twin steps as
fast as it can) in a temporary directory and watches them from outside: the commit records of the
logs (``log.zarr/commit``: what each actor logged, and the learner's per-actor log, i.e. what it
acknowledged), ``weights_version.json``, ``server.json``, /proc CPU times, and a weights
subscriber of its own (Subscribe without Hello, so it is not an actor). One JSON object per run
(``--e2e-runs``):

- ``e2e`` ``pixels_idle_learner`` / ``pixels_idle_learner_2_actors``: two 128 x 128 cameras,
  learner with ``--learning-starts`` above the budget (no updates: transport, logging and the
  actors' rendering alone), one then two actors: transitions/s into the learner (steady window,
  from the learner's log), each actor's env steps/s, backlog, ticks;
- ``e2e`` ``pixels_learning``: the same with a learner that updates (small networks, batch 64):
  ingest and actor tick overruns while the learner is busy on pixels. The learner owes one
  update per received step and pays them after STOP (not interruptible), so the bench stops it
  after ``--learner-exit-timeout-s`` (SIGTERM, then SIGKILL) and says so (``learner.exit``);
  ``pixels_learning_frames`` is the same with ``--no-actor-features`` (the learner encodes every
  arriving frame instead of taking the actor's features): compare the learner's ``updates``,
  its CPU (``contention``) and ``backbone.frames_encoded`` (not in the default runs:
  ``--e2e-runs pixels_learning pixels_learning_frames``);
- ``e2e`` ``state_learning``: state obs, learner updating from ``--learning-starts 200`` with the
  default networks: actor tick overruns and max_tick_work_s while the learner is busy;
- every ``e2e`` run reports the weights: versions the actors loaded, bytes, and a broadcast
  latency from ``weights_version.json``'s mtime (written just after ``publish_weights`` returns)
  to this bench's subscriber receiving it; it excludes encoding and can be slightly negative;
  ``first_step_policy_version`` > 0 means the actor never acted before weights arrived;
- ``e2e_recovery``: state obs, one actor; once the learner acknowledged ``--kill-after``
  transitions it is SIGKILLed, restarted ``--away-s`` later with ``--resume`` on the same port:
  time from the restart to serving, to the first new acknowledgement, until the learner holds
  everything the actor had logged at the restart (``caught_up``) and what it logs now
  (``caught_up_live``); at the end the learner's log of that actor is compared row by row with
  the actor's log (no transition lost or duplicated; ``truncated`` differs where the crash cut an
  episode, by design).

Pixel learners: the default replay capacity (1M transitions) needs a 50 GiB array per
128 x 128 camera, which a 23 GB machine refuses; the bench passes ``--buffer-capacity
--pixel-buffer-capacity``.

The machine has 2 cores: a learner and one or two actors (plus this bench, mostly asleep)
contend for them; each object reports the processes' CPU use (``contention``) and a timeline.

    python bench/distributed.py                   # transport, about a minute
    python bench/distributed.py --part e2e --out bench/results/distributed_e2e.jsonl  # ~5 min
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _distributed_common import CAMERAS, DistributedBenchConfig  # noqa: E402
from distributed_e2e import bench_e2e  # noqa: E402
from sample_efficiency import machine_info  # noqa: E402

STATE_DIM, ACTION_DIM, EP_LEN = 27, 4, 50


def twin_frames(cfg: DistributedBenchConfig) -> dict[str, np.ndarray]:
    """Camera -> (F, H, W, 3) frames of the scripted expert on pick_cube."""
    from robot_rl.app.envs.build import base_to_policy_action, make_env_from_setup
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.core import keys

    lenv = LearnerEnvConfig(
        task="pick_cube", obs="pixels", cameras=CAMERAS, image_size=cfg.image_size
    )
    env, backend = make_env_from_setup(lenv.env_setup())
    out: dict[str, list] = {c: [] for c in CAMERAS}
    try:
        to_policy = base_to_policy_action(env)
        seed = 0
        while len(out[CAMERAS[0]]) < cfg.frames:
            expert = backend.make_expert()
            expert.reset(np.random.default_rng(seed))
            obs, info = env.reset(seed=seed)
            for _ in range(40):
                for c in CAMERAS:
                    out[c].append(obs[keys.IMAGES][c])
                obs, _, term, trunc, info = env.step(to_policy(expert.act(obs, info)))
                if term or trunc:
                    break
            seed += 1
    finally:
        env.close()
        backend.close()
    return {c: np.stack(v[: cfg.frames]) for c, v in out.items()}


def layout(cfg: DistributedBenchConfig):
    from robot_rl.core.batch import ObsLayout
    from robot_rl.core.specs import ArraySpec

    spec = ArraySpec((cfg.image_size, cfg.image_size, 3), "uint8")
    return ObsLayout(state_dim=STATE_DIM, images={c: spec for c in CAMERAS})


def rows(first: int, n: int, frames: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Transitions first .. first + n - 1 in the codec's format (episodes of EP_LEN steps)."""
    seqs = np.arange(first, first + n)
    ep, t = np.divmod(seqs, EP_LEN)
    nf = len(next(iter(frames.values())))
    rng = np.random.default_rng(first)
    out: dict[str, np.ndarray] = {}
    for prefix, shift in (("obs/", 0), ("next_obs/", 1)):
        idx = (seqs + shift) % nf
        out[prefix + "state"] = np.sin(0.01 * (seqs[:, None] + shift + np.arange(STATE_DIM)))
        out[prefix + "state"] = out[prefix + "state"].astype(np.float32)
        for c, f in frames.items():
            out[f"{prefix}images/{c}"] = f[idx]
    act = rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32)
    last = t == EP_LEN - 1
    out.update(
        action=act, policy_action=act.copy(), reward=-np.ones(n, np.float32),
        terminated=np.zeros(n, bool), truncated=last, intervened=np.zeros(n, bool),
        policy_version=np.zeros(n, np.int64), stamp_s=seqs * 0.1 + 0.1,
        episode=ep.astype(np.int64), step=t.astype(np.int64),
    )  # fmt: skip
    return out


def bench_transitions(cfg: DistributedBenchConfig, actors: int, frames, compress: bool) -> dict:
    from robot_rl.transport.client import LearnerClient, LearnerClientConfig
    from robot_rl.transport.codec import encode_transitions, layout_fingerprint
    from robot_rl.transport.log_sink import LogSink
    from robot_rl.transport.server import LearnerServer, LearnerServerConfig

    lay = layout(cfg)
    sample = rows(0, cfg.batch, frames)
    payload, _, _ = encode_transitions(sample, compress=compress)
    with tempfile.TemporaryDirectory() as tmp:
        sink = LogSink(Path(tmp) / "actors", lay, ACTION_DIM)
        srv = LearnerServer(sink, lay, ACTION_DIM, LearnerServerConfig(bind="127.0.0.1:0"))
        fp = layout_fingerprint(lay, ACTION_DIM)
        clients = [
            LearnerClient(
                LearnerClientConfig(target=srv.address, actor_id=f"actor-{i}", compress=compress),
                fp,
            )
            for i in range(actors)
        ]
        try:
            for c in clients:
                assert c.wait_connected(30.0), c.last_error
            t0 = time.perf_counter()

            def run(c) -> None:
                while c.acked_through < cfg.transitions - 1:
                    s = c.next_seq
                    if s is not None and s < cfg.transitions:
                        n = min(cfg.batch, cfg.transitions - s)
                        if c.push(s, rows(s, n, frames)):
                            continue
                    time.sleep(0.001)  # queue full: the actor would go on with its control tick

            threads = [threading.Thread(target=run, args=(c,)) for c in clients]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            wall = time.perf_counter() - t0
        finally:
            for c in clients:
                c.close()
            srv.stop(0)
            sink.close()
    total = actors * cfg.transitions
    return {
        "benchmark": "transitions",
        "actors": actors,
        "compress": compress,
        "transitions": total,
        "acked_transitions_per_s": total / wall,
        "payload_bytes_per_transition": len(payload) / cfg.batch,
        "wall_s": wall,
    }


def bench_weights(cfg: DistributedBenchConfig, obs: str) -> dict:
    import torch

    from policies.config import SACConfig
    from policies.sac import SACAgent
    from robot_rl.core.batch import ObsLayout
    from robot_rl.transport.client import LearnerClient, LearnerClientConfig
    from robot_rl.transport.codec import layout_fingerprint
    from robot_rl.transport.server import LearnerServer, LearnerServerConfig
    from robot_rl.transport.sink import MemorySink
    from robot_rl.transport.weights import trainable_state

    lay = ObsLayout(state_dim=STATE_DIM, images={}) if obs == "state" else layout(cfg)
    agent = SACAgent(lay, ACTION_DIM, SACConfig(), seed=0)
    # What an actor needs to act: the observation encoder and the actor head.
    policy = torch.nn.ModuleDict({"encoder": agent.encoder, "actor": agent.actor})
    state = trainable_state(policy)
    got: dict[int, float] = {}
    arrived = threading.Condition()

    def on_weights(version: int, _: dict) -> None:
        with arrived:
            got[version] = time.perf_counter()
            arrived.notify_all()

    srv = LearnerServer(MemorySink(), lay, ACTION_DIM, LearnerServerConfig(bind="127.0.0.1:0"))
    client = LearnerClient(
        LearnerClientConfig(target=srv.address, actor_id="actor-0"),
        layout_fingerprint(lay, ACTION_DIM),
        on_weights=on_weights,
    )
    lat, size = [], 0
    try:
        assert client.wait_connected(30.0), client.last_error
        for v in range(1, cfg.weights_rounds + 1):
            with torch.no_grad():
                next(iter(state.values())).add_(1e-3)
            t0 = time.perf_counter()
            size = srv.publish_weights(v, state)
            with arrived:
                assert arrived.wait_for(lambda v=v: v in got, 30.0), f"weights {v} never arrived"
            lat.append(got[v] - t0)
    finally:
        client.close()
        srv.stop(0)
    return {
        "benchmark": "weights",
        "obs": obs,
        "parameters": int(sum(t.numel() for t in state.values())),
        "bytes_per_broadcast": size,
        "latency_ms_p50": 1e3 * float(np.percentile(lat, 50)),
        "latency_ms_p95": 1e3 * float(np.percentile(lat, 95)),
    }


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the children are killed on the way out."""

    def handle(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


def main(argv: list[str] | None = None) -> int:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()
    import torch
    import tyro

    torch.set_num_threads(1)
    cfg = tyro.cli(DistributedBenchConfig, args=argv)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}
    results = []
    if cfg.part in ("transport", "all"):
        frames = twin_frames(cfg)
        results += [
            bench_transitions(cfg, 1, frames, compress=True),
            bench_transitions(cfg, 1, frames, compress=False),
            bench_transitions(cfg, 2, frames, compress=True),
            bench_weights(cfg, "state"),
            bench_weights(cfg, "pixels"),
        ]
    if cfg.part in ("e2e", "all"):
        _exit_on_sigterm()
        results += bench_e2e(cfg)
    lines = [json.dumps({**r, "config": config, "machine": machine_info()}) for r in results]
    for line in lines:
        print(line, flush=True)
    if cfg.out is not None:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
