"""Reward server round trips over real gRPC on 127.0.0.1, serving a real (tiny) torch model.

The model is a small conv net with fixed seeded weights; a "slow" variant blocks in ``predict``
until the test opens a gate (a sleep the test controls, so no timing assumption decides the
outcome). Expected values come from the same model run in process on the JPEG-decoded images.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc", reason="reward serving needs the `serve` extra (grpcio)")
pytest.importorskip("grpc_health", reason="reward serving needs the `serve` extra")
import cv2  # noqa: E402
import grpc  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save as st_save  # noqa: E402

from rewards.serve import (  # noqa: E402
    AsyncRewardLabeller,
    RewardClient,
    RewardServiceError,
    RewardTimeout,
    ServeConfig,
    reward_pb2,
    reward_pb2_grpc,
    serve,
)
from rewards.serve.codec import decode_images, encode_images, encode_state  # noqa: E402
from robot_rl.core.protocols import RewardModel, RewardQuery, RewardResult  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CAMS = ("front", "wrist")
STATE_DIM = 5
WAIT_S = 30.0  # upper bound on condition waits; never reached when things work


class TinyConvReward:
    """A real RewardModel: conv -> ReLU -> mean pool per camera, linear head, sigmoid.

    Reward is ``p - 1``. Records the batch size of every ``predict`` call. With a ``gate``,
    ``predict`` sets ``entered`` and then blocks until the gate opens (a slow model).
    """

    model_id = "tiny-conv"
    model_version = "seed0"

    def __init__(self, seed: int = 0, gate: threading.Event | None = None) -> None:
        g = torch.Generator().manual_seed(seed)
        self.cameras = CAMS
        self.conv = torch.nn.Conv2d(3, 4, kernel_size=3, stride=2)
        self.head = torch.nn.Linear(4 * len(CAMS) + STATE_DIM, 1)
        with torch.no_grad():
            for p in [*self.conv.parameters(), *self.head.parameters()]:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        self.gate = gate
        self.entered = threading.Event()
        self.calls: list[int] = []

    def predict(self, query: RewardQuery) -> RewardResult:
        batch = query.images[CAMS[0]].shape[0]
        self.calls.append(batch)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S), "test never opened the gate"
        with torch.no_grad():
            feats = []
            for cam in CAMS:
                x = torch.from_numpy(query.images[cam]).permute(0, 3, 1, 2).float() / 255.0
                feats.append(torch.relu(self.conv(x)).mean(dim=(2, 3)))  # (B, 4)
            state = (
                torch.zeros(batch, STATE_DIM)
                if query.state is None
                else torch.from_numpy(query.state)
            )
            p = torch.sigmoid(self.head(torch.cat([*feats, state], dim=1)))[:, 0].numpy()
        return RewardResult(p, p - 1.0, self.model_id, self.model_version)


def make_query(rng: np.random.Generator, batch: int, size: int = 24) -> RewardQuery:
    images = {c: rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8) for c in CAMS}
    state = rng.standard_normal((batch, STATE_DIM)).astype(np.float32)
    return RewardQuery(images=images, state=state, task_text="put the cube in the bowl")


def jpeg_roundtrip(query: RewardQuery) -> RewardQuery:
    """What the server's model sees: the frames after JPEG encode + decode."""
    images = decode_images(encode_images(query.images))
    return RewardQuery(images=images, state=query.state, task_text=query.task_text)


