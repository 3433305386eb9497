"""RelativeFrame: observe the TCP relative to the episode start, act in the TCP frame.

Observation (state parts; other parts, images and stamps pass through unchanged):

* ``tcp_pose``: ``T_start_cur = T_base_start^-1 * T_base_cur`` (7,), the current TCP pose
  expressed in the frame of the TCP pose measured at ``reset``. Identity at reset.
* ``tcp_vel``: ``[R_cur^T v, R_cur^T w]`` (6,), the base-frame twist rotated into the current
  TCP frame (m/s, rad/s).
* ``tcp_wrench``: ``[R_cur^T f, R_cur^T tau]`` (6,), the wrench rotated into the current TCP
  frame (N, N m). The reference point stays the TCP.

``R_cur`` (``R_base_ee``) is the rotation of the last measured absolute ``tcp_pose`` the inner
env returned, which is exactly the pose :class:`robot_rl.envs.RobotEnv` applies the next delta
to.

Action ``[dx, dy, dz, rx, ry, rz, gripper]`` (7) or ``[dx, dy, dz, gripper]`` (4, the inner env
keeps the start orientation): translation and rotation vector are given in the current TCP
frame and mapped to the base frame by ``R_cur`` (``a_base = R_cur a_ee``; a TCP-frame rotation
vector ``w_ee`` is the base-frame rotation vector ``R_cur w_ee``). With the 4-dim layout only
the translation is rotated. The gripper passes unchanged.

Clipping: the inner env clips each action component to [-1, 1]. A rotated vector with every
component in [-1, 1] can have base-frame components up to ``sqrt(3)`` in magnitude; the inner
env then clips those components, which shortens the step and bends its direction towards the
nearest face of the cube. Keep ``|a_ee[:3]|_2 <= 1`` (and the same for the rotation part) for
the executed motion to be exactly the rotated one. :meth:`RelativeFrame.inverse_action` is
exact for any base-frame action (its result may in turn leave [-1, 1]).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core import frames, keys

_ROTATED_PARTS = (keys.TCP_VEL, keys.TCP_WRENCH)


def _rotation_dims(action_dim: int) -> bool:
    """True if the action layout has a rotation part (7-dim), False for the 4-dim layout."""
    if action_dim == 7:
        return True
    if action_dim == 4:
        return False
    raise ValueError(
        f"RelativeFrame expects a 7-dim [dx, dy, dz, rx, ry, rz, gripper] or 4-dim "
        f"[dx, dy, dz, gripper] action, got {action_dim} dims"
    )


def ee_to_base_action(a_ee: np.ndarray, R_base_ee: np.ndarray) -> np.ndarray:
    """Map a TCP-frame action to the base frame.

    Args:
        a_ee: (7,) or (4,) action with translation (and rotation vector) in the TCP frame.
        R_base_ee: (3, 3) rotation of the TCP in the base frame.

    Returns:
        (A,) float64 base-frame action; the gripper component is unchanged. Not clipped.
    """
    a = np.array(a_ee, dtype=np.float64, copy=True)
    rotate_rot = _rotation_dims(a.shape[-1])
    a[:3] = R_base_ee @ a[:3]
    if rotate_rot:
        a[3:6] = R_base_ee @ a[3:6]
    return a


def base_to_ee_action(a_base: np.ndarray, R_base_ee: np.ndarray) -> np.ndarray:
    """Exact inverse of :func:`ee_to_base_action` (rotates by ``R_base_ee^T``)."""
    a = np.array(a_base, dtype=np.float64, copy=True)
    rotate_rot = _rotation_dims(a.shape[-1])
    R_ee_base = R_base_ee.T
    a[:3] = R_ee_base @ a[:3]
    if rotate_rot:
        a[3:6] = R_ee_base @ a[3:6]
    return a


def _rotate_6(v: np.ndarray, R: np.ndarray) -> np.ndarray:
    """Rotate both 3-vectors of a (6,) twist or wrench by ``R``; float64 result."""
    v = np.asarray(v, dtype=np.float64)
    return np.concatenate([R @ v[:3], R @ v[3:6]])


class RelativeFrame(gym.Wrapper):
    """TCP pose relative to the episode start; velocities, wrenches and actions in the TCP frame.

    See the module docstring for the exact maps and the clipping caveat. The inner env's
    observation must be a Dict with ``obs["state"]`` a Dict holding ``tcp_pose``; its action the
    7-dim or 4-dim robot_rl layout. Apply before :class:`FlattenState`.

    Args:
        env: Inner env with robot_rl's observation layout (base-frame quantities).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        obs_space = env.observation_space
        state_space = (
            obs_space.spaces.get(keys.STATE) if isinstance(obs_space, gym.spaces.Dict) else None
        )
        if not isinstance(state_space, gym.spaces.Dict) or keys.TCP_POSE not in state_space.spaces:
            raise ValueError(
                "RelativeFrame needs obs['state'] to be a Dict with 'tcp_pose'; put it before "
                "FlattenState and keep 'tcp_pose' in EnvConfig.state_parts"
            )
        self.control_rotation = _rotation_dims(int(env.action_space.shape[0]))
        new_state = dict(state_space.spaces)
        for part in (keys.TCP_POSE, *_ROTATED_PARTS):
            if part in new_state:
                shape = new_state[part].shape
                new_state[part] = gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)
        spaces = dict(obs_space.spaces)
        spaces[keys.STATE] = gym.spaces.Dict(new_state)
        self.observation_space = gym.spaces.Dict(spaces)
        self._T_base_start: np.ndarray | None = None  # (7,) float64
        self._R_base_ee: np.ndarray | None = None  # (3, 3) float64, last measured TCP rotation

    # -- frames ------------------------------------------------------------------------------

    @property
    def start_pose(self) -> np.ndarray:
        """(7,) TCP pose measured at the last reset, base frame (a copy)."""
        if self._T_base_start is None:
            raise RuntimeError("call reset() first: the start pose is set at reset")
        return self._T_base_start.copy()

    @property
    def R_base_ee(self) -> np.ndarray:
        """(3, 3) rotation of the last measured TCP pose in the base frame (a copy)."""
        if self._R_base_ee is None:
            raise RuntimeError("call reset() first: the TCP rotation is read from observations")
        return self._R_base_ee.copy()

    # -- actions -----------------------------------------------------------------------------

    def action(self, a_ee: np.ndarray) -> np.ndarray:
        """TCP-frame action -> base-frame action for the inner env (float64, not clipped)."""
        return ee_to_base_action(self._check_action(a_ee), self.R_base_ee)

    def inverse_action(self, a_base: np.ndarray) -> np.ndarray:
        """Base-frame action (e.g. a human's or an expert's) -> this wrapper's TCP frame.

        Exact inverse of :meth:`action` at the current TCP rotation (float64, not clipped).
        """
        return base_to_ee_action(self._check_action(a_base), self.R_base_ee)

    def _check_action(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {a.shape}")
        return a

    # -- observations ------------------------------------------------------------------------

    def observation(self, obs: dict) -> dict:
        """Absolute (base-frame) observation -> relative observation (new dicts and arrays).

        Also records the TCP rotation the next action is mapped with.
        """
        assert self._T_base_start is not None
        state = obs[keys.STATE]
        T_base_cur = np.asarray(state[keys.TCP_POSE], dtype=np.float64)
        R_base_cur = frames.quat_to_mat(T_base_cur[3:7])
        self._R_base_ee = R_base_cur
        new_state = dict(state)
        rel = frames.pose_mul(frames.pose_inv(self._T_base_start), T_base_cur)
        new_state[keys.TCP_POSE] = rel.astype(np.float32)
        for part in _ROTATED_PARTS:
            if part in new_state:
                new_state[part] = _rotate_6(state[part], R_base_cur.T).astype(np.float32)
        out = dict(obs)
        out[keys.STATE] = new_state
        return out

    def inverse_observation(self, obs_rel: dict) -> dict:
        """Relative observation -> absolute base-frame observation (float32, new arrays).

        Uses this episode's start pose; up to float32 rounding it restores what the inner env
        returned. Cheap; meant for tests, experts and debugging.
        """
        if self._T_base_start is None:
            raise RuntimeError("call reset() first: the start pose is set at reset")
        state = obs_rel[keys.STATE]
        T_base_cur = frames.pose_mul(
            self._T_base_start, np.asarray(state[keys.TCP_POSE], dtype=np.float64)
        )
        R_base_cur = frames.quat_to_mat(T_base_cur[3:7])
        new_state = dict(state)
        new_state[keys.TCP_POSE] = T_base_cur.astype(np.float32)
        for part in _ROTATED_PARTS:
            if part in new_state:
                new_state[part] = _rotate_6(state[part], R_base_cur).astype(np.float32)
        out = dict(obs_rel)
        out[keys.STATE] = new_state
        return out

    # -- gym API -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        T_base_start = np.asarray(obs[keys.STATE][keys.TCP_POSE], dtype=np.float64)  # (7,)
        self._T_base_start = frames.pose(T_base_start[:3], T_base_start[3:7])
        return self.observation(obs), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(self.action(action))
        return self.observation(obs), reward, terminated, truncated, info
