"""Learner gRPC server and actor client over real gRPC on 127.0.0.1 (ephemeral ports).

Each transition carries its sequence number in ``policy_version``, so the sink's rows show loss,
duplication or reordering directly. Raw-stub tests send what a buggy or hostile actor would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import torch
from polling import poll_until
from torch import nn

from robot_rl.core.batch import ObsLayout
from robot_rl.core.netaddr import is_loopback
from robot_rl.core.specs import ArraySpec
from robot_rl.transport import transport_pb2 as pb
from robot_rl.transport import transport_pb2_grpc as pb_grpc
from robot_rl.transport.client import LearnerClient, LearnerClientConfig, LearnerError
from robot_rl.transport.codec import (
    PROTOCOL_VERSION,
    encode_transitions,
    layout_fingerprint,
    sha256_hex,
    transition_fields,
)
from robot_rl.transport.server import LearnerServer, LearnerServerConfig
from robot_rl.transport.sink import MemorySink
from robot_rl.transport.weights import load_trainable_state, trainable_state, weights_spec

A = 2
EP_LEN = 5
LAYOUT = ObsLayout(state_dim=4, images={"front": ArraySpec((8, 8, 3), "uint8")})
FP = layout_fingerprint(LAYOUT, A)
WAIT_S = 10.0
FAST = {"reconnect_min_s": 0.05, "reconnect_max_s": 0.2, "hello_timeout_s": 2.0}


def rows(first: int, n: int) -> dict[str, np.ndarray]:
    """Transitions first..first+n-1: episodes of EP_LEN steps, reward 1 per step."""
    seq = np.arange(first, first + n)
    rng = np.random.default_rng(first)
    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in transition_fields(LAYOUT, A).items():
        if dtype == "uint8":
            out[name] = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        elif dtype == "bool":
            out[name] = np.zeros((n, *shape), bool)
        else:
            out[name] = rng.standard_normal((n, *shape)).astype(dtype)
    out["policy_version"] = seq.astype(np.int64)
    out["episode"], out["step"] = seq // EP_LEN, seq % EP_LEN
    out["terminated"] = seq % EP_LEN == EP_LEN - 1
    out["reward"] = np.ones(n, np.float32)
    return out


def batch_msg(actor: str, first: int, n: int, compress: bool = True, **kw) -> pb.TransitionBatch:
    payload, codec, sha = encode_transitions(rows(first, n), compress)
    fields = {"actor_id": actor, "first_seq": first, "count": n, "payload": payload}
    return pb.TransitionBatch(**{**fields, "codec": codec, "sha256": sha, **kw})


def seqs(sink: MemorySink, actor: str) -> list[int]:
    return sink.rows(actor).get("policy_version", np.zeros(0)).tolist()


def until(cond: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    """Wait for a condition (polling), not for a fixed time."""
    return poll_until(cond, timeout_s)


def pump(client: LearnerClient, end: int, size: int = 4) -> None:
    """The actor's resend loop: push from next_seq while the client takes batches."""
    while (s := client.next_seq) is not None and s < end:
        if not client.push(s, rows(s, min(size, end - s))):
            return


def pump_until_acked(client: LearnerClient, end: int) -> None:
    assert until(lambda: (pump(client, end), client.acked_through >= end - 1)[1]), client.last_error


@pytest.fixture
def server() -> Iterator[LearnerServer]:
    srv = LearnerServer(MemorySink(), LAYOUT, A, LearnerServerConfig(run_id="run-x"))
    yield srv
    srv.stop(0)


def client_for(srv: LearnerServer, actor: str = "a", layout_json: str = FP, **kw) -> LearnerClient:
    cfg = LearnerClientConfig(target=srv.address, actor_id=actor, **{**FAST, **kw})
    return LearnerClient(cfg, layout_json)


def stub(srv: LearnerServer, token: str | None = None) -> tuple[grpc.Channel, Any, tuple]:
    channel = grpc.insecure_channel(srv.address)
    return (
        channel,
        pb_grpc.LearnerStub(channel),
        (("authorization", f"Bearer {token}"),) if token else (),
    )


