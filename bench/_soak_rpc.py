"""Malformed RPCs and the reward server probe of bench/soak.py (imported by it; not a script).

:func:`bad_rpcs` sends what a broken or hostile client sends, to the learner and to the reward
server, and counts the status codes that come back: bytes that are not the message, a wrong and a
missing token, metadata over the servers' 16 KiB limit, and a burst of connections at once. None of
it may be answered OK, and none of it may crash a server (the soak checks that the good clients
go on).
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

LEARNER = "/robot_rl.transport.v1.Learner"
REWARD = "/robot_rl.reward.v1.RewardService"
TIMEOUT_S = 10.0


def _code(call: Any) -> str:
    try:
        call()
    except grpc.RpcError as e:
        return e.code().name
    return "OK"


def _raw(
    address: str, method: str, payload: bytes, metadata: tuple, timeout_s: float = TIMEOUT_S
) -> str:
    """The status code of one call of ``method`` with ``payload`` as its bytes."""
    with grpc.insecure_channel(address) as ch:
        fn = ch.unary_unary(method)  # bytes in, bytes out: no serializer
        return _code(lambda: fn(payload, metadata=metadata, timeout=timeout_s))


def _hello() -> bytes:
    from robot_rl.transport import transport_pb2 as pb

    return pb.HelloRequest(actor_id="soak-bad-client").SerializeToString()


def bad_rpcs(learner: str, learner_token: str, reward: str, reward_token: str) -> dict:
    """Send each kind of bad request; returns {target: {kind: {status code: count}}}."""
    from rewards.serve import reward_pb2

    garbage = os.urandom(512)
    big = (("x-pad", "a" * 20_000),)  # metadata over the 16 KiB limit
    auth_l = (("authorization", f"Bearer {learner_token}"),)
    auth_r = (("authorization", f"Bearer {reward_token}"),)
    wrong = (("authorization", "Bearer not-the-token"),)
    info = reward_pb2.InfoRequest().SerializeToString()
    kinds = {
        "learner": {
            "not_protobuf": (learner, f"{LEARNER}/Hello", garbage, auth_l),
            "wrong_token": (learner, f"{LEARNER}/Hello", _hello(), wrong),
            "missing_token": (learner, f"{LEARNER}/Hello", _hello(), ()),
            "oversized_metadata": (learner, f"{LEARNER}/Hello", _hello(), auth_l + big),
        },
        "reward_server": {
            "not_protobuf": (reward, f"{REWARD}/Predict", garbage, auth_r),
            "wrong_token": (reward, f"{REWARD}/Info", info, wrong),
            "missing_token": (reward, f"{REWARD}/Info", info, ()),
            "oversized_metadata": (reward, f"{REWARD}/Info", info, auth_r + big),
        },
    }
    out: dict[str, dict[str, dict[str, int]]] = {}
    for target, calls in kinds.items():
        out[target] = {}
        for kind, (addr, method, payload, md) in calls.items():
            out[target][kind] = dict(Counter(_raw(addr, method, payload, md) for _ in range(5)))
        # 64 connections at once, each with a request without the token
        burst = [(*calls["missing_token"][:3], ())] * 64
        with ThreadPoolExecutor(16) as pool:
            codes = pool.map(lambda c: _raw(*c), burst)
            out[target]["connection_burst"] = dict(Counter(codes))
    return out


def answered_ok(counts: dict) -> int:
    """How many bad requests were answered OK (must be 0)."""
    return sum(n for kinds in counts.values() for c in kinds.values() for k, n in c.items()
               if k == "OK")  # fmt: skip


def reward_server_answers(address: str, token: str) -> bool:
    """The reward server answers an authorised Info call."""
    from rewards.serve import reward_pb2

    info = reward_pb2.InfoRequest().SerializeToString()
    md = (("authorization", f"Bearer {token}"),)
    return _raw(address, f"{REWARD}/Info", info, md, timeout_s=2.0) == "OK"
