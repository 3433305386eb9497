#!/usr/bin/env bash
# Regenerate the reward service's Python code from rewards/serve/reward.proto.
#
#   bash scripts/gen_proto.sh            # writes rewards/serve/reward_pb2{.py,.pyi,_grpc.py}
#   bash scripts/gen_proto.sh OUT_DIR    # writes OUT_DIR/rewards/serve/... (the test compares)
#
# Needs grpcio-tools (the `dev` extra). The generated files are committed; regenerate after
# editing the .proto, with the grpcio-tools version pinned in pyproject.toml (the generated code
# records it and checks the installed grpcio against it at import).
# Environment: PYTHON (default: .venv/bin/python in the repository root).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
OUT="${1:-$REPO}"
mkdir -p "$OUT/rewards/serve"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"
# -I. with the path from the repository root: the generated imports read
# `from rewards.serve import reward_pb2`.
"$PYTHON" -m grpc_tools.protoc -I. \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  rewards/serve/reward.proto