def test_hello_push_acks_two_actors(server: LearnerServer) -> None:
    sink = server.sink
    with client_for(server, "a") as a, client_for(server, "b") as b:
        assert a.wait_connected(WAIT_S) and b.wait_connected(WAIT_S)
        assert a.next_seq == 0 and a.acked_through == -1 and a.run_id == "run-x"
        pump_until_acked(a, 12)
        pump_until_acked(b, 7)
        assert a.counts()["batches_acked"] == 3 and a.counts()["duplicates"] == 0
        stats = server.publish_stats(updates=5, replay_size=19)
        assert until(lambda: b.learner_stats() is not None)
    assert seqs(sink, "a") == list(range(12)) and seqs(sink, "b") == list(range(7))
    got, want = (
        sink.rows("a"),
        {k: np.concatenate([rows(s, 4)[k] for s in (0, 4, 8)]) for k in rows(0, 1)},
    )
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes(), k
    per_actor = {s.actor_id: s for s in stats.actors}
    assert per_actor["a"].transitions == 12 and per_actor["a"].acked_through_seq == 11
    assert per_actor["a"].episodes == 2 and per_actor["a"].last_episode_return == EP_LEN
    assert per_actor["b"].transitions == 7 and per_actor["b"].episodes == 1
    assert b.learner_stats().updates == 5


def test_resent_rows_are_stored_once_and_counted(server: LearnerServer) -> None:
    channel, s, _ = stub(server)
    with channel:
        sent = [
            batch_msg("a", 0, 6),
            batch_msg("a", 0, 6),
            batch_msg("a", 3, 6),
            batch_msg("a", 9, 2),
        ]
        acks = list(s.PushTransitions(iter(sent)))
        assert [(k.acked_through_seq, k.duplicates_dropped, k.error) for k in acks] == [
            (5, 0, ""), (5, 6, ""), (8, 3, ""), (10, 0, ""),
        ]  # fmt: skip
        assert [k.batch_first_seq for k in acks] == [0, 0, 3, 9]
        hello = s.Hello(
            pb.HelloRequest(actor_id="a", layout_json=FP, protocol_version=PROTOCOL_VERSION)
        )
        assert (
            hello.acked_through_seq == 10
            and hello.max_message_bytes == server.cfg.max_message_bytes
        )
    assert seqs(server.sink, "a") == list(range(11))
    st = server.actor_stats()["a"]
    assert st.transitions == 11 and st.duplicates_dropped == 9 and st.batches_rejected == 0


def test_gap_is_refused_and_the_stream_stays_usable(server: LearnerServer) -> None:
    channel, s, _ = stub(server)
    with channel:
        gap, ok = list(s.PushTransitions(iter([batch_msg("a", 3, 2), batch_msg("a", 0, 5)])))
    assert "leaves a gap" in gap.error and "resend from 0" in gap.error
    assert gap.acked_through_seq == -1
    assert ok.error == "" and ok.acked_through_seq == 4
    assert seqs(server.sink, "a") == list(range(5))


