"""Client of the reward server, used by the env's reward wrapper on the robot PC.

:class:`RewardClient` is a RewardModel whose ``predict`` asks the server and waits at most its
deadline (``RewardTimeout`` after). :class:`AsyncRewardLabeller` never blocks the control loop:
``submit`` hands a step's query to a background thread and returns; ``poll`` collects rewards
that arrived (an off-policy learner can label a transition late); ``wait`` blocks for one step's
answer, for decisions such as termination that need a confirmed reward.

A server at its ``max_concurrent_rpcs`` refuses a call at once (``RESOURCE_EXHAUSTED``, "Concurrent
RPC limit exceeded!"); the client then sends it again, waiting :data:`BUSY_RETRY_MIN_S` doubling
up to :data:`BUSY_RETRY_MAX_S`, until its deadline. Every other refusal is final.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rewards.serve import reward_pb2, reward_pb2_grpc
from rewards.serve.codec import DEFAULT_JPEG_QUALITY, encode_images, encode_state
from robot_rl.core.protocols import RewardQuery, RewardResult

BUSY = "Concurrent RPC limit exceeded"
"""Start of gRPC's message when a server runs its ``maximum_concurrent_rpcs`` calls already."""
BUSY_RETRY_MIN_S = 0.02
"""First wait before resending a call the server refused as busy, seconds."""
BUSY_RETRY_MAX_S = 0.5
"""Longest wait between resends of a refused-as-busy call, seconds."""

_HINTS = {
    grpc.StatusCode.UNAUTHENTICATED: "pass token= matching the server's token",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "a limit of the server (max_message_bytes, "
    "max_request_pixels, or max_concurrent_rpcs calls at once: the message says which); send "
    "fewer or smaller frames per call, or raise the server's limit",
    grpc.StatusCode.UNAVAILABLE: "is the reward server running and reachable at this address?",
}


class RewardServiceError(RuntimeError):
    """The reward server refused or failed a call.

    Attributes:
        code: The gRPC status code.
        details: The server's message.
    """

    def __init__(self, target: str, code: grpc.StatusCode, details: str) -> None:
        hint = _HINTS.get(code)
        super().__init__(
            f"reward server {target}: {code.name}: {details}" + (f" ({hint})" if hint else "")
        )
        self.code = code
        self.details = details


class RewardTimeout(RewardServiceError, TimeoutError):
    """No answer within the deadline; the step may proceed and take the reward later."""


@dataclass(frozen=True)
class ServerInfo:
    """What the server serves (its Info reply)."""

    model_id: str
    model_version: str
    cameras: tuple[str, ...]
    max_batch: int
    max_message_bytes: int


