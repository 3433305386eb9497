"""``robot-rl reward frames``: the twin renders labelled frames for reward classifiers.

On the robot a person labels frames (``robot-rl label``); in the twin the task's own success is
the label, so the whole classifier pipeline (frames -> ``reward train`` -> ``reward eval`` ->
``train --reward``) runs end to end in CI. Episodes come in four kinds, drawn per episode:

- ``success``: the task's scripted expert; the episode goes on for ``--after-success-steps``
  after success (the env does not end it), so success is seen from several steps and poses;
- ``near_miss``: the expert stopped just short of success (:class:`sim.experts.near_miss.
  NearMissExpert`: the cube grasped but held low, the peg on the opening or partly in): the
  hard negatives a classifier must not call success;
- ``noisy``: the expert with Gaussian action noise (mostly failures, some late successes);
- ``wander``: smooth random motion with the gripper opening and closing at random, the states
  an exploring policy visits. Without them a classifier trained on expert-like frames called
  an empty closed gripper held high "cube lifted" (found by ``train --reward``'s trigger log in
  the first few hundred steps of RL).

Each frame (the observation after reset and after every step) is stored in a
:class:`robot_rl.replay.frames.FrameLog` with ``label`` = the task's success at that frame
(``task_success`` too), in the learner's pixel layout (``--cameras``, ``--image-size``).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core import keys
from robot_rl.core.features import DEFAULT_IMAGE_SIZE
from sim.config import DEFAULT_ARM

KINDS = ("success", "near_miss", "noisy", "wander")


@dataclass(frozen=True)
class RewardFramesConfig:
    """Render labelled success / near-miss / failure frames of a twin task."""

    out: Path
    """The frame store to create (refused if it exists)."""
    task: str = "pick_cube"
    """Twin task with a near-miss rule: pick_cube, peg_insert or plug_insert."""
    arm: str = DEFAULT_ARM
    """The twin's arm kind (fr3, ur5e, so101: docs/arms.md); its cameras render the frames."""
    episodes: int = 60
    """Episodes to render (many short episodes beat few long ones: the held-out splits are
    made of whole episodes)."""
    cameras: tuple[str, ...] = ("front", "wrist")
    """Cameras in each frame."""
    image_size: int = DEFAULT_IMAGE_SIZE
    """Frames are image_size x image_size pixels (the learner's --image-size)."""
    near_miss_fraction: float = 0.3
    """Fraction of near-miss episodes."""
    near_miss_margin: float = 0.6
    """Near misses stop at up to this fraction of the success threshold (lift or depth)."""
    noisy_fraction: float = 0.15
    """Fraction of noisy-expert episodes (the rest: successful expert episodes)."""
    noise_std: float = 0.4
    """Action noise of noisy episodes (standard deviation, action units)."""
    wander_fraction: float = 0.15
    """Fraction of wander episodes (smooth random motion and gripper)."""
    after_success_steps: int = 8
    """Steps an episode goes on after the task first succeeds."""
    max_steps: int = 40
    """Step limit of an episode (near misses and failures run to it)."""
    seed: int = 5_000_000
    """Episode i resets with seed + i; the kinds are drawn from this seed too."""
    json: bool = False
    """Print exactly one JSON object on stdout."""

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.max_steps < 1 or self.after_success_steps < 0:
            raise ValueError("episodes and max_steps must be >= 1, after_success_steps >= 0")
        fr = (self.near_miss_fraction, self.noisy_fraction, self.wander_fraction)
        if min(fr) < 0.0 or sum(fr) > 1.0:
            raise ValueError(
                f"near_miss_fraction {fr[0]}, noisy_fraction {fr[1]} and wander_fraction "
                f"{fr[2]} must be >= 0 and sum to at most 1"
            )
        if not self.cameras:
            raise ValueError("--cameras must name at least one camera (classifiers read images)")


def episode_kinds(cfg: RewardFramesConfig) -> list[str]:
    """The kind of every episode: exact counts from the fractions, in a seeded order."""
    n = cfg.episodes
    near = round(cfg.near_miss_fraction * n)
    noisy = min(round(cfg.noisy_fraction * n), n - near)
    wander = min(round(cfg.wander_fraction * n), n - near - noisy)
    rest = n - near - noisy - wander
    kinds = ["near_miss"] * near + ["noisy"] * noisy + ["wander"] * wander + ["success"] * rest
    np.random.default_rng((cfg.seed, 7)).shuffle(kinds)
    return kinds


