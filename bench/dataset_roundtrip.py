"""LeRobot round trip: our zarr demos -> ``export_lerobot`` (LeRobotDataset v3.0, parquet + mp4)
-> ``import_lerobot`` -> zarr, timed and compared. Prints one JSON object.

    python bench/dataset_roundtrip.py                     # pick_cube, 2 cameras 128 px, 10 episodes
    python bench/dataset_roundtrip.py --episodes 20 --image-size 96

Figures: export and import seconds per 1000 frames (a frame = one step with every camera),
whether actions, intervention flags and successes come back bit-identical, the largest state
error, and per camera the mean absolute pixel error of the decoded video (lossy: mp4) and the
share of frames closer to their own step than to either neighbour (the frames stay in order).
The demos are recorded first (the twin's scripted expert; not timed). Printed, never asserted.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro


@dataclass(frozen=True)
class BenchConfig:
    """Round trip benchmark."""

    task: str = "pick_cube"
    episodes: int = 10
    image_size: int = 128
    cameras: tuple[str, ...] = ("front", "wrist")


def _episodes(path: Path) -> list[dict]:
    from robot_rl.replay import EpisodeLog

    log = EpisodeLog.open(path)
    try:
        return [log.read_episode(i) for i in range(log.num_episodes)]
    finally:
        log.close()


def main(cfg: BenchConfig) -> None:
    from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
    from robot_rl.dataset.lerobot_export import export_lerobot
    from robot_rl.dataset.lerobot_import import import_lerobot

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "demos.zarr"
        env = LearnerEnvConfig(
            task=cfg.task, obs="pixels", cameras=cfg.cameras, image_size=cfg.image_size
        )
        run_collect(CollectConfig(env=env, out=src, episodes=cfg.episodes), progress=False)
        t0 = time.perf_counter()
        exported = export_lerobot(src, tmp / "lerobot")
        t_export = time.perf_counter() - t0
        t0 = time.perf_counter()
        import_lerobot(tmp / "lerobot", tmp / "back.zarr")
        t_import = time.perf_counter() - t0
        a, b = _episodes(src), _episodes(tmp / "back.zarr")
    frames = sum(e["meta"].length for e in a)
    pairs = list(zip(a, b, strict=True))
    same = {k: all(np.array_equal(x[k], y[k]) for x, y in pairs) for k in ("action", "intervened")}
    same["success"] = all(x["meta"].success == y["meta"].success for x, y in pairs)
    state_err = max(float(np.abs(x["obs"]["state"] - y["obs"]["state"]).max()) for x, y in pairs)
    cams = {}
    for cam in cfg.cameras:
        err, own, n = 0.0, 0, 0
        for x, y in pairs:
            A = x["obs"]["images"][cam][: x["meta"].length].astype(np.float64)
            B = y["obs"]["images"][cam][: x["meta"].length].astype(np.float64)
            err += float(np.abs(A - B).mean(axis=(1, 2, 3)).sum())
            d_own = np.abs(A[1:-1] - B[1:-1]).mean(axis=(1, 2, 3))
            d_prev = np.abs(A[1:-1] - B[:-2]).mean(axis=(1, 2, 3))
            d_next = np.abs(A[1:-1] - B[2:]).mean(axis=(1, 2, 3))
            own += int(np.sum((d_own < d_prev) & (d_own < d_next)))
            n += len(d_own)
        cams[cam] = {
            "mean_abs_pixel_error": round(err / frames, 2),
            "closest_to_own_step": round(own / max(n, 1), 3),
        }
    print(
        json.dumps(
            {
                "benchmark": "dataset_roundtrip",
                "config": {**cfg.__dict__, "cameras": list(cfg.cameras)},
                "machine": {
                    "cpu_cores": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "episodes": len(a),
                "frames": frames,
                "export_s_per_1k_frames": round(t_export / frames * 1000, 2),
                "import_s_per_1k_frames": round(t_import / frames * 1000, 2),
                "bit_identical": same,
                "state_max_abs_error": state_err,
                "cameras": cams,
                "export_files": exported.get("files"),
            }
        )
    )


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