class RewardClient:
    """A RewardModel backed by a reward server.

    Args:
        target: ``host:port`` of the server.
        token: The server's token (sent as ``authorization: Bearer <token>``), or None.
        timeout_s: Deadline of each call, seconds.
        root_cert_path: PEM CA (or self-signed server) certificate: connect with TLS. None:
            plaintext.
        jpeg_quality: JPEG quality of the frames sent, 1..100.
    """

    def __init__(
        self,
        target: str,
        token: str | None = None,
        timeout_s: float = 1.0,
        *,
        root_cert_path: Path | None = None,
        jpeg_quality: int = DEFAULT_JPEG_QUALITY,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s={timeout_s}: use a positive deadline in seconds")
        if not 1 <= jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality={jpeg_quality}: use 1..100")
        self.target = target
        self.timeout_s = timeout_s
        self._jpeg_quality = jpeg_quality
        if root_cert_path is not None:
            creds = grpc.ssl_channel_credentials(Path(root_cert_path).read_bytes())
            self._channel = grpc.secure_channel(target, creds)
        else:
            self._channel = grpc.insecure_channel(target)
        self._stub = reward_pb2_grpc.RewardServiceStub(self._channel)
        self._metadata = () if token is None else (("authorization", f"Bearer {token}"),)
        self._info: ServerInfo | None = None
        self._lock = threading.Lock()
        self._busy_refusals = 0

    @property
    def busy_refusals(self) -> int:
        """Calls the server refused as busy (max_concurrent_rpcs) and this client sent again."""
        with self._lock:
            return self._busy_refusals

    def _error(self, e: grpc.RpcError) -> RewardServiceError:
        code, details = e.code(), e.details() or ""  # type: ignore[attr-defined]
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return RewardTimeout(self.target, code, details or "no answer within the deadline")
        return RewardServiceError(self.target, code, details)

    def info(self, timeout_s: float | None = None) -> ServerInfo:
        """Ask the server what it serves (cached after the first answer)."""
        if self._info is None:
            try:
                reply = self._stub.Info(
                    reward_pb2.InfoRequest(),
                    timeout=timeout_s or self.timeout_s,
                    metadata=self._metadata,
                )
            except grpc.RpcError as e:
                raise self._error(e) from None
            self._info = ServerInfo(
                model_id=reply.model_id,
                model_version=reply.model_version,
                cameras=tuple(reply.cameras),
                max_batch=reply.max_batch,
                max_message_bytes=reply.max_message_bytes,
            )
        return self._info

    @property
    def model_id(self) -> str:
        return self.info().model_id

    @property
    def model_version(self) -> str:
        return self.info().model_version

    def healthy(self, timeout_s: float | None = None) -> bool:
        """Whether the server's standard health check answers SERVING in time."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s or self.timeout_s)
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    def encode(self, query: RewardQuery) -> reward_pb2.PredictRequest:
        """Build the wire request for a query (JPEG frames, safetensors state)."""
        jpegs = encode_images(query.images, self._jpeg_quality)
        request = reward_pb2.PredictRequest(
            request_id=uuid.uuid4().hex,
            images={cam: reward_pb2.ImageBatch(jpeg=frames) for cam, frames in jpegs.items()},
        )
        if query.state is not None:
            request.state = encode_state(query.state)
        if query.task_text is not None:
            request.task_text = query.task_text
        return request

    def _result(self, reply: reward_pb2.PredictReply, batch: int) -> RewardResult:
        success_prob = np.asarray(reply.success_prob, dtype=np.float32)
        reward = np.asarray(reply.reward, dtype=np.float32)
        if success_prob.shape != (batch,) or reward.shape != (batch,):
            raise RewardServiceError(
                self.target,
                grpc.StatusCode.INTERNAL,
                f"reply has {success_prob.size} probabilities and {reward.size} rewards for a "
                f"batch of {batch}",
            )
        return RewardResult(success_prob, reward, reply.model_id, reply.model_version)

    def predict(self, query: RewardQuery) -> RewardResult:
        """Ask the server; block at most ``timeout_s``.

        Raises:
            RewardTimeout: No answer within ``timeout_s``.
            RewardServiceError: The server refused (bad token, bad payload, too large) or
                failed the call; the message says which.
        """
        return self.predict_future(query, self.timeout_s).result()

    def predict_future(
        self, query: RewardQuery, timeout_s: float | None = None
    ) -> Future[RewardResult]:
        """Encode on this thread, send without waiting; the future fails with RewardTimeout
        after ``timeout_s`` (default: the client's) or RewardServiceError. A call the server
        refuses as busy is sent again until the deadline (see the module docstring)."""
        request = self.encode(query)
        batch = len(next(iter(request.images.values())).jpeg)
        out: Future[RewardResult] = Future()
        out.set_running_or_notify_cancel()
        deadline_s = time.monotonic() + (timeout_s or self.timeout_s)
        self._send(request, batch, deadline_s, out, BUSY_RETRY_MIN_S)
        return out

    def _send(
        self,
        request: reward_pb2.PredictRequest,
        batch: int,
        deadline_s: float,
        out: Future[RewardResult],
        wait_s: float,
    ) -> None:
        """One attempt of a Predict call; resolves ``out`` or schedules the next attempt."""
        call = self._stub.Predict.future(
            request, timeout=max(deadline_s - time.monotonic(), 1e-3), metadata=self._metadata
        )

        def again() -> None:
            try:
                self._send(request, batch, deadline_s, out, min(2 * wait_s, BUSY_RETRY_MAX_S))
            except Exception as e:  # e.g. the channel was closed meanwhile
                out.set_exception(e)

        def done(call: grpc.Future) -> None:
            try:
                out.set_result(self._result(call.result(), batch))
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""  # type: ignore[attr-defined]
                busy = code == grpc.StatusCode.RESOURCE_EXHAUSTED and details.startswith(BUSY)
                if busy and time.monotonic() + wait_s < deadline_s:
                    with self._lock:
                        self._busy_refusals += 1
                    timer = threading.Timer(wait_s, again)
                    timer.daemon = True
                    timer.start()
                else:
                    out.set_exception(self._error(e))
            except Exception as e:  # a malformed reply must still resolve the future
                out.set_exception(e)

        call.add_done_callback(done)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRewardLabeller:
    """Labels steps with rewards off the control thread; late answers are kept, not lost.

    Args:
        client: The reward client.
        late_timeout_s: How long a submitted step's reward may take to arrive before it is
            given up (its failure then shows in :meth:`failures`), seconds.
        max_in_flight: Most unanswered steps; ``submit`` refuses more (the server is down or
            far too slow).
    """

    def __init__(
        self, client: RewardClient, late_timeout_s: float = 30.0, max_in_flight: int = 1024
    ) -> None:
        if late_timeout_s <= 0:
            raise ValueError(f"late_timeout_s={late_timeout_s}: use a positive time in seconds")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight={max_in_flight}: use >= 1")
        self._client = client
        self._late_timeout_s = late_timeout_s
        self._max_in_flight = max_in_flight
        self._cond = threading.Condition()
        self._in_flight: set[Hashable] = set()
        self._arrived: dict[Hashable, RewardResult] = {}
        self._failed: dict[Hashable, Exception] = {}
        # One sender thread: JPEG encoding happens here, the RPCs themselves overlap.
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-labeller")

    @property
    def in_flight(self) -> int:
        """Steps submitted and not answered yet."""
        with self._cond:
            return len(self._in_flight)

    def submit(self, step_id: Hashable, query: RewardQuery) -> None:
        """Queue a step's query and return at once (encoding and sending run elsewhere).

        Raises:
            ValueError: ``step_id`` is already in flight or holds an uncollected answer.
            RuntimeError: ``max_in_flight`` steps are unanswered.
        """
        with self._cond:
            if step_id in self._in_flight or step_id in self._arrived or step_id in self._failed:
                raise ValueError(f"step_id {step_id!r} was already submitted and not collected")
            if len(self._in_flight) >= self._max_in_flight:
                raise RuntimeError(
                    f"{len(self._in_flight)} reward requests unanswered (max_in_flight="
                    f"{self._max_in_flight}); is the reward server up? ({self._client.target})"
                )
            self._in_flight.add(step_id)
        self._sender.submit(self._send, step_id, query)

    def _send(self, step_id: Hashable, query: RewardQuery) -> None:
        try:
            future = self._client.predict_future(query, self._late_timeout_s)
        except Exception as e:  # e.g. a query that cannot be encoded
            self._finish(step_id, None, e)
            return
        future.add_done_callback(lambda f: self._finish(step_id, *_outcome(f)))

    def _finish(
        self, step_id: Hashable, result: RewardResult | None, error: Exception | None
    ) -> None:
        with self._cond:
            self._in_flight.discard(step_id)
            if error is not None:
                self._failed[step_id] = error
            else:
                assert result is not None
                self._arrived[step_id] = result
            self._cond.notify_all()

    def poll(self) -> list[tuple[Hashable, RewardResult]]:
        """Rewards that arrived since the last poll (each step is returned once)."""
        with self._cond:
            out, self._arrived = list(self._arrived.items()), {}
        return out

    def failures(self) -> list[tuple[Hashable, Exception]]:
        """Steps whose reward failed or arrived too late (each returned once)."""
        with self._cond:
            out, self._failed = list(self._failed.items()), {}
        return out

    def ready(self, step_id: Hashable, timeout_s: float | None = None) -> bool:
        """Wait up to ``timeout_s`` until ``step_id`` is answered (or failed); collect it with
        :meth:`poll` / :meth:`failures`. False if it is still in flight (or unknown)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: (
                    step_id in self._arrived
                    or step_id in self._failed
                    or step_id not in self._in_flight
                ),
                timeout_s,
            ) and (step_id in self._arrived or step_id in self._failed)

    def wait(self, step_id: Hashable, timeout_s: float | None = None) -> RewardResult:
        """Block until ``step_id``'s reward arrives and return it (it is not polled again).

        Raises:
            KeyError: ``step_id`` was never submitted or was already collected.
            RewardTimeout: No answer within ``timeout_s``; the step stays in flight.
            Exception: The step's failure (e.g. RewardServiceError), if it failed.
        """
        with self._cond:
            known = step_id in self._in_flight or step_id in self._arrived
            if not known and step_id not in self._failed:
                raise KeyError(
                    f"step_id {step_id!r} is not in flight (never submitted, or "
                    "already collected by poll/wait)"
                )
            ready = self._cond.wait_for(
                lambda: step_id in self._arrived or step_id in self._failed, timeout_s
            )
            if not ready:
                raise RewardTimeout(
                    self._client.target,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no reward for step {step_id!r} within {timeout_s} s; still in flight",
                )
            if step_id in self._failed:
                raise self._failed.pop(step_id)
            return self._arrived.pop(step_id)

    def close(self) -> None:
        """Stop sending; requests already sent may still arrive (and are dropped)."""
        self._sender.shutdown(wait=True, cancel_futures=True)


def _outcome(future: Future[RewardResult]) -> tuple[RewardResult | None, Exception | None]:
    error = future.exception()
    if error is not None:
        return None, error if isinstance(error, Exception) else RuntimeError(str(error))
    return future.result(), None
