"""``robot-rl train --setup``: the training env is RobotEnv over ROS 2 (a setup file's graph).

    robot-rl train --setup launch/sim.yaml --launch --run runs/x [--human none|sim|teleop]

The env is built as for ``record`` (:func:`robot_rl.app.nodes.ros_env.make_ros_env`; the learner
layout of ``--obs`` through :func:`robot_rl.app.teleop.record.env_wrappers`), so demos recorded with
``robot-rl record`` (or collected on the direct twin) fit it. ``--task`` is the twin's task: a
setup with another one is started with ``--task`` when ``--launch`` is given, and refused
otherwise (the running twin serves its own task). A hardware setup needs a learned reward
(``--reward rm/``: nothing on a real robot computes the task's reward); without one it is refused
with :func:`make_ros_env`'s error. With ``--reward`` the classifier's cameras are subscribed
beside the observation's (resized to the classifier's image size), the task's success no longer
ends episodes, and evaluation between episodes reads the detector's verdict (the only success
there is on a robot).

Who may take over (``--human``), always through the teleop topics and
:class:`drivers.ros_teleop.RosTeleop`, read by :class:`robot_rl.wrappers.Intervention`
(outermost), as in the direct case:

- ``none``: no teleop is read (the setup's teleop nodes are not started);
- ``sim``: ``sim.human_node`` is started here with the ``--human-*`` settings (its own default
  rule is ``always``; train passes ``--human-rule``, ``no_progress`` by default) and
  ``--seed``. In lockstep the twin waits for nothing, so each step first waits (at most
  :data:`ANSWER_TIMEOUT_S`) for the human's answer stamped with the observation the policy
  acts on (:class:`AnsweredTeleop`, as ``record --teleop sim-expert`` does); a late answer is
  counted (``late_teleop_answers``) and the step uses whatever arrived. In real time nothing
  waits, as with a person: each step reads the newest answer (the node answers once per
  control period, see :mod:`sim.human_node`; a twist older than the reader's
  ``stale_after_s`` reads as zero), so the human reacts to a state up to one control period
  (plus transport) older than the policy's;
- ``teleop``: the setup's own teleop node (a person with a device; started here with
  ``--launch``, else the one under ``robot-rl up``). A lockstep twin is paced to
  ``control_hz x --realtime-factor`` of wall time so that a person can follow.

Evaluation runs on the same ROS env, with the human bypassed (the env below the intervention
wrapper: the deterministic policy alone), and only between training episodes
(``Trainer(eval_between_episodes=True)``): an evaluation due mid-episode waits for the episode
to end, the final one for the budget-cut episode to be closed. It is the only choice that
carries over to a real robot, and in lockstep one env session must be the twin's only stepper.
Whatever the human publishes meanwhile is dropped: :class:`RosTeleop` clears its latches when
the publisher's clock goes back (every twin reset). ``robot-rl eval --run`` of such a run uses
the direct twin of the same task and settings.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from robot_rl.app.teleop.human_answers import ANSWER_TIMEOUT_S, HumanAnswers
from robot_rl.app.teleop.record import env_wrappers
from robot_rl.app.teleop.teleop_env import (
    TELEOP_MODULES,
    Pacer,
    TeleopOptions,
    load_setup_for_task,
    open_teleop_env,
)
from robot_rl.core.clock import obs_stamp
from robot_rl.core.types import TeleopState

ROS_CONNECTION = ("launch", "domain_id", "log_dir", "realtime_factor", "teleop_wait_s")
"""Options that say how to reach the ROS 2 graph, not what to train: --resume takes them from
the call (e.g. resume under `robot-rl up` a run first started with --launch)."""


class AnsweredTeleop:
    """A :class:`drivers.ros_teleop.RosTeleop` whose :meth:`read` first waits for the answer to
    the current observation (the simulated human in lockstep, which stamps its answer with the
    observation's sim time), through :class:`robot_rl.app.teleop.human_answers.HumanAnswers`.

    It implements :class:`robot_rl.core.intervention.StepObserver` only to learn the stamp of
    the observation the next step acts on; the decision is the node's.

    Args:
        teleop: The connected reader.
        node_ended: Whether the human's node has exited (a missing answer is then an error).
        timeout_s: How long to wait for an answer, seconds.
        first_timeout_s: How long to wait for the first answer (discovery), seconds.
    """

    def __init__(
        self,
        teleop: Any,
        node_ended: Callable[[], bool],
        timeout_s: float = ANSWER_TIMEOUT_S,
        first_timeout_s: float = 30.0,
    ) -> None:
        self.teleop = teleop
        self.node_ended = node_ended
        self.answers = HumanAnswers(
            teleop,
            True,
            lambda line: print(f"[train] {line}", file=sys.stderr, flush=True),
            node_ended,
            timeout_s=timeout_s,
            first_timeout_s=first_timeout_s,
            log_hint="; see its log under the node log directory (--log-dir)/teleop",
        )
        self._stamp: float | None = None

    @property
    def late(self) -> int:
        """Steps that went on without their answer."""
        return self.answers.late

    def connect(self) -> None:
        self.teleop.connect()

    def disconnect(self) -> None:
        self.teleop.disconnect()

    def observe_reset(self, obs: Mapping, info: Mapping[str, Any], seed: int | None) -> None:
        self._stamp = obs_stamp(obs, default=0.0)

    def observe_step(self, obs: Mapping, reward: float, info: Mapping[str, Any]) -> None:
        self._stamp = obs_stamp(obs, default=0.0)

    def read(self) -> TeleopState:
        """The human's answer to the current observation (see the class docstring).

        Raises:
            RuntimeError: No answer and the human's node has exited.
            TimeoutError: No first answer within ``first_timeout_s`` (see :class:`HumanAnswers`).
        """
        if self._stamp is not None and not self.answers.wait(self._stamp) and self.node_ended():
            raise RuntimeError(
                "the simulated human's node (sim.human_node) exited; see its log under the "
                "node log directory (--log-dir)/teleop"
            )
        return self.teleop.read()


class Paced(gym.Wrapper):
    """Holds each ``step`` to ``period_s`` of wall time (a person driving a lockstep twin)."""

    def __init__(self, env: gym.Env, period_s: float) -> None:
        super().__init__(env)
        self.pacer = Pacer(period_s)

    def reset(self, **kwargs: Any):
        self.pacer.reset()
        return self.env.reset(**kwargs)

    def step(self, action: Any):
        self.pacer.wait()
        return self.env.step(action)


@dataclass
class RosTraining:
    """What :func:`build_ros_training` built.

    Attributes:
        env: The training env (the intervention wrapper outermost with a human).
        eval_env: The same robot without the intervention wrapper.
        intervention: The intervention wrapper, or None for ``--human none``.
        closers: Close these (in order) when done.
        teleop: The :class:`AnsweredTeleop` (lockstep ``--human sim``), else None.
    """

    env: gym.Env
    eval_env: gym.Env
    intervention: Any
    closers: list[Any]
    teleop: AnsweredTeleop | None = None

    def result(self) -> dict:
        """Extra fields of train's JSON result."""
        return {"late_teleop_answers": self.teleop.late if self.teleop is not None else 0}

    def close(self) -> None:
        """Close the envs, the ROS session and the nodes started here."""
        for c in self.closers:
            c.close()


def human_node_args(cmd: Any) -> tuple[str, ...]:
    """``sim.human_node`` arguments for ``cmd``'s ``--human-*`` settings and seed."""
    h = cmd.human_config()
    scale = cmd.env.action_scale_m  # None: the node takes the task's, as the env does
    extra = ("--action-scale-m", repr(float(scale))) if scale else ()
    return (
        *extra,
        "--rule", h.rule,
        "--patience-steps", str(h.patience_steps),
        "--min-progress", repr(float(h.min_progress)),
        "--takeover-steps", str(h.takeover_steps),
        "--max-interventions", str(h.max_interventions),
        "--reaction-steps", str(h.reaction_steps),
        "--action-noise", repr(float(h.action_noise)),
        "--attention-share", repr(float(h.attention_share)),
        "--trust-patience-steps", str(h.trust_patience_steps),
        "--trust-episodes", str(h.trust_episodes),
        "--seed", str(cmd.seed),
    )  # fmt: skip


DEMO_CROPS_KEY = "demo_camera_crops"
"""The learner's policy settings name its pixel demos' crop boxes under this key; an actor with
a ``--setup`` compares them with its cameras' (:func:`check_demo_crops`)."""


def demo_crops(demos: Any) -> Any:
    """The camera crop boxes a demo store was recorded through (``camera_crops`` in its meta,
    as `record` writes it), or None (no demos, no such store yet, or no boxes stored)."""
    from pathlib import Path

    from robot_rl.replay import EpisodeLog

    if demos is None or not Path(demos).exists():
        return None  # the demo loader says what is wrong with the path
    log = EpisodeLog.open(demos, mode="r")
    try:
        return (log.meta or {}).get("camera_crops")
    finally:
        log.close()


def check_demo_crops(setup: Any, crops: Any, source: str) -> None:
    """Refuse pixel demos recorded through other crop boxes than ``setup``'s cameras: the
    policy would learn from pixels this setup never shows it.

    Raises:
        ValueError: Naming the boxes there and here, and what to do.
    """
    if diff := setup.crop_mismatch(crops):
        raise ValueError(
            f"{source} were recorded through other camera crops ({diff}): the policy would "
            "learn from pixels this setup never shows it. Give the setup the crops the demos "
            "were recorded with, or record the demos again through this setup file"
        )


def build_ros_training(cmd: Any, reward: Any) -> RosTraining:
    """The training and evaluation envs over ROS 2 for a ``TrainCmdConfig`` with ``setup``
    and its learned reward (:class:`robot_rl.app.training.compose.RewardParts`; called by
    :func:`robot_rl.app.training.compose.build_envs`).

    Raises:
        ValueError: A hardware setup (no task reward), a task the running nodes do not serve,
            cameras the setup lacks, a classifier labelled through other camera crops.
        TimeoutError: Nodes or the teleop node not reachable.
    """
    from drivers.setup import load_setup
    from robot_rl.app.nodes.ros_env import _check_hardware, make_ros_env
    from robot_rl.wrappers import Intervention, InterventionConfig

    settings = reward.settings  # a learned reward: a hardware setup is fine
    # make_ros_env's refusal of a hardware setup first, before any node starts.
    _check_hardware(load_setup(cmd.setup), needs_task_reward=settings is None)
    setup = load_setup_for_task(cmd.setup, cmd.env.task, cmd.launch)
    if crops := setup.crop_mismatch(reward.camera_crops):
        raise ValueError(
            f"--reward {cmd.reward} was trained on frames labelled with other camera crops "
            f"({crops}): it would judge pixels it never saw. Give the setup the crops the "
            "frames were labelled with, or label and train the classifier again on this setup"
        )
    if cmd.env.obs == "pixels":
        check_demo_crops(setup, demo_crops(cmd.demos), f"--demos {cmd.demos}")
    lenv = cmd.env
    cams, wrappers = env_wrappers(lenv, setup)
    rcams = tuple(c for c in reward.cameras if c not in cams)
    verdicts, hook = reward.verdicts, reward.hook
    if cmd.human == "none":
        env_setup = dataclasses.replace(
            setup,
            cameras=tuple(c for c in setup.cameras if c.name in (*cams, *rcams)),
            nodes=tuple(n for n in setup.nodes if n.module not in TELEOP_MODULES),
        )
        unknown = [c for c in (*cams, *rcams) if c not in {s.name for s in setup.cameras}]
        if unknown:
            raise ValueError(f"cameras {unknown} are not in {setup.source}")
        env, backend = make_ros_env(
            env_setup,
            control_rotation=lenv.control_rotation,
            max_episode_steps=lenv.max_episode_steps,
            action_scale_m=lenv.action_scale_m,
            wrappers=wrappers,
            domain_id=cmd.domain_id,
            launch=cmd.launch,
            log_dir=cmd.log_dir,
            terminate_on_success=settings is None,
            needs_task_reward=settings is None,
            obs_cameras=cams,
            reward=hook,
        )
        return RosTraining(env, env, None, [env, backend])
    opts = TeleopOptions(
        launch=cmd.launch,
        teleop="sim-expert" if cmd.human == "sim" else "setup",
        realtime_factor=cmd.realtime_factor,
        domain_id=cmd.domain_id,
        log_dir=cmd.log_dir,
        teleop_wait_s=cmd.teleop_wait_s,
    )
    sess = open_teleop_env(
        setup,
        opts,
        obs_cameras=cams,
        wrappers=wrappers,
        control_rotation=lenv.control_rotation,
        max_episode_steps=lenv.max_episode_steps,
        terminate_on_success=settings is None,
        human_args=human_node_args(cmd) if cmd.human == "sim" else (),
        reward_cameras=rcams,
        reward=hook,
    )
    try:
        if verdicts is not None:  # the person's success / failure buttons end episodes
            verdicts.attach(sess.teleop)
        teleop: Any = sess.teleop
        answered = None
        inner: gym.Env = sess.env
        if cmd.human == "sim" and sess.lockstep:
            teleop = answered = AnsweredTeleop(
                sess.teleop, sess.teleop_ended, first_timeout_s=cmd.teleop_wait_s
            )
        if cmd.human == "teleop" and sess.lockstep and cmd.realtime_factor > 0:
            inner = Paced(inner, sess.backend.env_cfg.control_dt_s / cmd.realtime_factor)
        cfg = InterventionConfig(hold_steps=cmd.intervention_hold_steps)
        env = Intervention(inner, teleop, cfg)
    except BaseException:
        sess.close()
        raise
    return RosTraining(env, sess.env, env, [sess], answered)
