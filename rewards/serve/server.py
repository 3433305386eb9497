"""gRPC reward server: serves any RewardModel to the robot PC (``robot-rl reward serve``).

Loopback by default; binding elsewhere needs ``allow_non_loopback=True`` and warns without a
token. Requests are micro-batched (:mod:`rewards.serve.batcher`), carry deadlines (a request
whose deadline passes while queued is dropped, not computed), and are checked before they reach
the model; none of the refusals takes the server down or delays the other clients' answers:

- a wrong or missing token: ``UNAUTHENTICATED``;
- bytes that are not a ``PredictRequest`` / ``InfoRequest`` protobuf: ``INVALID_ARGUMENT``
  (requests are parsed here, not by gRPC, which would answer ``INTERNAL``);
- a frame that is not a colour JPEG or not of the model's image size, a state that is not
  (B, S) float32 safetensors of the model's width, NaN/inf, inconsistent batch sizes, a
  missing camera: ``INVALID_ARGUMENT`` naming the field, expected and got;
- a message over ``max_message_bytes``, call metadata over :data:`MAX_METADATA_BYTES`, frames
  whose JPEG headers add up to more than ``max_request_pixels``, or a call beyond
  ``max_concurrent_rpcs`` running at once: ``RESOURCE_EXHAUSTED`` (never queued, never decoded).

Standard gRPC health checking (``grpc.health.v1``) answers without a token.
"""

from __future__ import annotations

import hmac
import logging
import math
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rewards.serve import reward_pb2, reward_pb2_grpc
from rewards.serve.batcher import BatcherStopped, DeadlineExpired, MicroBatcher, ModelError
from rewards.serve.codec import PayloadError, PayloadTooLarge, decode_images, decode_state
from robot_rl.core.netaddr import check_bind, is_loopback
from robot_rl.core.protocols import RewardModel, RewardQuery

log = logging.getLogger(__name__)

SERVICE_NAME = "robot_rl.reward.v1.RewardService"
"""Full gRPC service name (also the health-check service name)."""

MAX_METADATA_BYTES = 16 * 1024
"""Largest call metadata (headers, the token included) accepted, bytes."""

_HEALTH_PREFIX = "/grpc.health.v1.Health/"


@dataclass(frozen=True)
class ServeConfig:
    """How to serve a reward model."""

    bind: str = "127.0.0.1:0"
    """host:port to listen on (port 0: any free port). Loopback unless allow_non_loopback."""
    token: str | None = None
    """Shared secret; clients must send ``authorization: Bearer <token>``. None: no auth."""
    max_batch: int = 32
    """Most frames per model call."""
    max_wait_ms: float = 5.0
    """Longest a batch waits for more requests after its first, milliseconds."""
    allow_non_loopback: bool = False
    """Allow a bind address other than 127.0.0.1 / ::1 / localhost."""
    tls_cert_path: Path | None = None
    """PEM server certificate (with tls_key_path: serve TLS). None: plaintext."""
    tls_key_path: Path | None = None
    """PEM private key of tls_cert_path."""
    max_message_bytes: int = 32 * 1024 * 1024
    """Largest request accepted, bytes (larger: RESOURCE_EXHAUSTED)."""
    max_workers: int = 16
    """gRPC handler threads (each decodes its request's JPEGs)."""
    cameras: tuple[str, ...] | None = None
    """Cameras requests must carry (None: the model's ``cameras`` attribute if any, else
    any)."""
    image_size: tuple[int, int] | None = None
    """(height, width) every frame must have, pixels (None: the model's ``image_size``
    attribute if any, else any size)."""
    state_dim: int | None = None
    """Width S of the state a request may carry (None: the model's ``state_dim`` attribute if
    any, else any)."""
    max_request_pixels: int = 1 << 24
    """Most pixels (frames x height x width, all cameras) one request may hold, read from the
    JPEG headers before any frame is decoded (more: RESOURCE_EXHAUSTED). 16.7 M: 64 frames of
    512x512; a 2-camera batch of 32 at 224x224 is 3.2 M."""
    max_concurrent_rpcs: int = 64
    """Most calls running or waiting for a handler thread at once; more get RESOURCE_EXHAUSTED
    at once (``RewardClient`` retries those within its deadline). Bounds what requests in the
    server hold to about this many x max_message_bytes."""

    def __post_init__(self) -> None:
        check_bind(self.bind, self.allow_non_loopback, 50051, "other machines")
        if self.max_batch < 1:
            raise ValueError(f"max_batch={self.max_batch}: use >= 1")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms={self.max_wait_ms}: use >= 0")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes={self.max_message_bytes}: use >= 1024")
        if self.max_workers < 1:
            raise ValueError(f"max_workers={self.max_workers}: use >= 1")
        if self.max_concurrent_rpcs < 1:
            raise ValueError(f"max_concurrent_rpcs={self.max_concurrent_rpcs}: use >= 1")
        if self.max_request_pixels < 1:
            raise ValueError(f"max_request_pixels={self.max_request_pixels}: use >= 1")
        if self.image_size is not None and (len(self.image_size) != 2 or min(self.image_size) < 1):
            raise ValueError(f"image_size={self.image_size}: use (height, width) >= 1")
        if self.state_dim is not None and self.state_dim < 1:
            raise ValueError(f"state_dim={self.state_dim}: use >= 1 or None")
        if self.token is not None and not self.token:
            raise ValueError("token='': give a non-empty token or None for no authentication")
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            raise ValueError("TLS needs both tls_cert_path and tls_key_path (or neither)")


