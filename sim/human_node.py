"""The simulated human as a teleop node: the twin's scripted expert drives through the teleop
topics, exactly where a person's device would.

    python -m sim.human_node --task pick_cube --ns arm [--control-rotation] [--rule always]
        [--patience-steps 10 --min-progress 0.01 --takeover-steps 20 --max-interventions 2]
        [--press-success]

Node ``teleop`` in namespace ``--ns``. It subscribes ``task/status`` of the twin (JSON with the
reward and the privileged sim state, ``drivers/CONTRACT.md``) and, for every status with a new
stamp, asks :class:`sim.human.SimulatedHuman` for the reading of the next step and publishes it
as ``teleop/twist`` + ``teleop/joy`` (:func:`drivers.teleop.mapping.joy_from_state`), stamped
with the status stamp (sim time), so a recorder in lockstep can wait for the answer to the
observation it holds (:meth:`drivers.ros_teleop.RosTeleop.wait_for_stamp`). With
``--press-success`` (passed for a setup with ``privileged: false``) the success button is down in
every reading while the task's success holds, as a person marks it where the run may not read
the truth.

Episodes (:class:`StatusFollower`, plain Python): the twin's time restarts at every
``task/reset``, so a stamp going back starts a new episode (``SimulatedHuman.reset`` with a
Generator seeded from ``(--seed, episode count)``, then an observation with no reward). A
status repeating the current stamp is ignored, except while the episode has not stepped yet:
then it replaces the first observation (the arm is placed after the scene is reset, under the
same stamp). The expert acts in the base env's space of ``--control-hz`` /
``--control-rotation``: start the node with the recorder's settings.

An answer published before the reader's subscription has matched this node's writer (DDS
discovery is not symmetric: the reader may see this publisher first) would reach nobody, and a
loop in lockstep waits for it: the node re-sends its last answer once when its writer matches
readers it did not have when the answer went out.

The person's stopwatch starts when the robot starts acting (``--wait-for-command``, passed for a
real-time twin, where the scene's time runs while the actor resets, waits for fresh images or
for its learner): the node also follows the bridge's ``status`` (its ``last_command_s``, the
time it last accepted a target), and until the bridge accepts a target after the episode's
reset, the human counts no stall. In lockstep the scene's time moves only with the env's steps,
so there is no such wait to leave out (and the answer to a step never waits on a second topic).
A node that never hears a bridge status counts from the reset.

One observation per control period: a lockstep twin publishes one status per ``sim/step``, but
a real-time twin publishes at its state rate (100 Hz). A status counts as the next step only
once its stamp is a control period (``1 / --control-hz``) past the last step's; statuses in
between are not answered (the last answer stays fresh for the reader, which reads once per
control period). So the simulated human's step counts (patience, takeover length) are control
steps in both modes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping

import numpy as np
import rclpy
from geometry_msgs.msg import TwistStamped
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from sensor_msgs.msg import Joy
from std_msgs.msg import String

from drivers.ros import convert, qos
from drivers.ros_task import decode_status
from drivers.teleop.mapping import joy_from_state
from robot_rl.core.config import EnvConfig
from robot_rl.core.types import TeleopState
from sim.config import DEFAULT_ARM
from sim.human import HumanConfig, SimulatedHuman

STAMP_TOL_S = 1e-6
RESEND_CHECK_S = 0.05
"""How often the node checks for teleop readers matched after its last answer, seconds."""
STEP_TOL_S = 5e-4
"""A status at most this much earlier than a full control period after the last step still
counts as the next step (float stamps of whole physics steps)."""


class StatusFollower:
    """Turns the stream of task statuses into one human observation per control step.

    Args:
        human: The simulated human.
        seed: Seeds each episode's Generator as ``(seed, episode count)``.
        control_dt_s: The env's control period; a status less than this after the last step's
            is not a new step (None: every new stamp is one).
    """

    def __init__(
        self,
        human: SimulatedHuman,
        seed: int = 0,
        control_dt_s: float | None = None,
        near_miss: SimulatedHuman | None = None,
        near_miss_every: int = 0,
        wait_for_command: bool = False,
    ) -> None:
        if control_dt_s is not None and not control_dt_s > 0:
            raise ValueError(f"control_dt_s must be > 0 seconds or None, got {control_dt_s}")
        if near_miss_every < 0 or (near_miss_every > 0) != (near_miss is not None):
            raise ValueError(
                f"near_miss_every {near_miss_every}: give a near-miss human and k >= 1, or "
                "neither (0)"
            )
        self.driver = self.human = human
        self.near_miss, self.near_miss_every = near_miss, int(near_miss_every)
        self.seed = int(seed)
        self.control_dt_s = control_dt_s
        self.episodes = 0
        self.steps = 0
        self._last: float | None = None
        self.wait_for_command = bool(wait_for_command)
        self._command: float | None = None  # the bridge's last_command_s, newest heard
        self.heard_bridge = False
        self._command_at_reset: float | None = None

    def on_bridge_status(self, last_command_s: float | None) -> None:
        """The bridge's ``last_command_s`` (None: it has accepted no target yet)."""
        self.heard_bridge = True
        self._command = last_command_s

    @property
    def acting(self) -> bool:
        """Whether the robot has accepted a target since the episode's reset (always True
        without ``wait_for_command``, or when no bridge status was ever heard)."""
        if not (self.wait_for_command and self.heard_bridge):
            return True
        return self._command != self._command_at_reset

    def on_status(
        self, privileged: Mapping, reward: float, stamp_s: float, success: bool = False
    ) -> TeleopState | None:
        """The reading for this status, or None for a repeat that changes nothing."""
        if self._last is None or stamp_s < self._last - STAMP_TOL_S:
            self.episodes += 1
            self.steps = 0
            return self._first(privileged, stamp_s, success)
        if abs(stamp_s - self._last) <= STAMP_TOL_S:
            return self._first(privileged, stamp_s, success) if self.steps == 0 else None
        if self.control_dt_s is not None and stamp_s < self._last + self.control_dt_s - STEP_TOL_S:
            return None  # a real-time twin's state between two control steps
        self.steps += 1
        self._last = stamp_s
        return self.driver.observe(privileged, float(reward), stamp_s, success, self.acting)

    def _first(self, privileged: Mapping, stamp_s: float, success: bool) -> TeleopState:
        # every near_miss_every-th episode (the k-th, 2k-th, ...) the near-miss human drives
        miss = self.near_miss_every > 0 and self.episodes % self.near_miss_every == 0
        self.driver = self.near_miss if miss and self.near_miss is not None else self.human
        self.driver.reset(np.random.default_rng((self.seed, self.episodes)))
        self._last = stamp_s
        self._command_at_reset = self._command
        return self.driver.observe(privileged, math.nan, stamp_s, success)


