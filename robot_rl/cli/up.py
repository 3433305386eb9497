"""``robot-rl up``: the live table of a setup's nodes over :func:`robot_rl.app.nodes.up.run_up`.

``python -m robot_rl.cli.up <setup.yaml>`` is the same as ``robot-rl up``.
"""

from __future__ import annotations

import sys
import threading
import time

import tyro

from robot_rl.app.nodes.supervisor import (
    BACKOFF,
    EXITED,
    FAILED,
    RUNNING,
    SKIPPED,
    STOPPED,
    Supervisor,
)
from robot_rl.app.nodes.up import UpConfig, run_up


def run(cfg: UpConfig) -> int:
    """``robot-rl up``: the live table on a terminal (``--live``), else one line per event."""
    return run_up(cfg, live=live_table if cfg.live and sys.stdout.isatty() else None)


def live_table(sup: Supervisor, stop: threading.Event, events: list[str]) -> None:
    """A rich table of the nodes, refreshed 4 times a second
    (:data:`robot_rl.app.nodes.up.LiveView`)."""
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
        return run(cfg)
    except SetupError as e:
        print(f"robot-rl up: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
