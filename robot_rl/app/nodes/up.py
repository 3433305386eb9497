"""``robot-rl up <setup.yaml>``: start and supervise the nodes of a setup as plain processes
(:class:`robot_rl.app.nodes.supervisor.Supervisor`: restarts, required nodes, clean shutdown,
``up.json``).
The live table is the command line's (:mod:`robot_rl.cli.up`); from Python, ``run_up(cfg)``
prints one line per event.

A required node down for good shuts the whole setup down: ``up`` prints which node died, its
exit status, its log file and the log's last lines, and exits with code 3
(:data:`robot_rl.app.nodes.supervision.EXIT_NODE_DIED`; commands that start a setup with
``--launch`` report it the same way). Ctrl-C / SIGTERM stops every node cleanly. A rich table
shows the live state on a terminal; without a terminal, one line per event goes to stderr.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TextIO

import tyro

from drivers.ros.env import ros_env
from drivers.setup import load_setup
from robot_rl.app.nodes.supervision import EXIT_NODE_DIED
from robot_rl.app.nodes.supervisor import Supervisor, default_log_dir


@dataclass(frozen=True)
class UpConfig:
    """Start every node of a setup, supervise them, stop them cleanly on Ctrl-C."""

    setup: Annotated[Path, tyro.conf.Positional]
    """Setup YAML file, e.g. launch/sim.yaml."""
    log_dir: Path | None = None
    """Directory of the per-node logs and up.json (default runs/up/<setup>-<time>)."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID for every node (default: $ROS_DOMAIN_ID, else 0)."""
    localhost_only: bool = True
    """Keep DDS discovery on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST)."""
    shutdown_timeout_s: float = 5.0
    """After SIGINT, wait this long before SIGTERM (and as long again before SIGKILL)."""
    live: bool = True
    """Show a live table when stdout is a terminal (else one line per event on stderr)."""

    def __post_init__(self) -> None:
        if self.shutdown_timeout_s <= 0:
            raise ValueError(f"shutdown_timeout_s must be positive, got {self.shutdown_timeout_s}")
        if self.domain_id is not None and not 0 <= self.domain_id <= 101:
            raise ValueError(f"domain_id {self.domain_id} must be in [0, 101]")


LiveView = Callable[[Supervisor, threading.Event, list[str]], None]
"""``(supervisor, stop, events)``: shows the nodes until ``stop`` is set or
``supervisor.poll()`` says the setup is down (e.g. :func:`robot_rl.cli.up.live_table`)."""


def run_up(cfg: UpConfig, out: TextIO | None = None, live: LiveView | None = None) -> int:
    """Run the supervisor until Ctrl-C / SIGTERM or a required node fails; return exit code.
    ``live``: a live view of the nodes (None: one line per event on ``out`` or stderr).

    0: stopped on request (or every node exited cleanly); 3 (:data:`EXIT_NODE_DIED`): a
    required node is down for good (the message names it, its exit status, log and last lines).

    Raises:
        drivers.setup.SetupError: The setup file is invalid.
    """
    setup = load_setup(cfg.setup)
    log_dir = cfg.log_dir or default_log_dir(setup)
    domain = cfg.domain_id if cfg.domain_id is not None else int(os.environ.get("ROS_DOMAIN_ID", 0))
    env = ros_env(domain, localhost_only=cfg.localhost_only)
    err = out or sys.stderr
    live_table = live is not None
    events: list[str] = []

    def on_event(line: str) -> None:
        events.append(line)
        if not live_table:
            print(f"[up] {line}", file=err, flush=True)

    sup = Supervisor(setup, log_dir, env, on_event=on_event)
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum, frame) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    on_event(
        f"setup {setup.name!r} from {setup.source}: {len(setup.nodes)} nodes, namespace "
        f"/{setup.namespace}, ROS_DOMAIN_ID={domain}, logs in {log_dir}"
    )
    try:
        sup.start()
        if live is not None:
            live(sup, stop, events)
        else:
            while not stop.is_set() and sup.poll():
                stop.wait(0.1)
    finally:
        if received:
            on_event(f"received {received[0]}; stopping every node")
        elif sup.failure:
            on_event(f"setup down: {sup.failure}; stopping every node")
        sup.stop(cfg.shutdown_timeout_s)
        for s, h in old.items():
            signal.signal(s, h)
    death = sup.required_death()
    if death is not None and death.final and not received:
        print(f"robot-rl up: {sup.error(death)}", file=err, flush=True)
        return EXIT_NODE_DIED
    return 0
