#!/usr/bin/env bash
# Create the optional lerobot venv (.venv-lerobot) for the LeRobot cross-checks in
# tests/dataset_cmd/test_lerobot_crosscheck.py (ROBOT_RL_LEROBOT_PYTHON). Idempotent; not part of CI.
#
#   bash scripts/lerobot_venv.sh          # create / complete it, print its python
#   ROBOT_RL_LEROBOT_PYTHON=$(bash scripts/lerobot_venv.sh) .venv/bin/pytest -m slow tests/dataset_cmd/test_lerobot_crosscheck.py
#
# lerobot cannot share robot_rl's venv: lerobot 0.4.4 (the last release for Python 3.11; 0.5+
# needs 3.12) pins torch < 2.11, and PyPI's torch / torchvision builds for those are CUDA
# builds of several GB. So this venv takes the CPU torch wheel on this disk (2.13), lerobot and
# torchcodec without their pins (--no-deps), torchcodec's CPU decoding over the system FFmpeg
# (apt: ffmpeg), the libraries lerobot's dataset code imports, and a stand-in `torchvision`
# package whose every use raises: lerobot's dataset modules import torchvision at load, and the
# paths the tests use (writing a dataset, loading one with video_backend="torchcodec") never
# call it. Nothing here is robot_rl's code or a copy of lerobot's.
#
# Environment: PYTHON (default python3), LEROBOT_VENV (default <repo>/.venv-lerobot).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${LEROBOT_VENV:-$REPO/.venv-lerobot}"
PY="$VENV/bin/python"

usable() {
  [ -x "$PY" ] && (cd / && "$PY" -c "import lerobot.datasets.lerobot_dataset, torchcodec.decoders" >/dev/null 2>&1)
}

if usable; then
  echo "$PY"
  exit 0
fi
if ! ldconfig -p | grep -q libavcodec; then
  echo "[lerobot venv] installing FFmpeg's libraries (apt-get install ffmpeg) for torchcodec" >&2
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq ffmpeg >&2; else sudo apt-get install -y -qq ffmpeg >&2; fi
fi
echo "[lerobot venv] creating $VENV" >&2
[ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" --no-deps "lerobot==0.4.4" "torchcodec==0.13.*" "draccus==0.10.0"
"${PIP[@]}" "datasets>=4,<5" "huggingface-hub>=0.34.2,<0.36" pandas pyarrow pillow \
  "av>=15,<16" jsonlines packaging termcolor einops deepdiff "imageio[ffmpeg]" fsspec \
  mergedeep pyyaml pyyaml-include toml typing-inspect accelerate
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$SITE/torchvision/transforms/v2"
cat > "$SITE/torchvision/__init__.py" <<'PYEOF'
"""A stand-in for torchvision in robot_rl's lerobot test venv (scripts/lerobot_venv.sh): lerobot's
dataset modules import it (and subclass its transforms) at load; making or calling anything from
it raises."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def fail(*args, **kwargs):
        raise RuntimeError(f"torchvision.{name}: torchvision is a stand-in in this venv")

    return type(name, (), {"__init__": fail, "__call__": fail})
PYEOF
cp "$SITE/torchvision/__init__.py" "$SITE/torchvision/transforms/__init__.py"
cp "$SITE/torchvision/__init__.py" "$SITE/torchvision/transforms/v2/__init__.py"
usable || { echo "[lerobot venv] lerobot's dataset module does not import:" >&2;
            (cd / && "$PY" -c "import lerobot.datasets.lerobot_dataset, torchcodec.decoders") >&2; exit 1; }
echo "$PY"
