"""What the ``robot-rl dataset`` tests share: datasets recorded with the real twin (``collect``)
plus online episodes written through the real EpisodeLog, and the CLI run in process (as a
process: ``cli_helpers.run_cli``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
from robot_rl.core import keys
from robot_rl.replay import EpisodeLog

FPS = 10
IMG = 32
ONLINE_IV = np.array([0, 1, 1, 0, 1, 0, 0, 0], dtype=bool)  # intervened steps of the online ep
OPEN_STEPS = 5  # steps flushed of the episode left open


def in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``robot-rl ARGS`` through :func:`robot_rl.cli.main.main` (exit code, stdout, stderr)."""
    from robot_rl.cli.main import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:  # tyro rejects options by exiting
        code = int(e.code)
    out, err = capsys.readouterr()
    return code, out, err


def obs_at(ep: dict, t: int) -> dict:
    o: dict = {}
    if keys.STATE in ep["obs"]:
        o[keys.STATE] = ep["obs"][keys.STATE][t]
    if keys.IMAGES in ep["obs"]:
        o[keys.IMAGES] = {c: v[t] for c, v in ep["obs"][keys.IMAGES].items()}
    return o


def append_steps(log: EpisodeLog, ep: dict, n: int, iv: np.ndarray, seed: int) -> None:
    """``n`` steps replaying ``ep``'s observations with random actions (``iv``: intervened)."""
    rng = np.random.default_rng(seed)
    for t in range(n):
        pol = rng.uniform(-1, 1, log.action_dim).astype(np.float32)
        act = rng.uniform(-1, 1, log.action_dim).astype(np.float32) if iv[t] else pol
        log.append(
            obs_learner=obs_at(ep, t),
            action=act,
            policy_action=pol,
            reward=float(rng.normal()),
            terminated=False,
            truncated=t == n - 1,
            intervened=bool(iv[t]),
            policy_version=3 + t // 4,
            stamp_s=100.0 + (t + 1) / FPS,
            next_obs_learner=obs_at(ep, t + 1),
        )


def make_dataset(root: Path, obs: str) -> Path:
    """2 scripted demos from the twin + 1 online episode (ONLINE_IV, failed, time limit) + 1
    online episode begun and never ended (OPEN_STEPS flushed steps)."""
    path = root / f"{obs}.zarr"
    env = LearnerEnvConfig(task="pick_cube", obs=obs, image_size=IMG)
    run_collect(CollectConfig(env=env, out=path, episodes=2), progress=False)
    log = EpisodeLog.open(path, mode="a")
    ep = log.read_episode(0)
    assert ep["meta"].length > len(ONLINE_IV) > OPEN_STEPS
    log.begin_episode("online", policy_version=3, seed=1)
    append_steps(log, ep, len(ONLINE_IV), ONLINE_IV, seed=1)
    log.end_episode(success=False)
    log.begin_episode("online", policy_version=5, seed=2)
    append_steps(log, ep, OPEN_STEPS, np.zeros(OPEN_STEPS, bool), seed=2)
    log.close()  # flushes; the episode stays open, as after a crash
    return path


def episodes_of(path: Path) -> list[dict]:
    log = EpisodeLog.open(path, unfinished="truncate")
    return [log.read_episode(i) for i in range(log.num_episodes)]
