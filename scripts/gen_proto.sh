#!/usr/bin/env bash
# Regenerate the Python code of every gRPC service from its .proto:
#   rewards/serve/reward.proto          (reward service)
#   robot_rl/transport/transport.proto  (actor <-> learner transport)
#
#   bash scripts/gen_proto.sh            # writes <dir>/<name>_pb2{.py,.pyi,_grpc.py} beside each
#   bash scripts/gen_proto.sh OUT_DIR    # writes OUT_DIR/<dir>/... (the tests compare)
#
# Needs grpcio-tools (the `dev` extra). The generated files are committed; regenerate after
# editing a .proto, with the grpcio-tools version pinned in pyproject.toml (the generated code
# records it and checks the installed grpcio against it at import).
# Environment: PYTHON (default: .venv/bin/python in the repository root).
set -euo pipefail

PROTOS=(
  rewards/serve/reward.proto
  robot_rl/transport/transport.proto
)

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
OUT="${1:-$REPO}"
for proto in "${PROTOS[@]}"; do
  mkdir -p "$OUT/$(dirname "$proto")"
done
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"
# -I. with paths from the repository root: the generated imports read e.g.
# `from rewards.serve import reward_pb2`. One protoc call per file, so each output depends on
# its own .proto only.
for proto in "${PROTOS[@]}"; do
  "$PYTHON" -m grpc_tools.protoc -I. \
    --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
    "$proto"
done
