"""RobotEnv: a gymnasium env over a Robot, its Cameras, a Task and a Clock.

One ``step`` is one control period:

1. validate the action (wrong shape -> :class:`ValueError`; NaN/inf -> the robot holds and
   :class:`UnsafeCommandError` is raised), clip it to [-1, 1];
2. turn it into an absolute TCP target: measured pose moved by ``a[:3] * action_scale_m``
   (base frame) and rotated by ``a[3:6] * action_scale_rad`` (base-frame rotation vector);
   gripper closure target ``(a[-1] + 1) / 2`` (0 open, 1 closed);
3. ``robot.send_command`` (the backend applies the shared safety layer and returns what it
   executed);
4. ``clock.tick()`` (wall-clock sleep on a robot, physics in the twin);
5. read the robot state and every camera, refusing stale readings
   (:class:`StaleSensorError`), and ask the task for reward / success.

Observation (gymnasium Dict)::

    {"state": {part: float32 (n,)}, "images": {cam: uint8 (H, W, 3)}, "stamps": {sensor: f64 ()}}

``images`` is absent when there are no cameras. ``info`` carries diagnostics only (success flag,
privileged sim truth, safety clipping, tick overruns, the executed command); nothing a learner
must read to be correct.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from robot_rl.core import frames, keys
from robot_rl.core.config import EnvConfig
from robot_rl.core.protocols import Camera, Clock, Robot, Task
from robot_rl.core.specs import ArraySpec, to_space
from robot_rl.core.types import (
    ArmCommand,
    Observation,
    RobotState,
    StaleSensorError,
    TaskStatus,
    UnsafeCommandError,
)

_PART_SHAPES = {
    keys.TCP_POSE: (7,),
    keys.TCP_VEL: (6,),
    keys.TCP_WRENCH: (6,),
    keys.GRIPPER_POS: (1,),
}


class RobotEnv(gym.Env):
    """Gymnasium env over robot_rl's hardware Protocols. See the module docstring.

    Args:
        robot: The arm (twin or driver). Must already be constructed; ``connect`` is called here.
        cameras: Cameras whose frames go into ``obs["images"]`` (may be empty).
        task: Scene setup, reward and success.
        clock: Paces steps; its period must equal ``1 / config.control_hz``.
        config: Env settings.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        robot: Robot,
        cameras: Sequence[Camera],
        task: Task,
        clock: Clock,
        config: EnvConfig,
        render_mode: str | None = "rgb_array",
    ) -> None:
        if abs(clock.period_s - config.control_dt_s) > 1e-9:
            raise ValueError(
                f"clock period {clock.period_s} s differs from control period "
                f"{config.control_dt_s} s (control_hz={config.control_hz}); build the clock "
                "with the same rate as the env"
            )
        names = [c.name for c in cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names must be unique, got {names}")
        self.robot = robot
        self.cameras = tuple(cameras)
        self.task = task
        self.clock = clock
        self.config = config
        self.render_mode = render_mode
        n_joints = robot.spec.num_joints
        part_shapes = dict(
            _PART_SHAPES, **{keys.JOINT_POS: (n_joints,), keys.JOINT_VEL: (n_joints,)}
        )
        state_spec = {p: ArraySpec(part_shapes[p], "float32") for p in config.state_parts}
        self.observation_spec: dict = {keys.STATE: state_spec}
        if self.cameras:
            self.observation_spec[keys.IMAGES] = {c.name: c.image_spec for c in self.cameras}
        self.observation_spec[keys.STAMPS] = {
            s: ArraySpec((), "float64") for s in [keys.STAMP_STATE, *names]
        }
        self.action_spec = ArraySpec((config.action_dim,), "float32", -1.0, 1.0)
        self.observation_space = to_space(self.observation_spec)
        self.action_space = to_space(self.action_spec)
        self._quat_ref = np.asarray(config.quat_hemisphere_ref, dtype=np.float32)
        self._connected = False
        self._state: RobotState | None = None
        self._obs: Observation | None = None
        self._start_pose: np.ndarray | None = None
        self._steps = 0
        self._needs_reset = True
        self._obs_age_s = float("nan")
        self._obs_read_s = float("nan")  # clock time of the observation's oldest reading

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect(self) -> None:
        if not self._connected:
            self.robot.connect()
            for cam in self.cameras:
                cam.connect()
            self._connected = True

    def close(self) -> None:
        if self._connected:
            for cam in self.cameras:
                cam.disconnect()
            self.robot.disconnect()
            self._connected = False

    # -- gym API -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._connect()
        start_pose = np.asarray(self.task.reset(self.np_random), dtype=np.float64)
        if start_pose.shape != (7,):
            raise ValueError(f"task.reset must return a (7,) start pose, got {start_pose.shape}")
        self.robot.reset(start_pose, gripper=0.0)
        self.clock.reset()
        self._start_pose = start_pose
        self._steps = 0
        self._needs_reset = False
        obs = self._observe()
        status = self.task.evaluate()
        return obs.to_dict(), self._info(status, None, None)

    def step(self, action):
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (the episode has ended or not begun)")
        a = self._validate_action(action)
        state = self._state
        assert state is not None and self._start_pose is not None
        cfg = self.config
        dpos = a[:3] * cfg.action_scale_m
        if cfg.control_rotation:
            target = frames.apply_delta(state.tcp_pose, dpos, a[3:6] * cfg.action_scale_rad)
        else:
            target = frames.pose(state.tcp_pose[:3] + dpos, self._start_pose[3:7])
        gripper = float((a[-1] + 1.0) / 2.0)
        action_age_s = self.clock.now_s() - self._obs_read_s  # the policy's time counts
        executed, report = self.robot.send_command(ArmCommand(target, gripper))
        self.clock.tick()
        obs = self._observe()
        status = self.task.evaluate()
        self._steps += 1
        terminated = bool(status.failure or (status.success and cfg.terminate_on_success))
        truncated = bool(self._steps >= cfg.max_episode_steps and not terminated)
        if terminated or truncated:
            self._needs_reset = True
        info = self._info(status, executed, report)
        info[keys.INFO_ACTION_AGE] = float(action_age_s)
        return obs.to_dict(), float(status.reward), terminated, truncated, info

    @property
    def robot_state(self) -> RobotState | None:
        """The robot state the last observation was built from (None before the first reset)."""
        return self._state

    def render(self):
        """Latest camera images side by side, (H, sum W, 3) uint8; None without cameras."""
        if self._obs is None or not self._obs.images:
            return None
        imgs = list(self._obs.images.values())
        h = max(i.shape[0] for i in imgs)
        padded = [np.pad(i, ((0, h - i.shape[0]), (0, 0), (0, 0))) for i in imgs]
        return np.concatenate(padded, axis=1)

    # -- internals ---------------------------------------------------------------------------

    def _validate_action(self, action) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != self.action_spec.shape:
            self.robot.hold()
            layout = (
                "[dx, dy, dz, rx, ry, rz, gripper]"
                if self.config.control_rotation
                else "[dx, dy, dz, gripper]"
            )
            raise ValueError(
                f"action must have shape {self.action_spec.shape} {layout}, got {a.shape}; "
                "the robot is holding its pose"
            )
        if not np.all(np.isfinite(a)):
            self.robot.hold()
            raise UnsafeCommandError(
                f"action contains NaN or inf: {a}; the robot is holding its pose. "
                "Check the policy (diverged weights?) or the teleop input, then call step again."
            )
        return np.clip(a, -1.0, 1.0)

    def _observe(self) -> Observation:
        now = self.clock.now_s()
        state = self.robot.read_state()
        age = now - state.stamp_s
        if age > self.config.max_state_age_s:
            self.robot.hold()
            raise StaleSensorError(
                f"robot state is {age:.3f} s old (limit max_state_age_s="
                f"{self.config.max_state_age_s}); is the arm driver running?"
            )
        images: dict[str, np.ndarray] = {}
        stamps: dict[str, float] = {keys.STAMP_STATE: float(state.stamp_s)}
        oldest = age
        for cam in self.cameras:
            frame = cam.read()
            age = now - frame.stamp_s
            if age > self.config.max_image_age_s:
                self.robot.hold()
                raise StaleSensorError(
                    f"camera {cam.name!r} frame is {age:.3f} s old (limit max_image_age_s="
                    f"{self.config.max_image_age_s}); is the camera streaming?"
                )
            images[cam.name] = np.array(frame.image, dtype=np.uint8, copy=True)
            stamps[cam.name] = float(frame.stamp_s)
            oldest = max(oldest, age)
        self._obs_age_s = float(oldest)
        self._obs_read_s = now - float(oldest)
        parts = {p: state.part(p) for p in self.config.state_parts}
        if keys.TCP_POSE in parts:
            q = parts[keys.TCP_POSE][3:7]
            if float(np.dot(q, self._quat_ref)) < 0:
                parts[keys.TCP_POSE][3:7] = -q
        self._state = state
        self._obs = Observation(state=parts, images=images, stamps=stamps)
        return self._obs

    def _info(self, status: TaskStatus, executed: ArmCommand | None, report) -> dict:
        info: dict = {} if status.success is None else {keys.INFO_SUCCESS: bool(status.success)}
        info |= {
            keys.INFO_FAILURE: bool(status.failure),
            keys.INFO_PRIVILEGED: {k: np.array(v, copy=True) for k, v in status.privileged.items()},
            keys.INFO_OVERRUNS: int(self.clock.overruns),
            keys.INFO_OBS_AGE: self._obs_age_s,
        }
        if executed is not None:
            info[keys.INFO_COMMAND] = executed.as_array()
            info[keys.INFO_SAFETY] = report.as_dict()
        return info
