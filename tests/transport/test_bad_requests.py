"""Bad, hostile and excessive requests to the learner, with a good actor served alongside.

The learner is the real one (LearnerServer over a LogSink of zarr logs, accepted rows added to a
ReplayBuffer), on 127.0.0.1 with a token. A good actor (LearnerClient) pushes its transitions
from a thread through every test; a bad client sends what a buggy or malicious actor would,
built with the generated stubs (or as raw bytes). Each test checks that the bad client gets a
clear status or error Ack, that nothing of it is stored (at the end the logs and the replay hold
exactly the good actor's rows), and that the good actor's rows keep being acknowledged during
and after the bad traffic.
"""

from __future__ import annotations

import pickle
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import torch
from polling import poll_until
from safetensors.numpy import save as st_save

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.transport import transport_pb2 as pb
from robot_rl.transport import transport_pb2_grpc as pb_grpc
from robot_rl.transport.client import LearnerClient, LearnerClientConfig
from robot_rl.transport.codec import (
    PROTOCOL_VERSION,
    encode_transitions,
    layout_fingerprint,
    sha256_hex,
    transition_fields,
)
from robot_rl.transport.log_sink import LogSink, add_rows
from robot_rl.transport.outbox import concat_rows
from robot_rl.transport.server import (
    ENVELOPE_BYTES,
    LearnerServer,
    LearnerServerConfig,
)

A = 2
LAYOUT = ObsLayout(state_dim=4, images={"front": ArraySpec((8, 8, 3), "uint8")})
FP = layout_fingerprint(LAYOUT, A)
TOKEN = "s3cret"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
EP_LEN = 5
WAIT_S = 30.0  # upper bound of condition waits; never reached when things work
FAST = {"reconnect_min_s": 0.05, "reconnect_max_s": 0.2, "hello_timeout_s": 5.0}
MAX_BYTES = 64 * 1024


