"""What an actor asks its learner before it builds its env: a Hello without a layout.

The learner owns the run's settings. ``robot-rl actor`` calls :func:`ask_learner` first, builds
its env from the answer (:mod:`robot_rl.app.training.run_settings`), and only then starts its
:class:`robot_rl.transport.client.LearnerClient` with the env's layout, whose Hello the learner
checks as before. The settings-only Hello registers nothing at the learner (the actor is not in
its stats until it says Hello with a layout) and opens no stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from robot_rl.transport import transport_pb2 as pb
from robot_rl.transport import transport_pb2_grpc as pb_grpc

# Package-internal: the same channel options and fatal-error hints as the actor's client.
from robot_rl.transport.client import _FATAL, LearnerClientConfig, LearnerError, _channel
from robot_rl.transport.codec import PROTOCOL_VERSION


@dataclass(frozen=True)
class LearnerInfo:
    """The learner's answer to a settings-only Hello."""

    run_id: str
    """Id of the learner's run (its run directory name)."""
    policy_json: str
    """Its policy settings (JSON; "" if it does not say)."""
    run_settings_json: str
    """Its run's env settings (JSON; "" if it does not say)."""


def ask_learner(cfg: LearnerClientConfig, timeout_s: float) -> LearnerInfo | None:
    """Ask the learner for its run's settings, waiting up to ``timeout_s`` for it to answer.

    Args:
        cfg: Address, identity and security, as for the actor's ``LearnerClient`` (its
            ``reconnect_max_s`` bounds how long a learner that comes up late goes unnoticed).
        timeout_s: How long to wait for an answer, seconds.

    Returns:
        The answer, or None if no learner answered in time (not running, unreachable, or a
        TLS mismatch).

    Raises:
        LearnerError: The learner refused this actor for good (token, protocol version, actor
            id): retrying cannot help.
    """
    channel = _channel(cfg)
    metadata = () if cfg.token is None else (("authorization", f"Bearer {cfg.token}"),)
    request = pb.HelloRequest(
        actor_id=cfg.actor_id, layout_json="", protocol_version=PROTOCOL_VERSION
    )
    try:
        reply = pb_grpc.LearnerStub(channel).Hello(
            request, timeout=timeout_s, metadata=metadata, wait_for_ready=True
        )
    except grpc.RpcError as e:
        code, details = e.code(), e.details() or ""  # type: ignore[attr-defined]
        if code not in _FATAL:
            return None
        hint = f" ({_FATAL[code]})" if _FATAL[code] else ""
        message = f"learner {cfg.target}: Hello: {code.name}: {details}{hint}"
        raise LearnerError(message, code) from e
    finally:
        channel.close()
    return LearnerInfo(reply.run_id, reply.policy_json, reply.run_settings_json)