def wait_until(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture
def plain() -> Iterator[tuple[TinyConvReward, str]]:
    model = TinyConvReward()
    with serve(model) as srv:
        yield model, srv.address


def test_round_trip_equals_in_process_predict(plain: tuple[TinyConvReward, str]) -> None:
    model, address = plain
    query = make_query(np.random.default_rng(0), batch=3)
    with RewardClient(address, timeout_s=WAIT_S) as client:
        assert client.healthy()
        info = client.info()
        assert (info.model_id, info.model_version, info.cameras) == ("tiny-conv", "seed0", CAMS)
        assert isinstance(client, RewardModel)
        got = client.predict(query)
    expected = TinyConvReward().predict(jpeg_roundtrip(query))
    np.testing.assert_array_equal(got.success_prob, expected.success_prob.astype(np.float32))
    np.testing.assert_array_equal(got.reward, expected.reward.astype(np.float32))
    assert (got.model_id, got.model_version) == ("tiny-conv", "seed0")
    assert model.calls == [3]
    # The raw frames give the same answer up to JPEG loss.
    raw = TinyConvReward().predict(query)
    np.testing.assert_allclose(got.success_prob, raw.success_prob, rtol=0, atol=0.02)


def test_concurrent_requests_are_batched() -> None:
    gate = threading.Event()
    model = TinyConvReward(gate=gate)
    rng = np.random.default_rng(1)
    queries = [make_query(rng, batch=1) for _ in range(7)]
    with serve(model, max_batch=32) as srv, RewardClient(srv.address, timeout_s=WAIT_S) as c:
        first = c.predict_future(queries[0])
        assert model.entered.wait(WAIT_S)  # the model is busy with the first request
        rest = [c.predict_future(q) for q in queries[1:]]
        wait_until(lambda: srv.stats()["queued"] == 6, "6 queued requests")
        gate.set()
        results = [f.result(WAIT_S) for f in [first, *rest]]
        assert srv.stats()["predict_calls"] == 2
    assert model.calls == [1, 6]  # 7 requests, 2 model calls
    reference = TinyConvReward()
    for query, got in zip(queries, results, strict=True):
        expected = reference.predict(jpeg_roundtrip(query))
        np.testing.assert_allclose(got.success_prob, expected.success_prob, rtol=0, atol=1e-6)


def test_deadline_times_out_and_labeller_fills_reward_late() -> None:
    gate = threading.Event()
    model = TinyConvReward(gate=gate)
    rng = np.random.default_rng(2)
    q_a, q_b, q_c = make_query(rng, 1), make_query(rng, 3), make_query(rng, 2)
    with serve(model) as srv, RewardClient(srv.address, timeout_s=1.0) as fast:
        # Connect first: a deadline spent on connecting would never reach the server.
        assert fast.info(timeout_s=WAIT_S).model_id == "tiny-conv"
        late_client = RewardClient(srv.address, timeout_s=WAIT_S)
        labeller = AsyncRewardLabeller(late_client, late_timeout_s=WAIT_S)
        labeller.submit(0, q_a)  # returns at once; the model then blocks on it
        assert model.entered.wait(WAIT_S)
        labeller.submit(1, q_c)
        with pytest.raises(RewardTimeout, match="DEADLINE_EXCEEDED"):
            fast.predict(q_b)  # queued behind the busy model past its deadline
        wait_until(lambda: srv.stats()["abandoned"] == 1, "the server to give up on q_b")
        wait_until(lambda: srv.stats()["queued"] == 2, "q_b and q_c queued")
        assert labeller.poll() == []
        with pytest.raises(RewardTimeout, match="still in flight"):
            labeller.wait(0, timeout_s=0.01)
        assert labeller.in_flight == 2
        gate.set()
        got_a = labeller.wait(0, timeout_s=WAIT_S)  # termination: waits for a confirmed answer
        arrived: list = []
        wait_until(lambda: bool(arrived.extend(labeller.poll()) or arrived), "step 1's reward")
        stats = srv.stats()
        labeller.close()
        late_client.close()
    assert [step for step, _ in arrived] == [1]
    assert model.calls == [1, 2]  # q_b (batch 3) was dropped, never computed
    assert stats["dropped_cancelled"] + stats["dropped_expired"] == 1
    reference = TinyConvReward()
    for query, got in ((q_a, got_a), (q_c, arrived[0][1])):
        expected = reference.predict(jpeg_roundtrip(query))
        np.testing.assert_array_equal(got.reward, expected.reward.astype(np.float32))


def test_token_auth() -> None:
    model = TinyConvReward()
    query = make_query(np.random.default_rng(3), batch=1)
    with serve(model, token="s3cret") as srv:
        for token, why in ((None, "missing 'authorization'"), ("nope", "wrong token")):
            with RewardClient(srv.address, token=token, timeout_s=WAIT_S) as client:
                assert client.healthy()  # health checks need no token
                with pytest.raises(RewardServiceError, match=why) as err:
                    client.predict(query)
                assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
                labeller = AsyncRewardLabeller(client)
                labeller.submit("s", query)
                with pytest.raises(RewardServiceError, match="UNAUTHENTICATED"):
                    labeller.wait("s", timeout_s=WAIT_S)
                labeller.close()
        with RewardClient(srv.address, token="s3cret", timeout_s=WAIT_S) as client:
            assert client.predict(query).reward.shape == (1,)
    assert model.calls == [1]  # refused requests never reached the model


def _request(query: RewardQuery, **override: object) -> reward_pb2.PredictRequest:
    jpegs = encode_images(query.images)
    request = reward_pb2.PredictRequest(
        request_id="t",
        images={c: reward_pb2.ImageBatch(jpeg=f) for c, f in jpegs.items()},
        state=encode_state(query.state),
    )
    for name, value in override.items():
        if name == "images":
            request.ClearField("images")
            for cam, frames in value.items():  # type: ignore[attr-defined]
                request.images[cam].jpeg.extend(frames)
        else:
            setattr(request, name, value)
    return request


def test_malformed_payloads_get_clear_errors_and_server_stays_up(
    plain: tuple[TinyConvReward, str],
) -> None:
    model, address = plain
    rng = np.random.default_rng(4)
    good = make_query(rng, batch=2)
    frames = encode_images(good.images)
    gray = cv2.imencode(".jpg", np.zeros((8, 8), np.uint8))[1].tobytes()
    cases = {
        "not a jpeg": (
            dict(images={"front": [b"garbage"], "wrist": frames["wrist"][:1]}),
            "images['front'][0]: not a decodable JPEG",
        ),
        "grayscale": (dict(images={"front": [gray], "wrist": [gray]}), "3-channel"),
        "batch mismatch": (
            dict(images={"front": frames["front"], "wrist": frames["wrist"][:1]}),
            "inconsistent batch sizes",
        ),
        "missing camera": (dict(images={"front": frames["front"]}), "missing camera"),
        "no frames": (dict(images={"front": [], "wrist": []}), "no frames"),
        "state garbage": (dict(state=b"\x00" * 20), "state: not a safetensors blob"),
        "state dtype": (dict(state=st_save({"state": np.zeros((2, 5))})), "float32"),
        "state key": (dict(state=st_save({"x": np.zeros((2, 5), np.float32)})), "'state'"),
        "state batch": (dict(state=encode_state(np.zeros((3, 5), np.float32))), "batch 3"),
        "state nan": (dict(state=encode_state(np.full((2, 5), np.nan, np.float32))), "NaN"),
    }
    with grpc.insecure_channel(address) as channel, RewardClient(address, timeout_s=WAIT_S) as c:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        for name, (override, message) in cases.items():
            with pytest.raises(grpc.RpcError) as err:
                stub.Predict(_request(good, **override), timeout=WAIT_S)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert message in err.value.details(), (name, err.value.details())
            assert c.predict(good).reward.shape == (2,), name  # still serving
    assert model.calls == [2] * len(cases)  # only the good requests reached the model


def test_oversized_message_is_refused() -> None:
    model = TinyConvReward()
    rng = np.random.default_rng(5)
    big = make_query(rng, batch=8, size=96)  # noise JPEGs: far over 64 KiB in total
    with serve(model, max_message_bytes=64 * 1024) as srv:
        with RewardClient(srv.address, timeout_s=WAIT_S) as client:
            with pytest.raises(RewardServiceError, match="max_message_bytes") as err:
                client.predict(big)
            assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert client.predict(make_query(rng, batch=1)).reward.shape == (1,)
    assert model.calls == [1]


class WrongShapeModel(TinyConvReward):
    """A buggy real model: drops the last element of its output."""

    def predict(self, query: RewardQuery) -> RewardResult:
        r = super().predict(query)
        return RewardResult(r.success_prob[:-1], r.reward[:-1], r.model_id, r.model_version)


def test_model_error_is_internal_and_server_stays_up() -> None:
    with serve(WrongShapeModel()) as srv, RewardClient(srv.address, timeout_s=WAIT_S) as c:
        for _ in range(2):
            with pytest.raises(RewardServiceError, match="expected \\(2,\\)") as err:
                c.predict(make_query(np.random.default_rng(6), batch=2))
            assert err.value.code == grpc.StatusCode.INTERNAL
        assert c.healthy()


def _listening(port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Local addresses with a socket listening on TCP ``port`` (from /proc/net/tcp{,6}).

    An IPv4-mapped IPv6 address (gRPC's dual-stack sockets) is returned as its IPv4 address.
    """
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr_hex, port_hex = local.split(":")
                if state != "0A" or int(port_hex, 16) != port:
                    continue
                # The kernel prints each 32-bit word in host (little-endian) order.
                raw = b"".join(
                    bytes.fromhex(addr_hex[i : i + 8])[::-1] for i in range(0, len(addr_hex), 8)
                )
                addr = ipaddress.ip_address(raw)
                mapped = getattr(addr, "ipv4_mapped", None)
                out.add(mapped or addr)
    return out


def test_default_bind_is_loopback(caplog: pytest.LogCaptureFixture) -> None:
    has_proc_net = os.path.exists("/proc/net/tcp") and os.path.exists("/proc/net/tcp6")
    with serve(TinyConvReward()) as srv:
        assert srv.host == "127.0.0.1"
        if has_proc_net:
            assert _listening(srv.port) == {ipaddress.ip_address("127.0.0.1")}
    with pytest.raises(ValueError, match="allow_non_loopback"):
        ServeConfig(bind="0.0.0.0:0")
    with caplog.at_level(logging.WARNING, logger="rewards.serve.server"):
        with serve(TinyConvReward(), bind="0.0.0.0:0", allow_non_loopback=True) as srv:
            if has_proc_net:
                assert not all(a.is_loopback for a in _listening(srv.port))
    assert "without a token" in caplog.text


def test_tls(self_signed_cert: tuple[Path, Path]) -> None:
    cert, key = self_signed_cert
    query = make_query(np.random.default_rng(7), batch=1)
    with serve(TinyConvReward(), tls_cert_path=cert, tls_key_path=key, token="t") as srv:
        with RewardClient(srv.address, token="t", root_cert_path=cert, timeout_s=WAIT_S) as c:
            assert c.predict(query).reward.shape == (1,)
        with RewardClient(srv.address, token="t", timeout_s=2.0) as plaintext:
            with pytest.raises(RewardServiceError, match="UNAVAILABLE"):
                plaintext.predict(query)
