"""Speed of the MuJoCo twin behind RobotEnv. Prints one JSON object per benchmark (JSON lines).

    python bench/sim_speed.py                      # state-only, and two 128x128 cameras
    python bench/sim_speed.py --episodes 5 --task pick_cube

Benchmarks:
    state_only:   no cameras.
    two_cameras:  front + wrist, image_size x image_size pixels.

Figures per benchmark:
    env_steps_per_s:        env.step calls per wall second (scripted expert, resets excluded).
    real_time_factor:       simulated seconds per wall second (env_steps_per_s / control_hz).
    physics_steps_per_s_in_env: physics steps per wall second inside env.step (controller,
                            safety, observation and rendering included).
    physics_steps_per_s_raw: bare mujoco.mj_step on the same model (no controller, no render).
    render_ms_per_frame:    per camera, milliseconds per rendered frame (update_scene + render,
                            what Camera.read() does when physics moved; None without cameras).

Timings are printed, never asserted (tests stay timing-free).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np
import tyro

from robot_rl.core import keys


@dataclass(frozen=True)
class BenchConfig:
    """Twin speed benchmark."""

    task: str = "pick_cube"
    """Task to run."""
    episodes: int = 10
    """Episodes per benchmark (scripted expert)."""
    max_episode_steps: int = 100
    """Step limit per episode."""
    image_size: int = 128
    """Camera images are image_size x image_size pixels in the camera benchmark."""
    control_hz: float = 10.0
    """Control rate."""
    sim_hz: float = 500.0
    """Physics rate."""
    raw_physics_steps: int = 5000
    """Bare mj_step calls timed for physics_steps_per_s_raw."""
    render_frames: int = 50
    """Camera reads timed per camera for render_ms_per_frame."""
    seed: int = 0
    """Episode i uses seed + i."""


def machine_info() -> dict:
    """CPU model, core count, Python and MuJoCo versions, GL backend."""
    import mujoco

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": cpu,
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "mujoco": mujoco.__version__,
        "MUJOCO_GL": os.environ.get("MUJOCO_GL"),
    }


def run_benchmark(name: str, cfg: BenchConfig, cameras: tuple[str, ...]) -> dict:
    """Time one configuration; returns the JSON-able record."""
    import mujoco

    from robot_rl.app.envs.build import EnvSetup, make_env_from_setup

    setup = EnvSetup(
        task=cfg.task,
        cameras=cameras,
        image_size=cfg.image_size,
        control_hz=cfg.control_hz,
        sim_hz=cfg.sim_hz,
        max_episode_steps=cfg.max_episode_steps,
    )
    env, backend = make_env_from_setup(setup)
    expert = backend.make_expert()
    step_s, steps, successes = 0.0, 0, 0
    try:
        for i in range(cfg.episodes):
            obs, info = env.reset(seed=cfg.seed + i)
            expert.reset(np.random.default_rng((cfg.seed + i, 1)))
            while True:
                action = expert.act(obs, info)
                t0 = time.perf_counter()
                obs, _, terminated, truncated, info = env.step(action)
                step_s += time.perf_counter() - t0
                steps += 1
                if terminated or truncated:
                    successes += bool(info.get(keys.INFO_SUCCESS, False))
                    break
        # Camera.read() renders only when physics moved; time the render it does then.
        render_ms = {}
        world = backend.world
        for cam in backend.cameras:
            h, w = cam.image_spec.shape[:2]
            world.render(cam.name, h, w)  # warm up: the renderer of this size exists
            t0 = time.perf_counter()
            world.render(cam.name, h, w, repeat=cfg.render_frames)
            render_ms[cam.name] = 1e3 * (time.perf_counter() - t0) / cfg.render_frames
        model, data = backend.world.model, backend.world.data
        scratch = mujoco.MjData(model)
        mujoco.mj_copyData(scratch, model, data)
        t0 = time.perf_counter()
        for _ in range(cfg.raw_physics_steps):
            mujoco.mj_step(model, scratch)
        raw_s = time.perf_counter() - t0
    finally:
        env.close()
        backend.close()
    substeps = round(cfg.sim_hz / cfg.control_hz)
    env_sps = steps / step_s
    return {
        "benchmark": name,
        "config": {
            "task": cfg.task,
            "control_hz": cfg.control_hz,
            "sim_hz": cfg.sim_hz,
            "cameras": list(cameras),
            "image_size": [cfg.image_size, cfg.image_size] if cameras else None,
            "steps": steps,
            "episodes": cfg.episodes,
            "policy": "scripted",
        },
        "machine": machine_info(),
        "figures": {
            "env_steps_per_s": env_sps,
            "real_time_factor": env_sps / cfg.control_hz,
            "physics_steps_per_s_in_env": env_sps * substeps,
            "physics_steps_per_s_raw": cfg.raw_physics_steps / raw_s,
            "render_ms_per_frame": render_ms or None,
            "success_rate": successes / cfg.episodes,
        },
    }


def main(argv: list[str] | None = None) -> int:
    from robot_rl.cli.main import configure_headless_gl

    configure_headless_gl()  # before MuJoCo is imported
    cfg = tyro.cli(BenchConfig, args=argv)
    for name, cams in (("state_only", ()), ("two_cameras", ("front", "wrist"))):
        print(json.dumps(run_benchmark(name, cfg, cams)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