def test_malformed_and_oversized_batches_get_clear_acks_and_the_server_stays_up() -> None:
    srv = LearnerServer(MemorySink(), LAYOUT, A, LearnerServerConfig(max_message_bytes=64 * 1024))
    try:
        flat = rows(0, 300)  # ~0.2 MB raw, a few KB compressed: a zip bomb in miniature
        for k in flat:
            if "images" in k:
                flat[k][:] = 0
        bomb, codec, sha = encode_transitions(flat, True)
        assert len(bomb) < 64 * 1024
        good = batch_msg("a", 0, 3)
        bad = [
            batch_msg("a", 0, 3, sha256="0" * 64),
            batch_msg("a", 0, 3, codec="pickle"),
            batch_msg("a", 0, 300, payload=bomb, codec=codec, sha256=sha),
            batch_msg("a", 0, 3, count=4),
            batch_msg("a", 0, 1, payload=b"junk", codec="safetensors", sha256=sha256_hex(b"junk")),
            batch_msg("", 0, 3),
        ]  # fmt: skip
        channel, s, _ = stub(srv)
        with channel:
            acks = list(s.PushTransitions(iter([*bad, good])))
            errors = [k.error for k in acks]
            assert "sha256: mismatch" in errors[0]
            assert "unknown codec 'pickle'" in errors[1]
            assert "decompresses to more than max_bytes=65536" in errors[2]
            assert "count is N = 4" in errors[3]
            assert "not a safetensors blob" in errors[4]
            assert "actor_id is empty" in errors[5]
            assert all(e.startswith("batch [0, ") for e in errors[:5])
            assert errors[-1] == "" and acks[-1].acked_through_seq == 2
            # Far over the gRPC limit: that stream ends, the server does not.
            huge = batch_msg("a", 3, 1, payload=np.random.default_rng(0).bytes(200_000))
            with pytest.raises(grpc.RpcError) as err:
                list(s.PushTransitions(iter([huge])))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            (ack,) = s.PushTransitions(iter([batch_msg("a", 3, 2)]))
            assert ack.error == "" and ack.acked_through_seq == 4
        assert srv.actor_stats()["a"].batches_rejected == 5
        assert seqs(srv.sink, "a") == list(range(5))
    finally:
        srv.stop(0)


def test_rejected_batch_moves_next_seq_back_and_later_batches_follow(server: LearnerServer) -> None:
    bad = rows(4, 4)
    bad["reward"][1] = np.nan  # an actor bug: the learner refuses the batch
    with client_for(server) as c:
        assert c.wait_connected(WAIT_S)
        assert c.push(0, rows(0, 4)) and c.push(4, bad) and c.push(8, rows(8, 4))
        assert until(lambda: c.counts()["rejected"] == 1)
        assert "reward: NaN or inf" in c.last_error
        assert until(lambda: c.acked_through == 3)
        assert c.next_seq == 4  # resend from the rejected batch ([8, 12) was dropped too)
        pump_until_acked(c, 16)  # the log's fixed rows
        assert c.counts()["rejected"] == 1
    assert seqs(server.sink, "a") == list(range(16))


def test_batches_larger_than_the_learner_limit_are_split() -> None:
    srv = LearnerServer(MemorySink(), LAYOUT, A, LearnerServerConfig(max_message_bytes=16 * 1024))
    try:
        with client_for(srv, compress=False) as c:
            assert c.wait_connected(WAIT_S)
            assert c.push(0, rows(0, 100))  # ~50 KB of rows
            assert c.wait_acked(99, WAIT_S), c.last_error
            assert c.counts()["batches_acked"] > 3 and c.counts()["rejected"] == 0
        assert seqs(srv.sink, "a") == list(range(100))
    finally:
        srv.stop(0)


def test_wrong_or_missing_token_is_refused() -> None:
    srv = LearnerServer(MemorySink(), LAYOUT, A, LearnerServerConfig(token="s3cret"))
    hello = pb.HelloRequest(actor_id="a", layout_json=FP, protocol_version=PROTOCOL_VERSION)
    try:
        for token, fragment in ((None, "missing 'authorization'"), ("nope", "wrong token")):
            channel, s, md = stub(srv, token)
            with channel:
                for name in ("Hello", "Push", "Subscribe"):
                    with pytest.raises(grpc.RpcError) as err:
                        if name == "Hello":
                            s.Hello(hello, metadata=md, timeout=WAIT_S)
                        elif name == "Push":
                            list(s.PushTransitions(iter([batch_msg("a", 0, 2)]), metadata=md))
                        else:
                            next(s.Subscribe(pb.SubscribeRequest(actor_id="a"), metadata=md))
                    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
                    assert fragment in err.value.details(), name
                from grpc_health.v1 import health_pb2, health_pb2_grpc

                status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
                assert status.status == health_pb2.HealthCheckResponse.SERVING  # no token needed
        assert srv.actor_stats() == {}  # nothing reached the service
        with client_for(srv, token="nope") as c:
            with pytest.raises(LearnerError, match="UNAUTHENTICATED.*wrong token") as err:
                c.wait_connected(WAIT_S)
            assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert not c.push(0, rows(0, 1))
        with client_for(srv, token="s3cret") as c:
            pump_until_acked(c, 3)
    finally:
        srv.stop(0)


