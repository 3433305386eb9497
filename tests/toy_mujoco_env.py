"""A small MuJoCo env registered on import (``--env toy_mujoco_env:ToyMjSlider-v0``), written
the way a peer's env is: it imports MuJoCo itself and works with whichever version its venv pins
(the tests run it in .venv-foreign-env, MuJoCo 3.2.7 and numpy 1.26, behind ``--env-python``).

A puck on two slide joints follows position actuators; the action moves their targets by at
most 5 cm per step (``[-0.05, 0.05]^2``); the goal is a random point, success within 3 cm. The
observation has the goal-env shape of ``toy_foreign_envs.ToyPointGoal-v0`` (``observation``:
position and velocity, ``achieved_goal``, ``desired_goal``), so its ``goal_expert`` drives it
too; ``info`` reports ``is_success`` and the MuJoCo version the env ran with.
"""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np

STEP_M = 0.05
SUCCESS_M = 0.03
SUBSTEPS = 20

XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <body name="puck">
      <joint name="x" type="slide" axis="1 0 0" range="-0.5 0.5" damping="2"/>
      <joint name="y" type="slide" axis="0 1 0" range="-0.5 0.5" damping="2"/>
      <geom type="cylinder" size="0.02 0.01" mass="0.1"/>
    </body>
  </worldbody>
  <actuator>
    <position joint="x" kp="40" ctrlrange="-0.5 0.5"/>
    <position joint="y" kp="40" ctrlrange="-0.5 0.5"/>
  </actuator>
</mujoco>
"""


class ToyMjSlider(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.model = mujoco.MjModel.from_xml_string(XML)
        self.data = mujoco.MjData(self.model)
        self.action_space = gym.spaces.Box(-STEP_M, STEP_M, (2,), np.float32)
        vec = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                "achieved_goal": vec,
                "desired_goal": vec,
            }
        )
        self._goal = np.zeros(2)

    def _obs(self):
        pos = self.data.qpos[:2].copy()
        return {
            "observation": np.concatenate([pos, self.data.qvel[:2]]).astype(np.float32),
            "achieved_goal": pos.astype(np.float32),
            "desired_goal": self._goal.astype(np.float32),
        }

    def _info(self) -> dict:
        dist = float(np.linalg.norm(self.data.qpos[:2] - self._goal))
        return {"is_success": dist < SUCCESS_M, "mujoco_version": mujoco.__version__}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        start = self.np_random.uniform(-0.1, 0.1, 2)
        self.data.qpos[:2] = start
        self.data.ctrl[:] = start
        self._goal = self.np_random.uniform(-0.1, 0.1, 2)
        mujoco.mj_forward(self.model, self.data)
        return self._obs(), self._info()

    def step(self, action):
        a = np.clip(np.asarray(action, np.float64), -STEP_M, STEP_M)
        self.data.ctrl[:] = np.clip(self.data.qpos[:2] + a, -0.5, 0.5)
        mujoco.mj_step(self.model, self.data, nstep=SUBSTEPS)
        info = self._info()
        dist = float(np.linalg.norm(self.data.qpos[:2] - self._goal))
        return self._obs(), -dist, bool(info["is_success"]), False, info


gym.register("ToyMjSlider-v0", entry_point=ToyMjSlider, max_episode_steps=30)
