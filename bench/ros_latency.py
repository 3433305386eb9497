"""ROS 2 control-loop latency: RobotEnv over ROS 2 against the real-time twin. One JSON object.

    MUJOCO_GL=osmesa python bench/ros_latency.py                  # 120 s, launch/sim.yaml
    MUJOCO_GL=osmesa python bench/ros_latency.py --duration-s 15 --policy walk --probes 5
    MUJOCO_GL=osmesa python bench/ros_latency.py --clock stream    # the old fixed-phase clock

Starts the twin node (``sim.ros_node --mode realtime``: physics in wall-clock time, state at
``--state-hz``, cameras at ``--camera-hz``, a new target executed at the next state period) and
the production env (``make_ros_env``: ``StreamAlignedClock``, phase-locked to the streams).

1. Command-to-motion probes (``--probes``, one episode each, so each at the phase the env clock
   takes after a reset): the arm at rest, then ``dx = +-1`` for three steps. Latency = the
   twin's publish time of the first ``ee_pose`` that moved > ``--motion-threshold-m`` toward
   the target, minus the env's publish time of the first command.
2. The control loop for ``--duration-s`` (scripted expert or random walk), resetting as needed.

Time base: the twin stamps with *sim* time (restarts at every reset), not the env's clock, so
``now - stamp`` is no age. Each ``ee_pose``'s DDS source timestamp (the twin's system clock when
it published that sim time; same machine, same clock as ``time.time()`` here) maps a sim stamp
to the wall time the reading was taken: sim stamp ``t`` -> source time of the newest ``ee_pose``
stamped at or before ``t``, plus ``t`` minus its stamp (the twin publishes the state with each
camera frame, so a frame's stamp has its ``ee_pose``; render and transport time count as age).
Observation age at action time = ``time.time()`` right after the env published the target minus
that reading time of the oldest part (state, each camera) of the observation the action came
from. ``env_estimated_age_ms``: what the env's staleness check sees (``now_s() - stamp``).

Tick jitter: gap between ``clock.tick()`` returns minus the period; overruns: the clock's count
over all episodes; CPU: ``/proc/<pid>/stat`` time / wall time (% of one core), env and twin.
``twin_state_jitter_ms``: per ``ee_pose``, its publication gap minus its sim-time gap (how late
the twin's pacing loop ran); ``twin_late_states``: such lateness above half a control period.
``--raw-out``: per step, the age of each part and the tick's nominal/return/set times.

``--clock stream``: the previous real-time clock (``StreamTimeClock``: fixed rate, the phase
against the streams is whatever the reset left, so ages spread over a camera period), for
comparison. ``clock_waits``/``clock_wait_timeouts``: ticks of the aligned clock that waited for a
set after their nominal time / whose wait ended at the bound.
"""

from __future__ import annotations

import bisect
import json
import os
import platform
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tyro
from geometry_msgs.msg import PoseStamped

from drivers.ros import qos
from drivers.ros.env import RMW
from drivers.ros_clock import StreamTimeClock
from drivers.setup import load_setup
from robot_rl.app.envs.policies import ExpertPolicy
from robot_rl.app.nodes.ros_env import make_ros_env
from robot_rl.core import keys
from robot_rl.core.types import StaleSensorError

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class BenchConfig:
    """RobotEnv over ROS 2 against the real-time twin: latency, jitter, overruns, CPU."""

    setup: Path = REPO / "launch/sim.yaml"
    """Setup YAML (robot: twin, clock: realtime); its nodes are started here."""
    duration_s: float = 120.0
    """Length of the control-loop phase, seconds."""
    policy: Literal["scripted", "walk"] = "scripted"
    """scripted: the task's expert; walk: a smooth random walk in the action space."""
    clock: Literal["aligned", "stream"] = "aligned"
    """aligned: the production StreamAlignedClock; stream: the old fixed-phase clock."""
    probes: int = 20
    """Command-to-motion probes (one episode each) before the control loop."""
    motion_threshold_m: float = 0.001
    """Probe: TCP displacement toward the target that counts as motion, metres."""
    domain_id: int = 96
    """ROS_DOMAIN_ID of the graph."""
    seed: int = 0
    """Episode i resets with seed + i; the policy's Generator is seeded from it too."""
    out: Path = REPO / "bench/results/ros_latency.json"
    """Where to write the JSON (also printed)."""
    progress: bool = True
    """Show a progress bar on stderr."""
    notes: str = ""
    """Free text stored in the JSON's ``notes`` (e.g. what else ran on the machine)."""
    raw_out: Path | None = None
    """Also write per-step records (part ages, tick timing) as JSON lines here."""

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.probes < 0 or self.motion_threshold_m <= 0:
            raise ValueError("need duration_s > 0, probes >= 0 and motion_threshold_m > 0")