def make_human(
    task: str,
    env_cfg: EnvConfig,
    rule: str | HumanConfig,
    near_miss: bool = False,
    arm: str = DEFAULT_ARM,
    near_miss_margin: float | None = None,
) -> SimulatedHuman:
    """The task's scripted expert (acting in ``env_cfg``'s base action space) as a human.

    ``rule``: a :class:`HumanConfig`, or only its rule (the other settings default).
    ``near_miss``: the expert stopped short of success (:mod:`sim.experts.near_miss`): the
    failures that look almost like success, which a person labelling a classifier shows it.
    ``arm``: the twin's arm kind (its task layout sizes the expert's motions, :mod:`sim.layout`).
    ``near_miss_margin``: the near miss stops below this fraction of the success threshold
    (None: :data:`sim.experts.near_miss.NEAR_MISS_MARGIN`).
    """
    from sim.backend import TASKS, task_info

    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {sorted(TASKS)}")
    expert = task_info(task, arm).make_expert(env_cfg)
    if near_miss:
        from sim.experts.near_miss import NEAR_MISS_MARGIN, NearMissExpert

        margin = NEAR_MISS_MARGIN if near_miss_margin is None else near_miss_margin
        expert = NearMissExpert(expert, task, margin)
    cfg = rule if isinstance(rule, HumanConfig) else HumanConfig(rule=rule)
    return SimulatedHuman(expert, cfg)


