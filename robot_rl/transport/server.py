"""The learner's gRPC server (``Learner`` service of ``transport.proto``): transitions in, weights,
run control and stats out.

:class:`LearnerServer` answers ``Hello`` (layout and protocol check, where to resume, the run's
policy and env settings; a Hello without a layout only asks for the settings), takes
transition batches on ``PushTransitions`` (one Ack per batch, in order; rows the sink already
holds are dropped and counted, a batch that would leave a gap is refused; a malformed batch gets
an Ack with the error and the stream goes on), and fans learner events out on ``Subscribe``
(newest weights first, then updates, run control and stats as they happen). Publishing never
waits for a subscriber: each keeps only the newest pending weights and stats.

Loopback by default; another bind address needs ``allow_non_loopback=True`` and warns without a
token or TLS. Standard gRPC health checking (``grpc.health.v1``, when grpcio-health-checking is
installed) answers without a token. What a bad or excessive request gets (nothing of it is
stored, and the other actors' calls go on):

- a wrong or missing token: ``UNAUTHENTICATED``;
- bytes that are not the RPC's protobuf message: ``INVALID_ARGUMENT`` (requests are parsed here,
  not by gRPC, which would answer ``INTERNAL``);
- an unsafe actor id: ``INVALID_ARGUMENT`` (Hello, Subscribe) or an error Ack (a batch);
- a batch that does not fit the learner's layout (names, dtypes, shapes, NaN/inf, ...): an error
  Ack naming the field, expected and got (:func:`robot_rl.transport.codec.decode_transitions`);
  the stream stays open;
- a message over ``max_message_bytes`` + :data:`ENVELOPE_BYTES`, or call metadata over
  :data:`MAX_METADATA_BYTES`: ``RESOURCE_EXHAUSTED`` from gRPC, before any of it is read;
- a transition stream or subscription beyond ``max_actors`` of its kind at once, or any call
  beyond ``2 * max_actors +`` :data:`SPARE_CALLS` running at once: ``RESOURCE_EXHAUSTED``
  (the calls already running, e.g. a connected actor's streams, are not affected).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import torch

from robot_rl.core.batch import ObsLayout
from robot_rl.core.netaddr import is_loopback
from robot_rl.transport import transport_pb2 as pb
from robot_rl.transport import transport_pb2_grpc as pb_grpc
from robot_rl.transport.codec import (
    PROTOCOL_VERSION,
    PayloadError,
    accepted_features,
    decode_transitions,
    layout_fingerprint,
)
from robot_rl.transport.guard import StreamSlots, TokenAuth, parse_request
from robot_rl.transport.server_config import LearnerServerConfig
from robot_rl.transport.sink import TransitionSink, check_actor_id
from robot_rl.transport.weights import encode_weights

log = logging.getLogger(__name__)

SERVICE_NAME = "robot_rl.transport.v1.Learner"
"""Full gRPC service name (also the health-check service name)."""

ENVELOPE_BYTES = 64 * 1024
"""gRPC message limit = max_message_bytes + this, so that a payload just over max_message_bytes
reaches the codec and gets an Ack naming the limit rather than a stream error."""

MAX_METADATA_BYTES = 16 * 1024
"""Largest call metadata (headers, the token included) accepted, bytes."""

SPARE_CALLS = 4
"""Calls that may run besides the actors' streams (Hello, health checks): the server runs at
most ``2 * max_actors + SPARE_CALLS`` calls at once and refuses more at once."""

COMMANDS = ("PAUSE", "RESUME", "STOP")
"""Run control commands (``RunControl.Command`` names)."""

_TOKEN_HINT = "LearnerClient(token=...)"
_SUBSCRIBER_POLL_S = 1.0  # a subscriber checks that its caller is still there this often


@dataclass
class _ActorCounters:
    transitions: int = 0
    duplicates: int = 0
    rejected: int = 0
    episodes: int = 0
    last_return: float = math.nan
    episode: int = -1  # the actor's episode index the running return belongs to
    running_return: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)  # serialises this actor's rows

    def record(self, steps: Mapping[str, np.ndarray]) -> None:
        ends = np.logical_or(steps["terminated"], steps["truncated"]).tolist()
        for ep, r, end in zip(
            steps["episode"].tolist(), steps["reward"].tolist(), ends, strict=True
        ):
            if ep != self.episode:
                self.episode, self.running_return = ep, 0.0
            self.running_return += r
            if end:
                self.episodes += 1
                self.last_return = self.running_return
        self.transitions += len(ends)


class _Subscriber:
    """Pending events of one Subscribe call: only the newest weights and stats are kept."""

    def __init__(self) -> None:
        self.weights: pb.LearnerEvent | None = None
        self.stats: pb.LearnerEvent | None = None
        self.controls: list[pb.LearnerEvent] = []
        self.closed = False

    def pop(self) -> pb.LearnerEvent | None:
        if self.controls:
            return self.controls.pop(0)
        event, self.weights = self.weights, None
        if event is None:
            event, self.stats = self.stats, None
        return event


class _Servicer(pb_grpc.LearnerServicer):
    def __init__(
        self, sink: TransitionSink, layout: ObsLayout, action_dim: int, cfg: LearnerServerConfig
    ) -> None:
        self._sink = sink
        self._layout = layout
        self._action_dim = action_dim
        self._cfg = cfg
        self.fingerprint = layout_fingerprint(layout, action_dim)
        # the optional next_obs features this learner asked its actors for (policy settings)
        self._features = accepted_features(json.loads(cfg.policy_json or "{}"), layout)
        self._counters: dict[str, _ActorCounters] = {}
        self._counters_lock = threading.Lock()
        # Learner -> actor events, under one condition.
        self.cond = threading.Condition()
        self.stopping = False
        self.subscribers: set[_Subscriber] = set()
        self.weights_version = 0
        self.weights_event: pb.LearnerEvent | None = None
        self.control_event: pb.LearnerEvent | None = None
        self.stats_event: pb.LearnerEvent | None = None
        self.push_slots = StreamSlots("transition stream", cfg.max_actors)
        self.subscribe_slots = StreamSlots("subscription", cfg.max_actors)

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's method handlers. Requests arrive as bytes and are parsed by
        :func:`~robot_rl.transport.guard.parse_request`: bytes that are not the expected message
        get INVALID_ARGUMENT."""

        def hello(raw: bytes, context: grpc.ServicerContext) -> pb.HelloReply:
            return self.Hello(parse_request(raw, pb.HelloRequest, context, "the request"), context)

        def push(raws: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[pb.Ack]:
            batches = (
                parse_request(raw, pb.TransitionBatch, context, f"message {i} of the stream")
                for i, raw in enumerate(raws)
            )
            return self.PushTransitions(batches, context)

        def subscribe(raw: bytes, context: grpc.ServicerContext) -> Iterator[pb.LearnerEvent]:
            request = parse_request(raw, pb.SubscribeRequest, context, "the request")
            return self.Subscribe(request, context)

        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Hello": grpc.unary_unary_rpc_method_handler(
                    hello, response_serializer=pb.HelloReply.SerializeToString
                ),
                "PushTransitions": grpc.stream_stream_rpc_method_handler(
                    push, response_serializer=pb.Ack.SerializeToString
                ),
                "Subscribe": grpc.unary_stream_rpc_method_handler(
                    subscribe, response_serializer=pb.LearnerEvent.SerializeToString
                ),
            },
        )

    def counters(self, actor_id: str) -> _ActorCounters:
        """The actor's counters; ``transitions`` starts at what the sink already holds (a
        restarted learner counts over the run, not since its start)."""
        with self._counters_lock:
            c = self._counters.get(actor_id)
        if c is None:
            held = self._sink.acked_through(actor_id) + 1
            with self._counters_lock:
                c = self._counters.setdefault(actor_id, _ActorCounters(transitions=held))
        return c

    def actor_stats(self) -> dict[str, pb.ActorStats]:
        with self._counters_lock:
            items = sorted(self._counters.items())
        return {
            a: pb.ActorStats(
                actor_id=a,
                transitions=c.transitions,
                duplicates_dropped=c.duplicates,
                batches_rejected=c.rejected,
                episodes=c.episodes,
                last_episode_return=c.last_return,
                acked_through_seq=self._sink.acked_through(a),
            )
            for a, c in items
        }

    def Hello(self, request: pb.HelloRequest, context: grpc.ServicerContext) -> pb.HelloReply:
        try:
            check_actor_id(request.actor_id)
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if request.protocol_version != PROTOCOL_VERSION:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"protocol version: the actor speaks {request.protocol_version}, the learner "
                f"{PROTOCOL_VERSION}; run the same robot_rl version on both machines",
            )
        settings_only = not request.layout_json  # the actor asks before it builds its env
        if not settings_only and request.layout_json != self.fingerprint:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"layout differs: the actor sends {_clip(request.layout_json)}, the learner has "
                f"{self.fingerprint}; build the actor from the same setup (cameras, image size, "
                "state, action) as the learner",
            )
        if not settings_only:
            self.counters(request.actor_id)
        with self.cond:
            version = self.weights_version
        return pb.HelloReply(
            run_id=self._cfg.run_id,
            acked_through_seq=self._sink.acked_through(request.actor_id),
            weights_version=version,
            max_message_bytes=self._cfg.max_message_bytes,
            protocol_version=PROTOCOL_VERSION,
            policy_json=self._cfg.policy_json,
            run_settings_json=self._cfg.run_settings_json,
        )

    def PushTransitions(
        self, request_iterator: Iterator[pb.TransitionBatch], context: grpc.ServicerContext
    ) -> Iterator[pb.Ack]:
        self.push_slots.take(context)
        for batch in request_iterator:
            yield self._take(batch)

    def _take(self, batch: pb.TransitionBatch) -> pb.Ack:
        actor, first, n = batch.actor_id, batch.first_seq, batch.count
        span = f"batch [{first}, {first + n})"
        if not actor:
            return pb.Ack(batch_first_seq=first, acked_through_seq=-1, error="actor_id is empty")
        try:
            check_actor_id(actor)
        except ValueError as e:  # never counted: unsafe ids get no counters, stats or log
            return pb.Ack(batch_first_seq=first, acked_through_seq=-1, error=f"{span}: {e}")
        counters = self.counters(actor)
        try:
            steps = decode_transitions(
                batch.payload, batch.codec, batch.sha256, layout=self._layout,
                action_dim=self._action_dim, max_bytes=self._cfg.max_message_bytes, count=n,
                features=self._features,
            )  # fmt: skip
        except PayloadError as e:
            with self._counters_lock:
                counters.rejected += 1
            log.warning("actor %r: %s rejected: %s", actor, span, e)
            return self._ack(batch, None, 0, f"{span} rejected: {e}")
        with counters.lock:
            acked = self._sink.acked_through(actor)
            if first > acked + 1:
                with self._counters_lock:
                    counters.rejected += 1
                return self._ack(
                    batch, acked, 0,
                    f"{span} leaves a gap: the learner holds this actor's transitions through "
                    f"seq {acked}; resend from {acked + 1}",
                )  # fmt: skip
            dup = min(n, acked + 1 - first)
            if dup < n:
                new = {k: v[dup:] for k, v in steps.items()}
                try:
                    acked = self._sink.accept(actor, first + dup, new)
                except Exception as e:  # the sink's failure: nothing stored, the actor resends
                    log.exception("actor %r: storing %s failed", actor, span)
                    return self._ack(batch, None, 0, f"{span}: the learner could not store it: {e}")
                with self._counters_lock:
                    counters.record(new)
            with self._counters_lock:
                counters.duplicates += dup
        return self._ack(batch, acked, dup, "")

    def _ack(self, batch: pb.TransitionBatch, acked: int | None, dup: int, error: str) -> pb.Ack:
        if acked is None:
            acked = self._sink.acked_through(batch.actor_id)
        return pb.Ack(
            actor_id=batch.actor_id,
            batch_first_seq=batch.first_seq,
            acked_through_seq=acked,
            duplicates_dropped=dup,
            error=error,
        )

    def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.LearnerEvent]:
        try:
            check_actor_id(request.actor_id)
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        self.subscribe_slots.take(context)
        sub = _Subscriber()
        with self.cond:
            if self.control_event is not None:
                if self.control_event.control.command != pb.RunControl.RESUME:
                    sub.controls.append(self.control_event)
            if self.weights_event is not None:
                if self.weights_version > request.have_weights_version:
                    sub.weights = self.weights_event
            sub.stats = self.stats_event
            self.subscribers.add(sub)

        def close() -> None:
            with self.cond:
                sub.closed = True
                self.cond.notify_all()

        context.add_callback(close)
        try:
            while True:
                with self.cond:
                    self.cond.wait_for(
                        lambda: sub.closed or self.stopping or sub.controls or sub.weights
                        or sub.stats,
                        _SUBSCRIBER_POLL_S,
                    )  # fmt: skip
                    if sub.closed or self.stopping:
                        return
                    event = sub.pop()
                if event is not None:
                    yield event  # blocks only this subscriber's thread (flow control)
                elif not context.is_active():
                    return
        finally:
            with self.cond:
                self.subscribers.discard(sub)

    def fan_out(self, event: pb.LearnerEvent) -> None:
        """Queue ``event`` for every subscriber (call with ``cond`` held)."""
        kind = event.WhichOneof("event")
        for sub in self.subscribers:
            if kind == "weights":
                sub.weights = event
            elif kind == "stats":
                sub.stats = event
            else:
                sub.controls.append(event)
        self.cond.notify_all()


