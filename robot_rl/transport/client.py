"""The actor's side of the transport: streams transitions to the learner, receives weights and run
control, and never blocks the control loop.

Resuming works through :attr:`LearnerClient.next_seq`, the sequence number the next
:meth:`~LearnerClient.push` must start at. The actor keeps every transition in its durable log
and pushes from ``next_seq`` on::

    while client.next_seq is not None and client.next_seq < log_end:
        s = client.next_seq
        if not client.push(s, log.read(s, min(s + B, log_end))):
            break  # queue full, or not connected yet: try again next tick

``push`` only queues (a background thread encodes, sends and reads Acks); it returns False
instead of waiting when the learner has not been reached yet or ``max_pending_batches`` are
unacknowledged. After a reconnect the learner's Hello says what it holds: batches still queued
and contiguous with it are resent (the learner drops duplicates), otherwise ``next_seq`` moves
back to the learner's ``acked_through + 1`` and the actor resends from its log. A batch the
learner rejects moves ``next_seq`` back the same way (:attr:`LearnerClient.last_error` says
why). ``next_seq`` may also move forward, when the learner holds more than this actor pushed
(an actor restarted with a log that lost its tail): sequence numbers are never reused, so the
actor then numbers its next transitions from there.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import torch

from robot_rl.transport import transport_pb2 as pb
from robot_rl.transport import transport_pb2_grpc as pb_grpc
from robot_rl.transport.codec import PROTOCOL_VERSION, PayloadError, encode_transitions
from robot_rl.transport.weights import WeightsSpec, decode_weights

log = logging.getLogger(__name__)

_FATAL = {
    grpc.StatusCode.UNAUTHENTICATED: "pass token= matching the learner's token",
    grpc.StatusCode.FAILED_PRECONDITION: "",  # the learner says what differs
    grpc.StatusCode.INVALID_ARGUMENT: "fix the actor's configuration",
    grpc.StatusCode.UNIMPLEMENTED: "is this address a robot_rl learner?",
}
"""Errors that retrying cannot fix: the client stops and reports them (hint per code)."""

_RUN_STATES = {pb.RunControl.PAUSE: "paused", pb.RunControl.RESUME: "running"}


class LearnerError(RuntimeError):
    """The learner refused this actor for good (wrong token, other layout, ...).

    Attributes:
        code: The gRPC status code.
    """

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class LearnerClientConfig:
    """How an actor reaches its learner."""

    target: str
    """``host:port`` of the learner."""
    actor_id: str
    """Stable id of this actor (e.g. ``"franka-left"``); sequence numbers are per actor id."""
    token: str | None = None
    """The learner's token (sent as ``authorization: Bearer <token>``), or None."""
    root_cert_path: Path | None = None
    """PEM CA (or self-signed learner) certificate: connect with TLS. None: plaintext."""
    tls_server_name: str | None = None
    """Name to check the learner's certificate against, if not the target's host."""
    max_pending_batches: int = 64
    """Most batches pushed and not yet acknowledged; ``push`` returns False beyond."""
    compress: bool = True
    """zlib-compress payloads (codec ``safetensors+zlib``)."""
    hello_timeout_s: float = 5.0
    """Deadline of each Hello, seconds."""
    reconnect_min_s: float = 0.2
    """First wait before reconnecting, seconds (doubles per failure up to reconnect_max_s)."""
    reconnect_max_s: float = 5.0
    """Longest wait between reconnection attempts, seconds."""
    keepalive_s: float = 10.0
    """Ping interval that detects a dead connection, seconds (the learner allows >= 5)."""
    max_receive_bytes: int = 256 * 1024 * 1024
    """Largest weights message accepted, bytes."""

    def __post_init__(self) -> None:
        if not self.actor_id:
            raise ValueError("actor_id is empty: give each actor a stable id")
        if ":" not in self.target:
            raise ValueError(f"target={self.target!r}: use host:port, e.g. 127.0.0.1:50061")
        if self.token is not None and not self.token:
            raise ValueError("token='': give a non-empty token or None")
        if self.max_pending_batches < 1:
            raise ValueError(f"max_pending_batches={self.max_pending_batches}: use >= 1")
        if min(self.hello_timeout_s, self.reconnect_min_s, self.keepalive_s) <= 0:
            raise ValueError("hello_timeout_s, reconnect_min_s and keepalive_s must be > 0")
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ValueError("reconnect_max_s must be >= reconnect_min_s")