def run_reward_frames(cfg: RewardFramesConfig, progress: bool = True) -> dict[str, Any]:
    """Render ``cfg.episodes`` episodes into a new frame store; returns a summary."""
    from robot_rl.app.envs.build import base_to_policy_action, configs_for, make_env
    from robot_rl.app.envs.collect import LearnerEnvConfig
    from robot_rl.replay import ObsAdapter
    from robot_rl.replay.frames import FrameLog
    from robot_rl.wrappers.flatten_state import named_state_slices
    from sim.experts.near_miss import NEAR_MISS_TASKS, NearMissExpert

    if cfg.task not in NEAR_MISS_TASKS:
        raise ValueError(f"--task {cfg.task!r} has no near-miss rule; choose {NEAR_MISS_TASKS}")
    out = Path(cfg.out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose another --out")
    lenv = LearnerEnvConfig(
        task=cfg.task, obs="pixels", cameras=cfg.cameras, image_size=cfg.image_size, arm=cfg.arm
    )
    setup = lenv.env_setup()
    env_cfg, sim_cfg = configs_for(setup)
    env_cfg = dataclasses.replace(
        env_cfg, terminate_on_success=False, max_episode_steps=cfg.max_steps
    )
    env, backend = make_env(cfg.task, env_cfg, sim_cfg, setup.wrappers, obs_cameras=setup.cameras)
    adapter = ObsAdapter(env.observation_space)
    meta = {
        "kind": "twin_frames",
        "task": cfg.task,
        "arm": cfg.arm,
        "env": lenv.to_json(),
        "state_slices": named_state_slices(env),  # what `reward train --gates` reads
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in _jsonable(cfg).items()},
    }
    store = FrameLog.create(out, adapter.layout, meta)
    kinds = episode_kinds(cfg)
    counts = {k: 0 for k in KINDS}
    successes = {k: 0 for k in KINDS}
    try:
        to_policy = base_to_policy_action(env)
        for i, kind in enumerate(kinds):
            seed = cfg.seed + i
            rng = np.random.default_rng((seed, 3))
            expert = backend.make_expert()
            if kind == "near_miss":
                expert = NearMissExpert(expert, cfg.task, cfg.near_miss_margin)
            expert.reset(rng)
            obs, info = env.reset(seed=seed)
            store.begin_episode(seed=seed)
            ever, after, terminated, walk = False, 0, False, None
            for step in range(cfg.max_steps + 1):
                ok = bool(info[keys.INFO_SUCCESS])
                store.append(
                    adapter.to_learner(obs), ok, float(obs[keys.STAMPS][keys.STAMP_STATE]), ok
                )
                ever |= ok
                after += int(ever)
                # A terminated step (a failure, e.g. the cube left the table) ends after its
                # frame is stored.
                if terminated or step == cfg.max_steps or after > cfg.after_success_steps:
                    break
                a = np.asarray(expert.act(obs, info), dtype=np.float64)
                if kind == "noisy":
                    a[:-1] += rng.normal(0.0, cfg.noise_std, a.size - 1)
                elif kind == "wander":
                    walk = wander_step(walk, a.size, rng)
                    a = walk.copy()
                a = np.clip(a, -1.0, 1.0)
                obs, _, terminated, _, info = env.step(to_policy(a))
            store.end_episode(kind=kind, success=ever)
            counts[kind] += 1
            successes[kind] += int(ever)
            if progress:
                print(
                    f"reward frames: episode {i + 1}/{len(kinds)} ({kind}, "
                    f"{'success' if ever else 'no success'}); {store.positives} positive / "
                    f"{store.negatives} negative frames",
                    file=sys.stderr,
                )
        result = {
            "out": str(out),
            "task": cfg.task,
            "episodes": store.num_episodes,
            "frames": store.num_frames,
            "positives": store.positives,
            "negatives": store.negatives,
            "episodes_by_kind": counts,
            "successful_episodes_by_kind": successes,
        }
    finally:
        store.close()
        env.close()
        backend.close()
    return result


def wander_step(prev: np.ndarray | None, size: int, rng: np.random.Generator) -> np.ndarray:
    """Next action of a smooth random walk (persistence 0.8); the gripper (last) flips sign
    with probability 0.15 per step."""
    if prev is None:
        a = rng.uniform(-1.0, 1.0, size)
        a[-1] = rng.choice([-1.0, 1.0])
        return a
    a = np.clip(0.8 * prev + rng.normal(0.0, 0.5, size), -1.0, 1.0)
    a[-1] = -prev[-1] if rng.random() < 0.15 else prev[-1]
    return a


def _jsonable(cfg: RewardFramesConfig) -> dict[str, Any]:
    d = dataclasses.asdict(cfg)
    d["out"] = str(d["out"])
    return d
