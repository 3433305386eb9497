"""The twin presented as a ros2_control-driven arm (a vendor ROS 2 driver), in real time: what
the generic ROS 2 backend (``drivers.ros2_arm``) drives on a real UR, xArm or Kinova.

Run::

    python -m sim.ros2_control_node --arm ur5e --task pick_cube --interface joint
    python -m sim.ros2_control_node --arm ur5e --task pick_cube --interface cartesian \
        --cameras front --image-size 64

Driver side (names of Universal_Robots_ROS2_Driver; under ``/<controller-ns>`` if given; header
stamps: the node's ROS clock, as a driver's):

- publishes ``/joint_states`` (``sensor_msgs/JointState``, reliable, depth 10, as ros2_control's
  joint_state_broadcaster: the arm's joint names with position, velocity, effort, and the
  gripper's ``robotiq_85_left_knuckle_joint`` in rad, 0 open .. 0.8 closed, as a Robotiq 2F-85),
  ``/tcp_pose_broadcaster/pose`` (``PoseStamped``, frame ``base``) and
  ``/force_torque_sensor_broadcaster/wrench`` (``WrenchStamped`` at the TCP, frame ``base``:
  unlike a UR's, which is in ``tool0``), every state period (``--state-hz``, default 100);
- ``--interface joint``: subscribes ``/scaled_joint_trajectory_controller/joint_trajectory``
  (``trajectory_msgs/JointTrajectory``, timed as a joint_trajectory_controller times one with
  a zero header stamp: it starts on arrival, the servo goals are interpolated linearly from
  their present values through the points at their ``time_from_start`` and stay at the last
  point; a new trajectory replaces a running one) and ``/forward_position_controller/commands``
  (``std_msgs/Float64MultiArray``, the arm's joint order: the servo goals at once, the servos
  move at their speed limit). Names (every arm joint, no other), lengths, NaN/inf, the joint
  limits and non-decreasing finite ``time_from_start`` are checked: a bad command is refused
  and counted, never executed;
- ``--interface cartesian``: subscribes ``/cartesian_compliance_controller/target_frame``
  (``PoseStamped`` in ``base``): the twin's Cartesian target (IK at 100 Hz onto the servos, the
  compliant controller of such a driver); NaN, a non-unit quaternion or another frame is refused;
- ``--interface servo_bus`` (an arm with a jaw, ``--arm so101``): no arm command topics; the
  servos answer on a simulated Feetech bus (``drivers.feetech.sim_bus.SimServoBus`` in a
  process of its own, :class:`sim.twin_servo_bus.ServoBusProcess`, over
  :class:`sim.twin_servo_bus.TwinServoModel`: positions from physics, goals onto the twin's
  servos through the same checks) behind a pseudo-terminal linked at ``--port``, with the
  matching calibration written to ``--calibration-out`` (default ``<port>.json``): what
  ``python -m drivers.so101.node --port <port> --calibration <port>.json`` drives;
- ``/gripper/command`` (``std_msgs/Float64``, knuckle rad 0..0.8, clipped; NaN refused);
- a command watchdog (``--watchdog-s``, default 0.5 s of sim time): no arm command within it
  (a trajectory counts until its end) -> the arm holds where it is (servo goals at the motors /
  target at the measured TCP), counted: the twin's own safety, as a UR's controller stops when
  its external control stream stops.

Twin only, in ``--ns`` (default ``arm``), stamped with ``time.monotonic()`` (a real camera's time
base on this host, the one the arm bridge's state uses): ``<cam>/image_raw`` + ``camera_info``
(IMAGE, ``--camera-hz``), ``task/status`` (every state period; with ``--status-stamps sim``
stamped with sim time instead, which restarts at every scene reset, as the simulated human
tells episodes apart; ``--score-log PATH``: the twin scores its episodes, :mod:`sim.scoring`),
``controller/status`` (JSON:
``accepted``, ``refused``, ``last_refusal``, ``watchdog_holds``, ``watchdog_s``,
``max_command_gap_s`` (the longest time between two accepted arm commands, sim s: the watchdog
fires only where it exceeded ``watchdog_s``), ``max_state_gap_ms`` (the longest wall time
between two joint states sent: the twin's own pauses), ``pacer`` (events run, superseded, kept
alive, resyncs: :mod:`sim.realtime`), ``dropped_after_reset``, ``interface``), service
``task/reset`` (seed from parameter ``episode_seed``, response
``{"start_pose", "stamp_s", "twin_id", "episode"}``: the arm is teleported to the task's start
pose, and arm commands far from it are dropped until one near it arrives: a commander's stream
meant for the old pose, :meth:`sim.ros2_control.ControlledArm.scene_reset`). Node name ``twin``.

Physics runs in wall-clock time through :mod:`sim.realtime` (a pacing thread; callbacks on a
single-threaded executor; one lock around the physics).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import threading
import time

import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64, Float64MultiArray, Header, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from drivers.ros import convert, qos
from robot_rl.core.clock import LongestGap
from robot_rl.core.config import EnvConfig
from sim.backend import TASKS, make_sim_backend
from sim.config import SimConfig
from sim.realtime import EventSchedule, RealtimePacer, TwinEvent
from sim.ros2_control import (
    GRIPPER_CLOSED_RAD,
    GRIPPER_JOINT,
    INTERFACES,
    ControlledArm,
)
from sim.ros_node import camera_info, twin_joint_ik
from sim.scoring import EpisodeScores
from sim.twin_servo_bus import ServoBusProcess, TwinServoModel, close_servo_bus, open_servo_bus

DRIVER_QOS = QoSProfile(depth=10)  # reliable, volatile: rclcpp's default, as ros2_control's


class Ros2ControlTwinNode(Node):
    """Node ``twin``: the twin as a ros2_control-driven arm (module docstring).

    Raises:
        ValueError: Unknown task or interface, rates whose ratios are not whole, or the joint
            interface on a torque-controlled twin arm.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        if args.task not in TASKS:
            raise ValueError(f"unknown task {args.task!r}; known: {', '.join(sorted(TASKS))}")
        sim_cfg = SimConfig(
            sim_hz=args.sim_hz,
            cameras=tuple(args.cameras),
            image_height=args.image_size,
            image_width=args.image_size,
            arm=args.arm,
        )
        schedule = EventSchedule(
            1 / sim_cfg.sim_hz, 1 / args.state_hz, args.state_hz, args.camera_hz
        )
        super().__init__("twin", namespace=args.ns)
        self.sim = make_sim_backend(args.task, sim_cfg, EnvConfig(), joint_ik=twin_joint_ik)
        world = self.sim.world
        if args.interface != "cartesian":
            world.joint_goal_solver = None  # joint goals come from the controllers / the bus
        self.ctl = ControlledArm(world, args.interface, args.watchdog_s)
        self.lock = threading.RLock()
        self.bus: ServoBusProcess | None = None
        self.servo_model: TwinServoModel | None = None
        self.port_link = args.port
        if args.interface == "servo_bus":
            self.servo_model, self.bus = open_servo_bus(self.ctl, args.port, args.calibration_out)
        self.sim.robot.connect()
        for cam in self.sim.cameras:
            cam.connect()
        self.twin_id = secrets.token_hex(4)
        self.state_gap = LongestGap()  # wall time between two joint states sent
        self.episode = 0
        self.status_stamps = args.status_stamps
        self.scores = EpisodeScores(args.score_log) if args.score_log else None
        self.declare_parameter("episode_seed", 0)
        ns = args.controller_ns.strip("/")
        prefix = f"/{ns}" if ns else ""
        self._joint_names = [*world.arm.joint_names, GRIPPER_JOINT]
        self._pub_joints = self.create_publisher(JointState, f"{prefix}/joint_states", DRIVER_QOS)
        self._pub_pose = self.create_publisher(
            PoseStamped, f"{prefix}/tcp_pose_broadcaster/pose", DRIVER_QOS
        )
        self._pub_wrench = self.create_publisher(
            WrenchStamped, f"{prefix}/force_torque_sensor_broadcaster/wrench", DRIVER_QOS
        )
        if args.interface == "joint":
            self.create_subscription(
                JointTrajectory,
                f"{prefix}/{args.trajectory_controller}/joint_trajectory",
                self._on_trajectory,
                DRIVER_QOS,
            )
            self.create_subscription(
                Float64MultiArray,
                f"{prefix}/{args.position_controller}/commands",
                self._on_positions,
                DRIVER_QOS,
            )
        else:
            self.create_subscription(
                PoseStamped,
                f"{prefix}/{args.cartesian_controller}/target_frame",
                self._on_target,
                DRIVER_QOS,
            )
        self.create_subscription(
            Float64, f"{prefix}/{args.gripper_topic}", self._on_gripper, DRIVER_QOS
        )
        self._image_pubs = {
            c.name: (
                self.create_publisher(Image, f"{c.name}/image_raw", qos.IMAGE),
                self.create_publisher(CameraInfo, f"{c.name}/camera_info", qos.IMAGE),
            )
            for c in self.sim.cameras
        }
        self._pub_task = self.create_publisher(String, "task/status", qos.STATUS)
        self._pub_ctl = self.create_publisher(String, "controller/status", qos.STATUS)
        self.create_service(Trigger, "task/reset", self._srv_task_reset)
        self.pacer = RealtimePacer(
            schedule,
            self.lock,
            self._run_event,
            max_lag_s=0.1,
            on_resync=lambda lag_s: self.get_logger().warning(
                f"the twin fell {lag_s * 1e3:.0f} ms behind (CPU starved?); sim time slips",
                throttle_duration_sec=1.0,
            ),
        )
        with self.lock:
            self._reset_task()
            self._sync_bus()
            self.pacer.restart()
        self.pacer.start()

    # -- commands (executor thread) --------------------------------------------------------

    def _sim_now(self) -> float:
        return float(self.sim.world.data.time)

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        with self.lock:
            points = [list(p.positions) for p in msg.points]
            times_s = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
            self.ctl.trajectory(list(msg.joint_names), points, self._sim_now(), times_s)

    def _on_positions(self, msg: Float64MultiArray) -> None:
        with self.lock:
            self.ctl.joint_goal(self.sim.world.arm.joint_names, list(msg.data), self._sim_now())

    def _on_target(self, msg: PoseStamped) -> None:
        with self.lock:
            try:
                pose, _ = convert.msg_to_pose_stamped(msg, self.sim.world.arm.base_frame)
            except ValueError as e:
                self.ctl.refuse(f"target_frame: {e}")
                return
            self.ctl.cartesian_target(pose, self._sim_now())

    def _on_gripper(self, msg: Float64) -> None:
        with self.lock:
            self.ctl.gripper(float(msg.data))

    # -- real time (pacing thread, under the lock) -----------------------------------------

    def _run_event(self, ev: TwinEvent, superseded: bool) -> None:
        if ev.advance:
            self.sim.world.step(ev.advance)
        if ev.state:
            self.ctl.tick(self._sim_now())
        self._sync_bus()
        if superseded:
            return
        try:
            self.publish_state()
            if ev.camera:
                self.publish_cameras()
        except Exception:
            if self.context.ok():
                raise  # else Ctrl-C / SIGTERM shut the context down before the pacer stopped

    def _sync_bus(self) -> None:
        """Under the lock: the servo bus's goals in, its positions out (servo_bus only)."""
        if self.servo_model is not None:
            self.servo_model.sync()

    def publish_state(self) -> None:
        """Driver topics (ROS clock) and the twin's task and controller status (monotonic)."""
        w = self.sim.world
        stamp = self.get_clock().now().to_msg()
        grip = w.gripper_closure() * GRIPPER_CLOSED_RAD
        effort = w.servo.last_torque if w.servo is not None else np.zeros(w.arm.num_joints)
        msg = JointState(header=Header(stamp=stamp), name=self._joint_names)
        msg.position = [*map(float, w.joint_pos()), grip]
        msg.velocity = [*map(float, w.joint_vel()), 0.0]
        msg.effort = [*map(float, effort), 0.0]
        self._pub_joints.publish(msg)
        self.state_gap.event(time.monotonic())
        base = w.arm.base_frame
        self._pub_pose.publish(
            PoseStamped(
                header=Header(stamp=stamp, frame_id=base), pose=convert.pose_to_msg(w.tcp_pose())
            )
        )
        wrench = convert.wrench_stamped_to_msg(w.tcp_wrench(), 0.0, base)
        wrench.header.stamp = stamp  # the driver's clock, as the other driver topics
        self._pub_wrench.publish(wrench)
        status = self.sim.task.evaluate()
        sim_now = self._sim_now()
        if self.scores is not None:
            self.scores.observe(sim_now, status)
        task = {
            "stamp_s": sim_now if self.status_stamps == "sim" else time.monotonic(),
            "reward": float(status.reward),
            "success": bool(status.success),
            "failure": bool(status.failure),
            "privileged": {
                k: np.asarray(v, dtype=np.float64).reshape(-1).tolist()
                for k, v in status.privileged.items()
            },
        }
        self._pub_task.publish(String(data=json.dumps(task)))
        ctl = {
            "stamp_s": time.monotonic(),
            "sim_time_s": self._sim_now(),
            "max_state_gap_ms": self.state_gap.max_s * 1e3,
            "pacer": self.pacer.counters(),
            **self.ctl.status(),
        }
        self._pub_ctl.publish(String(data=json.dumps(ctl)))

    def publish_cameras(self) -> None:
        """Render and publish every camera, stamped with ``time.monotonic()``."""
        for cam in self.sim.cameras:
            frame = cam.read()
            stamp = time.monotonic()
            img_pub, info_pub = self._image_pubs[cam.name]
            img_pub.publish(convert.image_to_msg(frame.image, stamp, cam.name))
            info_pub.publish(camera_info(self.sim, cam.name, stamp))

    # -- task reset ------------------------------------------------------------------------

    def _reset_task(self, episode: int = 0) -> np.ndarray:
        """Under the lock: a new scene (episode ``episode``), the arm teleported to its start
        pose, watchdog off; the scores close the old episode and open the new one."""
        seed = int(self.get_parameter("episode_seed").value)
        if self.scores is not None:
            self.scores.finish("reset")
        start = np.asarray(self.sim.task.reset(np.random.default_rng(seed)), dtype=np.float64)
        if self.scores is not None:
            self.scores.start(episode, seed)
        self.sim.robot.reset(start, 0.0)
        self.ctl.watchdog.reset()
        return start

    def _srv_task_reset(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        with self.lock:
            try:
                start = self._reset_task(self.episode + 1)
            except (RuntimeError, ValueError) as e:
                response.success, response.message = False, f"task/reset failed: {e}"
                return response
            self.ctl.scene_reset()  # a commander's stream for the old pose is dropped
            self._sync_bus()
            self.episode += 1
            self.pacer.restart()
            self.publish_state()
            if self.sim.cameras:
                self.publish_cameras()
            response.success = True
            response.message = json.dumps(
                {
                    "start_pose": [float(v) for v in start],
                    "stamp_s": time.monotonic(),
                    "twin_id": self.twin_id,
                    "episode": self.episode,
                }
            )
        return response

    def destroy_node(self) -> None:
        pacer = getattr(self, "pacer", None)
        if pacer is not None:
            pacer.stop()
        if getattr(self, "bus", None) is not None:
            close_servo_bus(self.bus, self.port_link)
        scores = getattr(self, "scores", None)
        if scores is not None:
            scores.close()
        super().destroy_node()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="The twin as a ros2_control-driven arm (node 'twin').")
    p.add_argument("--arm", default="ur5e", help="the twin's arm kind (sim.twin_arms.TWIN_ARMS)")
    p.add_argument("--task", default="pick_cube", help="task name (sim.backend.TASKS)")
    p.add_argument("--interface", choices=INTERFACES, default="joint")
    p.add_argument("--ns", default="arm", help="namespace of the twin-only topics and services")
    p.add_argument("--controller-ns", default="", help="namespace of the driver topics")
    p.add_argument("--trajectory-controller", default="scaled_joint_trajectory_controller")
    p.add_argument("--position-controller", default="forward_position_controller")
    p.add_argument("--cartesian-controller", default="cartesian_compliance_controller")
    p.add_argument("--gripper-topic", default="gripper/command", help="Float64, knuckle rad")
    p.add_argument("--cameras", nargs="*", default=[], help="twin cameras (front, wrist)")
    p.add_argument("--image-size", type=int, default=64, help="square image side, pixels")
    p.add_argument("--sim-hz", type=float, default=500.0, help="physics rate, Hz")
    p.add_argument("--state-hz", type=float, default=100.0, help="state publication rate, Hz")
    p.add_argument("--camera-hz", type=float, default=30.0, help="camera rate, Hz")
    p.add_argument("--watchdog-s", type=float, default=0.5, help="command watchdog, sim s")
    p.add_argument(
        "--score-log",
        default=None,
        help="append one JSON line per finished episode here (sim.scoring), the twin's own "
        "judgement when a run plays a real robot on it",
    )
    p.add_argument(
        "--status-stamps",
        choices=("monotonic", "sim"),
        default="monotonic",
        help="time base of task/status: the host's monotonic clock, or sim time (restarts at "
        "every scene reset: what the simulated human, sim.human_node, tells episodes by)",
    )
    p.add_argument(
        "--port",
        default="/tmp/robot_rl_so101_twin",
        help="servo_bus: a symlink made here to the simulated bus's pseudo-terminal (the "
        "SO-101 node's --port)",
    )
    p.add_argument(
        "--calibration-out",
        default="",
        help="servo_bus: write the twin's servo calibration here (the SO-101 node's "
        "--calibration); empty: <port>.json",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point: build the twin, spin until Ctrl-C / SIGTERM, free the renderers."""
    args, ros_args = build_parser().parse_known_args(argv)
    rclpy.init(args=ros_args)
    try:
        node = Ros2ControlTwinNode(args)
    except ValueError as e:
        print(f"ros2_control twin: {e}", file=sys.stderr)
        rclpy.try_shutdown()
        raise SystemExit(2) from e
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    node.get_logger().info(
        f"ros2_control twin ready: arm={args.arm} task={args.task} interface={args.interface}"
    )
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # SIGTERM shut the context down while the executor built its wait set
        if rclpy.ok():
            raise
    finally:
        executor.shutdown()
        node.destroy_node()
        node.sim.close()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