class _Batch:
    """Rows [first_seq, first_seq + n) as pushed; ``msg`` is their encoding, made once."""

    def __init__(self, first_seq: int, steps: Mapping[str, np.ndarray], n: int) -> None:
        self.first_seq, self.steps, self.n = first_seq, steps, n
        self.msg: pb.TransitionBatch | None = None
        self.live = True  # False: dropped after a rejection, its Ack is ignored

    @property
    def end(self) -> int:
        return self.first_seq + self.n

    def split(self, max_bytes: int) -> list[_Batch]:
        """Parts whose uncompressed payload fits ``max_bytes`` (estimate; [] if one row can't)."""
        overhead = 64 + 256 * len(self.steps)  # safetensors header, generous
        row_bytes = sum(v[:1].nbytes for v in self.steps.values()) * 1.001 + 1  # zlib expansion
        rows = int((max_bytes - overhead) // row_bytes)
        if rows < 1:
            return []
        return [
            _Batch(s, {k: v[s - self.first_seq : s - self.first_seq + rows] for k, v in
                       self.steps.items()}, min(rows, self.end - s))
            for s in range(self.first_seq, self.end, rows)
        ]  # fmt: skip


class _Stream:
    def __init__(self) -> None:
        self.done = False


class LearnerClient:
    """Connection of one actor to the learner; background threads, started on construction.

    Args:
        cfg: Address, identity, security, limits.
        layout_json: This actor's layout fingerprint (``codec.layout_fingerprint``).
        weights_spec: Name -> (shape, dtype) of the actor policy's trainable state
            (``weights.weights_spec(trainable_state(policy))``): weights that do not fit are
            refused. None: accept any names.
        on_weights: Called as ``on_weights(version, state)`` on the subscription thread for
            each new set (keep it short; :meth:`latest_weights` polls instead).
        on_control: Called as ``on_control(command, reason)`` with ``"PAUSE"``, ``"RESUME"`` or
            ``"STOP"``.
    """

    def __init__(
        self,
        cfg: LearnerClientConfig,
        layout_json: str,
        *,
        weights_spec: WeightsSpec | None = None,
        on_weights: Callable[[int, dict[str, torch.Tensor]], None] | None = None,
        on_control: Callable[[str, str], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self._layout_json = layout_json
        self._spec = weights_spec
        self._on_weights, self._on_control = on_weights, on_control
        self._metadata = () if cfg.token is None else (("authorization", f"Bearer {cfg.token}"),)
        self._channel = _channel(cfg)
        self._stub = pb_grpc.LearnerStub(self._channel)
        self._cond = threading.Condition()
        self._closing = False
        self._wake = threading.Event()  # interrupts backoff waits on close
        self._calls: set[grpc.Call] = set()
        # push state (under _cond)
        self._next_seq: int | None = None
        self._acked = -1
        self._queue: deque[_Batch] = deque()
        self._inflight: deque[_Batch] = deque()
        self._connected = False
        self._max_bytes = 0
        self.run_id: str | None = None
        """The learner's run id from the last Hello (None before the first)."""
        self.policy_json: str | None = None
        """The learner's policy settings (JSON) from the last Hello (None before the first)."""
        self._fatal: LearnerError | None = None
        self._last_error: str | None = None
        self._counts = dict.fromkeys(("batches_acked", "rejected", "duplicates", "resumes"), 0)
        # subscription state (under _cond)
        self._weights: tuple[int, dict[str, torch.Tensor]] | None = None
        self._run_state = "running"
        self._stats: pb.Stats | None = None
        self._threads = [
            threading.Thread(target=self._push_loop, name="learner-push", daemon=True),
            threading.Thread(target=self._subscribe_loop, name="learner-sub", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # -- caller side --------------------------------------------------------------------------

    def push(self, first_seq: int, steps: Mapping[str, np.ndarray]) -> bool:
        """Queue transitions [first_seq, first_seq + N) for the learner; never waits.

        The arrays are kept by reference until acknowledged: do not modify them.

        Returns:
            True: queued (:attr:`next_seq` advanced by N). False: not queued, keep them in the
            log and push again later: the learner has not been reached yet, max_pending_batches
            are unacknowledged, or ``first_seq`` is not :attr:`next_seq` (a reconnect or a
            rejection moved it; push from there), or the client is closed or refused.

        Raises:
            ValueError: No arrays, or arrays with differing or zero row counts.
        """
        steps = {k: np.asarray(v) for k, v in steps.items()}
        lengths = {v.shape[0] if v.ndim else 0 for v in steps.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"steps: give arrays with the same N >= 1 rows, got {sorted(lengths)}")
        with self._cond:
            if self._closing or self._fatal is not None or first_seq != self._next_seq:
                return False
            pending = len(self._queue) + sum(b.live for b in self._inflight)
            if pending >= self.cfg.max_pending_batches:
                return False
            n = lengths.pop()
            self._queue.append(_Batch(first_seq, steps, n))
            self._next_seq = first_seq + n
            self._cond.notify_all()
        return True

    @property
    def next_seq(self) -> int | None:
        """Where the next :meth:`push` must start (None until the learner answered Hello)."""
        with self._cond:
            return self._next_seq

    @property
    def acked_through(self) -> int:
        """Last sequence number the learner holds durably, -1 for none (or not known yet)."""
        with self._cond:
            return self._acked

    @property
    def connected(self) -> bool:
        """Whether the transition stream is up (Hello answered, stream not broken)."""
        with self._cond:
            return self._connected

    @property
    def fatal_error(self) -> LearnerError | None:
        """Why the learner refused this actor for good (the client stopped), or None."""
        with self._cond:
            return self._fatal

    @property
    def last_error(self) -> str | None:
        """The most recent problem (connection lost, batch rejected, bad weights), or None."""
        with self._cond:
            return self._last_error

    def counts(self) -> dict[str, int]:
        """batches_acked, rejected (batches refused by the learner or unsendable), duplicates
        (rows the learner already held), resumes (successful Hellos)."""
        with self._cond:
            return dict(self._counts)

    def latest_weights(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """(version, trainable state) of the newest weights received, or None."""
        with self._cond:
            return self._weights

    @property
    def run_state(self) -> str:
        """``"running"``, ``"paused"`` or ``"stopped"``, per the learner's last run control."""
        with self._cond:
            return self._run_state

    def learner_stats(self) -> pb.Stats | None:
        """The newest stats snapshot from the learner, or None."""
        with self._cond:
            return self._stats

    def wait_connected(self, timeout_s: float | None = None) -> bool:
        """Block until the stream is up; False on timeout, LearnerError if refused for good."""
        return self._wait(lambda: self._connected, timeout_s)

    def wait_acked(self, seq: int, timeout_s: float | None = None) -> bool:
        """Block until the learner holds every transition through ``seq`` (as wait_connected)."""
        return self._wait(lambda: self._acked >= seq, timeout_s)

    def wait_weights(self, version: int, timeout_s: float | None = None) -> bool:
        """Block until weights of at least ``version`` arrived (as wait_connected)."""
        return self._wait(
            lambda: self._weights is not None and self._weights[0] >= version, timeout_s
        )

    def _wait(self, ready: Callable[[], bool], timeout_s: float | None) -> bool:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: ready() or self._fatal is not None or self._closing, timeout_s
            )
            if self._fatal is not None and not ready():
                raise self._fatal
            return ok and ready()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop both threads (unacknowledged batches are dropped: they are in the log)."""
        with self._cond:
            self._closing = True
            calls = list(self._calls)
            self._cond.notify_all()
        self._wake.set()
        for call in calls:
            call.cancel()
        for t in self._threads:
            t.join(timeout_s)
        self._channel.close()

    def __enter__(self) -> LearnerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background ---------------------------------------------------------------------------

    def _stopped(self) -> bool:
        with self._cond:
            return self._closing or self._fatal is not None

    def _track(self, call: Any) -> bool:
        """Register a call for cancellation on close; False (and cancel it) if closing."""
        with self._cond:
            if self._closing:
                call.cancel()
                return False
            self._calls.add(call)
            return True

    def _error(self, what: str, e: grpc.RpcError) -> None:
        """Record a failed call; a fatal one stops the client."""
        code, details = e.code(), e.details() or ""  # type: ignore[attr-defined]
        message = f"learner {self.cfg.target}: {what}: {code.name}: {details}"
        with self._cond:
            if self._closing:
                return
            if code in _FATAL and self._fatal is None:
                self._fatal = LearnerError(
                    f"{message} ({_FATAL[code]})" if _FATAL[code] else message, code
                )
                log.error("%s", self._fatal)
            self._last_error = message
            self._cond.notify_all()
        if code not in _FATAL:
            log.info("%s", message)

    def _backoff(self, wait_s: float) -> float:
        self._wake.wait(wait_s)
        return min(2 * wait_s, self.cfg.reconnect_max_s)

    def _push_loop(self) -> None:
        wait_s = self.cfg.reconnect_min_s
        while not self._stopped():
            hello = pb.HelloRequest(
                actor_id=self.cfg.actor_id,
                layout_json=self._layout_json,
                protocol_version=PROTOCOL_VERSION,
            )
            call = self._stub.Hello.future(
                hello, timeout=self.cfg.hello_timeout_s, metadata=self._metadata
            )
            if not self._track(call):
                return
            try:
                reply = call.result()
            except grpc.FutureCancelledError:
                return  # closing
            except grpc.RpcError as e:
                self._error("Hello", e)
                wait_s = self._backoff(wait_s)
                continue
            finally:
                with self._cond:
                    self._calls.discard(call)
            self._resume(reply)
            if self._stream():
                wait_s = self.cfg.reconnect_min_s
            else:
                wait_s = self._backoff(wait_s)

    def _resume(self, reply: pb.HelloReply) -> None:
        """Line the queue up with what the learner holds (see the module docstring)."""
        held = reply.acked_through_seq
        with self._cond:
            pending = [b for b in [*self._inflight, *self._queue] if b.live and b.end - 1 > held]
            self._inflight.clear()
            self._queue.clear()
            if pending and pending[0].first_seq <= held + 1:
                self._queue.extend(pending)  # still contiguous: resend (overlap is deduplicated)
            else:
                self._next_seq = held + 1
            self._acked = held
            self._max_bytes = reply.max_message_bytes
            if self.run_id is not None and reply.run_id != self.run_id:
                log.warning("learner run id changed: %r -> %r", self.run_id, reply.run_id)
            self.run_id = reply.run_id
            self.policy_json = reply.policy_json
            self._counts["resumes"] += 1
            self._connected = True
            self._cond.notify_all()

    def _stream(self) -> bool:
        """One PushTransitions stream until it breaks; True if any Ack arrived."""
        stream = _Stream()
        call = self._stub.PushTransitions(self._requests(stream), metadata=self._metadata)
        if not self._track(call):
            return False
        got_ack = False
        try:
            for ack in call:
                got_ack = True
                if not self._on_ack(ack):
                    call.cancel()
                    break
        except grpc.RpcError as e:
            self._error("transition stream", e)
        finally:
            with self._cond:
                stream.done = True
                self._connected = False
                self._calls.discard(call)
                self._cond.notify_all()
        return got_ack

    def _requests(self, stream: _Stream) -> Iterator[pb.TransitionBatch]:
        """Batches to send, in order; runs on gRPC's sender thread."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: stream.done or self._closing or bool(self._queue))
                if stream.done or self._closing:
                    return
                batch, max_bytes = self._queue[0], self._max_bytes
            parts = [batch] if batch.msg is not None else self._encode(batch, max_bytes)
            with self._cond:
                if stream.done or self._closing:
                    return
                if not self._queue or self._queue[0] is not batch:
                    continue  # lined up anew meanwhile
                self._queue.popleft()
                if not parts:  # unsendable: earlier batches in flight stay valid
                    self._reject(batch, batch.first_seq - 1, self._last_error or "", later=False)
                    continue
                self._queue.extendleft(reversed(parts[1:]))
                self._inflight.append(parts[0])
            yield parts[0].msg  # type: ignore[misc]

    def _encode(self, batch: _Batch, max_bytes: int) -> list[_Batch]:
        """Encode (and split to fit the learner's limit); [] if a single row cannot fit."""
        parts = batch.split(max_bytes)
        error = (
            f"transition seq {batch.first_seq} does not fit the learner's "
            f"max_message_bytes={max_bytes}; raise it on the learner"
        )
        for p in parts:
            try:
                payload, codec, sha = encode_transitions(p.steps, self.cfg.compress)
            except ValueError as e:  # arrays the codec cannot carry (e.g. 0-d)
                parts, error = [], f"batch [{p.first_seq}, {p.end}) cannot be encoded: {e}"
                break
            p.msg = pb.TransitionBatch(
                actor_id=self.cfg.actor_id, first_seq=p.first_seq, count=p.n,
                payload=payload, codec=codec, sha256=sha,
            )  # fmt: skip
        if not parts:
            with self._cond:
                self._last_error = error
        return parts

    def _on_ack(self, ack: pb.Ack) -> bool:
        """Apply one Ack; False on a protocol violation (the stream is then restarted)."""
        with self._cond:
            if not self._inflight or ack.batch_first_seq != self._inflight[0].first_seq:
                self._last_error = f"unexpected Ack for seq {ack.batch_first_seq}; reconnecting"
                log.warning("%s", self._last_error)
                return False
            batch = self._inflight.popleft()
            if batch.live:
                if ack.error:
                    self._reject(batch, ack.acked_through_seq, ack.error)
                else:
                    self._counts["batches_acked"] += 1
                    self._counts["duplicates"] += ack.duplicates_dropped
                self._acked = max(self._acked, ack.acked_through_seq)
            self._cond.notify_all()
        return True

    def _reject(self, batch: _Batch, held: int, error: str, *, later: bool = True) -> None:
        """Drop ``batch`` and every batch after it; the actor resends from ``held + 1``.

        ``later``: the batches in flight come after ``batch`` (it was rejected by the learner),
        so the learner refuses them too (a gap): their Acks are ignored.
        """
        log.warning("not stored, resend from %d: %s", held + 1, error)
        self._last_error = error
        self._counts["rejected"] += 1
        for b in self._inflight if later else ():
            b.live = False
        self._queue.clear()
        self._next_seq = held + 1

    def _subscribe_loop(self) -> None:
        wait_s = self.cfg.reconnect_min_s
        while not self._stopped():
            with self._cond:
                have = 0 if self._weights is None else self._weights[0]
            request = pb.SubscribeRequest(actor_id=self.cfg.actor_id, have_weights_version=have)
            call = self._stub.Subscribe(request, metadata=self._metadata)
            if not self._track(call):
                return
            try:
                for event in call:
                    wait_s = self.cfg.reconnect_min_s
                    self._on_event(event)
            except grpc.RpcError as e:
                self._error("subscription", e)
            finally:
                with self._cond:
                    self._calls.discard(call)
            wait_s = self._backoff(wait_s)

    def _on_event(self, event: pb.LearnerEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "weights":
            w = event.weights
            try:
                state = decode_weights(w.payload, w.sha256, expected=self._spec)
            except PayloadError as e:
                with self._cond:
                    self._last_error = f"weights version {w.version} refused: {e}"
                log.warning("weights version %d refused: %s", w.version, e)
                return
            with self._cond:
                if self._weights is not None and w.version <= self._weights[0]:
                    return
                self._weights = (w.version, state)
                self._cond.notify_all()
            _call(self._on_weights, w.version, state)
        elif kind == "control":
            name = pb.RunControl.Command.Name(event.control.command)
            with self._cond:
                self._run_state = _RUN_STATES.get(event.control.command, "stopped")
                self._cond.notify_all()
            _call(self._on_control, name, event.control.reason)
        elif kind == "stats":
            with self._cond:
                self._stats = event.stats


def _call(callback: Callable[..., None] | None, *args: Any) -> None:
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:  # the caller's bug must not kill the subscription
        log.exception("callback %r failed", callback)


def _channel(cfg: LearnerClientConfig) -> grpc.Channel:
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", cfg.max_receive_bytes),
        ("grpc.keepalive_time_ms", int(cfg.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(cfg.keepalive_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", int(cfg.reconnect_min_s * 1000)),
        ("grpc.min_reconnect_backoff_ms", int(cfg.reconnect_min_s * 1000)),
        ("grpc.max_reconnect_backoff_ms", int(cfg.reconnect_max_s * 1000)),
    ]
    if cfg.root_cert_path is None:
        return grpc.insecure_channel(cfg.target, options=options)
    if cfg.tls_server_name is not None:
        options.append(("grpc.ssl_target_name_override", cfg.tls_server_name))
    creds = grpc.ssl_channel_credentials(Path(cfg.root_cert_path).read_bytes())
    return grpc.secure_channel(cfg.target, creds, options=options)