def _deny(message: str) -> grpc.RpcMethodHandler:
    def handler(request: bytes, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return grpc.unary_unary_rpc_method_handler(handler)


class _TokenAuth(grpc.ServerInterceptor):
    """Refuses calls without ``authorization: Bearer <token>`` (health checks exempt)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()
        self._missing = _deny(
            "missing 'authorization' metadata: this server needs a token; send "
            "'authorization: Bearer <token>' (RewardClient(token=...))"
        )
        self._wrong = _deny(
            "wrong token in 'authorization' metadata; use the token the server was started with"
        )

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        if handler_call_details.method.startswith(_HEALTH_PREFIX):
            return continuation(handler_call_details)
        metadata = dict(handler_call_details.invocation_metadata or ())
        got = metadata.get("authorization")
        if got is None:
            return self._missing
        got_bytes = got.encode() if isinstance(got, str) else got
        if not hmac.compare_digest(got_bytes, self._expected):
            return self._wrong
        return continuation(handler_call_details)


def _parse(raw: bytes, cls: Any, context: grpc.ServicerContext) -> Any:
    """Parse a request's bytes, or abort with INVALID_ARGUMENT saying what they are not."""
    try:
        return cls.FromString(raw)
    except Exception as e:  # untrusted bytes: any parser failure is the caller's
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the request ({len(raw)} bytes) is not a {cls.DESCRIPTOR.full_name} protobuf "
            f"message ({e}); build requests with the stubs generated from reward.proto",
        )


