"""The MuJoCo twin behind ROS 2: node ``twin`` serving the topics and services of
``drivers/CONTRACT.md`` for one arm namespace, as a real arm + cameras would.

Run::

    python -m sim.ros_node --task pick_cube --ns arm --cameras front wrist --image-size 128 \
        --mode lockstep --control-hz 10

It builds the twin with :func:`sim.backend.make_sim_backend`, wraps the twin's arm in
:class:`TwinArmBackend` and puts the same bridge core (:class:`drivers.arm_bridge.core.ArmBridge`:
validation, safety box/cone/per-step limit, watchdog, e-stop) and the same bridge topics and
services (:class:`drivers.arm_bridge.node.BridgeInterface`) in front of it as on a real arm.
Every message is stamped with simulation time.

Extra, twin only: ``<cam>/image_raw`` + ``<cam>/camera_info`` (IMAGE), ``task/status`` (JSON,
same stamp as the state), services ``task/reset`` (seed from parameter ``episode_seed``) and
``sim/step`` (lockstep mode). ``--score-log PATH``: the twin scores its own episodes (one JSON
line per scene reset, success from its own truth; :mod:`sim.scoring`), which is how a run that
plays a real robot (setup ``privileged: false``) is measured without reading ``task/status``.

Safety limits: the read-only parameters of :mod:`drivers.arm_bridge.params` (defaults: the
task's ``default_safety``), passed to ``make_sim_backend``, so the same limits apply in the
bridge core and in the twin's own safety layer and watchdog. Invalid values: exit code 2.

Answers identify the twin (``twin_id`` random per process, ``episode`` = ``task/reset`` calls,
``step`` = steps since), so the env's lockstep clock can tell another client or a second twin
in the same ROS domain from a control-rate mismatch (``drivers/CONTRACT.md``).

Modes:

- ``lockstep``: physics advances only on ``sim/step``: bridge tick (the newest target, clipped
  against the measured pose), one control period of physics, publish everything, respond
  ``{"stamp_s": t, "twin_id", "episode", "step"}``. So that a target published just before
  the call is executed in this period, ``sim/step`` first waits up to ``--command-wait-s``
  (wall) for a target stamped at or after the current sim time (else it goes ahead).
- ``realtime``: physics runs in wall-clock time (:mod:`sim.realtime`): state, task status and
  bridge status every state period (``--state-hz``, default 100) and with every camera frame
  (like a high-rate arm: the newest state is never older than a frame); camera frames at
  ``--camera-hz`` (default 30), each stamped with the sim time it shows; a newly received
  target is executed at the next state period (at most one new target per control period, so
  the per-step limit and the watchdog keep their per-period meaning). A bridge service call
  (reset, hold, ...) publishes the state at once; the cameras keep their schedule, which a
  ``task/reset`` restarts (with a frame at sim time 0).

Diagnostics: ``kill -USR1 <pid>`` prints every thread's Python stack to stderr; a ``sim/step``
still running after :data:`STEP_STALL_REPORT_S` does so by itself (both through
:mod:`faulthandler`, which works even while a C call holds the GIL), and one slower than
:data:`STEP_SLOW_WARN_S` logs where its time went.

Threads: lockstep: a multi-threaded executor; subscriptions and hold/estop run in a reentrant
group, the stepping services in an exclusive one. Real time: a pacing thread runs the events and
a single-threaded executor the callbacks (rclpy's multi-threaded executor busy-loops in Python
and starved the pacing thread of the GIL). One lock serialises the bridge and the physics.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import (
    ExternalShutdownException,
    MultiThreadedExecutor,
    SingleThreadedExecutor,
)
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import String
from std_srvs.srv import Trigger

from drivers.arm_bridge.core import TARGET_INTERVAL_PERIODS, ArmBridge, BridgeConfig
from drivers.arm_bridge.node import (
    RESET_GRIPPER_PARAM,
    RESET_POSE_PARAM,
    BridgeInterface,
    exit_bad_parameter,
)
from drivers.arm_bridge.params import BridgeParamError, declare_safety_parameters, describe_safety
from drivers.ik import joint_goal_solver
from drivers.ros import convert, qos
from robot_rl.core.config import EnvConfig
from robot_rl.core.types import ArmCommand, RobotState, UnsafeCommandError
from sim.backend import TASKS, SimBackend, make_sim_backend, task_info
from sim.config import DEFAULT_ARM, SimConfig
from sim.realtime import EventSchedule, RealtimePacer, TwinEvent
from sim.robot import SimRobot
from sim.scoring import EpisodeScores
from sim.twin_arms import TwinArm


def twin_joint_ik(arm: TwinArm) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A joint-controlled twin arm's bridge IK: the robot side's
    (:func:`drivers.ik.joint_goal_solver`, as ``robot_rl.app.envs.build.twin_joint_ik``)."""
    return joint_goal_solver(arm.kinematics, arm.arm, arm.bridge_hz)


