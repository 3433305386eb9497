#!/usr/bin/env bash
# Create the "their env" venv (.venv-foreign-env in the repository root). Idempotent.
#
#   bash scripts/foreign_env_venv.sh          # create / complete it, print its python
#   bash scripts/foreign_env_venv.sh --check  # exit 0 if it is usable, 1 if not (no install)
#
# It stands for a user's env whose pins conflict with robot_rl's: an older MuJoCo (3.2.7; ours
# is pinned in pyproject.toml) and numpy 1.26, with gymnasium, and NOT robot_rl. The tests run
# such an env behind `--env-python .venv-foreign-env/bin/python` (robot_rl.envs.remote_env).
#
# Environment: PYTHON (default python3, >= 3.9), FOREIGN_ENV_VENV (default
# <repo>/.venv-foreign-env).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${FOREIGN_ENV_VENV:-$REPO/.venv-foreign-env}"
PY="$VENV/bin/python"
PINS=(numpy==1.26.4 mujoco==3.2.7 gymnasium==1.0.0)

usable() {
  [ -x "$PY" ] && (cd / && "$PY" - <<'EOF2' >/dev/null 2>&1
import gymnasium, mujoco, numpy
assert mujoco.__version__ == "3.2.7" and numpy.__version__ == "1.26.4"
try:
    import robot_rl  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("robot_rl must not be importable here")
EOF2
)
}

# shellcheck source=scripts/_side_venv.sh
source "$REPO/scripts/_side_venv.sh"
side_venv_main foreign-env "$@" -- "${PINS[@]}"