def obs(ep: int, t: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([ep, t])
    return {
        "state": rng.standard_normal(4).astype(np.float32),
        "images/front": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
    }


def rows(first: int, n: int) -> dict[str, np.ndarray]:
    """Transitions first..first+n-1 of a consistent stream (seq in ``policy_version``)."""
    fields = transition_fields(LAYOUT, A)
    out: dict[str, list] = {k: [] for k in fields}
    for seq in range(first, first + n):
        ep, t = divmod(seq, EP_LEN)
        for name, value in obs(ep, t).items():
            out[f"obs/{name}"].append(value)
        for name, value in obs(ep, t + 1).items():
            out[f"next_obs/{name}"].append(value)
        act = np.random.default_rng(seq).uniform(-1, 1, A)
        values = {
            "action": act, "policy_action": act, "reward": -1.0, "terminated": t == EP_LEN - 1,
            "truncated": False, "intervened": False, "policy_version": seq,
            "stamp_s": seq * 0.1, "episode": ep, "step": t,
        }  # fmt: skip
        for k, v in values.items():
            out[k].append(v)
    return {k: np.asarray(v, dtype=fields[k][1]) for k, v in out.items()}


def batch(actor: str, first: int, steps: dict[str, np.ndarray], **kw: Any) -> pb.TransitionBatch:
    payload, codec, sha = encode_transitions(steps, compress=False)
    n = len(next(iter(steps.values())))
    msg = dict(actor_id=actor, first_seq=first, count=n, payload=payload, codec=codec, sha256=sha)
    return pb.TransitionBatch(**{**msg, **kw})


def until(cond: Callable[[], bool]) -> bool:
    return poll_until(cond, WAIT_S)


class GoodActor:
    """A well-behaved actor: a LearnerClient pushing its next transitions from a thread."""

    def __init__(self, server: LearnerServer, actor_id: str = "good") -> None:
        cfg = LearnerClientConfig(
            target=server.address, actor_id=actor_id, token=TOKEN, **FAST
        )  # fmt: skip
        self.client = LearnerClient(cfg, FP)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            s = self.client.next_seq
            if s is not None:
                self.client.push(s, rows(s, 3))
            self._stop.wait(0.02)  # a control loop's pace, not a wait for a result

    def progresses(self, rows_more: int = 6) -> bool:
        """Whether the learner acknowledges ``rows_more`` more of its rows (waits for it)."""
        start = self.client.acked_through
        return until(lambda: self.client.acked_through >= start + rows_more)

    def close(self) -> int:
        """Stop pushing, wait until the learner acknowledged everything pushed (so no batch of
        this actor is being stored any more), close; returns how many rows it holds."""
        self._stop.set()
        self._thread.join(WAIT_S)
        c = self.client
        assert until(lambda: c.next_seq is not None and c.acked_through == c.next_seq - 1)
        acked = c.acked_through
        c.close()
        return acked + 1


class Learner:
    """The learner's storage (per-actor zarr logs, replay) behind a real server."""

    def __init__(self, tmp: Path, **cfg: Any) -> None:
        self.replay = ReplayBuffer(100_000, LAYOUT, A)
        self.sink = LogSink(
            tmp / "actors", LAYOUT, A, on_rows=lambda _a, s: add_rows(self.replay, s)
        )
        server_cfg = LearnerServerConfig(token=TOKEN, max_message_bytes=MAX_BYTES, **cfg)
        self.server = LearnerServer(self.sink, LAYOUT, A, server_cfg)
        self.channels: list[grpc.Channel] = []

    def stub(self) -> pb_grpc.LearnerStub:
        """A raw client: the generated stub on its own channel."""
        channel = grpc.insecure_channel(self.server.address)
        self.channels.append(channel)
        return pb_grpc.LearnerStub(channel)

    def raw(self, method: str, kind: str = "unary_unary") -> Callable:
        """A call that sends bytes as they are (no protobuf serialisation)."""
        channel = grpc.insecure_channel(self.server.address)
        self.channels.append(channel)
        return getattr(channel, kind)(f"/robot_rl.transport.v1.Learner/{method}")

    def assert_holds_exactly(self, acked: dict[str, int]) -> None:
        """The logs and the replay hold exactly the good actors' acknowledged rows (``acked``:
        actor id -> rows, from seq 0 on) and nothing else."""
        assert self.sink.actors() == sorted(acked)
        for actor, n in acked.items():
            assert self.sink.acked_through(actor) == n - 1
            got, want = concat_rows(list(self.sink.iter_transitions(actor))), rows(0, n)
            assert sorted(got) == sorted(want)
            for k in want:
                assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
        assert len(self.replay) == sum(acked.values())

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        self.server.stop(0)
        self.sink.close()


@pytest.fixture
def learner(tmp_path: Path) -> Iterator[Learner]:
    lrn = Learner(tmp_path)
    yield lrn
    lrn.close()


def rpc_error(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


# -- wrong shapes, dtypes, values ------------------------------------------------------------


def _changed(**changes: np.ndarray | None) -> dict[str, np.ndarray]:
    steps = rows(0, 3)
    for name, value in changes.items():
        if value is None:
            del steps[name]
        else:
            steps[name] = value
    return steps


def _with(name: str, index: tuple, value: Any) -> dict[str, np.ndarray]:
    steps = rows(0, 3)
    steps[name] = steps[name].copy()
    steps[name][index] = value
    return steps


BAD_BATCHES = {
    "state width": (
        _changed(**{"obs/state": np.zeros((3, 5), np.float32)}),
        "obs/state: float32 (3, 5), expected float32 (N, 4)",
    ),
    "state dtype": (
        _changed(**{"obs/state": np.zeros((3, 4), np.float64)}),
        "obs/state: float64 (3, 4), expected float32 (N, 4)",
    ),
    "image channels": (
        _changed(**{"next_obs/images/front": np.zeros((3, 8, 8, 4), np.uint8)}),
        "next_obs/images/front: uint8 (3, 8, 8, 4), expected uint8 (N, 8, 8, 3)",
    ),
    "image dtype": (
        _changed(**{"obs/images/front": np.zeros((3, 8, 8, 3), np.float32)}),
        "obs/images/front: float32 (3, 8, 8, 3), expected uint8 (N, 8, 8, 3)",
    ),
    "action size": (
        _changed(action=np.zeros((3, 3), np.float32)),
        "action: float32 (3, 3), expected float32 (N, 2)",
    ),
    "action dtype": (
        _changed(action=np.zeros((3, 2), np.int64)),
        "action: int64 (3, 2), expected float32 (N, 2)",
    ),
    "reward rank": (
        _changed(reward=np.zeros((3, 1), np.float32)),
        "reward: float32 (3, 1), expected float32 (N,)",
    ),
    "missing array": (_changed(reward=None), "missing ['reward']"),
    "extra array": (
        _changed(**{"obs/images/rear": np.zeros((3, 8, 8, 3), np.uint8)}),
        "unexpected ['obs/images/rear']",
    ),
    "reward nan": (_with("reward", (1,), np.nan), "reward: NaN or inf in transition(s) [1]"),
    "action inf": (_with("action", (2, 0), np.inf), "action: NaN or inf in transition(s) [2]"),
    "state nan": (_with("next_obs/state", (0, 3), np.nan), "next_obs/state: NaN or inf"),
    "bool bytes": (
        _changed(terminated=np.array([0, 2, 0], np.uint8).view(np.bool_)),
        "terminated: bool array holds bytes other than 0 and 1",
    ),
    "negative step": (_with("step", (0,), -1), "step: negative values"),
}


def test_wrong_shapes_dtypes_and_values_get_error_acks_and_store_nothing(learner: Learner) -> None:
    good = GoodActor(learner.server)
    assert good.progresses()
    stub = learner.stub()
    sent = [batch("mallory", 0, steps) for steps, _ in BAD_BATCHES.values()]
    sent.append(batch("mallory", 0, rows(0, 3), count=4))  # the message's count is not N
    acks = list(stub.PushTransitions(iter(sent), metadata=AUTH, timeout=WAIT_S))
    assert len(acks) == len(sent)  # one Ack per batch; the stream stayed open throughout
    for ack, (name, (_, fragment)) in zip(acks, BAD_BATCHES.items(), strict=False):
        assert ack.error.startswith("batch [0, 3) rejected: "), name
        assert fragment in ack.error, (name, ack.error)
        assert ack.acked_through_seq == -1, name
    assert "count is N = 4" in acks[-1].error
    assert good.progresses()  # served during the bad stream and after it
    # The same bad rows under the good actor's own id, at its next seq: refused, its stream intact.
    (ack,) = stub.PushTransitions(
        iter([batch("good", good.client.next_seq or 0, BAD_BATCHES["action dtype"][0])]),
        metadata=AUTH,
        timeout=WAIT_S,
    )
    assert "action: int64 (3, 2), expected float32 (N, 2)" in ack.error
    assert good.progresses()
    stats = learner.server.actor_stats()
    assert stats["mallory"].batches_rejected == len(sent) and stats["mallory"].transitions == 0
    learner.assert_holds_exactly({"good": good.close()})


# -- malformed payloads and messages ---------------------------------------------------------


class _Exploit:
    """Unpickling this would create a file: proof that nothing unpickles the payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_garbage_payloads_and_undecodable_messages_are_refused(
    learner: Learner, tmp_path: Path
) -> None:
    good = GoodActor(learner.server)
    assert good.progresses()
    marker = tmp_path / "unpickled"
    pickled = pickle.dumps({"obs/state": _Exploit(marker)})
    raw_st = st_save({"reward": np.zeros(3, np.float32)})
    lying_header = (10**6).to_bytes(8, "little") + raw_st[8:]  # header length past the end
    junk = np.random.default_rng(0).bytes(5000)
    cases = {
        "random bytes": (junk, "safetensors", "not a safetensors blob (5000 bytes)"),
        "pickle": (pickled, "safetensors", "not a safetensors blob"),
        "lying header": (lying_header, "safetensors", "not a safetensors blob"),
        "not zlib": (junk, "safetensors+zlib", "not a zlib stream"),
        "truncated zlib": (zlib.compress(raw_st)[:-8], "safetensors+zlib", "truncated zlib"),
    }
    sent = [
        pb.TransitionBatch(
            actor_id="mallory", first_seq=0, count=3, payload=p, codec=c, sha256=sha256_hex(p)
        )
        for p, c, _ in cases.values()
    ]
    sent.append(pb.TransitionBatch(actor_id="mallory", count=3, payload=pickled, codec="pickle"))
    sent.append(batch("mallory", 0, rows(0, 3), sha256="ab" * 32))
    acks = list(learner.stub().PushTransitions(iter(sent), metadata=AUTH, timeout=WAIT_S))
    for ack, (name, (_, _, fragment)) in zip(acks, cases.items(), strict=False):
        assert fragment in ack.error, (name, ack.error)
    assert "codec: unknown codec 'pickle'; use one of" in acks[-2].error
    assert "sha256: mismatch" in acks[-1].error
    assert not marker.exists()  # never unpickled
    assert good.progresses()
    # Bytes that are not the RPC's protobuf message at all: INVALID_ARGUMENT, naming the type.
    garbage = b"\x0a\xff\xff\xff\xff\x0f"  # a length-delimited field running past the end
    calls = {
        "HelloRequest": lambda: learner.raw("Hello")(garbage, metadata=AUTH, timeout=WAIT_S),
        "SubscribeRequest": lambda: next(
            learner.raw("Subscribe", "unary_stream")(garbage, metadata=AUTH, timeout=WAIT_S)
        ),
        "TransitionBatch": lambda: list(
            learner.raw("PushTransitions", "stream_stream")(
                iter(
                    [batch("mallory", 0, rows(0, 1), sha256="0" * 64).SerializeToString(), garbage]
                ),
                metadata=AUTH,
                timeout=WAIT_S,
            )
        ),
    }
    for name, call in calls.items():
        err = rpc_error(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert f"is not a robot_rl.transport.v1.{name} protobuf message" in err.details(), name
    assert "message 1 of the stream (6 bytes)" in err.details()
    bad_utf8 = rpc_error(lambda: learner.raw("Hello")(b"\x0a\x02\xff\xfe", metadata=AUTH))
    assert bad_utf8.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "bad UTF-8" in bad_utf8.details()
    assert good.progresses()
    learner.assert_holds_exactly({"good": good.close()})


# -- oversized messages ----------------------------------------------------------------------


def test_oversized_messages_and_metadata_are_refused(learner: Learner) -> None:
    good = GoodActor(learner.server)
    assert good.progresses()
    stub = learner.stub()
    # Over the gRPC limit: refused before it is read; that stream ends, not the server.
    huge = pb.TransitionBatch(actor_id="mallory", count=1, payload=b"\0" * (MAX_BYTES * 2))
    err = rpc_error(lambda: list(stub.PushTransitions(iter([huge]), metadata=AUTH)))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"vs. {MAX_BYTES + ENVELOPE_BYTES})" in err.details()  # e.g. (131099 vs. 131072)
    hello = pb.HelloRequest(
        actor_id="mallory", layout_json="x" * (MAX_BYTES * 2), protocol_version=PROTOCOL_VERSION
    )
    err = rpc_error(lambda: stub.Hello(hello, metadata=AUTH, timeout=WAIT_S))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in err.details()
    # Within the gRPC envelope but over max_message_bytes: an Ack naming the limit.
    (ack,) = stub.PushTransitions(
        iter([batch("mallory", 0, rows(0, 1), payload=b"\0" * (MAX_BYTES + 1))]), metadata=AUTH
    )
    assert f"{MAX_BYTES + 1} bytes > max_bytes={MAX_BYTES}" in ack.error
    # Metadata over 16 KiB (e.g. a runaway token): refused by gRPC, with the sizes.
    for md in ((("authorization", "Bearer " + "x" * 20_000),), (*AUTH, ("x-junk", "y" * 20_000))):
        err = rpc_error(lambda md=md: stub.Hello(hello, metadata=md, timeout=WAIT_S))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "metadata size exceeds hard limit" in err.details() and "16384" in err.details()
    assert good.progresses()
    assert "mallory" not in learner.server.actor_stats() or (
        learner.server.actor_stats()["mallory"].transitions == 0
    )
    learner.assert_holds_exactly({"good": good.close()})


# -- auth and identity -----------------------------------------------------------------------


def test_wrong_or_missing_token_is_refused_on_every_call(learner: Learner) -> None:
    good = GoodActor(learner.server)
    assert good.progresses()
    stub = learner.stub()
    hello = pb.HelloRequest(actor_id="mallory", layout_json=FP, protocol_version=PROTOCOL_VERSION)
    tokens = {
        "missing": ((), "missing 'authorization' metadata"),
        "wrong": ((("authorization", "Bearer nope"),), "wrong token"),
        "no Bearer": ((("authorization", TOKEN),), "wrong token"),
        "empty": ((("authorization", ""),), "wrong token"),
    }
    for name, (md, fragment) in tokens.items():
        calls = {
            "Hello": lambda md=md: stub.Hello(hello, metadata=md, timeout=WAIT_S),
            "Push": lambda md=md: list(
                stub.PushTransitions(iter([batch("mallory", 0, rows(0, 3))]), metadata=md)
            ),
            "Subscribe": lambda md=md: next(
                stub.Subscribe(pb.SubscribeRequest(actor_id="mallory"), metadata=md)
            ),
        }
        for rpc, call in calls.items():
            err = rpc_error(call)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (name, rpc)
            assert fragment in err.details(), (name, rpc, err.details())
    assert good.progresses()
    assert "mallory" not in learner.server.actor_stats()  # nothing reached the service
    learner.assert_holds_exactly({"good": good.close()})


def test_unsafe_actor_ids_are_refused_everywhere(learner: Learner, tmp_path: Path) -> None:
    good = GoodActor(learner.server)
    assert good.progresses()
    stub = learner.stub()
    for bad in ("../evil", "a/b", ".hidden", "x" * 65, "nul\0byte"):
        hello = pb.HelloRequest(actor_id=bad, layout_json=FP, protocol_version=PROTOCOL_VERSION)
        for call in (
            lambda h=hello: stub.Hello(h, metadata=AUTH, timeout=WAIT_S),
            lambda b=bad: next(stub.Subscribe(pb.SubscribeRequest(actor_id=b), metadata=AUTH)),
        ):
            err = rpc_error(call)
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "is not a safe directory name" in err.details()
        (ack,) = stub.PushTransitions(iter([batch(bad, 0, rows(0, 3))]), metadata=AUTH)
        assert ack.error.startswith("batch [0, 3): actor id") and "safe directory" in ack.error
    assert good.progresses()
    assert sorted(learner.server.actor_stats()) == ["good"]  # no counters, stats or tb tags
    assert not (tmp_path / "evil").exists() and not (tmp_path / "actors" / "a").exists()
    learner.assert_holds_exactly({"good": good.close()})


# -- a flood of connections ------------------------------------------------------------------

FLOOD = 200
BUSY = ("too many ", "Concurrent RPC limit exceeded")


def test_flood_of_connections_leaves_the_connected_actor_served(tmp_path: Path) -> None:
    lrn = Learner(tmp_path, max_actors=3)
    try:
        good = GoodActor(lrn.server)
        assert good.progresses()
        assert until(lambda: lrn.server.open_streams() == {"push": 1, "subscribe": 1})
        release = threading.Event()

        def held_stream(i: int) -> Iterator[pb.TransitionBatch]:
            yield batch(f"flood-{i}", 0, rows(0, 2), sha256="0" * 64)  # refused: stores nothing
            release.wait(WAIT_S)  # then keep the stream open

        hellos, subs, pushes = [], [], []
        for i in range(FLOOD):  # 200 channels, each: Hello, a subscription, a transition stream
            stub = lrn.stub()
            hello = pb.HelloRequest(
                actor_id=f"flood-{i}", layout_json=FP, protocol_version=PROTOCOL_VERSION
            )
            hellos.append(stub.Hello.future(hello, metadata=AUTH, timeout=WAIT_S))
            subs.append(stub.Subscribe(pb.SubscribeRequest(actor_id=f"flood-{i}"), metadata=AUTH))
            pushes.append(stub.PushTransitions(held_stream(i), metadata=AUTH))

        def settled(calls: list, kind: str) -> bool:  # every call refused or holding a slot
            return sum(c.done() for c in calls) + lrn.server.open_streams()[kind] - 1 == FLOOD

        assert until(lambda: settled(subs, "subscribe") and settled(pushes, "push"))
        assert until(lambda: all(h.done() for h in hellos))
        streams = lrn.server.open_streams()
        assert streams["push"] <= 3 and streams["subscribe"] <= 3  # never more than max_actors
        refused = [c for c in subs + pushes if c.done()]
        assert len(refused) >= 2 * (FLOOD - 2)
        for call in refused:
            assert call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, call.details()
            assert call.details().startswith(BUSY), call.details()
        assert any("too many subscriptions" in c.details() for c in refused)
        assert any("too many transition streams" in c.details() for c in refused)
        for h in hellos:  # answered, or refused at once when the spare calls were all running
            assert h.exception() is None or h.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # The connected actor is served while the flood holds its streams: acks and weights.
        assert good.progresses()
        lrn.server.publish_weights(1, {"w": torch.ones(3)})
        assert good.client.wait_weights(1, WAIT_S)
        # After the flood: its streams are released and a new actor gets in.
        release.set()
        for c in lrn.channels:
            c.close()
        lrn.channels.clear()
        assert until(lambda: lrn.server.open_streams() == {"push": 1, "subscribe": 1})
        late = GoodActor(lrn.server, "late")
        assert late.progresses() and good.progresses()
        held = {"good": good.close(), "late": late.close()}
        assert lrn.server.actor_stats()["good"].batches_rejected == 0
        lrn.assert_holds_exactly(held)  # no flood-* log: every flood batch was refused
    finally:
        lrn.close()