MODES = ("lockstep", "realtime")
STEP_SLOW_WARN_S = 0.5
"""A ``sim/step`` slower than this logs a warning with its phases (fresh target, lock, step)."""
STEP_STALL_REPORT_S = 1.5
"""A ``sim/step`` still running after this long dumps every thread's stack to stderr (the env's
deadline for it is 2 s, ``drivers/CONTRACT.md``)."""


class TwinArmBackend:
    """:class:`drivers.arm_bridge.backend.ArmBackend` over the twin's :class:`SimRobot`.

    ``command`` goes through ``SimRobot.send_command``, so the twin's own safety layer and
    physics-rate watchdog stay in force behind the bridge (defence in depth; on an already safe
    command they change nothing). ``start_move`` teleports (``SimRobot.reset``): the twin is a
    simulator, and a teleport is what the direct (non-ROS) twin does at reset too. It runs under
    the node's lock (the bridge calls it in ``begin_reset``), which also guards the physics, so
    the move is done when it returns and ``move_done`` is always True.
    """

    def __init__(self, robot: SimRobot) -> None:
        self.robot = robot

    def connect(self) -> None:
        self.robot.connect()

    def disconnect(self) -> None:
        self.robot.disconnect()

    def read_state(self) -> RobotState:
        return self.robot.read_state()

    def command(self, target_pose: np.ndarray, gripper: float) -> None:
        self.robot.send_command(ArmCommand(np.asarray(target_pose, dtype=np.float64), gripper))

    def hold(self) -> None:
        self.robot.hold()

    def start_move(self, pose: np.ndarray, gripper: float) -> None:
        self.robot.reset(np.asarray(pose, dtype=np.float64), gripper)

    def move_done(self) -> bool:
        return True

    def clear_error(self) -> bool:
        return True

    @property
    def error(self) -> str | None:
        return None


def static_twin_backend() -> TwinArmBackend:
    """Factory for ``python -m drivers.arm_bridge.node --backend sim.ros_node:static_twin_backend``:
    the pick_cube twin's arm with physics that never steps (a frozen arm), to exercise the
    lifecycle bridge node on its own."""
    b = make_sim_backend("pick_cube", SimConfig(cameras=()), EnvConfig())
    start = b.task.reset(np.random.default_rng(0))
    arm = TwinArmBackend(b.robot)
    arm.connect()
    arm.start_move(start, 0.0)
    return arm


def camera_info(backend: SimBackend, name: str, stamp_s: float) -> CameraInfo:
    """Pinhole ``CameraInfo`` of a twin camera (square pixels, principal point at the centre,
    from the MJCF ``fovy``)."""
    cam = next(c for c in backend.cameras if c.name == name)
    h, w = cam.image_spec.shape[:2]
    fovy_rad = float(np.deg2rad(backend.world.model.cam_fovy[backend.world.model.camera(name).id]))
    f = 0.5 * h / np.tan(0.5 * fovy_rad)
    cx, cy = 0.5 * w, 0.5 * h
    msg = CameraInfo(header=convert.header(stamp_s, name), height=h, width=w)
    msg.distortion_model = "plumb_bob"
    msg.d = [0.0] * 5
    msg.k = [f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0]
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
    return msg


