"""``robot-rl rehearse``: the real-robot day, rehearsed on the twin played as a real robot.

    robot-rl rehearse --out runs/rehearsal --task pick_cube --obs pixels --robot-minutes 60

Each step is the command a user types on the robot day, run as its own process against one
real-time twin that the run may not read the truth of (a setup with ``privileged: false``,
written to ``<out>/setup.yaml``):

1. ``robot-rl up <out>/setup.yaml``: the twin in real time, its cameras, and its own episode
   scoring (``--score-log <out>/scores.jsonl``, :mod:`sim.scoring`), the only judge of what
   the run achieved;
2. ``robot-rl record --teleop sim-expert``: demonstrations, through the teleop topics, from the
   simulated human, which presses success as a person would (the recorder cannot read it);
3. ``robot-rl label --teleop sim-expert``: success frames (the human holds the button);
4. ``robot-rl reward train`` and ``robot-rl reward eval``: the success classifier, its
   precision and recall on held-out episodes and its calibrated threshold;
5. ``robot-rl learner`` (its own process, gRPC on 127.0.0.1) and ``robot-rl actor --reward
   <classifier> --human sim`` against the setup: reward and success only from the classifier,
   corrections only through the teleop topics, on the wall clock. The training stops when the
   last ``--target-episodes`` episodes without a correction succeeded at ``--target-success``
   (as the twin scored them; the actor's log says which episodes were corrected), or after
   ``--robot-minutes`` of robot time.
6. ``robot-rl eval --run <out>/learner --setup <out>/setup.yaml --reward <classifier>
   --episodes <target-episodes>``: the final policy, deterministic and without the human, on
   the same real-time twin over ROS 2 as the robot day ran, its episodes ended by the
   classifier; the twin's own scores of these episodes are the truth. The target is judged
   here (``target_met``: at least ``--target-success`` over ``--target-episodes`` episodes,
   as the twin scored them), as published real-robot results judge a trained policy; the
   rolling rule of step 5 is only the early stop (:mod:`robot_rl.app.rehearsal.rehearsal_report`
   says
   why it rarely fires).
7. ``robot-rl eval --run <out>/learner --episodes <target-episodes>``: the same policy on the
   direct twin (lockstep, the task's own success), for comparison with the benchmarks.

The arm (``--arm``, default ``fr3``; ``robot-rl rehearse --arm ur5e`` for the 6-DoF UR5e-class
arm) is the twin node's (``sim.ros_node --arm``, the arm bridge and the joint-mode IK inside it)
and the setup's ``arm:``, which every env of the day checks the served joints against; the
demos' stored settings, the learner, the actor and the direct-twin evaluation use it too.
``--driver ros2_control`` puts the arm's own bridge in front of a twin that stands in for its
vendor driver, as on the robot: the generic ROS 2 bridge on a ros2_control-shaped UR5e (joint
mode) or FR3 (Cartesian mode), the SO-101 bridge on the SO-101's simulated servo bus
(:mod:`robot_rl.app.rehearsal.rehearse_setup`).

No privileged information in the loop, enforced: the setup's ``privileged: false`` keeps every
env of the run from subscribing to ``task/status`` (:class:`drivers.ros_task.RosTwinSceneTask`),
the learner evaluates nothing on a twin of its own (``--eval-episodes 0``), and while the actor
runs this command asks the ROS 2 graph which nodes read ``task/status``: anything but the
simulated human (node ``teleop``) stops the rehearsal (``privileged_readers`` in the report).

The report directory holds every step's JSON and log, ``report.json`` (the figures), PNGs and
``summary.md`` (:mod:`robot_rl.app.rehearsal.rehearsal_report`).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from robot_rl.app.nodes.proc_cpu import CpuMeter
from robot_rl.app.nodes.supervisor import die_with_parent
from robot_rl.app.rehearsal.rehearsal_report import training_episodes, unaided_successes
from robot_rl.app.rehearsal.rehearse_setup import write_setup
from sim.config import DEFAULT_ARM
from sim.human import HumanConfig

STEPS = ("up", "record", "label", "reward_train", "reward_eval", "train", "eval_ros", "eval")
"""The rehearsal's steps, in order (``report.json``'s ``steps`` holds each one's wall time)."""
HUMAN_NODE = "teleop"
"""The simulated human's node name (``sim.human_node``): the one reader of ``task/status``
allowed besides the twin's own scoring."""


