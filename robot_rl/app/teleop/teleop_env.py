"""What ``robot-rl record`` and ``robot-rl label`` share: a RobotEnv over ROS 2 driven by a
person through the teleop topics, and the small parts of the loop around it.

:func:`open_teleop_env` builds, from a setup file:

- the env over ROS 2 (:func:`robot_rl.app.nodes.ros_env.make_ros_env`; with ``launch`` the setup's
  nodes are started here, without it they must run already, e.g. under ``robot-rl up``);
- the teleop node, chosen by :class:`TeleopOptions`: a recorded event file (``--teleop-events``:
  the replay node, started here), the scripted expert as a simulated human (``--teleop
  sim-expert``: ``sim.human_node``, started here), or the setup's own teleop node (started here
  with ``launch``, with the terminal when it reads keys; else the one already running);
- a :class:`drivers.ros_teleop.RosTeleop` on the env's ROS session.

Loop helpers: :class:`Pacer` (a lockstep twin advances only when stepped, so a person-driven
loop is paced to wall time), :class:`StopFlag` (SIGINT / SIGTERM end the loop between steps; a
second signal interrupts at once), :class:`ButtonEdges` (an end button acts once per press,
not on every read while held), :class:`LiveView` (rich Live on a terminal, else one line per
event on stderr); the simulated human's answers: :mod:`robot_rl.app.teleop.human_answers`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from drivers.ros.env import ros_env
from drivers.setup import (
    NodeSpec,
    RestartPolicy,
    Setup,
    SetupError,
    load_setup,
    parse_setup,
    read_yaml,
)
from robot_rl.core.features import DEFAULT_IMAGE_SIZE

TeleopChoice = Literal["setup", "sim-expert"]
TELEOP_MODULES = ("drivers.teleop.node", "sim.human_node")
"""Modules whose nodes publish the teleop topics (replaced by ``--teleop-events`` and
``--teleop sim-expert``)."""


@dataclass(frozen=True)
class TeleopOptions:
    """Where the ROS 2 graph and the person's input come from."""

    launch: bool = False
    """Start the setup's nodes here (else they must be running, e.g. under `robot-rl up`)."""
    teleop: TeleopChoice = "setup"
    """setup: the setup's teleop node (a device); sim-expert: the task's scripted expert acting
    as a person through the teleop topics (twin setups only)."""
    teleop_events: Path | None = None
    """Replay this recorded teleop event file (drivers.teleop.recording format) instead of a
    device; the recording ends when the file has been played."""
    sim_near_miss_every: int = 0
    """--teleop sim-expert: every k-th episode the simulated human stops short of success (the
    cube grasped but held low, the peg on the opening), as a person labelling frames shows the
    classifier failures that look almost like success (pick_cube, peg_insert, plug_insert). 0:
    never."""
    sim_near_miss_margin: float | None = None
    """--sim-near-miss-every: a near miss stops below this fraction of the success threshold,
    drawn per episode (None: 0.6; closer, e.g. 0.95, where success differs from a near miss by
    a few pixels, as the SO-101's 2 cm lift: bench/classifier_near_miss.py)."""
    realtime_factor: float = 1.0
    """Lockstep twin: pace the loop at control_hz x this on the wall clock (0: unpaced)."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID (default: $ROS_DOMAIN_ID, else 0)."""
    log_dir: Path | None = None
    """Node logs of what is started here (default runs/up/<setup>-<time>)."""
    teleop_wait_s: float = 30.0
    """How long to wait for a teleop publisher before giving up, seconds."""

    def __post_init__(self) -> None:
        if self.teleop_events is not None and self.teleop != "setup":
            raise ValueError("--teleop-events replaces the teleop device; drop --teleop")
        if self.teleop_events is not None and not Path(self.teleop_events).is_file():
            raise ValueError(f"teleop events file {self.teleop_events} does not exist")
        if self.sim_near_miss_every < 0:
            raise ValueError(f"--sim-near-miss-every must be >= 0, got {self.sim_near_miss_every}")
        if self.sim_near_miss_every and self.teleop != "sim-expert":
            raise ValueError(
                "--sim-near-miss-every is for --teleop sim-expert (the simulated human)"
            )
        if self.sim_near_miss_margin is not None:
            from sim.experts.near_miss import check_margin

            check_margin(self.sim_near_miss_margin, "--sim-near-miss-margin")
        if self.realtime_factor < 0:
            raise ValueError(f"realtime_factor must be >= 0, got {self.realtime_factor}")
        if self.teleop_wait_s <= 0:
            raise ValueError(f"teleop_wait_s must be > 0, got {self.teleop_wait_s}")