def test_layout_or_protocol_mismatch_is_refused_at_hello(server: LearnerServer) -> None:
    other = layout_fingerprint(ObsLayout(state_dim=4, images={}), A)
    channel, s, _ = stub(server)
    with channel:
        with pytest.raises(grpc.RpcError) as err:
            s.Hello(
                pb.HelloRequest(actor_id="a", layout_json=other, protocol_version=PROTOCOL_VERSION)
            )
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"the actor sends {other}" in err.value.details()
        assert f"the learner has {FP}" in err.value.details()
        with pytest.raises(grpc.RpcError, match="protocol version: the actor speaks 99"):
            s.Hello(pb.HelloRequest(actor_id="a", layout_json=FP, protocol_version=99))
    with client_for(server, layout_json=other) as c:
        with pytest.raises(LearnerError, match="layout differs") as err:
            c.wait_connected(WAIT_S)
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert c.next_seq is None and not c.push(0, rows(0, 1))


def test_non_loopback_bind_needs_the_explicit_flag() -> None:
    for bind in ("0.0.0.0:0", "192.168.1.5:50061", "[::]:0", "robot-pc:1"):
        with pytest.raises(ValueError, match="allow_non_loopback=True"):
            LearnerServerConfig(bind=bind)
        LearnerServerConfig(bind=bind, allow_non_loopback=True)  # asked for: accepted
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "[::1]", "127.0.0.2"))
    with pytest.raises(ValueError, match="host:port"):
        LearnerServerConfig(bind="127.0.0.1")
    assert LearnerServerConfig().bind.startswith("127.0.0.1:")


