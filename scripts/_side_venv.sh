# Sourced by scripts/franka_sim_venv.sh and scripts/foreign_env_venv.sh: the shape both share.
# The caller sets PYTHON, VENV and PY ($VENV/bin/python) and defines `usable` (exit 0 when the
# venv imports what it is for), then calls
#
#   side_venv_main LABEL "$@" -- PIP_REQUIREMENTS...
#
# With --check as the script's argument: exit 0 if usable, 1 if not (no install). Otherwise:
# print $PY when usable, else create the venv, pip install the requirements, check again and
# print $PY (progress and errors on stderr).

side_venv_main() {
  local label="$1" mode=""
  shift
  if [ "${1:-}" != "--" ]; then mode="$1"; shift; fi
  shift # the --
  if [ "$mode" = "--check" ]; then
    usable && exit 0 || exit 1
  fi
  if usable; then
    echo "$PY"
    exit 0
  fi
  printf '[%s venv] creating %s (%s)\n' "$label" "$VENV" "$*" >&2
  [ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install --quiet --disable-pip-version-check "$@" >&2
  usable || { echo "[$label venv] $* do not import after install" >&2; exit 1; }
  echo "$PY"
}