@dataclass(frozen=True)
class TeleopRunConfig:
    """What `robot-rl record` and `robot-rl label` share: a setup driven by a person (or a
    recorded / simulated one) into a zarr store. Subclasses redeclare ``out``, ``episodes`` and
    ``seed`` with their own defaults."""

    setup: Path
    """Setup YAML (launch/*.yaml): robot, cameras, task, nodes."""
    io: Annotated[TeleopOptions, tyro.conf.OmitArgPrefixes] = field(default_factory=TeleopOptions)
    """Nodes and teleop source."""
    out: Path = Path("out.zarr")
    """The zarr store to write."""
    episodes: int = 10
    """Stop after this many kept episodes (this run)."""
    resume: bool = False
    """Append to an existing --out (recorded with the same settings)."""
    task: str | None = None
    """Task (default: the setup's; another one needs --launch)."""
    cameras: tuple[str, ...] | None = None
    """Cameras stored (default: every camera of the setup)."""
    image_size: int = DEFAULT_IMAGE_SIZE
    """Stored images are image_size x image_size (resized from the setup's cameras)."""
    control_rotation: bool = False
    """7-dim action with rotation, or 4-dim [dx, dy, dz, gripper] (train's default)."""
    max_episode_steps: int | None = None
    """Episode step limit (default: the task's)."""
    seed: int = 0
    """Episode k resets with seed + k."""
    json: bool = False
    """Print exactly one JSON object on stdout."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.image_size < 16:
            raise ValueError(f"image_size {self.image_size} must be >= 16 pixels")
        if self.max_episode_steps is not None and self.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {self.max_episode_steps}")


def check_out(out: Path, resume: bool, what: str) -> None:
    """Refuse an existing ``out`` without ``resume``, and ``resume`` without ``out``.

    Raises:
        FileExistsError: ``out`` exists and ``resume`` is False.
        FileNotFoundError: ``resume`` and ``out`` does not exist.
    """
    out = Path(out)
    if out.exists() and not resume:
        raise FileExistsError(
            f"{out} already exists; pass --resume to add {what} to it, or choose another --out"
        )
    if resume and not out.exists():
        raise FileNotFoundError(f"nothing to resume at {out}; drop --resume to create it")


def load_setup_for_task(path: Path, task: str | None, launch: bool) -> Setup:
    """The setup at ``path``, with its ``task`` replaced by ``task`` if given.

    Raises:
        SetupError: Invalid setup, or ``task`` differs while the nodes are not started here
            (a running twin serves the task it was started with).
    """
    setup = load_setup(path)
    if task is None or task == setup.task:
        return setup
    if not launch:
        raise SetupError(
            f"{path}: the running nodes serve task {setup.task!r}, not {task!r}; drop --task, "
            "or add --launch to start the setup here with that task"
        )
    raw = read_yaml(path)
    raw["task"] = task
    return parse_setup(raw, source=str(path))


def teleop_node(
    setup: Setup,
    opts: TeleopOptions,
    control_rotation: bool = False,
    human_args: tuple[str, ...] = (),
) -> NodeSpec | None:
    """The teleop node to start here (None: use the one already running).

    ``control_rotation``: the env's action layout, which the simulated human's expert needs.
    ``human_args``: more arguments of ``sim.human_node`` (e.g. ``--rule no_progress``).
    """
    never = RestartPolicy(policy="never")
    if opts.teleop_events is not None:
        args = ("--device", "replay", "--file", str(Path(opts.teleop_events).resolve()))
        args += ("--ns", setup.namespace, "--exit-at-end")
        return NodeSpec("teleop", "drivers.teleop.node", args, restart=never, required=False)
    if opts.teleop == "sim-expert":
        if setup.robot != "twin":
            raise ValueError(f"{setup.source}: --teleop sim-expert needs a twin setup")
        args = ("--task", setup.task, "--ns", setup.namespace, "--arm", setup.arm.name)
        args += ("--control-hz", f"{setup.control_hz:g}")
        args += ("--control-rotation",) if control_rotation else ()
        # A run kept from the twin's truth learns of success only from the person's buttons.
        args += ("--press-success",) if not setup.privileged else ()
        # The twin's scene time runs while the actor resets: the person's patience starts when
        # the bridge accepts the episode's first command (lockstep has no such wait).
        args += ("--wait-for-command",) if setup.clock == "realtime" else ()
        if opts.sim_near_miss_every:
            args += ("--near-miss-every", str(opts.sim_near_miss_every))
            if opts.sim_near_miss_margin is not None:
                args += ("--near-miss-margin", f"{opts.sim_near_miss_margin:g}")
        args += tuple(human_args)
        return NodeSpec("teleop", "sim.human_node", args, restart=never, required=False)
    if opts.launch:
        own = [n for n in setup.nodes if n.module in TELEOP_MODULES]
        if not own:
            raise ValueError(
                f"{setup.source} has no teleop node (module {TELEOP_MODULES[0]}); add one, or "
                "pass --teleop-events file.jsonl"
            )
        return own[0]
    return None


@dataclass
class TeleopSession:
    """The env, its ROS backend, the teleop reader and the nodes started here."""

    env: Any
    backend: Any
    teleop: Any  # drivers.ros_teleop.RosTeleop
    setup: Setup
    teleop_node: NodeSpec | None
    supervisor: Any = None
    _closed: bool = field(default=False, repr=False)

    @property
    def lockstep(self) -> bool:
        return self.setup.clock == "lockstep"

    def teleop_ended(self) -> bool:
        """The teleop node started here has exited (a replayed file is done)."""
        if self.supervisor is None:
            return False
        return not self.supervisor.poll()

    def close(self) -> None:
        """Stop the teleop node started here, the env and the setup's nodes (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.teleop.disconnect()
            self.env.close()
        finally:
            if self.supervisor is not None:
                self.supervisor.stop(5.0)
            self.backend.close()


