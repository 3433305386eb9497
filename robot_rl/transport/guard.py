"""What the learner's gRPC server checks before a call reaches the service, and how it refuses.

- :class:`TokenAuth`: a wrong or missing ``authorization: Bearer <token>`` gets
  ``UNAUTHENTICATED`` (health checks are exempt).
- :func:`parse_request`: requests arrive as bytes and are parsed by the service, so that bytes
  that are not the RPC's protobuf message get ``INVALID_ARGUMENT`` naming the message type
  (gRPC's own parsing would answer ``INTERNAL``, which reads as the server's fault).
- :class:`StreamSlots`: a long-lived stream beyond its limit gets ``RESOURCE_EXHAUSTED`` at once,
  so that a flood of streams cannot take the worker threads that Hello and health calls need.

Nothing here unpickles: the only parser is protobuf's.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from typing import Any

import grpc

HEALTH_PREFIX = "/grpc.health.v1.Health/"
"""Method prefix of the standard health service (answered without a token)."""


def _deny_like(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as ``handler`` that refuses the call."""

    def deny(request: Any, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    kind = "_".join(
        "stream" if s else "unary" for s in (handler.request_streaming, handler.response_streaming)
    )
    make = getattr(grpc, f"{kind}_rpc_method_handler")
    return make(deny)


class TokenAuth(grpc.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` (health checks exempt).

    Args:
        token: The shared secret.
        client_hint: How a client passes the token, for the message (e.g.
            ``"LearnerClient(token=...)"``).
    """

    def __init__(self, token: str, client_hint: str) -> None:
        self._expected = f"Bearer {token}".encode()
        self._hint = client_hint

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        got = dict(handler_call_details.invocation_metadata or ()).get("authorization")
        if got is None:
            return _deny_like(
                handler,
                "missing 'authorization' metadata: this learner needs a token; send "
                f"'authorization: Bearer <token>' ({self._hint})",
            )
        got_bytes = got.encode() if isinstance(got, str) else got
        if not hmac.compare_digest(got_bytes, self._expected):
            return _deny_like(
                handler, "wrong token in 'authorization' metadata; use the learner's token"
            )
        return handler


def parse_request(raw: bytes, cls: Any, context: grpc.ServicerContext, what: str) -> Any:
    """Parse a request's bytes as protobuf message ``cls``, or abort the call with
    ``INVALID_ARGUMENT`` saying what they are not.

    Args:
        raw: The bytes as received.
        cls: The generated message class (e.g. ``transport_pb2.HelloRequest``).
        context: The call's context.
        what: Which message, for the error (e.g. ``"message 3 of the stream"``).
    """
    try:
        return cls.FromString(raw)
    except Exception as e:  # untrusted bytes: any parser failure is the caller's
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{what} ({len(raw)} bytes) is not a {cls.DESCRIPTOR.full_name} protobuf message "
            f"({e}); build requests with the stubs generated from transport.proto",
        )


class StreamSlots:
    """Running streams of one kind: at most ``limit`` at once; one more is refused.

    Args:
        what: The kind, for the error (e.g. ``"transition stream"``).
        limit: Most streams at once (the learner's ``max_actors``).

    Attributes:
        active: Streams counted now.
    """

    def __init__(self, what: str, limit: int) -> None:
        self.what, self.limit, self.active = what, limit, 0
        self._lock = threading.Lock()

    def take(self, context: grpc.ServicerContext) -> None:
        """Count this call until it ends, or abort it with ``RESOURCE_EXHAUSTED`` when all slots
        are in use."""
        with self._lock:
            full = self.active >= self.limit
            if not full:
                self.active += 1
        if full:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many {self.what}s: the learner serves {self.limit} at once (max_actors="
                f"{self.limit}) and all are in use; retry later, or raise the learner's "
                "--max-actors (an actor that vanished frees its streams when keepalive finds it "
                "gone, within 30 s)",
            )

        def release() -> None:
            with self._lock:
                self.active -= 1

        if not context.add_callback(release):  # the call is already over
            release()