@dataclass(frozen=True)
class RehearseConfig:
    """Rehearse a whole robot day on the twin played as a real robot: record demos and label
    success frames with a simulated human, train a success classifier, train over ROS 2 with
    the human correcting, then evaluate and write a report."""

    out: Path = Path("runs/rehearsal")
    """Report directory (refused if it holds a report; steps' data, logs and figures)."""
    task: str = "pick_cube"
    """Twin task."""
    arm: str = DEFAULT_ARM
    """The twin's arm kind (sim.twin_arms.TWIN_ARMS), e.g. fr3 (the 7-DoF FR3-class arm,
    Cartesian impedance control) or ur5e (the 6-DoF UR5e-class arm, joint position control with
    IK at the bridge rate); the whole day runs on it: the twin node, the demos, the learner and
    the evaluations (docs/arms.md)."""
    driver: Literal["twin", "ros2_control"] = "twin"
    """twin: the twin node is its own arm bridge; ros2_control: the twin stands in for the arm's
    vendor driver and our bridge for it runs in front (the generic ROS 2 bridge on the ur5e and
    fr3, the SO-101 bridge on the so101's simulated servo bus), as on the robot."""
    obs: Literal["state", "pixels"] = "pixels"
    """What the policy sees: pixels (the setup's cameras + the robot state) or state (the robot
    state only: the run may not read object poses; reach needs nothing else)."""
    cameras: tuple[str, ...] = ("front", "wrist")
    """The setup's cameras (the classifier's; the policy's too with --obs pixels)."""
    reward_cameras: tuple[str, ...] | None = None
    """The cameras the classifier reads, a subset of --cameras (None: all of them), as
    HIL-SERL's classifier keys: a camera that cannot show success (a wrist camera on a lift,
    which moves with the cube) only adds what differs between episodes."""
    previous_action: bool = False
    """The policy also observes the action sent on the previous step (record, learner and
    actor: `robot-rl train --previous-action`)."""
    image_size: int = 128
    """Camera frames are image_size x image_size pixels."""
    control_hz: float = 10.0
    """Control rate of the robot day."""
    state_hz: float = 100.0
    """Rate at which the twin publishes the robot state (a real arm's bridge: its `state_hz`);
    every message costs the actor's ROS executor CPU time (and the GIL) whether or not a
    control step reads it."""
    demos: int = 20
    """Demonstrations to record."""
    label_episodes: int = 10
    """Episodes to label for the classifier."""
    label_max_steps: int | None = None
    """Step limit of a labelling episode (None: the task's)."""
    label_near_miss_every: int = 3
    """Every k-th labelling episode the simulated human stops short of success (pick_cube,
    peg_insert, plug_insert; ignored for other tasks): the hard negatives a person shows the
    classifier. 0: every labelling episode succeeds."""
    label_near_miss_margin: float | None = None
    """A near miss stops below this fraction of the success threshold, drawn per episode (None:
    0.6). Closer near misses show the classifier the frames a policy stopping just short of
    success makes (bench/classifier_near_miss.py measures 0.6 against 0.95 on the SO-101)."""
    robot_minutes: float = 60.0
    """Robot-time budget of the training (actor steps / control_hz)."""
    target_success: float = 0.9
    """The target: the final evaluation succeeds this often (and training stops early when the
    policy succeeded without correction in this share of the last --target-episodes
    episodes)."""
    target_episodes: int = 50
    """Episodes of the final evaluation (and of the early stop's window)."""
    port: int = 50071
    """The learner's port on 127.0.0.1."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID of the rehearsal's graph (default: $ROS_DOMAIN_ID, else 0)."""
    seed: int = 0
    """Seed of the learner, the actor and the recorded episodes."""
    learner_nice: int = 10
    """Niceness of the learner process (0-19): on the machine it shares with the actor, the
    twin and the simulated human, the processes that keep time come first and the learner
    takes the CPU they leave (on a robot PC: `nice -n 10 robot-rl learner ...`). 0: equal."""
    reward_gates: tuple[str, ...] = ()
    """State gates of the classifier (`reward train --gates`), e.g. `gripper_pos>=0.45
    gripper_pos<=0.7` for a cube in the closed hand: a frame outside them cannot confirm
    success, whatever the cameras show."""
    control_rotation: bool | None = None
    """7-dim actions with rotation for the demos, the labels and the policy (None: when the
    task needs it, as plug_insert and assemble do; else the 4-dim [dx, dy, dz, gripper])."""
    gripper_discretize: bool = True
    """The learner's `--gripper-discretize` (close / open / keep the last command), where the
    task lets the policy command the gripper: pick_cube from pixels reached 0.94 with it in 10
    robot minutes, 0.28-0.70 without (docs/real_robot.md)."""
    human_patience_steps: int = HumanConfig().patience_steps
    """Training: the simulated human takes over when the policy has not made progress for this
    many steps (`actor --human-patience-steps`); a person who steps in at every hesitation
    leaves the policy few chances to recover on its own."""
    human_reaction_steps: int = HumanConfig().reaction_steps
    """Training: the simulated human's reaction time, steps (`actor --human-reaction-steps`)."""
    human_action_noise: float = HumanConfig().action_noise
    """Training: noise on the simulated human's motions (`actor --human-action-noise`)."""
    human_attention_share: float = HumanConfig().attention_share
    """Training: the simulated human's attention budget, the most of the robot's steps it
    drives (`actor --human-attention-share`; 1.0: no budget)."""
    human_trust_patience_steps: int = HumanConfig().trust_patience_steps
    """Training: earned autonomy, the extra patience (steps) the simulated human gives a policy
    that succeeded unaided in all of its last `--human-trust-episodes` episodes (scaled by the
    share; `actor --human-trust-patience-steps`; 0: off)."""
    human_trust_episodes: int = HumanConfig().trust_episodes
    """Training: the recent episodes that earn trust (`actor --human-trust-episodes`)."""
    learner_args: tuple[str, ...] = ()
    """More options of `robot-rl learner`, as one quoted string split like a shell line, e.g.
    `--learner-args="--utd 2 --sac.critic-arch residual"` (the `=` form: a value that starts
    with `--` cannot follow the flag as a separate word)."""
    actor_args: tuple[str, ...] = ()
    """More options of `robot-rl actor`, the same way (`--actor-args="--no-progress"`)."""
    progress: bool = True
    """Show progress on stderr."""
    json: bool = False
    """Print exactly one JSON object (the report) on stdout."""

    def __post_init__(self) -> None:
        for name in ("learner_args", "actor_args"):  # "--utd 2" -> ("--utd", "2")
            try:
                words = tuple(w for arg in getattr(self, name) for w in shlex.split(arg))
            except ValueError as e:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag}: {e} (give the options as one shell line)") from e
            object.__setattr__(self, name, words)
        if self.demos < 1 or self.label_episodes < 2:
            raise ValueError("--demos must be >= 1 and --label-episodes >= 2")
        if self.label_near_miss_every < 0:
            raise ValueError(
                f"--label-near-miss-every must be >= 0, got {self.label_near_miss_every}"
            )
        if self.label_near_miss_margin is not None:
            from sim.experts.near_miss import check_margin

            check_margin(self.label_near_miss_margin, "--label-near-miss-margin")
        if not 0 <= self.learner_nice <= 19:
            raise ValueError(f"--learner-nice must be in 0..19, got {self.learner_nice}")
        if self.human_patience_steps < 1:
            raise ValueError(
                f"--human-patience-steps must be >= 1, got {self.human_patience_steps}"
            )
        HumanConfig(  # the other --human-* settings' checks, before anything starts
            reaction_steps=self.human_reaction_steps,
            action_noise=self.human_action_noise,
            attention_share=self.human_attention_share,
            trust_patience_steps=self.human_trust_patience_steps,
            trust_episodes=self.human_trust_episodes,
        )
        if not self.robot_minutes > 0:
            raise ValueError(f"--robot-minutes must be > 0, got {self.robot_minutes}")
        if not 0.0 < self.target_success <= 1.0 or self.target_episodes < 1:
            raise ValueError("--target-success must be in (0, 1] and --target-episodes >= 1")
        if not self.cameras:
            raise ValueError("--cameras: the classifier needs at least one camera")
        if self.reward_cameras is not None and (
            not self.reward_cameras or not set(self.reward_cameras) <= set(self.cameras)
        ):
            raise ValueError(
                f"--reward-cameras {list(self.reward_cameras)} must name some of --cameras "
                f"{list(self.cameras)}"
            )
        from sim.twin_arms import TWIN_ARMS

        if self.arm not in TWIN_ARMS:
            raise ValueError(
                f"--arm {self.arm!r}: the twin has no such arm kind; choose from "
                f"{', '.join(sorted(TWIN_ARMS))}"
            )
        from sim.realtime import EventSchedule

        try:  # the twin's own check, before anything starts
            EventSchedule(1.0 / 500.0, 1.0 / self.control_hz, self.state_hz, 30.0)
        except ValueError as e:
            raise ValueError(f"--state-hz {self.state_hz:g} / --control-hz: {e}") from e

    @property
    def rotation(self) -> bool:
        """Whether the actions control rotation (``control_rotation``, else the task's need)."""
        if self.control_rotation is not None:
            return self.control_rotation
        from sim.backend import TASKS

        return bool(TASKS[self.task].needs_rotation) if self.task in TASKS else False

    @property
    def robot_steps(self) -> int:
        """The training budget in actor steps."""
        return max(1, round(self.robot_minutes * 60.0 * self.control_hz))