class _Servicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(self, model: RewardModel, batcher: MicroBatcher, cfg: ServeConfig) -> None:
        self._model = model
        self._batcher = batcher
        self._cfg = cfg
        self._cameras = tuple(
            cfg.cameras if cfg.cameras is not None else getattr(model, "cameras", ())
        )
        size = cfg.image_size if cfg.image_size is not None else getattr(model, "image_size", None)
        self._image_size = None if size is None else (int(size[0]), int(size[1]))
        dim = cfg.state_dim if cfg.state_dim is not None else getattr(model, "state_dim", None)
        self._state_dim = None if dim is None else int(dim)

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's method handlers; requests arrive as bytes and are parsed by
        :func:`_parse` (bytes that are not the message get INVALID_ARGUMENT)."""
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Predict": grpc.unary_unary_rpc_method_handler(
                    lambda raw, ctx: self.Predict(_parse(raw, reward_pb2.PredictRequest, ctx), ctx),
                    response_serializer=reward_pb2.PredictReply.SerializeToString,
                ),
                "Info": grpc.unary_unary_rpc_method_handler(
                    lambda raw, ctx: self.Info(_parse(raw, reward_pb2.InfoRequest, ctx), ctx),
                    response_serializer=reward_pb2.InfoReply.SerializeToString,
                ),
            },
        )

    def _decode(self, request: reward_pb2.PredictRequest) -> RewardQuery:
        images = decode_images(
            {cam: list(b.jpeg) for cam, b in request.images.items()},
            self._cameras,
            image_size=self._image_size,
            max_pixels=self._cfg.max_request_pixels,
        )
        batch = next(iter(images.values())).shape[0]
        state = None
        if request.HasField("state"):
            state = decode_state(request.state, batch, self._state_dim)
        task_text = request.task_text if request.HasField("task_text") else None
        return RewardQuery(images=images, state=state, task_text=task_text)

    def Predict(  # gRPC method name
        self, request: reward_pb2.PredictRequest, context: grpc.ServicerContext
    ) -> reward_pb2.PredictReply:
        try:
            query = self._decode(request)
        except PayloadTooLarge as e:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except PayloadError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        remaining_s = context.time_remaining()
        if remaining_s is not None and (not math.isfinite(remaining_s) or remaining_s > 1e8):
            remaining_s = None
        deadline_s = None if remaining_s is None else time.monotonic() + remaining_s
        future = self._batcher.submit(query, deadline_s)
        # Caller gone (deadline or cancel): skip the request if still queued.
        context.add_callback(lambda: self._batcher.abandon(future))
        code, message = grpc.StatusCode.INTERNAL, ""
        try:
            result = future.result(timeout=remaining_s)
        except DeadlineExpired:
            code, message = grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed while queued"
        except futures.TimeoutError:
            self._batcher.abandon(future)  # dropped if still queued
            code, message = grpc.StatusCode.DEADLINE_EXCEEDED, "no answer within the deadline"
        except futures.CancelledError:  # the RPC ended first (deadline or caller's cancel)
            code, message = grpc.StatusCode.CANCELLED, "request cancelled by the caller"
            if remaining_s is not None and context.time_remaining() <= 0:
                code, message = grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed while queued"
        except BatcherStopped as e:
            code, message = grpc.StatusCode.UNAVAILABLE, str(e)
        except ModelError as e:
            code, message = grpc.StatusCode.INTERNAL, f"reward model failed: {e}"
        else:
            return reward_pb2.PredictReply(
                request_id=request.request_id,
                success_prob=result.success_prob.tolist(),
                reward=result.reward.tolist(),
                model_id=result.model_id,
                model_version=result.model_version,
            )
        context.abort(code, message)

    def Info(  # gRPC method name
        self, request: reward_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> reward_pb2.InfoReply:
        return reward_pb2.InfoReply(
            model_id=self._model.model_id,
            model_version=self._model.model_version,
            cameras=list(self._cameras),
            max_batch=self._cfg.max_batch,
            max_message_bytes=self._cfg.max_message_bytes,
        )


class RunningServer:
    """A started reward server. Stop it with :meth:`stop` (or use it as a context manager).

    Attributes:
        host: The bound host, as given in ``bind``.
        port: The bound TCP port (the chosen one when ``bind`` asked for port 0).
        tls: Whether it serves TLS.
    """

    def __init__(
        self,
        server: grpc.Server,
        batcher: MicroBatcher,
        health_servicer: health.HealthServicer,
        host: str,
        port: int,
        tls: bool,
    ) -> None:
        self._server = server
        self._batcher = batcher
        self._health = health_servicer
        self.host = host
        self.port = port
        self.tls = tls

    @property
    def address(self) -> str:
        """``host:port`` a client can dial."""
        return f"{self.host}:{self.port}"

    def stats(self) -> dict[str, int]:
        """Batcher counters: requests, predict_calls, frames_computed, abandoned (the caller's
        deadline passed or it cancelled while the request was queued), dropped_expired and
        dropped_cancelled (skipped by the batcher, never computed), failed (model errors),
        queued (waiting now, abandoned ones included until the batcher reaches them)."""
        return self._batcher.stats()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server stops (or timeout); True if it stopped."""
        return self._server.wait_for_termination(timeout_s)

    def stop(self, grace_s: float = 1.0) -> None:
        """Report NOT_SERVING, let running calls finish for ``grace_s``, stop the batcher."""
        self._health.enter_graceful_shutdown()
        self._server.stop(grace_s).wait()
        self._batcher.stop()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(model: RewardModel, cfg: ServeConfig) -> RunningServer:
    """Start serving ``model`` per ``cfg``; returns once the port is bound.

    Raises:
        RuntimeError: The address could not be bound, or the TLS files not read.
    """
    host = cfg.bind.rpartition(":")[0]
    if not is_loopback(host):
        if cfg.token is None:
            log.warning(
                "reward server on non-loopback %s without a token: anyone on the "
                "network can query it; pass a token",
                cfg.bind,
            )
        if cfg.tls_cert_path is None:
            log.warning(
                "reward server on non-loopback %s without TLS: traffic (and any "
                "token) is in clear text",
                cfg.bind,
            )
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", cfg.max_message_bytes),
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.so_reuseport", 0),  # a port in use is an error, not a silent share
        ("grpc.keepalive_time_ms", 20_000),  # during a call: find a vanished client, free it
        ("grpc.keepalive_timeout_ms", 10_000),
    ]
    interceptors = [] if cfg.token is None else [_TokenAuth(cfg.token)]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="reward-rpc"),
        interceptors=interceptors,
        options=options,
        maximum_concurrent_rpcs=cfg.max_concurrent_rpcs,  # more: RESOURCE_EXHAUSTED at once
    )
    batcher = MicroBatcher(model, cfg.max_batch, cfg.max_wait_ms / 1000.0)
    server.add_generic_rpc_handlers((_Servicer(model, batcher, cfg).handler(),))
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        if cfg.tls_cert_path is not None and cfg.tls_key_path is not None:
            key_cert = (Path(cfg.tls_key_path).read_bytes(), Path(cfg.tls_cert_path).read_bytes())
            port = server.add_secure_port(cfg.bind, grpc.ssl_server_credentials([key_cert]))
        else:
            port = server.add_insecure_port(cfg.bind)
    except Exception as e:
        batcher.stop()
        raise RuntimeError(f"could not bind the reward server to {cfg.bind}: {e}") from e
    if port == 0:
        batcher.stop()
        raise RuntimeError(f"could not bind the reward server to {cfg.bind} (port in use?)")
    server.start()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info("reward server for %s %s on %s", model.model_id, model.model_version, cfg.bind)
    return RunningServer(
        server, batcher, health_servicer, host, port, cfg.tls_cert_path is not None
    )


def serve(
    model: RewardModel,
    bind: str = "127.0.0.1:0",
    token: str | None = None,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    **kwargs: Any,
) -> RunningServer:
    """Start serving ``model``; keyword arguments as in :class:`ServeConfig`."""
    cfg = ServeConfig(
        bind=bind, token=token, max_batch=max_batch, max_wait_ms=max_wait_ms, **kwargs
    )
    return start_server(model, cfg)
