"""Manipulation tasks from public suites on PyPI, for ``bench/sparse_suite.py``: envs we did not
write, trained through the Python Trainer API as a user would.

- ``fetch_pick_place``: gymnasium-robotics ``FetchPickAndPlace-v4`` with its native sparse
  reward (-1 per step, 0 when the object is within 5 cm of the goal; no termination, 50-step
  episodes). The observation is a goal-env Dict (``observation``, ``achieved_goal``,
  ``desired_goal``), which ``ObsAdapter`` flattens as is.
- ``metaworld_pick_place`` and ``metaworld_push``: Meta-World ``pick-place-v3`` and
  ``push-v3`` (MT1) with the sparse success reward (1 on success, else 0,
  :class:`robot_rl.wrappers.SuccessReward` over its ``info["success"]``) and termination on
  success, 200-step episodes; the 39-dim observation becomes ``state``.
- ``metaworld_push_noterm``: ``push-v3`` the same but without termination on success (the
  reward is 1 on every step the puck is at the goal, for all 200 steps; success is scored as
  any success step, as for the others): Meta-World's own wrapper says terminating on success
  during training "leads to instability", the fall we see on push.
- ``metaworld_push_fresh``: ``push-v3`` with termination, but every reset draws a fresh puck /
  goal layout from the task's whole range. MT1 draws 50 layouts per ``make`` seed and every
  episode takes one of them, so the train env (seed s), the eval env (s + 10000) and the demo
  env (s + 20000) each have their own 50: the agent trained on 50 layouts and was scored on 50
  others.
- ``metaworld_pick_place_fresh``: ``pick-place-v3`` the same way, a fresh object / goal layout
  per reset.

Install: ``pip install -c <pins> gymnasium-robotics==1.4.2 metaworld==3.0.0`` where the pins
hold this repo's ``mujoco==3.17.0`` and numpy / gymnasium (metaworld 3.1.1 pins mujoco 3.3.0).

Both packages predate mujoco 3.17 in one place each, patched here at import (our own code, in
the bench only): gymnasium-robotics' joint helpers compare a mujoco enum with ``np.int32``
(False since mujoco 3.12's pybind11, so an assert fires), and Meta-World writes 11 values into
a weld constraint's ``eq_data`` row, which has 12 since mujoco 3.4.

Demonstrations come from scripted experts: our own for Fetch (above the object, down, close,
carry to the goal), Meta-World's own policy class for its task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

EXTERNAL_TASKS = (
    "fetch_pick_place",
    "metaworld_pick_place",
    "metaworld_push",
    "metaworld_push_noterm",
    "metaworld_push_fresh",
    "metaworld_pick_place_fresh",
)


def _patch_gymnasium_robotics() -> None:
    """Joint qpos/qvel helpers that compare joint types as ints (see the module docstring)."""
    import mujoco
    from gymnasium_robotics.utils import mujoco_utils as mu

    if getattr(mu, "_robot_rl_patched", False):
        return
    jt = mujoco.mjtJoint
    widths = {
        int(jt.mjJNT_FREE): (7, 6),
        int(jt.mjJNT_BALL): (4, 3),
        int(jt.mjJNT_HINGE): (1, 1),
        int(jt.mjJNT_SLIDE): (1, 1),
    }

    def span(model, name: str, vel: bool) -> slice:
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if jid < 0:
            raise KeyError(f"joint {name!r} is not in the model")
        start = int(model.jnt_dofadr[jid] if vel else model.jnt_qposadr[jid])
        return slice(start, start + widths[int(model.jnt_type[jid])][int(vel)])

    def setter(vel: bool) -> Callable:
        def set_joint(model, data, name, value):
            s = span(model, name, vel)
            (data.qvel if vel else data.qpos)[s] = np.asarray(value, dtype=np.float64)

        return set_joint

    def getter(vel: bool) -> Callable:
        def get_joint(model, data, name):
            return (data.qvel if vel else data.qpos)[span(model, name, vel)].copy()

        return get_joint

    mu.set_joint_qpos, mu.set_joint_qvel = setter(False), setter(True)
    mu.get_joint_qpos, mu.get_joint_qvel = getter(False), getter(True)
    mu._robot_rl_patched = True


def _patch_metaworld() -> None:
    """Weld resets that write only the 11 values Meta-World knows (module docstring)."""
    import mujoco
    from metaworld import sawyer_xyz_env as sx

    if getattr(sx, "_robot_rl_patched", False):
        return
    weld = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 5.0])

    def reset_mocap_welds(self) -> None:
        m = self.model
        if m.nmocap > 0 and m.eq_data is not None:
            for i in range(m.eq_data.shape[0]):
                if int(m.eq_type[i]) == int(mujoco.mjtEq.mjEQ_WELD):
                    m.eq_data[i, : weld.size] = weld

    sx.SawyerMocapBase.reset_mocap_welds = reset_mocap_welds
    sx._robot_rl_patched = True


class FetchExpert:
    """Scripted FetchPickAndPlace: above the object (open), down, close, carry to the goal."""

    def reset(self) -> None:
        self.phase, self.t = 0, 0

    def act(self, obs: dict) -> np.ndarray:
        o, goal = obs["observation"], obs["desired_goal"]
        grip, obj = o[0:3], o[3:6]
        a = np.zeros(4)
        if self.phase == 0:  # above the object, gripper open
            d = obj + np.array([0.0, 0.0, 0.05]) - grip
            a[:3], a[3] = 10 * d, 1.0
            self.phase += bool(np.linalg.norm(d) < 0.01)
        elif self.phase == 1:  # down to it
            d = obj - grip
            a[:3], a[3] = 10 * d, 1.0
            self.phase += bool(np.linalg.norm(d) < 0.01)
        elif self.phase == 2:  # close for a few steps
            a[3] = -1.0
            self.t += 1
            self.phase += self.t > 4
        else:  # carry the object to the goal
            a[:3], a[3] = 10 * (goal - obj), -1.0
        a[:3] = np.clip(a[:3], -1.0, 1.0)
        return a.astype(np.float32)


class _MetaWorldSuccess(gym.Wrapper):
    """Meta-World's 39-dim Box observation as ``{"state": ...}`` and ``info["success"]`` as
    ``info["is_success"]`` (the key robot_rl's SuccessReward and evaluation read).

    ``reset(seed=s)`` gives the same layout for the same ``s``. Meta-World's MT1 env does not:
    its ``RandomTaskSelectWrapper`` draws the episode's task (one of 50 object / goal layouts)
    from the env's generator *before* passing the seed on, so the layout of ``reset(seed=s)``
    depends on what came before, and the "same evaluation episodes every time"
    (``eval_seed + i``) were 30 fresh random layouts at every evaluation. The env's generator
    is seeded here first, so the draw is a function of ``s`` (still uniform over the 50).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Dict(
            {"state": gym.spaces.Box(-np.inf, np.inf, box.shape, np.float32)}
        )

    def _obs(self, o: np.ndarray) -> dict:
        return {"state": np.asarray(o, dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.unwrapped.np_random, _ = gym.utils.seeding.np_random(seed)
        o, info = self.env.reset(seed=seed, options=options)
        return self._obs(o), {**info, "is_success": False}

    def step(self, action):
        o, r, term, trunc, info = self.env.step(action)
        return self._obs(o), r, term, trunc, {**info, "is_success": bool(info["success"] > 0)}


class MetaWorldExpert:
    """Meta-World's own scripted policy for the task, on the observation's state (the raw
    39-dim observation)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def reset(self) -> None:
        pass

    def act(self, obs: dict) -> np.ndarray:
        raw = np.asarray(obs["state"], dtype=np.float64)
        return np.clip(self.policy.get_action(raw), -1.0, 1.0).astype(np.float32)


@dataclass(frozen=True)
class ExternalTask:
    """An external env factory and its scripted expert."""

    name: str
    make: Callable[[int], gym.Env]
    """seed -> a new env (the seed fixes the task's randomisation where reset(seed) does not)."""
    expert: Callable[[gym.Env], Any]
    """env -> an expert with reset() and act(obs)."""
    reward: str
    """What the reward is, for the report."""


def _make_fetch(seed: int) -> gym.Env:
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    _patch_gymnasium_robotics()
    return gym.make("FetchPickAndPlace-v4")


def _unfreeze_layouts(env: gym.Env) -> None:
    """MT1 fixes 50 layouts (``rand_vec``) per ``make`` seed and sets one at every reset; make
    every reset draw its own from the env's seeded generator instead."""
    from metaworld.wrappers import RandomTaskSelectWrapper

    e = env
    while not isinstance(e, RandomTaskSelectWrapper):
        e = e.env
    e.reset(seed=0)  # sets a task once (the env needs one), then never again
    e.toggle_sample_tasks_on_reset(False)
    base = env.unwrapped
    base._freeze_rand_vec, base.seeded_rand_vec = False, True


def _metaworld(
    env_name: str, policy: str, terminate: bool = True, fresh_layouts: bool = False
) -> tuple[Callable, Callable]:
    """(make, expert) for the Meta-World MT1 task ``env_name`` and its scripted ``policy``
    class in ``metaworld.policies``; ``terminate``: success ends the episode;
    ``fresh_layouts``: every reset draws a new object / goal layout from the task's whole range
    (a function of the reset's seed) instead of one of the 50 layouts MT1 fixes at ``make``."""

    def make(seed: int) -> gym.Env:
        import metaworld

        from robot_rl.wrappers import SuccessReward

        del metaworld  # registers the Meta-World ids
        _patch_metaworld()
        env = gym.make(
            "Meta-World/MT1",
            env_name=env_name,
            seed=seed,
            max_episode_steps=200,
            terminate_on_success=terminate,
        )
        if fresh_layouts:
            _unfreeze_layouts(env)
        return SuccessReward(_MetaWorldSuccess(env))

    def expert(env: gym.Env) -> MetaWorldExpert:
        from metaworld import policies

        del env
        return MetaWorldExpert(getattr(policies, policy)())

    return make, expert


TASKS = {
    "fetch_pick_place": ExternalTask(
        "fetch_pick_place",
        _make_fetch,
        lambda env: FetchExpert(),
        "native sparse: -1 per step, 0 with the object within 5 cm of the goal; no termination",
    ),
    "metaworld_pick_place": ExternalTask(
        "metaworld_pick_place",
        *_metaworld("pick-place-v3", "SawyerPickPlaceV3Policy"),
        "sparse success: 1 on success (which ends the episode), else 0",
    ),
    "metaworld_push": ExternalTask(
        "metaworld_push",
        *_metaworld("push-v3", "SawyerPushV3Policy"),
        "sparse success: 1 on success (which ends the episode), else 0",
    ),
    "metaworld_push_fresh": ExternalTask(
        "metaworld_push_fresh",
        *_metaworld("push-v3", "SawyerPushV3Policy", fresh_layouts=True),
        "sparse success: 1 on success (which ends the episode), else 0; a fresh layout per reset",
    ),
    "metaworld_pick_place_fresh": ExternalTask(
        "metaworld_pick_place_fresh",
        *_metaworld("pick-place-v3", "SawyerPickPlaceV3Policy", fresh_layouts=True),
        "sparse success: 1 on success (which ends the episode), else 0; a fresh layout per reset",
    ),
    "metaworld_push_noterm": ExternalTask(
        "metaworld_push_noterm",
        *_metaworld("push-v3", "SawyerPushV3Policy", terminate=False),
        "sparse success: 1 on every success step, else 0; no termination (200 steps)",
    ),
}


def expert_demos(task: ExternalTask, env: gym.Env, episodes: int, seed: int) -> Any:
    """A demo ReplayBuffer of ``episodes`` successful expert episodes (learner layout,
    policy-space actions); failed attempts are skipped (at most 3x as many tried)."""
    from robot_rl.replay import ObsAdapter, ReplayBuffer
    from robot_rl.run.evaluate import ActionMap

    adapter, amap = ObsAdapter(env.observation_space), ActionMap(env.action_space)
    expert = task.expert(env)
    steps: list[tuple] = []
    kept = tried = 0
    limit = getattr(env.spec, "max_episode_steps", None) or 500
    while kept < episodes and tried < 3 * episodes:
        obs, info = env.reset(seed=seed + tried)
        expert.reset()
        tried += 1
        ep, success = [], False
        for _ in range(limit):
            a = expert.act(obs)
            nxt, r, term, trunc, info = env.step(a)
            ep.append((adapter.to_learner(obs), amap.to_policy(a), float(r),
                       adapter.to_learner(nxt), bool(term)))  # fmt: skip
            success = success or bool(info.get("is_success", False))
            obs = nxt
            if term or trunc:
                break
        if success:
            steps += ep
            kept += 1
    if kept < episodes:
        raise RuntimeError(f"the {task.name} expert succeeded in only {kept} of {tried} episodes")
    buf = ReplayBuffer(len(steps), adapter.layout, amap.dim, "cpu")
    for o, a, r, n, t in steps:
        buf.add(o, a, r, n, t, False)
    return buf


# -- the same tasks from the command line (``robot-rl ... --env _external_envs:ID``) ----------

CLI_ID = "robot_rl_bench/{name}-v0"
"""The gymnasium id each task registers under when this module is imported (with ``bench/`` on
PYTHONPATH): ``robot-rl train --env _external_envs:robot_rl_bench/fetch_pick_place-v0``.
``gym.make``'s ``seed`` keyword (``--env-kwargs '{"seed": 3}'``) is the task's make seed."""


def _make_registered(name: str, seed: int = 0) -> gym.Env:
    return TASKS[name].make(seed)


class CliExpert:
    """A task's scripted expert as a ``--policy module:function`` object: called with the env's
    own observation and info, reset at every episode start (``robot-rl collect`` does)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._expert: Any = None

    def reset(self) -> None:
        if self._expert is None:
            self._expert = TASKS[self.name].expert(None)
        self._expert.reset()

    def __call__(self, obs: Any, info: Any) -> np.ndarray:
        if self._expert is None:
            self.reset()
        return self._expert.act(obs)


def _register_cli_ids() -> None:
    import functools

    for name in TASKS:
        env_id = CLI_ID.format(name=name)
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=functools.partial(_make_registered, name))
        globals()[f"expert_{name}"] = CliExpert(name)


_register_cli_ids()