class StateProbe:
    """Every ``ee_pose`` with its DDS source/receive timestamps (system clock, seconds)."""

    def __init__(self, session: Any) -> None:
        self.lock = threading.Lock()
        self.stamps: list[float] = []  # this episode's sim stamps, increasing
        self.sources: list[float] = []  # their DDS source times
        self.recent: deque[tuple[float, np.ndarray]] = deque(maxlen=200)  # (source, xyz)
        self.twin_jitter_s: list[float] = []  # source gap minus sim-stamp gap, per message
        self.transport_s: list[float] = []
        self.sub = session.node.create_subscription(PoseStamped, "ee_pose", self._cb, qos.SENSOR)

    def _cb(self, msg: PoseStamped, info: Any) -> None:
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        src, rcv = info["source_timestamp"] * 1e-9, info["received_timestamp"] * 1e-9
        p = msg.pose.position
        with self.lock:
            last = self.stamps[-1] if self.stamps else None
            if last is not None and stamp > last + 1e-9:  # the pacing loop's next publication
                self.twin_jitter_s.append((src - self.sources[-1]) - (stamp - last))
            elif last is not None and stamp < last - 1e-9:  # sim time restarted: new episode
                self.stamps.clear()
                self.sources.clear()
            elif last is not None:  # the same sim time again (a service call published it)
                self.stamps.pop()
                self.sources.pop()
            self.stamps.append(stamp)
            self.sources.append(src)
            self.recent.append((src, np.array([p.x, p.y, p.z])))
            self.transport_s.append(rcv - src)

    def reading(self, stamp_s: float) -> float | None:
        """System time the reading stamped ``stamp_s`` (sim time) was taken, or None."""
        with self.lock:
            i = bisect.bisect_right(self.stamps, stamp_s + 1e-9) - 1
            if i < 0:
                return None
            return self.sources[i] + (stamp_s - self.stamps[i])

    def first_motion(self, after_s: float, p0: np.ndarray, u: np.ndarray, thr: float):
        """Source time of the first pose published after ``after_s`` that moved > thr along u."""
        with self.lock:
            for src, p in self.recent:
                if src > after_s and float(np.dot(p - p0, u)) > thr:
                    return src
        return None


