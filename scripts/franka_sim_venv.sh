#!/usr/bin/env bash
# Create the franka-sim venv (.venv-franka-sim in the repository root). Idempotent.
#
#   bash scripts/franka_sim_venv.sh          # create / complete it, print its python
#   bash scripts/franka_sim_venv.sh --check  # exit 0 if it is usable, 1 if not (no install)
#
# franka-sim (PyPI) is the FR3 simulator that speaks libfranka's network protocol (FCI, server
# version 10) on 127.0.0.1. It pins numpy==1.26.4 and mujoco<3.3, which clash with robot_rl's
# own venv, so it lives in its own venv and runs in its own process
# (drivers/franka/sim_server.py). It never downloads a robot model here: the FR3 MJCF it loads
# is ours, written by drivers/franka/sim_mjcf.py and passed through $FR3_MJCF.
#
# Environment: PYTHON (default python3, >= 3.9), FRANKA_SIM_VERSION (default 1.1.7),
# FRANKA_SIM_VENV (default <repo>/.venv-franka-sim).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VERSION="${FRANKA_SIM_VERSION:-1.1.7}"
VENV="${FRANKA_SIM_VENV:-$REPO/.venv-franka-sim}"
PY="$VENV/bin/python"

usable() {
  [ -x "$PY" ] && "$PY" - "$VERSION" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import version

assert version("franka-sim") == sys.argv[1]
import franka_sim.mujoco_franka_sim  # noqa: F401  (mujoco + numpy import)
EOF
}

# shellcheck source=scripts/_side_venv.sh
source "$REPO/scripts/_side_venv.sh"
side_venv_main franka-sim "$@" -- "franka-sim==$VERSION"
