"""``robot-rl up <setup.yaml>``: start and supervise the nodes of a setup as plain processes
(:class:`robot_rl.app.nodes.Supervisor`: restarts, required nodes, clean shutdown, ``up.json``).

A required node down for good shuts the whole setup down: ``up`` prints which node died, its
exit status, its log file and the log's last lines, and exits with code 3
(:data:`robot_rl.app.supervision.EXIT_NODE_DIED`; commands that start a setup with
``--launch`` report it the same way). Ctrl-C / SIGTERM stops every node cleanly. A rich table
shows the live state on a terminal; without a terminal, one line per event goes to stderr.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TextIO

import tyro

from drivers.ros.env import ros_env
from drivers.setup import load_setup
from robot_rl.app.nodes import (
    BACKOFF,
    EXITED,
    FAILED,
    RUNNING,
    SKIPPED,
    STOPPED,
    Supervisor,
    default_log_dir,
)
from robot_rl.app.supervision import EXIT_NODE_DIED


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


def run_up(cfg: UpConfig, out: TextIO | None = None) -> int:
    """Run the supervisor until Ctrl-C / SIGTERM or a required node fails; return exit code.

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
    live_table = cfg.live and sys.stdout.isatty()
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
        if live_table:
            _live_loop(sup, stop, events)
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


def _live_loop(sup: Supervisor, stop: threading.Event, events: list[str]) -> None:
    from rich.live import Live

    with Live(_table(sup, events), refresh_per_second=4) as live:
        while not stop.is_set() and sup.poll():
            live.update(_table(sup, events))
            stop.wait(0.25)
        live.update(_table(sup, events))


def _table(sup: Supervisor, events: list[str]):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    colours = {
        RUNNING: "green",
        BACKOFF: "yellow",
        EXITED: "blue",
        FAILED: "red",
        STOPPED: "dim",
        SKIPPED: "dim",
    }
    now = time.monotonic()
    table = Table(title=f"robot-rl up: {sup.setup.name} (/{sup.setup.namespace})")
    for col in ("node", "module", "state", "pid", "uptime", "restarts", "exit", "log"):
        table.add_column(col)
    for n in sup.nodes:
        up_s = f"{now - n.started_at:.0f} s" if n.state == RUNNING and n.started_at else ""
        limit = n.spec.restart.max_restarts if n.spec.restart.policy == "on-failure" else 0
        table.add_row(
            n.spec.name + ("" if n.spec.required else " (optional)"),
            n.spec.module,
            Text(n.state, style=colours.get(n.state, "")),
            str(n.pid or ""),
            up_s,
            f"{n.restarts}/{limit}",
            "" if n.last_exit is None else str(n.last_exit),
            str(n.log_path),
        )
    tail = Text("\n".join(events[-6:]), style="dim")
    return Group(table, tail, Text("Ctrl-C stops every node", style="bold"))


def main(argv: list[str] | None = None) -> int:
    """``python -m robot_rl.cli.up <setup.yaml>`` (same as ``robot-rl up``)."""
    from drivers.setup import SetupError

    cfg = tyro.cli(UpConfig, args=argv, prog="robot-rl up")
    try:
        return run_up(cfg)
    except SetupError as e:
        print(f"robot-rl up: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
