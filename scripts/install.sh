#!/usr/bin/env bash
# Install robot_rl into .venv in the repository root. Idempotent; safe to re-run.
#
#   bash scripts/install.sh          # runtime, twin, encoders, VLMs, reward server, ROS 2, Franka, export:
#                                    #   pip install -e ".[sim,vision,vlm,serve,ros,franka,export,arms]"
#   bash scripts/install.sh --dev    # plus test tools (".[...,dev]") and the franka-sim venv
#                                    #   (.venv-franka-sim, scripts/franka_sim_venv.sh)
#                                    #   and an env venv with other pins (.venv-foreign-env)
#
# torch: if .venv has no torch yet, torch==$ROBOT_RL_TORCH (default 2.13.0) is installed first,
# so that the project's open `torch>=2.4` requirement is already satisfied (a bare requirement
# would pull a multi-GB CUDA build). For a GPU build, install your torch into .venv first.
#
# System packages (Debian/Ubuntu, installed with apt-get only when missing):
#   libosmesa6    headless software OpenGL for MuJoCo rendering (MUJOCO_GL=osmesa)
#   python3-venv  python3 -m venv (Debian's python3 ships without ensurepip)
#   libusb-1.0-0  needed by pyrealsense2 (RealSense cameras) to import
#   libegl1 libegl-mesa0 libgl1-mesa-dri
#                 headless EGL (MUJOCO_GL=egl: GPU drivers where present, Mesa's software
#                 rasteriser otherwise); CI runs the rendering tests under both backends
# No system ffmpeg is needed: imageio-ffmpeg ships its own binary.
# apt-get runs as root (or via passwordless sudo); `apt-get update` runs only if an install
# fails on stale or missing package lists. Without apt-get, missing libraries are reported and
# the install carries on as far as it can.
# Environment: PYTHON (default python3) picks the interpreter (>= 3.10).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
EXTRAS="sim,vision,vlm,serve,ros,franka,export,arms"
DEV=0
for arg in "$@"; do
  case "$arg" in
    --dev) EXTRAS="sim,vision,vlm,serve,ros,franka,export,arms,dev"; DEV=1 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (use --dev or --help)" >&2; exit 2 ;;
  esac
done

log() { printf '[install] %s\n' "$*"; }

have_osmesa() {
  local f
  for f in /usr/lib/*/libOSMesa.so* /usr/lib64/libOSMesa.so* /usr/lib/libOSMesa.so*; do
    [ -e "$f" ] && return 0
  done
  { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libOSMesa\.so'
}
have_venv() { "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; }
have_egl() {
  { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libEGL_mesa\.so' \
    && { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libEGL\.so\.1'
}
have_libusb() {
  { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q 'libusb-1\.0\.so'
}

apt_install() {
  # apt_install PKG...: install with apt-get as root or passwordless sudo; 1 if impossible.
  local sudo=""
  if ! command -v apt-get >/dev/null 2>&1; then return 1; fi
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
      return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  log "apt-get install $*"
  if ! $sudo apt-get install -y --no-install-recommends "$@" </dev/null; then
    log "apt-get install failed; refreshing package lists (apt-get update) and retrying"
    $sudo apt-get update </dev/null && $sudo apt-get install -y --no-install-recommends "$@" </dev/null
  fi
}

# -- system packages -------------------------------------------------------------------------
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "install.sh: $PYTHON not found; install Python >= 3.10 (apt-get install python3)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "install.sh: $("$PYTHON" --version 2>&1) is too old; robot_rl needs Python >= 3.10" >&2
  exit 1
fi
missing=()
have_osmesa || missing+=(libosmesa6)
have_venv || missing+=("python3-venv")
have_libusb || missing+=("libusb-1.0-0")
have_egl || missing+=(libegl1 libegl-mesa0 libgl1-mesa-dri)
if [ "${#missing[@]}" -gt 0 ]; then
  if ! apt_install "${missing[@]}"; then
    log "could not install ${missing[*]} (no apt-get, or not root and no passwordless sudo)"
  fi
fi
if ! have_venv; then
  echo "install.sh: '$PYTHON -m venv' is unavailable; install python3-venv and re-run" >&2
  exit 1
fi
if ! have_osmesa; then
  log "WARNING: libOSMesa not found: headless rendering (cameras, videos) will fail unless"
  log "         MUJOCO_GL=egl works on this machine; state-only envs still run"
fi

# -- virtualenv and package ------------------------------------------------------------------
cd "$REPO"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $("$PYTHON" --version 2>&1)"
  "$PYTHON" -m venv .venv
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
log "pip install -e .[$EXTRAS]"
.venv/bin/python -m pip install --quiet --upgrade "pip>=23"
if ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
  log "pip install torch==${ROBOT_RL_TORCH:-2.13.0} (no torch in .venv yet)"
  .venv/bin/python -m pip install --quiet "torch==${ROBOT_RL_TORCH:-2.13.0}"
fi
.venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"
if [ "$DEV" -eq 1 ]; then
  log "franka-sim venv for the Franka tests (scripts/franka_sim_venv.sh)"
  bash scripts/franka_sim_venv.sh >/dev/null
  log "their-env venv for the --env-python tests (scripts/foreign_env_venv.sh)"
  bash scripts/foreign_env_venv.sh >/dev/null
fi
log "done: $(.venv/bin/python -c 'import robot_rl, mujoco, torch; print("robot_rl", robot_rl.__version__, "mujoco", mujoco.__version__, "torch", torch.__version__)')"
log "run: .venv/bin/robot-rl --help"