def open_teleop_env(
    setup: Setup,
    opts: TeleopOptions,
    *,
    obs_cameras: tuple[str, ...],
    wrappers: Any,
    control_rotation: bool,
    max_episode_steps: int | None,
    terminate_on_success: bool,
    human_args: tuple[str, ...] = (),
    reward_cameras: tuple[str, ...] = (),
    reward: Any = None,
) -> TeleopSession:
    """Build the env over ROS 2 and the teleop reader (see the module docstring).

    Args:
        setup: The setup (its teleop nodes are handled here, not by ``make_ros_env``).
        opts: Launch and teleop options.
        obs_cameras: Setup cameras that enter the observation (others are left out).
        wrappers: ``robot_rl.app.envs.build.WrapperConfig`` for the env.
        control_rotation: 7-dim (True) or 4-dim action.
        max_episode_steps: Episode step limit (None: the task's default).
        terminate_on_success: Whether the task's success ends an episode.
        human_args: More arguments of the simulated human's node (``--teleop sim-expert``).
        reward_cameras: Setup cameras a learned reward reads besides the observation's.
        reward: ``robot_rl.app.envs.build.RewardHook`` of a learned reward, or None.

    Raises:
        ValueError: A camera not in the setup, or a second teleop publisher.
        TimeoutError: Nodes or the teleop publisher not reachable (the message says which).
    """
    from drivers.ros_teleop import RosTeleop, RosTeleopConfig
    from robot_rl.app.nodes.ros_env import make_ros_env
    from robot_rl.app.nodes.supervisor import Supervisor, default_log_dir

    names = [c.name for c in setup.cameras]
    unknown = [c for c in (*obs_cameras, *reward_cameras) if c not in names]
    if unknown:
        raise ValueError(f"cameras {unknown} are not in {setup.source} (it has {names})")
    spec = teleop_node(setup, opts, control_rotation, human_args)
    if spec is not None and spec.terminal and not sys.stdin.isatty():
        raise ValueError(
            f"the teleop node {spec.name!r} of {setup.source} reads keys from the terminal, and "
            "stdin is not one: run in a terminal, or pass --teleop-events file.jsonl / --teleop "
            "sim-expert"
        )
    env_setup = dataclasses.replace(
        setup,
        cameras=tuple(c for c in setup.cameras if c.name in (*obs_cameras, *reward_cameras)),
        nodes=tuple(n for n in setup.nodes if n.module not in TELEOP_MODULES),
    )
    domain = (
        opts.domain_id if opts.domain_id is not None else int(os.environ.get("ROS_DOMAIN_ID", 0))
    )
    log_dir = opts.log_dir or default_log_dir(setup)
    env, backend = make_ros_env(
        env_setup,
        control_rotation=control_rotation,
        max_episode_steps=max_episode_steps,
        wrappers=wrappers,
        domain_id=domain,
        launch=opts.launch,
        log_dir=log_dir,
        terminate_on_success=terminate_on_success,
        # A hardware setup (no task reward) is fine when the person's buttons mark success, or
        # a learned reward does.
        needs_task_reward=terminate_on_success and reward is None,
        obs_cameras=obs_cameras,
        reward=reward,
    )
    teleop = RosTeleop(RosTeleopConfig(namespace=setup.namespace), session=backend.session)
    sess = TeleopSession(env, backend, teleop, setup, spec)
    try:
        teleop.connect()
        if spec is not None:
            if teleop.publishers() > 0:
                raise ValueError(
                    f"another node already publishes {teleop.joy_topic} (a teleop node under "
                    "`robot-rl up`?); stop it, or drop --teleop-events / --teleop sim-expert to "
                    "use it"
                )
            node_setup = dataclasses.replace(setup, nodes=(spec,))
            extra = {"MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
            sess.supervisor = Supervisor(
                node_setup,
                Path(log_dir) / "teleop",
                ros_env(domain, extra=extra),
                on_event=lambda line: print(f"[teleop] {line}", file=sys.stderr, flush=True),
            )
            sess.supervisor.start()
        where = (
            f"see {sess.supervisor.nodes[0].log_path}"
            if sess.supervisor is not None
            else "start the setup with `robot-rl up` (it runs the teleop node), or pass "
            "--launch, --teleop-events file.jsonl or --teleop sim-expert"
        )
        if not teleop.wait_for_publisher(opts.teleop_wait_s):
            raise TimeoutError(
                f"no teleop node publishes {teleop.joy_topic} after {opts.teleop_wait_s:g} s; "
                f"{where}"
            )
        # A device node publishes all the time: start once its messages flow. The simulated
        # human answers the twin's task/status: all the time on a real-time twin (so wait for
        # it too: else the first episode runs while its subscriptions are still being
        # discovered, up to seconds on a loaded machine, and the person seems to sleep
        # through it), but only once episodes run in lockstep.
        flowing = opts.teleop != "sim-expert" or not sess.lockstep
        if flowing and not teleop.wait_for_message(opts.teleop_wait_s):
            raise TimeoutError(
                f"a teleop node is connected on {teleop.joy_topic} but sent nothing valid in "
                f"{opts.teleop_wait_s:g} s ({teleop.status().describe()}); {where}"
            )
    except BaseException:
        sess.close()
        raise
    return sess


class Pacer:
    """Holds a loop to ``period_s`` of wall time per iteration (None or 0: no pacing).

    After a stall longer than a period it restarts from now instead of catching up in a burst.
    """

    def __init__(self, period_s: float | None) -> None:
        self.period_s = period_s if period_s else None
        self._next: float | None = None

    def reset(self) -> None:
        self._next = None

    def wait(self) -> None:
        if self.period_s is None:
            return
        now = time.monotonic()
        if self._next is None or now - self._next > self.period_s:
            self._next = now
        if self._next > now:
            time.sleep(self._next - now)
        self._next += self.period_s


class SensorFaults:
    """A stale sensor in a teleop session (``record``, ``label``): the open episode is dropped,
    as a person would redo it, and the session waits ``retry_s`` and goes on with the next one;
    it gives up (re-raises) once no step has succeeded for ``timeout_s``. Finished episodes are
    never touched.

    Args:
        view: Where the event lines go (``LiveView.event``).
        timeout_s: Seconds without a successful step before giving up.
        retry_s: Wait after each fault, seconds.
    """

    def __init__(self, view: Any, timeout_s: float = 30.0, retry_s: float = 0.5) -> None:
        self.view, self.timeout_s, self.retry_s = view, timeout_s, retry_s
        self.count = 0
        self._since: float | None = None

    def ok(self) -> None:
        """A step (or reset) succeeded."""
        self._since = None

    def fault(self, err: Exception) -> None:
        """Count ``err``, re-raise it after ``timeout_s`` without a success, else wait."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
        self.count += 1
        if now - self._since >= self.timeout_s:
            raise err
        self.view.event(
            f"stale sensor: {err}; this episode is dropped and the next starts once the sensors "
            f"are fresh (giving up after {self.timeout_s:g} s without a step)"
        )
        time.sleep(self.retry_s)


class StopFlag:
    """Context manager: SIGINT / SIGTERM set :attr:`requested` (the loop ends between steps);
    a second signal raises KeyboardInterrupt at once. Handlers are restored on exit."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested is not None:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> StopFlag:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


class ButtonEdges:
    """Buttons newly down in a reading (not down in the previous one)."""

    def __init__(self) -> None:
        self._prev: frozenset[str] = frozenset()

    def reset(self, down: frozenset[str] = frozenset()) -> None:
        self._prev = frozenset(down)

    def update(self, down: frozenset[str]) -> frozenset[str]:
        new = frozenset(down) - self._prev
        self._prev = frozenset(down)
        return new


class LiveView:
    """A live status table (rich) on a terminal; without one, event lines on stderr.

    Args:
        title: Table title; also the ``[prefix]`` of event lines.
        live: Show the table (None: when stdout is a terminal).
    """

    def __init__(self, title: str, live: bool | None = None) -> None:
        self.title = title
        self._events: list[str] = []
        self._fields: dict[str, str] = {}
        self._live = None
        if live if live is not None else sys.stdout.isatty():
            from rich.live import Live

            self._live = Live(self._render(), refresh_per_second=4)
            self._live.start()

    @property
    def is_live(self) -> bool:
        """The table is shown (a terminal); else events go to stderr."""
        return self._live is not None

    def update(self, **fields: Any) -> None:
        """Set the shown fields (keys are labels; values are shown as text)."""
        self._fields.update({k.replace("_", " "): str(v) for k, v in fields.items()})
        if self._live is not None:
            self._live.update(self._render())

    def event(self, line: str) -> None:
        """Something happened: a line under the table, or on stderr without a terminal."""
        self._events.append(line)
        if self._live is None:
            print(f"[{self.title}] {line}", file=sys.stderr, flush=True)
        else:
            self._live.update(self._render())

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"robot-rl {self.title}", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        for k, v in self._fields.items():
            table.add_row(k, v)
        tail = Text("\n".join(self._events[-6:]), style="dim")
        return Group(table, tail, Text("Ctrl-C stops (the open episode is dropped)", style="bold"))
