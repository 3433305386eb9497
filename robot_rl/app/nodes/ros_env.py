"""Composition root for RobotEnv over ROS 2: a setup YAML -> ``(env, backend)``.

:func:`make_ros_env` reads a setup (:mod:`drivers.setup`), optionally starts its nodes with the
supervisor of ``robot-rl up`` (``launch=True``), and builds::

    RosSession(namespace) shared by
      RosRobot (bridge node ``twin`` or ``arm_bridge``), RosCamera per setup camera,
      RosTwinTask (robot: twin), RosTwinSceneTask (twin with privileged: false: resets only,
        reads no truth) or HardwareTask (robot: hardware), clock:
        lockstep            -> RosLockstepClock   (tick = sim/step)
        realtime, twin      -> StreamAlignedClock (wall pacing phase-locked to the streams,
                                                   sim-time now)
        realtime, hardware  -> StreamAlignedClock (same pacing, now in the setup's time_base:
                                                   monotonic unless it says stream)
    -> RobotEnv -> the same wrappers as the direct twin (robot_rl.app.envs.build.apply_wrappers)

With ``launch``, the env is wrapped in :class:`robot_rl.app.nodes.supervision.SupervisedEnv`: a
required
node that dies (at start-up or mid-run) raises :class:`robot_rl.app.nodes.supervision.NodeDiedError`
naming it, its exit status and its log, instead of the stale-data / timeout error it causes.

The returned backend has the attributes ``rollout`` uses from the direct twin's backend
(``cameras``, ``task``, ``make_expert()``, ``close()``), so the same episode loop drives both.
The scripted expert reads ``info["privileged"]``, which :class:`RosTwinTask` fills from
``task/status``. Only this module (the CLI layer) picks the ROS classes.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from drivers.ros.env import apply_ros_env, ros_env
from drivers.ros_camera import RosCamera, RosCameraConfig
from drivers.ros_clock import RosLockstepClock, StreamAlignedClock
from drivers.ros_hw_task import HardwareTask, HardwareTaskConfig
from drivers.ros_robot import RosRobot, RosRobotConfig
from drivers.ros_session import RosSession
from drivers.ros_task import RosTwinSceneTask, RosTwinTask, RosTwinTaskConfig
from drivers.setup import Setup, load_setup
from robot_rl.app.nodes.supervision import SupervisedEnv, explain
from robot_rl.core.config import EnvConfig
from robot_rl.core.safety import SafetyConfig
from robot_rl.envs import RobotEnv


@dataclass
class RosBackend:
    """What :func:`make_ros_env` built besides the env (mirrors ``sim.backend.SimBackend``)."""

    setup: Setup
    session: RosSession
    robot: RosRobot
    cameras: tuple[RosCamera, ...]
    task: Any
    clock: Any
    env_cfg: EnvConfig
    safety: SafetyConfig
    supervisor: Any = None
    _closed: bool = field(default=False, repr=False)

    def make_expert(self):
        """The twin task's scripted expert (reads ``info["privileged"]``).

        Raises:
            ValueError: The setup is not the twin, or its task has no expert.
        """
        info = _twin_task_info(self.setup)
        if info is not None and not self.setup.privileged:
            raise ValueError(
                f"{self.setup.source} has privileged: false: the scripted policy needs the "
                "twin's privileged state, which this run may not read; the simulated human "
                "(--teleop sim-expert / --human sim) reads it in its own node"
            )
        if info is None:
            raise ValueError(
                f"{self.setup.source}: the scripted policy needs the twin's privileged state "
                f"(robot: twin and a known task); this setup is robot: {self.setup.robot}, "
                f"task: {self.setup.task!r}"
            )
        return info.make_expert(self.env_cfg)

    def close(self) -> None:
        """Close the ROS session and stop the nodes this process started (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.session.close()
        if self.supervisor is not None:
            self.supervisor.stop(5.0)


def _check_hardware(setup: Setup, needs_task_reward: bool) -> None:
    """Refuse a hardware setup (or a twin one kept from its truth, ``privileged: false``) where
    a task reward is needed, and a hardware setup without a start pose."""
    if setup.robot == "twin" and not setup.privileged and needs_task_reward:
        raise ValueError(
            f"{setup.source} has privileged: false: this run may not read the twin's reward or "
            "success (task/status), as on a real robot. Give it a learned reward (--reward rm/) "
            "or a person's buttons (record / label --success-from buttons), or use a setup "
            "without privileged: false"
        )
    if setup.robot != "hardware":
        return
    if needs_task_reward:
        raise ValueError(
            f"{setup.source} is robot: hardware: nothing on a real robot computes the task's "
            "reward or success (a reward model does, from stage 5). Record demonstrations and "
            "labels on it with `robot-rl record` / `robot-rl label` (the person's buttons mark "
            "success); roll out or train on a twin setup (robot: twin)"
        )
    if setup.reset_pose is None:
        raise ValueError(
            f"{setup.source}: robot: hardware needs reset_pose: [x, y, z, qw, qx, qy, qz] (the "
            "episode start pose in the base frame, inside the safety box), and optionally "
            "reset_jitter_m: [dx, dy, dz]; see launch/README.md"
        )


def _twin_task_info(setup: Setup):
    if setup.robot != "twin":
        return None
    from sim.backend import TASKS, task_info
    from sim.twin_arms import TWIN_ARMS

    if setup.task not in TASKS:
        return None
    # a twin setup describing an arm the twin has no model of: the default twin arm plays it
    return task_info(setup.task, setup.arm.name if setup.arm.name in TWIN_ARMS else None)


def make_ros_env(
    setup: Setup | str | Path,
    *,
    control_rotation: bool = True,
    max_episode_steps: int | None = None,
    action_scale_m: float | None = None,
    wrappers: Any = None,
    domain_id: int | None = None,
    launch: bool = False,
    log_dir: Path | None = None,
    connect_timeout_s: float | None = None,
    terminate_on_success: bool = True,
    needs_task_reward: bool = True,
    obs_cameras: tuple[str, ...] | None = None,
    reward: Any = None,
) -> tuple[gym.Env, RosBackend]:
    """Build RobotEnv over the ROS 2 graph of ``setup``. See the module docstring.

    Args:
        setup: A parsed setup or the path of its YAML.
        control_rotation: 7-dim action with rotation, or 4-dim.
        max_episode_steps: Episode length (None: the twin task's default, else 100).
        action_scale_m: TCP translation per step for an action of 1.0 (None: the twin task's
            default, else 2 cm).
        wrappers: ``robot_rl.app.envs.build.WrapperConfig`` (None: no wrappers).
        domain_id: ROS_DOMAIN_ID (None: ``$ROS_DOMAIN_ID``, else 0). The ROS variables of
            :func:`drivers.ros.env.ros_env` are applied to this process.
        launch: Start the setup's nodes here (stopped by ``backend.close()``), except nodes
            that read the terminal, and supervise them (see the module docstring); False:
            connect to nodes already running (``robot-rl up``).
        log_dir: Node logs when ``launch`` (default: ``runs/up/<setup>-<time>``).
        connect_timeout_s: How long to wait for the bridge (None: 60 s when launching, as the
            twin takes a few seconds to start; else 10 s).
        terminate_on_success: ``EnvConfig.terminate_on_success`` (False: the task's success
            does not end the episode, e.g. when a person's button decides).
        needs_task_reward: The caller takes reward and success from the task (rollout). A
            hardware setup has neither (:class:`drivers.ros_hw_task.HardwareTask`) and is
            refused; ``record`` and ``label`` pass False (the person's buttons mark success),
            and so does training with a learned reward.
        obs_cameras: Setup cameras whose frames enter the observation (None: all). The others
            are connected for out-of-band reading (a learned reward's cameras).
        reward: ``robot_rl.app.envs.build.RewardHook`` wrapping the env in a learned reward (see
            :func:`robot_rl.app.envs.build.make_env`), or None.

    Raises:
        drivers.setup.SetupError: Invalid setup file.
        ValueError: A hardware setup where a task reward is needed, or without ``reset_pose``.
        drivers.ros_session.RosTimeoutError: Nodes not reachable.
        robot_rl.app.nodes.supervision.NodeDiedError: ``launch`` and a required node died.
    """
    from robot_rl.app.envs.build import WrapperConfig, apply_wrappers

    if not isinstance(setup, Setup):
        setup = load_setup(setup)
    _check_hardware(setup, needs_task_reward)  # before any node starts
    domain = domain_id if domain_id is not None else int(os.environ.get("ROS_DOMAIN_ID", 0))
    apply_ros_env(domain)
    info = _twin_task_info(setup)
    if setup.robot == "hardware" and max_episode_steps is None:
        max_episode_steps = 100
    env_cfg = EnvConfig(
        control_hz=setup.control_hz,
        max_episode_steps=max_episode_steps or (info.max_episode_steps if info else 100),
        control_rotation=control_rotation,
        action_scale_m=action_scale_m or (info.action_scale_m if info else 0.02),
        max_state_age_s=setup.max_state_age_s,
        max_image_age_s=setup.max_image_age_s,
        terminate_on_success=terminate_on_success,
    )
    safety = setup.safety or (info.default_safety if info else SafetyConfig())
    supervisor = None
    if launch:
        import dataclasses

        from robot_rl.app.nodes.supervisor import Supervisor, default_log_dir

        # Nodes that read a person's terminal (keyboard teleop) are for `robot-rl up` only.
        headless = dataclasses.replace(setup, nodes=tuple(n for n in setup.nodes if not n.terminal))
        supervisor = Supervisor(
            headless,
            log_dir or default_log_dir(setup),
            ros_env(domain),
            on_event=lambda line: print(f"[up] {line}", file=sys.stderr, flush=True),
        )
        supervisor.start()
    timeout = connect_timeout_s or (60.0 if launch else 10.0)
    session = RosSession(setup.namespace, domain_id=domain)
    try:
        backend = _build(setup, session, env_cfg, safety, info, timeout)
        backend.supervisor = supervisor
        if supervisor is not None:
            _wait_nodes_up(backend, supervisor, timeout)
        backend.robot.connect()  # fail here, with what to start, rather than at reset
        names = [c.name for c in backend.cameras] if obs_cameras is None else list(obs_cameras)
        in_obs = [c for c in backend.cameras if c.name in names]
        env: gym.Env = RobotEnv(backend.robot, in_obs, backend.task, backend.clock, env_cfg)
        if wrappers is not None or reward is not None:
            hook = None
            if reward is not None:
                out_of_band = {c.name: c for c in backend.cameras if c.name not in names}
                for cam in out_of_band.values():
                    cam.connect()
                task = backend.task

                def hook(e: gym.Env) -> gym.Env:
                    return reward(e, out_of_band, task)

            env = apply_wrappers(
                env,
                wrappers or WrapperConfig(),
                has_images=bool(in_obs),
                object_specs=backend.task.privileged_spec,
                reward=hook,
            )
    except BaseException as e:
        died = explain(supervisor, e)  # a node that died starting up is the cause
        session.close()
        if supervisor is not None:
            supervisor.stop(5.0)
        if died is not None:
            raise died from e
        raise
    if supervisor is not None:
        env = SupervisedEnv(env, supervisor)
    return env, backend


def _build(
    setup: Setup,
    session: RosSession,
    env_cfg: EnvConfig,
    safety: SafetyConfig,
    info,
    connect_timeout_s: float,
) -> RosBackend:
    twin = setup.robot == "twin"
    if setup.clock == "lockstep":
        clock: Any = RosLockstepClock(session, setup.control_hz)
    else:
        clock = StreamAlignedClock(
            session,
            setup.control_hz,
            time_base="monotonic" if setup.time_base == "monotonic" else "stream",
        )
    robot = RosRobot(
        RosRobotConfig(
            namespace=setup.namespace,
            bridge_node=setup.bridge_node,
            max_state_age_s=setup.max_state_age_s,
            safety=safety,
            ack_timeout_s=2.0 if setup.clock == "lockstep" else None,
            connect_timeout_s=connect_timeout_s,
            arm=setup.arm,
        ),
        clock.now_s,
        session,
    )
    cameras = tuple(
        cropped(
            RosCamera(
                RosCameraConfig(
                    name=c.name,
                    height=c.height,
                    width=c.width,
                    namespace=setup.namespace,
                    max_age_s=setup.max_image_age_s,
                ),
                clock.now_s,
                session,
            ),
            c.crop,
        )
        for c in setup.cameras
    )
    task: Any
    if not twin:
        assert setup.reset_pose is not None  # checked by _check_hardware
        task = HardwareTask(
            HardwareTaskConfig(
                name=setup.task,
                reset_pose=setup.reset_pose,
                reset_jitter_m=setup.reset_jitter_m,
                safety=safety,
            )
        )
        return RosBackend(setup, session, robot, cameras, task, clock, env_cfg, safety)
    if not setup.privileged:  # the twin played as a real robot: no task/status subscription
        scene = RosTwinSceneTask(
            RosTwinTaskConfig(name=setup.task, namespace=setup.namespace), session
        )
        return RosBackend(setup, session, robot, cameras, scene, clock, env_cfg, safety)
    spec = None
    if info is not None:
        from sim.backend import _load

        spec = _load(info.task_class)().privileged_spec
    task = RosTwinTask(
        RosTwinTaskConfig(
            name=setup.task, namespace=setup.namespace, max_age_s=setup.max_state_age_s
        ),
        clock.now_s,
        session,
        privileged_spec=spec,
    )
    return RosBackend(
        setup=setup,
        session=session,
        robot=robot,
        cameras=cameras,
        task=task,
        clock=clock,
        env_cfg=env_cfg,
        safety=safety,
    )


def _wait_nodes_up(backend: RosBackend, supervisor, timeout_s: float) -> None:
    """Wait until the bridge subscribes to ``target_pose``, failing early with
    :class:`robot_rl.app.nodes.supervision.NodeDiedError` if a required node of the setup died."""
    session = backend.session
    topic = session.topic("target_pose")
    deadline = time.monotonic() + timeout_s
    while session.node.count_subscribers(topic) == 0:
        death = supervisor.required_death()
        if death is not None and death.final:
            raise supervisor.error(death)
        if time.monotonic() > deadline:
            return  # robot.connect() raises with the full explanation
        time.sleep(0.1)


def cropped(camera: Any, crop: tuple[int, int, int, int] | None) -> Any:
    """The camera as the setup's commands see it: its ``crop`` box, if the setup gives one."""
    if crop is None:
        return camera
    from robot_rl.wrappers.image_crop_resize import CroppedCamera

    return CroppedCamera(camera, crop)
