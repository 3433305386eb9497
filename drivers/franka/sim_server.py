"""Run franka-sim (the FCI simulator) bound to one address; runs in franka-sim's own venv.

This file is executed by the interpreter of ``.venv-franka-sim`` (see
``scripts/franka_sim_venv.sh``), never imported by robot_rl: it imports only the standard
library and ``franka_sim``. Unlike ``run-franka-sim-server`` (which binds every interface) it
binds ``--host`` only (default 127.0.0.1) and prints one line ``FRANKA_SIM_READY <host>:<port>``
on stdout once the server has answered franka-sim's own handshake probe, so a supervisor can
wait on a condition rather than a sleep. SIGTERM and SIGINT shut it down cleanly.

The arm model comes from ``$FR3_MJCF`` (write ours with ``python -m drivers.franka.sim_mjcf``);
without it franka-sim would try to download one.

    .venv-franka-sim/bin/python drivers/franka/sim_server.py --enforce-motion-limits
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="franka-sim bound to one address")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback)")
    parser.add_argument("--port", type=int, default=1337, help="FCI command port (libfranka: 1337)")
    parser.add_argument("--no-gripper", action="store_true", help="no gripper server on 1338")
    parser.add_argument(
        "--enforce-motion-limits",
        action="store_true",
        help="abort motions that break the FCI limits (torque rate, velocity, ...) with a reflex",
    )
    parser.add_argument(
        "--enforce-comm-constraints",
        action="store_true",
        help="abort a motion after 20 consecutive lost command cycles, as the real FCI does",
    )
    parser.add_argument(
        "--ready-timeout-s", type=float, default=60.0, help="readiness probe budget"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; exit code 0 on a clean stop, 1 if never ready."""
    args = _parse(argv)
    if not os.environ.get("FR3_MJCF"):
        print("sim_server: set FR3_MJCF to our FR3 MJCF (python -m drivers.franka.sim_mjcf OUT)")
        return 2
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from franka_sim import FrankaSimServer
    from franka_sim.health_check import HealthCheckError, check_server

    server = FrankaSimServer(
        host=args.host,
        port=args.port,
        enable_gripper=not args.no_gripper,
        enforce_motion_limits=args.enforce_motion_limits,
        enforce_comm_constraints=args.enforce_comm_constraints,
    )
    failed = threading.Event()

    def probe() -> None:
        try:
            check_server(args.host, args.port, timeout=args.ready_timeout_s)
        except HealthCheckError as exc:
            print(f"FRANKA_SIM_FAILED {exc}", flush=True)
            failed.set()
            os.kill(os.getpid(), signal.SIGTERM)
            return
        print(f"FRANKA_SIM_READY {args.host}:{args.port}", flush=True)

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    threading.Thread(target=probe, name="ready-probe", daemon=True).start()
    try:
        server.start()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop()
    return 1 if failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