def _clip(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


class LearnerServer:
    """The learner's gRPC endpoint, started on construction; :meth:`stop` it (or use ``with``).

    Args:
        sink: Where accepted transitions go (durably) and where resumption starts.
        layout: The learner's observation layout; actors must send exactly this.
        action_dim: The learner's action size A.
        cfg: Address, security and limits.

    Attributes:
        sink: The sink given.
        host: The bound host, as given in ``bind``.
        port: The bound TCP port (the chosen one when ``bind`` asked for port 0).
        tls: Whether it serves TLS.

    Raises:
        RuntimeError: The address could not be bound, or the TLS files not read.
    """

    def __init__(
        self,
        sink: TransitionSink,
        layout: ObsLayout,
        action_dim: int,
        cfg: LearnerServerConfig | None = None,
    ) -> None:
        cfg = cfg or LearnerServerConfig()
        self.cfg = cfg
        self.host = cfg.bind.rpartition(":")[0]
        self.tls = cfg.tls_cert_path is not None
        if not is_loopback(self.host):
            if cfg.token is None:
                log.warning("learner on non-loopback %s without a token: pass a token", cfg.bind)
            if not self.tls:
                log.warning("learner on non-loopback %s without TLS: traffic in clear", cfg.bind)
        self.sink = sink
        self._servicer = _Servicer(sink, layout, action_dim, cfg)
        workers = 2 * cfg.max_actors + SPARE_CALLS  # two streams per actor, Hello, health
        limit = cfg.max_message_bytes + ENVELOPE_BYTES
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.max_metadata_size", MAX_METADATA_BYTES),
            ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
            ("grpc.so_reuseport", 0),  # a port in use is an error, not a silent share
            ("grpc.keepalive_time_ms", 20_000),  # find dead actors, free their streams
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5_000),  # actors ping every 10 s
            ("grpc.http2.max_ping_strikes", 0),
        ]
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="learner-rpc"),
            interceptors=[] if cfg.token is None else [TokenAuth(cfg.token, _TOKEN_HINT)],
            options=options,
            maximum_concurrent_rpcs=workers,  # more at once: RESOURCE_EXHAUSTED, never queued
        )
        self._server.add_generic_rpc_handlers((self._servicer.handler(),))
        self._health = _add_health(self._server)
        try:
            if cfg.tls_cert_path is not None and cfg.tls_key_path is not None:
                key_cert = (
                    Path(cfg.tls_key_path).read_bytes(),
                    Path(cfg.tls_cert_path).read_bytes(),
                )
                creds = grpc.ssl_server_credentials([key_cert])
                self.port = self._server.add_secure_port(cfg.bind, creds)
            else:
                self.port = self._server.add_insecure_port(cfg.bind)
        except Exception as e:
            raise RuntimeError(f"could not bind the learner to {cfg.bind}: {e}") from e
        if self.port == 0:
            raise RuntimeError(f"could not bind the learner to {cfg.bind} (port in use?)")
        self._server.start()
        if self._health is not None:
            from grpc_health.v1 import health_pb2

            for service in ("", SERVICE_NAME):
                self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("learner serving %s on %s:%d", cfg.run_id or "(no run id)", self.host, self.port)

    @property
    def address(self) -> str:
        """``host:port`` an actor can dial."""
        return f"{self.host}:{self.port}"

    @property
    def layout_json(self) -> str:
        """The layout fingerprint actors must send in Hello."""
        return self._servicer.fingerprint

    @property
    def weights_version(self) -> int:
        """Version of the newest published weights, 0 for none."""
        with self._servicer.cond:
            return self._servicer.weights_version

    def publish_weights(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Encode weights once and queue them for every subscriber (never waits for one).

        Args:
            version: Must exceed the last published version (e.g. the update count).
            state_dict: The policy's trainable state
                (:func:`robot_rl.transport.weights.trainable_state`): frozen parts are not sent.

        Returns:
            Size of the encoded weights, bytes.

        Raises:
            ValueError: Version not increasing, weights larger than max_message_bytes, or
                not publishable (empty, NaN/inf: see ``encode_weights``).
        """
        payload, sha = encode_weights(state_dict)
        if len(payload) > self.cfg.max_message_bytes:
            raise ValueError(
                f"weights are {len(payload)} bytes > max_message_bytes="
                f"{self.cfg.max_message_bytes}; raise LearnerServerConfig.max_message_bytes"
            )
        event = pb.LearnerEvent(weights=pb.Weights(version=version, payload=payload, sha256=sha))
        s = self._servicer
        with s.cond:
            if version <= s.weights_version:
                raise ValueError(
                    f"weights version {version} <= last published {s.weights_version}; "
                    "versions must increase"
                )
            s.weights_version, s.weights_event = version, event
            s.fan_out(event)
        return len(payload)

    def control(self, command: str, reason: str = "") -> None:
        """Send run control to every actor (and to actors that subscribe later, until changed).

        Args:
            command: ``"PAUSE"``, ``"RESUME"`` or ``"STOP"`` (any case).
            reason: Free text for the actors' logs.
        """
        name = command.upper()
        if name not in COMMANDS:
            raise ValueError(f"command={command!r}: use one of {list(COMMANDS)}")
        value = pb.RunControl.Command.Value(name)
        event = pb.LearnerEvent(control=pb.RunControl(command=value, reason=reason))
        with self._servicer.cond:
            self._servicer.control_event = event
            self._servicer.fan_out(event)

    def actor_stats(self) -> dict[str, pb.ActorStats]:
        """Per-actor counts (actors that said Hello or sent a batch), by actor id."""
        return self._servicer.actor_stats()

    def open_streams(self) -> dict[str, int]:
        """Calls running now: ``{"push": transition streams, "subscribe": subscriptions}`` (each
        at most ``max_actors``)."""
        s = self._servicer
        return {"push": s.push_slots.active, "subscribe": s.subscribe_slots.active}

    def publish_stats(self, updates: int, replay_size: int, update_backlog: int = 0) -> pb.Stats:
        """Send a stats snapshot (with :meth:`actor_stats`) to every subscriber; returns it."""
        stats = pb.Stats(
            updates=updates,
            replay_size=replay_size,
            actors=list(self.actor_stats().values()),
            update_backlog=max(0, int(update_backlog)),
        )
        with self._servicer.cond:
            self._servicer.stats_event = pb.LearnerEvent(stats=stats)
            self._servicer.fan_out(self._servicer.stats_event)
        return stats

    def stop(self, grace_s: float = 1.0) -> None:
        """Report NOT_SERVING, end subscriptions, let running calls finish for ``grace_s``."""
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        with self._servicer.cond:
            self._servicer.stopping = True
            self._servicer.cond.notify_all()
        self._server.stop(grace_s).wait()

    def __enter__(self) -> LearnerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _add_health(server: grpc.Server) -> Any:
    """Register the standard health service if grpcio-health-checking is installed."""
    try:
        from grpc_health.v1 import health, health_pb2_grpc
    except ImportError:
        return None
    servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return servicer
