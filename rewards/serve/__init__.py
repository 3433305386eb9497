"""Reward model serving over gRPC (`robot-rl reward serve`) and its client.

Needs the ``serve`` extra (grpcio, grpcio-health-checking, protobuf). The wire format is in
``reward.proto``; the generated ``reward_pb2*`` modules are committed (scripts/gen_proto.sh).
"""

from rewards.serve.client import (
    AsyncRewardLabeller,
    RewardClient,
    RewardServiceError,
    RewardTimeout,
    ServerInfo,
)
from rewards.serve.server import RunningServer, ServeConfig, serve, start_server

__all__ = [
    "AsyncRewardLabeller",
    "RewardClient",
    "RewardServiceError",
    "RewardTimeout",
    "RunningServer",
    "ServeConfig",
    "ServerInfo",
    "serve",
    "start_server",
]