class RehearsalError(RuntimeError):
    """A step failed; the message names it and the tail of its log."""


class _Say:
    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, msg: str) -> None:
        if self.on:
            print(f"[rehearse] {msg}", file=sys.stderr, flush=True)


class Rehearsal:
    """Runs the steps (see the module docstring); :meth:`run` returns the report dict."""

    def __init__(self, cfg: RehearseConfig) -> None:
        self.cfg = cfg
        self.out = cfg.out
        self.logs = cfg.out / "logs"
        self.say = _Say(cfg.progress)
        self.domain = cfg.domain_id if cfg.domain_id is not None else int(
            os.environ.get("ROS_DOMAIN_ID", 0)
        )  # fmt: skip
        self.env = self._env()
        self.steps: dict[str, dict[str, float]] = {}
        self.results: dict[str, Any] = {}
        self._procs: list[subprocess.Popen] = []

    def _env(self) -> dict[str, str]:
        from drivers.ros.env import ros_env

        # The steps render headless as `robot-rl` does: MUJOCO_GL as set, else OSMesa.
        extra = {"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
        return ros_env(self.domain, extra=extra)

    # -- processes ---------------------------------------------------------------------------

    def _cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "robot_rl.cli.main", *args]

    def _spawn(self, name: str, args: list[str], nice: int = 0) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        out = (self.logs / f"{name}.json").open("w")
        err = (self.logs / f"{name}.log").open("w")
        # `up` (and every step) ends with the rehearsal even when it is SIGKILLed: up's SIGTERM
        # handler then stops its nodes.
        cmd = die_with_parent(self._cmd(*args))
        if nice:
            cmd = ["nice", "-n", str(nice), *cmd]
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=self.env, start_new_session=True)
        out.close()
        err.close()
        self._procs.append(proc)
        return proc

    def _json(self, name: str) -> Any:
        text = (self.logs / f"{name}.json").read_text().strip()
        return json.loads(text) if text else None

    def _tail(self, name: str, lines: int = 15) -> str:
        path = self.logs / f"{name}.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""

    def _step(self, name: str, args: list[str], timeout_s: float | None = None) -> Any:
        """Run one command to its end; its JSON (stdout), or RehearsalError."""
        self.say(f"{name}: robot-rl {' '.join(args)}")
        t0 = time.time()
        proc = self._spawn(name, args)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc, 10.0)
            raise RehearsalError(
                f"step {name} did not finish in {timeout_s:g} s; its log "
                f"({self.logs / (name + '.log')}) ends:\n{self._tail(name)}"
            ) from None
        self.steps[name] = {"wall_start": t0, "wall_end": time.time()}
        if code != 0:
            raise RehearsalError(
                f"step {name} failed (exit {code}); its log ({self.logs / (name + '.log')}) "
                f"ends:\n{self._tail(name)}"
            )
        res = self._json(name)
        self.results[name] = res
        return res

    # -- the day -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        if (self.out / "report.json").exists():
            raise FileExistsError(f"{self.out} holds a rehearsal report; choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "config.json").write_text(json.dumps(_jsonable(asdict(cfg)), indent=1))
        setup = write_setup(cfg)
        up = None
        try:
            up = self._up(setup)
            common = ["--setup", str(setup), "--teleop", "sim-expert", "--json"]
            obs = ["--obs", cfg.obs] + (["--cameras", *cfg.cameras] if cfg.obs == "pixels" else [])
            obs += ["--previous-action"] if cfg.previous_action else []
            obs += ["--control-rotation"] if cfg.rotation else []
            size = ["--image-size", str(cfg.image_size)]
            self._step("record", ["record", *common, "--out", str(self.out / "demos.zarr"),
                                  "--episodes", str(cfg.demos), *obs, *size,
                                  "--seed", str(3_000_000 + 1000 * cfg.seed)])  # fmt: skip
            steps = [] if cfg.label_max_steps is None else ["--max-episode-steps",
                                                            str(cfg.label_max_steps)]  # fmt: skip
            from sim.experts.near_miss import NEAR_MISS_TASKS

            if cfg.label_near_miss_every and cfg.task in NEAR_MISS_TASKS:
                steps += ["--sim-near-miss-every", str(cfg.label_near_miss_every)]
                if cfg.label_near_miss_margin is not None:
                    steps += ["--sim-near-miss-margin", f"{cfg.label_near_miss_margin:g}"]
            steps += ["--control-rotation"] if cfg.rotation else []
            self._step("label", ["label", *common, "--out", str(self.out / "frames.zarr"),
                                 "--episodes", str(cfg.label_episodes), *size, *steps,
                                 "--cameras", *cfg.cameras])  # fmt: skip
            self._step("reward_train", ["reward", "train", "--frames",
                                        str(self.out / "frames.zarr"), "--out",
                                        str(self.out / "classifier"), "--json",
                                        *(["--gates", *cfg.reward_gates]
                                          if cfg.reward_gates else []),
                                        *(["--cameras", *cfg.reward_cameras]
                                          if cfg.reward_cameras else [])])  # fmt: skip
            self._step("reward_eval", ["reward", "eval", "--model", str(self.out / "classifier"),
                                       "--json"])  # fmt: skip
            self._train(setup, obs, size, up.pid)
            self._step("eval_ros", ["eval", "--run", str(self.out / "learner"), "--setup",
                                    str(setup), "--reward", str(self.out / "classifier"),
                                    "--episodes", str(cfg.target_episodes),
                                    "--json"])  # fmt: skip
            self._step("eval", ["eval", "--run", str(self.out / "learner"), "--episodes",
                                str(cfg.target_episodes), "--json"])  # fmt: skip
        finally:
            for p in self._procs:
                _stop(p, 15.0)
            if up is not None:
                self.steps["up"]["wall_end"] = time.time()
        from robot_rl.app.rehearsal.rehearsal_report import write_report

        return write_report(self.out, cfg, self.steps, self.results)

    def _up(self, setup: Path) -> subprocess.Popen:
        log_dir = self.out / "nodes"
        self.say(f"up: robot-rl up {setup}")
        t0 = time.time()
        proc = self._spawn("up", ["up", str(setup), "--log-dir", str(log_dir)])
        twin_log = log_dir / "twin.log"
        end = time.monotonic() + 120.0
        while not (twin_log.exists() and "twin ready" in twin_log.read_text(errors="replace")):
            if proc.poll() is not None:
                raise RehearsalError(f"robot-rl up exited ({proc.returncode}):\n{self._tail('up')}")
            if time.monotonic() > end:
                raise RehearsalError(f"the twin was not ready in 120 s:\n{self._tail('up')}")
            time.sleep(0.2)
        self.steps["up"] = {"wall_start": t0, "wall_end": time.time()}
        return proc

    def _train(self, setup: Path, obs: list[str], size: list[str], up_pid: int) -> None:
        cfg = self.cfg
        bind = f"127.0.0.1:{cfg.port}"
        env_args = ["--task", cfg.task, "--arm", cfg.arm, *obs, *size]
        from robot_rl.app.envs.collect import LearnerEnvConfig

        lenv = LearnerEnvConfig(task=cfg.task, control_rotation=cfg.rotation)
        if cfg.gripper_discretize and lenv.fixed_gripper() is None:
            env_args.append("--gripper-discretize")
        t0 = time.time()
        learner = self._spawn("learner", [
            "learner", "--run", str(self.out / "learner"), "--bind", bind,
            "--demos", str(self.out / "demos.zarr"), "--learned-reward", "--eval-episodes", "0",
            "--steps", str(10 * cfg.robot_steps), "--seed", str(cfg.seed), "--no-progress",
            "--json", *env_args, *cfg.learner_args], nice=cfg.learner_nice)  # fmt: skip
        actor = self._spawn("actor", [
            "actor", "--learner", bind, "--run", str(self.out / "actor"), "--setup", str(setup),
            "--reward", str(self.out / "classifier"), "--human", "sim", "--seed", str(cfg.seed),
            "--human-patience-steps", str(cfg.human_patience_steps),
            "--human-reaction-steps", str(cfg.human_reaction_steps),
            "--human-action-noise", repr(float(cfg.human_action_noise)),
            "--human-attention-share", repr(float(cfg.human_attention_share)),
            "--human-trust-patience-steps", str(cfg.human_trust_patience_steps),
            "--human-trust-episodes", str(cfg.human_trust_episodes),
            "--steps", str(cfg.robot_steps), "--no-progress", "--json", *env_args,
            *cfg.actor_args])  # fmt: skip
        self.say(f"train: learner on {bind}, actor on {setup} for {cfg.robot_minutes:g} robot min")
        # where the 2 cores go: learner, actor (+ the simulated human), up (+ the twin)
        cpu = CpuMeter({"learner": learner.pid, "actor": actor.pid, "up": up_pid})
        readers = None
        stopped_by = "budget"
        bar = _bar(cfg)
        try:
            while actor.poll() is None:
                if learner.poll() is not None:
                    raise RehearsalError(
                        f"the learner exited ({learner.returncode}):\n{self._tail('learner')}"
                    )
                if readers is None:
                    # the human node starts with the actor; its subscription shows discovery
                    readers = self._privileged_readers(lambda: actor.poll() is not None)
                    bad = [n for n in readers or () if n != HUMAN_NODE]
                    if bad:
                        raise RehearsalError(
                            f"nodes {bad} subscribe to task/status: the run may not read the "
                            "twin's truth (only the simulated human may)"
                        )
                done = training_episodes(self.out, cfg.control_hz, t0)
                if bar is not None:
                    bar.n = min(bar.total, round(time.time() - t0))
                    bar.set_postfix_str(_recent(done, cfg.target_episodes))
                    bar.refresh()
                cpu.sample()
                if _early_stop_met(done, cfg):
                    stopped_by = "target"
                    self.say("train: success target met; stopping the actor")
                    actor.send_signal(signal.SIGINT)
                    actor.wait(120.0)
                    break
                time.sleep(1.0)
        finally:
            if bar is not None:
                bar.close()
        cpu.sample()
        if actor.returncode not in (0, -signal.SIGINT, 130):
            raise RehearsalError(f"the actor failed ({actor.returncode}):\n{self._tail('actor')}")
        learner.send_signal(signal.SIGINT)
        try:
            learner.wait(120.0)
        except subprocess.TimeoutExpired:
            _stop(learner, 10.0)
        self.steps["train"] = {"wall_start": t0, "wall_end": time.time()}
        self.results["actor"] = self._json("actor")
        self.results["learner"] = self._json("learner")
        self.results["train"] = {
            "stopped_by": stopped_by,
            "privileged_readers": readers,
            "cpu_cores": cpu.shares(),
        }

    def _privileged_readers(self, actor_ended: Any) -> list[str] | None:
        """Names of the nodes subscribed to ``/arm/task/status``, once the simulated human's
        subscription is seen (so the graph has been discovered); None if the actor ended
        first."""
        from drivers.ros.graph import topic_subscribers

        return topic_subscribers(
            self.domain, "/arm/task/status", HUMAN_NODE, timeout_s=600.0, give_up=actor_ended
        )


def _early_stop_met(rows: list[dict], cfg: RehearseConfig) -> bool:
    """The policy succeeded on its own (the twin's score, nobody corrected it) in at least
    ``target_success`` of the last ``target_episodes`` episodes (the report's
    ``robot_minutes_to_target`` rule)."""
    last = unaided_successes(rows)[-cfg.target_episodes :]
    return len(last) == cfg.target_episodes and sum(last) / len(last) >= cfg.target_success


def _recent(rows: list[dict], n: int) -> str:
    last = unaided_successes(rows)[-n:]
    if not last:
        return "no episode yet"
    return f"{len(rows)} episodes, unaided success {sum(last) / len(last):.2f} (last {len(last)})"


def _bar(cfg: RehearseConfig):
    if not cfg.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=round(cfg.robot_minutes * 60), desc="robot time", unit="s", file=sys.stderr)


def _stop(proc: subprocess.Popen, timeout_s: float) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the process's group, each after ``timeout_s``."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _jsonable(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_jsonable(v) for v in d]
    if isinstance(d, Path):
        return str(d)
    return d


def run_rehearse(cfg: RehearseConfig) -> dict[str, Any]:
    """Run the rehearsal (see the module docstring); the report dict.

    Raises:
        RehearsalError: A step failed (the message names it and ends with its log).
        FileExistsError: ``--out`` holds a report.
    """
    return Rehearsal(cfg).run()