class Timed:
    """Delegates to the env's robot and clock; records when targets are published and when
    ticks return (the env sees the same objects otherwise)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.pub_wall_s = self.pub_mono_s = 0.0
        self.tick_mono: list[float] = []
        self.last_tick: dict = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def send_command(self, command: Any) -> Any:
        out = self._inner.send_command(command)
        self.pub_wall_s, self.pub_mono_s = time.time(), time.monotonic()
        return out

    def tick(self) -> None:
        ticker = getattr(self._inner, "ticker", None)
        before = (ticker.next_s, ticker.waits, ticker.wait_timeouts) if ticker else None
        entered = time.monotonic()
        self._inner.tick()
        self.tick_mono.append(time.monotonic())
        self.last_tick = {"entered": entered, "returned": self.tick_mono[-1]}
        if ticker is not None and before is not None:
            with self._inner.session.cond:
                newest, interval = ticker.sets.newest, ticker.sets.interval_s()
            self.last_tick.update(
                nominal=before[0],
                waited=ticker.waits - before[1],
                timed_out=ticker.wait_timeouts - before[2],
                newest_set=newest,
                set_interval=interval,
            )


class WalkPolicy:
    """Smooth random walk: a <- 0.8 a + 0.3 N(0, 1), clipped to [-1, 1]; gripper open."""

    def __init__(self, env: Any) -> None:
        self.dim = env.action_space.shape[0]

    def reset(self, rng: np.random.Generator) -> None:
        self.rng, self.a = rng, np.zeros(self.dim)

    def act(self, obs: Any, info: dict) -> np.ndarray:
        self.a = np.clip(0.8 * self.a + 0.3 * self.rng.normal(size=self.dim), -1, 1)
        self.a[-1] = -1.0
        return self.a.astype(np.float32)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stats_ms(xs_s: list[float], absolute: bool = False) -> dict:
    a = np.abs(np.asarray(xs_s)) if absolute else np.asarray(xs_s)
    if a.size == 0:
        return {"n": 0}
    q = [float(v) * 1e3 for v in np.percentile(a, [50, 95, 99])]
    return {"n": int(a.size), "p50": q[0], "p95": q[1], "p99": q[2], "max": float(a.max()) * 1e3}


def run_probes(cfg: BenchConfig, env: Any, robot: Timed, probe: StateProbe, bar) -> dict:
    """Step-response probes; see the module docstring."""
    latencies, misses, stale, thr = [], 0, 0, cfg.motion_threshold_m
    rest = np.zeros(env.action_space.shape, np.float32)
    rest[-1] = -1.0  # keep the gripper open, as after reset
    for i in range(cfg.probes):
        bar(i)
        push = rest.copy()
        push[0] = 1.0 if i % 2 == 0 else -1.0
        try:
            env.reset(seed=cfg.seed + 10_000 + i)
            for _ in range(3):
                obs, *_ = env.step(rest)
            p0 = np.asarray(obs[keys.STATE][keys.TCP_POSE][:3], dtype=np.float64)
            _, _, _, _, info = env.step(push)
            t_pub = robot.pub_wall_s
            for _ in range(2):  # keep pushing, so a later command never cancels the step
                env.step(push)
        except StaleSensorError:  # counted; the control loop reports the message
            stale += 1
            continue
        u = np.asarray(info[keys.INFO_COMMAND][:3], dtype=np.float64) - p0
        if np.linalg.norm(u) < 5e-3:  # clipped by the safety box: no clean step
            misses += 1
            continue
        u /= np.linalg.norm(u)
        end = time.monotonic() + 1.0
        while (hit := probe.first_motion(t_pub, p0, u, thr)) is None and time.monotonic() < end:
            time.sleep(0.01)
        if hit is None:
            misses += 1
        else:
            latencies.append(hit - t_pub)
    bar(cfg.probes)
    return {**stats_ms(latencies), "misses": misses, "stale_errors": stale}


def run_loop(cfg: BenchConfig, env: Any, backend: Any, robot: Timed, clock: Timed, probe, bar):
    """The control loop for ``cfg.duration_s``; returns figures."""
    scripted = cfg.policy == "scripted"
    policy: Any = ExpertPolicy(backend.make_expert(), env) if scripted else WalkPolicy(env)
    ages, env_ages, periods, tick_periods, tick_to_action, resets = [], [], [], [], [], []
    overruns = steps = episodes = successes = unmatched = waits = wait_timeouts = 0
    stale: list[str] = []
    raw: list[dict] = []
    pid_twin = backend.supervisor.nodes[0].pid
    cpu0, twin0, wall0 = cpu_s(os.getpid()), cpu_s(pid_twin), time.monotonic()
    end = wall0 + cfg.duration_s
    while time.monotonic() < end:
        t_reset = time.monotonic()
        obs, info = env.reset(seed=cfg.seed + episodes)
        resets.append(time.monotonic() - t_reset)
        policy.reset(np.random.default_rng([cfg.seed + episodes, 1]))
        episodes += 1
        pubs: list[float] = []
        clock.tick_mono.clear()
        clock.last_tick = {}
        while time.monotonic() < end:
            a = policy.act(obs, info)
            stamps = [float(s) for s in obs["stamps"].values()]
            env_ages.append(backend.clock.now_s() - min(stamps))
            last_tick = clock.tick_mono[-1] if clock.tick_mono else None
            obs_tick = clock.last_tick  # the tick after which obs was read ({} after a reset)
            try:
                obs, _, term, trunc, info = env.step(a)
            except StaleSensorError as e:
                stale.append(str(e))
                break
            reading = [probe.reading(s) for s in stamps]
            if None in reading:
                unmatched += 1
            else:
                ages.append(robot.pub_wall_s - min(reading))
                raw.append(
                    {
                        "episode": episodes,
                        "ages_ms": [1e3 * (robot.pub_wall_s - r) for r in reading],
                        "stamps": stamps,
                        **obs_tick,
                    }
                )
            pubs.append(robot.pub_wall_s)
            if last_tick is not None:
                tick_to_action.append(robot.pub_mono_s - last_tick)
            steps += 1
            successes += bool(info[keys.INFO_SUCCESS] and term)
            bar(time.monotonic() - wall0, f"episode {episodes}, step {steps}")
            if term or trunc:
                break
        overruns += clock.overruns
        ticker = getattr(clock._inner, "ticker", None)  # the aligned clock's counters
        if ticker is not None:
            waits, wait_timeouts = waits + ticker.waits, wait_timeouts + ticker.wait_timeouts
        periods += list(np.diff(pubs))
        tick_periods += list(np.diff(clock.tick_mono))
    wall = time.monotonic() - wall0
    cpu_env, cpu_twin = cpu_s(os.getpid()) - cpu0, cpu_s(pid_twin) - twin0
    period = clock.period_s
    with probe.lock:
        twin_jitter = list(probe.twin_jitter_s)
        transport = list(probe.transport_s)
    with backend.session.cond:
        received = {s.topic: s.count for s in backend.session.synced}
    if cfg.raw_out is not None:
        cfg.raw_out.write_text("".join(json.dumps(r) + "\n" for r in raw))
    return {
        "steps": steps,
        "episodes": episodes,
        "successes": successes,
        "wall_s": wall,
        "obs_age_ms": {**stats_ms(ages), "unmatched": unmatched},
        "env_estimated_age_ms": stats_ms(env_ages),
        "tick_jitter_ms": stats_ms([p - period for p in tick_periods], absolute=True),
        "action_period_jitter_ms": stats_ms([p - period for p in periods], absolute=True),
        "tick_to_action_ms": stats_ms(tick_to_action),
        "overruns": overruns,
        "clock_waits": waits,
        "clock_wait_timeouts": wait_timeouts,
        "reset_ms": stats_ms(resets),
        "stale_errors": len(stale),
        "first_stale_error": stale[0] if stale else None,
        "cpu_percent_env": 100.0 * cpu_env / wall,
        "cpu_percent_twin": 100.0 * cpu_twin / wall,
        "twin_state_jitter_ms": stats_ms(twin_jitter, absolute=True),
        "twin_late_states": int(sum(j > 0.5 * period for j in twin_jitter)),
        "state_transport_ms": stats_ms(transport),
        "messages_received": {**received, "probe ee_pose": len(transport)},
    }


def main(cfg: BenchConfig) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    os.environ.setdefault("MUJOCO_GL", "osmesa")
    setup = load_setup(cfg.setup)
    if setup.robot != "twin" or setup.clock != "realtime":
        raise ValueError(
            f"{cfg.setup}: this bench needs robot: twin and clock: realtime, got robot: "
            f"{setup.robot}, clock: {setup.clock}; use launch/sim.yaml or a copy of it"
        )
    mach = {"platform": platform.platform(), "python": platform.python_version(), "rmw": RMW,
            "cpu_count": os.cpu_count(), "loadavg_start": list(os.getloadavg())}  # fmt: skip
    env, backend = make_ros_env(setup, launch=True, domain_id=cfg.domain_id)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), disable=not cfg.progress,
    )  # fmt: skip
    try:
        base = env.unwrapped
        probe = StateProbe(backend.session)
        if cfg.clock == "stream":
            # Same now_s() (stream time) as the aligned clock the robot and cameras were given.
            base.clock = StreamTimeClock(backend.session, setup.control_hz)
        robot, clock = Timed(base.robot), Timed(base.clock)
        base.robot, base.clock = robot, clock
        with progress:
            probes = progress.add_task("command-to-motion probes", total=cfg.probes)
            motion = run_probes(
                cfg, env, robot, probe, lambda n: progress.update(probes, completed=n)
            )
            loop = progress.add_task("control loop", total=cfg.duration_s)
            bar = lambda t, d: progress.update(loop, completed=t, description=d)  # noqa: E731
            figures = run_loop(cfg, env, backend, robot, clock, probe, bar)
    finally:
        env.close()
        backend.close()
    figures["command_to_motion_ms"] = motion
    mach["loadavg_end"] = list(os.getloadavg())
    cfg_items = asdict(cfg).items()
    p99, over = figures["obs_age_ms"].get("p99"), figures["overruns"]
    c2m = motion.get("p99")
    result = {
        "benchmark": "ros_latency",
        "notes": cfg.notes,
        "config": {
            **{k: os.path.relpath(v, REPO) if isinstance(v, Path) else v for k, v in cfg_items},
            "control_hz": setup.control_hz,
            "task": setup.task,
            "cameras": [asdict(c) for c in setup.cameras],
            "time_base": "system clock: twin DDS source timestamps vs time.time() in the env",
            "twin_args": list(setup.nodes[0].args),
            "env_clock": type(base.clock._inner).__name__,
            "phase_lock": asdict(base.clock.ticker.config) if cfg.clock == "aligned" else None,
        },
        "machine": mach,
        "figures": figures,
        "targets": {
            "obs_age_p99_ms": {"target": 30.0, "value": p99, "met": p99 is not None and p99 <= 30},
            "overruns": {"target": 0, "value": over, "met": over == 0},
            "command_to_motion_p99_ms": {"value": c2m},
        },
    }
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    cfg.out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print(json.dumps(result, default=float))
    return result


if __name__ == "__main__":
    main(tyro.cli(BenchConfig))