class Policy(nn.Module):
    """A frozen encoder (never sent) and a trainable head."""

    def __init__(self, head_seed: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = nn.Linear(4, 8).requires_grad_(False)
        torch.manual_seed(head_seed)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def test_weights_reach_the_actor_in_increasing_versions_trainable_only(
    server: LearnerServer,
) -> None:
    learner, actor = Policy(1), Policy(2)
    seen: list[int] = []
    cfg = LearnerClientConfig(target=server.address, actor_id="a", **FAST)
    spec = weights_spec(trainable_state(actor))
    with LearnerClient(cfg, FP, weights_spec=spec, on_weights=lambda v, s: seen.append(v)) as c:
        for version in (1, 2, 3):
            with torch.no_grad():
                learner.head.bias.add_(1.0)  # "training"
            server.publish_weights(version, trainable_state(learner))
            assert c.wait_weights(version, WAIT_S)
        assert seen == sorted(set(seen)) and seen[-1] == 3
        version, state = c.latest_weights()
        assert version == 3 and set(state) == {"head.weight", "head.bias"}  # no frozen encoder
        load_trainable_state(actor, state)
        x = torch.rand(5, 4)
        assert torch.equal(actor(x), learner(x))
        with pytest.raises(ValueError, match="versions must increase"):
            server.publish_weights(3, trainable_state(learner))
    late: list[int] = []
    with LearnerClient(cfg, FP, weights_spec=spec, on_weights=lambda v, s: late.append(v)) as c:
        assert c.wait_weights(3, WAIT_S) and late == [3]  # only the newest


def test_slow_subscriber_never_blocks_publish(server: LearnerServer) -> None:
    channel, s, _ = stub(server)
    big = {"w": torch.zeros(256 * 1024)}  # 1 MiB per version: more than the stream buffers
    with channel:
        events = s.Subscribe(pb.SubscribeRequest(actor_id="slow"))
        server.publish_weights(1, big)
        assert next(events).weights.version == 1
        for version in range(2, 41):  # the subscriber reads nothing meanwhile
            big["w"].fill_(version)
            server.publish_weights(version, big)
        got = [1]
        while got[-1] < 40:
            got.append(next(events).weights.version)
        events.cancel()
    assert got == sorted(set(got)) and len(got) < 40  # older pending versions were skipped


def test_run_control_reaches_current_and_later_actors(server: LearnerServer) -> None:
    commands: list[str] = []
    cfg = LearnerClientConfig(target=server.address, actor_id="a", **FAST)
    with LearnerClient(cfg, FP, on_control=lambda c, r: commands.append(f"{c}:{r}")) as c:
        assert c.wait_connected(WAIT_S) and c.run_state == "running"
        server.control("pause", reason="operator")
        assert until(lambda: c.run_state == "paused")
        with client_for(server, "b") as later:
            assert until(lambda: later.run_state == "paused")
        server.control("RESUME")
        assert until(lambda: c.run_state == "running")
        server.control("STOP", reason="done")
        assert until(lambda: c.run_state == "stopped")
    assert commands == ["PAUSE:operator", "RESUME:", "STOP:done"]
    with pytest.raises(ValueError, match="use one of"):
        server.control("halt")


def test_push_never_blocks_while_the_learner_is_down() -> None:
    srv = LearnerServer(MemorySink(), LAYOUT, A)
    with client_for(srv, max_pending_batches=3) as c:
        assert c.wait_connected(WAIT_S)
        pump_until_acked(c, 4)
        srv.stop(0)
        assert until(lambda: not c.connected)
        results = [c.push(c.next_seq, rows(c.next_seq, 2)) for _ in range(5)]
        assert results == [True, True, True, False, False]  # queue full: the caller keeps them
        assert c.next_seq == 10 and c.acked_through == 3
    cfg = LearnerClientConfig(target=f"127.0.0.1:{srv.port}", actor_id="a", **FAST)  # none there
    with LearnerClient(cfg, FP) as c:
        assert c.next_seq is None and not c.push(0, rows(0, 1))  # not reached yet: refused


class GatedSink(MemorySink):
    """Stores a batch, then holds its Ack until released (the learner dies in between)."""

    def __init__(self, gate_seq: int) -> None:
        super().__init__()
        self.gate_seq, self.stored, self.release = gate_seq, threading.Event(), threading.Event()

    def accept(self, actor_id: str, first_seq: int, steps: dict[str, np.ndarray]) -> int:
        acked = super().accept(actor_id, first_seq, steps)
        if first_seq == self.gate_seq:
            self.stored.set()
            self.release.wait(WAIT_S)
        return acked


def test_learner_restart_on_the_same_port_resumes_without_loss_or_duplicates() -> None:
    sink = GatedSink(gate_seq=8)
    srv = LearnerServer(sink, LAYOUT, A)
    port = srv.port
    with client_for(srv, max_pending_batches=4) as c:
        pump_until_acked(c, 8)
        pump(c, 12)  # [8, 12) is stored, its Ack never leaves
        assert sink.stored.wait(WAIT_S)
        srv.stop(0)
        sink.release.set()
        assert until(lambda: not c.connected)
        pump(c, 40)  # queues what fits, returns at once
        assert c.acked_through == 7 and c.next_seq < 40
        srv = LearnerServer(sink, LAYOUT, A, LearnerServerConfig(bind=f"127.0.0.1:{port}"))
        try:
            pump_until_acked(c, 40)
            assert c.counts()["resumes"] >= 2
        finally:
            srv.stop(0)
    assert seqs(sink, "a") == list(range(40))


def test_tls(self_signed_cert: tuple[Path, Path]) -> None:
    cert, key = self_signed_cert
    cfg = LearnerServerConfig(token="t", tls_cert_path=cert, tls_key_path=key)
    srv = LearnerServer(MemorySink(), LAYOUT, A, cfg)
    try:
        assert srv.tls
        with client_for(srv, token="t", root_cert_path=cert) as c:
            pump_until_acked(c, 3)
        channel, s, md = stub(srv, "t")  # plaintext against TLS
        with channel, pytest.raises(grpc.RpcError) as err:
            s.Hello(
                pb.HelloRequest(actor_id="a", layout_json=FP, protocol_version=1),
                metadata=md,
                timeout=2.0,
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop(0)