class HumanNode(Node):
    """Thin ROS adapter: ``task/status`` in, ``teleop/twist`` + ``teleop/joy`` out."""

    def __init__(self, follower: StatusFollower, namespace: str) -> None:
        super().__init__("teleop", namespace=namespace)
        self.follower = follower
        self.twist_pub = self.create_publisher(TwistStamped, "teleop/twist", qos.SENSOR)
        self.joy_pub = self.create_publisher(Joy, "teleop/joy", qos.TELEOP_JOY)
        self.create_subscription(String, "task/status", self._on_status, qos.STATUS)
        self.create_subscription(String, "status", self._on_bridge_status, qos.STATUS)
        self.rejected = 0
        # The last answer and how many readers its writer had matched when it went out. A
        # reader sees this node's publisher (its publisher count) before, or after, this
        # writer matches the reader: an answer published in between reaches nobody, and a
        # loop in lockstep would wait for it forever (the next status comes only after its
        # step). So an answer is re-sent once to readers that matched after it went out. (A
        # reader that matched during the publish gets it twice: harmless, as this node holds
        # buttons for whole frames and never taps one.)
        self._answer: tuple[TwistStamped, Joy] | None = None
        self._sent_to = 0
        self.create_timer(RESEND_CHECK_S, self._resend_to_new_readers)

    def _on_status(self, msg: String) -> None:
        try:
            status, stamp = decode_status(msg)
        except ValueError as e:
            self.rejected += 1
            self.get_logger().warn(f"task/status dropped ({self.rejected} so far): {e}")
            return
        reading = self.follower.on_status(
            status.privileged, status.reward, stamp, bool(status.success)
        )
        if reading is None:
            return
        axes, buttons = joy_from_state(reading)
        self._answer = (
            convert.twist_stamped_to_msg(reading.twist, stamp),
            Joy(header=convert.header(stamp), axes=axes, buttons=buttons),
        )
        self._publish_answer()

    def _on_bridge_status(self, msg: String) -> None:
        try:
            last = json.loads(msg.data).get("last_command_s")
            if last is not None and not math.isfinite(float(last)):
                raise ValueError(f"last_command_s {last!r} is not a finite number")
        except (ValueError, TypeError, AttributeError) as e:
            self.rejected += 1
            self.get_logger().warn(f"bridge status dropped ({self.rejected} so far): {e}")
            return
        if not self.follower.heard_bridge:
            self.get_logger().info(f"bridge status heard (last_command_s {last})")
        self.follower.on_bridge_status(None if last is None else float(last))

    def _publish_answer(self) -> None:
        assert self._answer is not None
        self._sent_to = self.joy_pub.get_subscription_count()
        self.twist_pub.publish(self._answer[0])
        self.joy_pub.publish(self._answer[1])

    def _resend_to_new_readers(self) -> None:
        if self._answer is None or not rclpy.ok(context=self.context):
            return  # nothing sent yet, or shutting down (a signal invalidated the context)
        try:
            readers = self.joy_pub.get_subscription_count()
        except Exception:  # rclpy's RCLError: the context went away between the two checks
            return
        if readers > self._sent_to:
            stamp = convert.msg_to_time(self._answer[1].header.stamp)
            self.get_logger().info(f"answer for {stamp:.3f} s re-sent to newly matched readers")
            self._publish_answer()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="pick_cube", help="twin task (sim.backend.TASKS)")
    p.add_argument(
        "--arm",
        default=DEFAULT_ARM,
        help="the twin's arm kind (sim.twin_arms.TWIN_ARMS): its task size",
    )
    p.add_argument("--ns", default="arm", help="arm namespace")
    p.add_argument("--control-hz", type=float, default=10.0, help="the env's control rate, Hz")
    p.add_argument("--control-rotation", action="store_true", help="7-dim actions (else 4)")
    p.add_argument(
        "--action-scale-m",
        type=float,
        default=None,
        help="the env's translation per step for an action of 1.0, metres (default: the task's)",
    )
    p.add_argument("--rule", choices=("always", "no_progress"), default="always")
    p.add_argument("--seed", type=int, default=0)
    d = HumanConfig()
    p.add_argument("--patience-steps", type=int, default=d.patience_steps, help="no_progress")
    p.add_argument("--min-progress", type=float, default=d.min_progress, help="no_progress")
    p.add_argument("--takeover-steps", type=int, default=d.takeover_steps, help="no_progress")
    p.add_argument("--max-interventions", type=int, default=d.max_interventions)
    p.add_argument("--reaction-steps", type=int, default=d.reaction_steps, help="no_progress")
    p.add_argument("--action-noise", type=float, default=d.action_noise)
    p.add_argument("--attention-share", type=float, default=d.attention_share, help="no_progress")
    p.add_argument(
        "--trust-patience-steps",
        type=int,
        default=d.trust_patience_steps,
        help="no_progress: extra patience earned by recent unaided successes",
    )
    p.add_argument("--trust-episodes", type=int, default=d.trust_episodes, help="no_progress")
    p.add_argument(
        "--wait-for-command",
        action="store_true",
        help="count the policy's stalls only once the bridge accepted a target after the "
        "episode's reset (a real-time twin, whose scene time runs while the actor resets)",
    )
    p.add_argument(
        "--press-success",
        action="store_true",
        help="press the success button while the task's success holds (a person marking "
        "success on a setup with privileged: false)",
    )
    p.add_argument(
        "--near-miss-every",
        type=int,
        default=0,
        help="every k-th episode stop short of success (a near miss: the cube grasped but held "
        "low, the peg on the opening), as a person shows a classifier its hard negatives; "
        "pick_cube, peg_insert, plug_insert; 0: never",
    )
    p.add_argument(
        "--near-miss-margin",
        type=float,
        default=None,
        help="a near miss stops below this fraction of the success threshold, drawn per "
        "episode (default 0.6)",
    )
    args, ros_args = p.parse_known_args(argv)
    from sim.backend import TASKS, task_info
    from sim.experts.near_miss import NEAR_MISS_TASKS, check_margin
    from sim.twin_arms import TWIN_ARMS

    if args.task not in TASKS:
        p.error(f"unknown --task {args.task!r}; known: {sorted(TASKS)}")
    if args.arm not in TWIN_ARMS:
        p.error(f"unknown --arm {args.arm!r}; the twin has {sorted(TWIN_ARMS)}")
    if args.near_miss_every < 0 or (args.near_miss_every and args.task not in NEAR_MISS_TASKS):
        p.error(
            f"--near-miss-every {args.near_miss_every}: needs k >= 0 and a task with a near-miss "
            f"rule {NEAR_MISS_TASKS} (got {args.task})"
        )
    if args.near_miss_margin is not None:
        try:
            check_margin(args.near_miss_margin, "--near-miss-margin")
        except ValueError as e:
            p.error(str(e))
    env_cfg = EnvConfig(
        control_hz=args.control_hz,
        control_rotation=args.control_rotation,
        action_scale_m=args.action_scale_m or task_info(args.task, args.arm).action_scale_m,
    )
    try:
        human = HumanConfig(
            rule=args.rule,
            patience_steps=args.patience_steps,
            min_progress=args.min_progress,
            takeover_steps=args.takeover_steps,
            max_interventions=args.max_interventions,
            press_success=args.press_success,
            reaction_steps=args.reaction_steps,
            action_noise=args.action_noise,
            attention_share=args.attention_share,
            trust_patience_steps=args.trust_patience_steps,
            trust_episodes=args.trust_episodes,
        )
    except ValueError as e:
        p.error(str(e))  # exit code 2 with the option to fix
    k = args.near_miss_every
    follower = StatusFollower(
        make_human(args.task, env_cfg, human, arm=args.arm),
        args.seed,
        control_dt_s=env_cfg.control_dt_s,
        near_miss=make_human(
            args.task,
            env_cfg,
            human,
            near_miss=True,
            arm=args.arm,
            near_miss_margin=args.near_miss_margin,
        )
        if k
        else None,
        near_miss_every=k,
        wait_for_command=args.wait_for_command,
    )
    rclpy.init(args=[sys.argv[0], *ros_args])
    node = HumanNode(follower, args.ns)
    node.get_logger().info(f"simulated human ({args.rule}) for {args.task} on /{args.ns}")
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