class TwinNode(Node):
    """Node ``twin``: the twin's arm (behind the bridge core), cameras and task on ROS 2.

    Builds the twin itself (``make_sim_backend``) once the safety parameters are read, so that
    they reach the twin's own safety layer; :attr:`sim` is the backend (closed by the caller).

    Args:
        task: Task name (a key of ``sim.backend.TASKS``).
        sim_cfg: Physics rate, cameras, image size.
        env_cfg: Control rate.
        namespace: Arm namespace (``arm`` -> ``/arm/...``).
        mode: ``"lockstep"`` or ``"realtime"``.
        command_wait_s: Lockstep: longest wall wait in ``sim/step`` for a fresh target.
        state_hz: Real time: state publication rate (a whole number of state periods per
            control period and of physics steps per state period).
        camera_hz: Real time: camera frame rate.

    Raises:
        ValueError: Unknown mode or task, or rates whose ratios are not whole.
        BridgeParamError: A safety parameter is invalid (the message names it).
    """

    def __init__(
        self,
        task: str,
        sim_cfg: SimConfig,
        env_cfg: EnvConfig,
        namespace: str = "arm",
        mode: str = "lockstep",
        command_wait_s: float = 0.1,
        state_hz: float = 100.0,
        camera_hz: float = 30.0,
        score_log: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: choose one of {MODES}")
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(sorted(TASKS))}")
        schedule = None
        if mode == "realtime":  # check the rates before building anything
            schedule = EventSchedule(
                1.0 / sim_cfg.sim_hz, env_cfg.control_dt_s, state_hz, camera_hz
            )
        super().__init__("twin", namespace=namespace)
        safety = declare_safety_parameters(self, task_info(task, sim_cfg.arm).default_safety)
        backend = make_sim_backend(task, sim_cfg, env_cfg, safety=safety, joint_ik=twin_joint_ik)
        self.sim = backend
        self.twin_id = secrets.token_hex(4)
        """Random per process: tells this twin's answers from another twin's."""
        self.episode = 0
        """``task/reset`` calls served (the scene reset at start-up is episode 0)."""
        self.steps = 0
        """Control periods stepped since the last scene reset."""
        self.scores = EpisodeScores(score_log) if score_log else None
        """The twin's own scoring of its episodes (``--score-log``; :mod:`sim.scoring`)."""
        self.mode = mode
        self.command_wait_s = command_wait_s
        self.lock = threading.RLock()
        self._fresh = threading.Event()
        # Gripper commands accepted since start, and that count when physics last stepped:
        # gripper/command and target_pose are separate topics whose callbacks may run in either
        # order, so lockstep also waits for the step's gripper command (see _fresh_target_pending).
        self._gripper_msgs = 0
        self._gripper_msgs_at_step = 0
        self.declare_parameter("episode_seed", 0)
        self.declare_parameter("mode", mode)
        self.arm = TwinArmBackend(backend.robot)
        self.arm.connect()
        for cam in backend.cameras:
            cam.connect()
        # Lockstep: command stamps are sim time (the env's clock is the twin's), so a stale
        # command is detectable. Real time: the env may stamp with its own wall clock.
        max_age = safety.watchdog_timeout_s if mode == "lockstep" else None
        self.bridge = ArmBridge(
            self.arm,
            BridgeConfig(
                safety=safety,
                max_command_age_s=max_age,
                min_target_interval_s=TARGET_INTERVAL_PERIODS * backend.clock.period_s,
            ),
        )
        self.get_logger().info(f"safety limits (read-only parameters): {describe_safety(safety)}")
        try:
            start = self._reset_task(0)
        except UnsafeCommandError as e:
            backend.close()
            raise BridgeParamError(
                f"{e}: the safety parameters (workspace_low_m, workspace_high_m, orientation_*) "
                f"must contain the start poses of task {task!r}; widen them"
            ) from e
        self.declare_parameter(RESET_POSE_PARAM, [float(v) for v in start])
        self.declare_parameter(RESET_GRIPPER_PARAM, 0.0)
        fast = ReentrantCallbackGroup()
        stepping = MutuallyExclusiveCallbackGroup()
        self.iface = BridgeInterface(
            self,
            self.bridge,
            self.lock,
            self.now_s,
            callback_group=fast,
            on_change=self.publish_all if mode == "lockstep" else self.publish_state,
            on_target=self._fresh.set,
            on_gripper=self._on_gripper_accepted,
            arm=backend.world.arm,
        )
        self._image_pubs = {
            c.name: (
                self.create_publisher(Image, f"{c.name}/image_raw", qos.IMAGE),
                self.create_publisher(CameraInfo, f"{c.name}/camera_info", qos.IMAGE),
            )
            for c in backend.cameras
        }
        self._task_pub = self.create_publisher(String, "task/status", qos.STATUS)
        self.create_service(Trigger, "task/reset", self._srv_task_reset, callback_group=stepping)
        self.pacer: RealtimePacer | None = None
        if schedule is None:
            self.create_service(Trigger, "sim/step", self._srv_step, callback_group=stepping)
        else:
            self._subs_per_control = schedule.subs_per_control
            self.pacer = RealtimePacer(
                schedule,
                self.lock,
                self._run_event,
                max_lag_s=backend.clock.period_s,
                on_resync=lambda lag_s: self.get_logger().warning(
                    f"real time: the twin fell {lag_s * 1e3:.0f} ms behind (CPU starved?); "
                    "sim time slips",
                    throttle_duration_sec=1.0,
                ),
            )
        with self.lock:
            self.publish_all()
            if self.pacer is not None:
                self.pacer.restart()
        if self.pacer is not None:
            self.pacer.start()

    # -- time and stepping ------------------------------------------------------------------

    def now_s(self) -> float:
        """Simulation time, seconds."""
        return self.sim.clock.now_s()

    def _reset_task(self, episode: int) -> np.ndarray:
        seed = int(self.get_parameter("episode_seed").value)
        if self.scores is not None:
            self.scores.finish("reset")
        start = np.asarray(self.sim.task.reset(np.random.default_rng(seed)), dtype=np.float64)
        if self.scores is not None:
            self.scores.start(episode, seed)
        self.bridge.reset(start, 0.0, self.now_s())
        self.sim.clock.reset()
        self.steps = 0
        self._gripper_msgs_at_step = self._gripper_msgs
        return start

    def step_once(self) -> float:
        """Bridge tick, one control period of physics, publish everything (call under lock).

        Returns:
            The new simulation time, seconds.
        """
        self.bridge.tick(self.now_s())
        self._gripper_msgs_at_step = self._gripper_msgs
        self.sim.clock.tick()
        self.steps += 1
        self.publish_all()
        return self.now_s()

    def _on_gripper_accepted(self) -> None:
        self._gripper_msgs += 1
        self._fresh.set()

    def _fresh_target_pending(self) -> bool:
        """A target stamped at or after now is queued and, once this twin has received any
        gripper command (a client that sends them sends one with every target, gripper first),
        the gripper command of this period has been processed too."""
        stamp = self.bridge.pending_stamp_s
        if stamp is None or stamp < self.now_s() - 1e-9:
            return False
        return self._gripper_msgs == 0 or self._gripper_msgs > self._gripper_msgs_at_step

    def _wait_for_fresh_target(self) -> None:
        deadline = time.monotonic() + self.command_wait_s
        while True:
            with self.lock:
                if self._fresh_target_pending() or self.bridge.estopped:
                    return
                self._fresh.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._fresh.wait(remaining)

    def _run_event(self, ev: TwinEvent, superseded: bool) -> None:
        """Real time (pacing thread, under lock): physics up to the event, then its work
        (nothing published if the loop is late and the next event is already due)."""
        if ev.advance:
            self.sim.world.step(ev.advance)
        boundary = ev.sub_index % self._subs_per_control == 0  # watchdog, gripper-only commands
        if ev.state and (boundary or self.bridge.has_pending):
            self.bridge.tick(self.now_s())  # a target waits for the bridge's minimum interval
        if superseded:
            return
        try:
            self.publish_state()  # also with a frame: the state is never older than the images
            if ev.camera:
                self.publish_cameras()
        except Exception:
            if self.context.ok():
                raise
            # Ctrl-C / SIGTERM: rclpy shut the context down before main() stops the pacer.

    def destroy_node(self) -> None:
        # getattr: rclpy may destroy a node whose __init__ failed (bad parameters) before
        # the pacer existed.
        pacer = getattr(self, "pacer", None)
        if pacer is not None:
            pacer.stop()
        iface = getattr(self, "iface", None)
        if iface is not None:
            iface.intake.stop()
        scores = getattr(self, "scores", None)
        if scores is not None:
            scores.close()
        super().destroy_node()

    # -- publishing -------------------------------------------------------------------------

    def publish_all(self) -> None:
        """State, images, task status and bridge status for the current sim time."""
        self.publish_state()
        self.publish_cameras()

    def publish_cameras(self) -> None:
        """Render and publish every camera (stamped with the sim time they show)."""
        for cam in self.sim.cameras:
            frame = cam.read()
            img_pub, info_pub = self._image_pubs[cam.name]
            img_pub.publish(convert.image_to_msg(frame.image, frame.stamp_s, cam.name))
            info_pub.publish(camera_info(self.sim, cam.name, frame.stamp_s))

    def publish_state(self) -> None:
        """State, task status and bridge status for the current sim time."""
        state = self.arm.read_state()
        t = state.stamp_s
        self.iface.publish_state(state)
        status = self.sim.task.evaluate()
        if self.scores is not None:
            self.scores.observe(t, status)
        task = {
            "stamp_s": t,
            "reward": float(status.reward),
            "success": bool(status.success),
            "failure": bool(status.failure),
            "privileged": {
                k: np.asarray(v, dtype=np.float64).reshape(-1).tolist()
                for k, v in status.privileged.items()
            },
        }
        self._task_pub.publish(String(data=json.dumps(task)))
        self.iface.publish_status()

    # -- services ---------------------------------------------------------------------------

    def _srv_step(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        t0 = time.monotonic()
        faulthandler.dump_traceback_later(STEP_STALL_REPORT_S, file=sys.stderr)
        try:
            self._wait_for_fresh_target()
            t1 = time.monotonic()
            with self.lock:
                t2 = time.monotonic()
                t = self.step_once()
                ids = {"twin_id": self.twin_id, "episode": self.episode, "step": self.steps}
        finally:
            faulthandler.cancel_dump_traceback_later()
        t3 = time.monotonic()
        if t3 - t0 > STEP_SLOW_WARN_S:
            self.get_logger().warning(
                f"sim/step took {t3 - t0:.2f} s: waiting for a fresh target {t1 - t0:.2f} s, for "
                f"the lock {t2 - t1:.2f} s, stepping and publishing {t3 - t2:.2f} s (CPU starved?)"
            )
        response.success, response.message = True, json.dumps({"stamp_s": t, **ids})
        return response

    def _srv_task_reset(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        with self.lock:
            try:
                start = self._reset_task(self.episode + 1)
            except (RuntimeError, ValueError) as e:
                response.success, response.message = False, f"task/reset failed: {e}"
                self.get_logger().error(response.message)
                return response
            self.episode += 1
            if self.pacer is not None:  # real time: the schedule restarts with the scene
                self.pacer.restart()
            self.publish_all()
            response.success = True
            response.message = json.dumps(
                {
                    "start_pose": [float(v) for v in start],
                    "stamp_s": self.now_s(),
                    "twin_id": self.twin_id,
                    "episode": self.episode,
                }
            )
        return response


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="The MuJoCo twin behind ROS 2 (node 'twin').")
    p.add_argument("--task", default="pick_cube", help="task name (sim.backend.TASKS)")
    p.add_argument("--ns", default="arm", help="arm namespace")
    p.add_argument("--cameras", nargs="*", default=["front", "wrist"], help="twin cameras")
    p.add_argument("--image-size", type=int, default=128, help="square image side, pixels")
    p.add_argument("--mode", choices=MODES, default="lockstep")
    p.add_argument("--control-hz", type=float, default=10.0, help="control rate, Hz")
    p.add_argument("--sim-hz", type=float, default=500.0, help="physics rate, Hz")
    p.add_argument(
        "--arm", default=DEFAULT_ARM, help="the twin's arm kind (sim.twin_arms.TWIN_ARMS)"
    )
    p.add_argument(
        "--command-wait-s", type=float, default=0.1, help="lockstep: wait for a fresh target, s"
    )
    p.add_argument("--state-hz", type=float, default=100.0, help="realtime: state rate, Hz")
    p.add_argument("--camera-hz", type=float, default=30.0, help="realtime: camera rate, Hz")
    p.add_argument(
        "--score-log",
        default=None,
        help="append one JSON line per episode (success from the twin's own truth) to this "
        "file (sim.scoring)",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point: build the twin, spin until Ctrl-C / SIGTERM, free the renderers."""
    args, ros_args = build_parser().parse_known_args(argv)
    sim_cfg = SimConfig(
        sim_hz=args.sim_hz,
        cameras=tuple(args.cameras),
        image_height=args.image_size,
        image_width=args.image_size,
        arm=args.arm,
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: every thread's stack
    rclpy.init(args=ros_args)
    try:
        node = TwinNode(
            args.task,
            sim_cfg,
            EnvConfig(control_hz=args.control_hz),
            args.ns,
            args.mode,
            args.command_wait_s,
            args.state_hz,
            args.camera_hz,
            args.score_log,
        )
    except BridgeParamError as e:
        exit_bad_parameter("twin", e)
    except ValueError as e:  # rates whose ratios are not whole, unknown task
        print(f"twin: {e}", file=sys.stderr)
        raise SystemExit(2) from e
    backend = node.sim
    # Real time: a single-threaded executor (callbacks wait for the lock at most one event). The
    # multi-threaded one rebuilds its wait set in Python in a busy loop that held the GIL half
    # the time and starved the pacing thread for up to seconds (stale-data errors in the env).
    executor = (
        SingleThreadedExecutor() if node.pacer is not None else MultiThreadedExecutor(num_threads=3)
    )
    executor.add_node(node)
    node.get_logger().info(
        f"twin ready: task={args.task} mode={args.mode} ns=/{args.ns} id={node.twin_id}"
    )
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        backend.close()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
