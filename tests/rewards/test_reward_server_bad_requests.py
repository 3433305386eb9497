"""Bad, hostile and excessive requests to the reward server, with a good client served alongside.

The server is the real one on 127.0.0.1 with a token, serving a small real RewardModel that
declares its cameras, image size and state width (the server checks requests against them). A
good client (RewardClient) asks for rewards from a thread through every test and checks each
answer against the model run on the same JPEG-decoded frames; a bad client sends what a buggy or
malicious one would, built with the generated stubs (or as raw bytes). Each test checks the bad
client's status and message, that the model never saw a bad request (its frame count is the
good client's), and that the good client keeps getting correct answers during and after.
"""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc", reason="reward serving needs the `serve` extra (grpcio)")
pytest.importorskip("grpc_health", reason="reward serving needs the `serve` extra")
import cv2  # noqa: E402
import grpc  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from safetensors.numpy import save as st_save  # noqa: E402

from rewards.serve import RewardClient, RewardServiceError, reward_pb2, reward_pb2_grpc  # noqa: E402
from rewards.serve.codec import decode_images, encode_images, encode_state  # noqa: E402
from rewards.serve.server import RunningServer, serve  # noqa: E402
from robot_rl.core.protocols import RewardQuery, RewardResult  # noqa: E402

TOKEN = "s3cret"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
SIZE = (24, 32)  # (height, width) the model expects
STATE_DIM = 3
MAX_BYTES = 256 * 1024
MAX_PIXELS = SIZE[0] * SIZE[1] * 16  # 16 frames per request
WAIT_S = 30.0  # upper bound of condition waits; never reached when things work


class MeanRed:
    """A real RewardModel: success probability = mean red of the front camera, in [0, 1].

    Declares ``cameras``, ``image_size`` and ``state_dim``; counts the frames it computes. With
    a ``gate``, ``predict`` blocks until the gate opens (a busy model, under the test's control).
    """

    model_id = "mean-red"
    model_version = "1"

    def __init__(self, image_size: tuple[int, int] | None = SIZE) -> None:
        self.cameras = ("front",)
        if image_size is not None:
            self.image_size = image_size
        self.state_dim = STATE_DIM
        self.frames = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def predict(self, query: RewardQuery) -> RewardResult:
        front = query.images["front"]
        assert front.shape[1:] == (*SIZE, 3)  # the server let nothing else through
        self.frames += len(front)
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
        p = (front[..., 0].mean(axis=(1, 2)) / 255.0).astype(np.float32)
        return RewardResult(p, p - 1.0, self.model_id, self.model_version)


def query(seed: int, batch: int = 1) -> RewardQuery:
    rng = np.random.default_rng(seed)
    images = {"front": rng.integers(0, 256, (batch, *SIZE, 3), dtype=np.uint8)}
    state = rng.standard_normal((batch, STATE_DIM)).astype(np.float32)
    return RewardQuery(images=images, state=state)


def expected(q: RewardQuery) -> np.ndarray:
    """The model's answer on the frames as the server decodes them."""
    front = decode_images(encode_images(q.images))["front"]
    return (front[..., 0].mean(axis=(1, 2)) / 255.0).astype(np.float32)


def request(q: RewardQuery, **override: Any) -> reward_pb2.PredictRequest:
    """The wire request a correct client would send (as RewardClient.encode), fields replaced."""
    jpegs = encode_images(q.images)
    req = reward_pb2.PredictRequest(
        request_id="bad",
        images={cam: reward_pb2.ImageBatch(jpeg=frames) for cam, frames in jpegs.items()},
        state=encode_state(q.state),
    )
    for name, value in override.items():
        if name == "images":
            req.ClearField("images")
            for cam, frames in value.items():
                req.images[cam].jpeg.extend(frames)
        else:
            setattr(req, name, value)
    return req


def until(cond: Callable[[], bool]) -> bool:
    """Wait for a condition (polling), not for a fixed time."""
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class GoodClient:
    """A well-behaved reward client asking from a thread; every answer is checked."""

    def __init__(self, address: str) -> None:
        self.client = RewardClient(address, token=TOKEN, timeout_s=WAIT_S)
        self.answered = 0
        self.frames = 0
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seed = 0
        while not self._stop.is_set():
            q = query(seed, batch=1 + seed % 2)
            try:
                got = self.client.predict(q)
                np.testing.assert_array_equal(got.success_prob, expected(q))
                self.frames += len(got.success_prob)
                self.answered += 1
            except Exception as e:  # recorded: the test asserts there is none
                self.errors.append(e)
            seed += 1
            self._stop.wait(0.005)  # a control loop's pace, not a wait for a result

    def progresses(self, answers: int = 5) -> bool:
        """Whether ``answers`` more correct answers arrive (waits for them)."""
        start = self.answered
        return until(lambda: self.answered >= start + answers or bool(self.errors))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self.client.close()

    def close(self) -> int:
        """Stop; returns the frames answered (raises the first error, if any)."""
        self.stop()
        if self.errors:
            raise self.errors[0]
        return self.frames


@pytest.fixture
def served() -> Iterator[tuple[MeanRed, RunningServer, GoodClient]]:
    model = MeanRed()
    cfg = dict(max_message_bytes=MAX_BYTES, max_request_pixels=MAX_PIXELS, max_batch=1)
    with serve(model, token=TOKEN, max_workers=8, max_concurrent_rpcs=8, **cfg) as srv:
        good = GoodClient(srv.address)
        assert good.progresses()
        yield model, srv, good
        good.stop()


def stub(srv: RunningServer) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(srv.address)
    return channel, reward_pb2_grpc.RewardServiceStub(channel)


def rpc_error(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


class _Exploit:
    """Unpickling this would create a file: proof that nothing unpickles a payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def _jpeg(frame: np.ndarray) -> bytes:
    return encode_images({"f": frame[None]})["f"][0]


def _declaring(size: tuple[int, int]) -> bytes:
    """A small valid JPEG whose frame header declares ``size`` (a decompression bomb)."""
    data = bytearray(_jpeg(np.zeros((*SIZE, 3), np.uint8)))
    sof = data.find(b"\xff\xc0")
    data[sof + 5 : sof + 9] = size[0].to_bytes(2, "big") + size[1].to_bytes(2, "big")
    return bytes(data)


def test_wrong_shapes_dtypes_and_malformed_payloads_get_invalid_argument(
    served: tuple[MeanRed, RunningServer, GoodClient], tmp_path: Path
) -> None:
    model, srv, good = served
    q = query(100)
    ok_frame = encode_images(q.images)["front"]
    png = cv2.imencode(".png", np.zeros((*SIZE, 3), np.uint8))[1].tobytes()
    gray = cv2.imencode(".jpg", np.zeros(SIZE, np.uint8))[1].tobytes()
    marker = tmp_path / "unpickled"
    cases = {
        "image size": (
            dict(images={"front": [_jpeg(np.zeros((32, 32, 3), np.uint8))]}),
            "images['front'][0]: 32x32 frame (height x width), the model expects 24x32",
        ),
        "size bomb": (
            dict(images={"front": [_declaring((30000, 30000))]}),
            "30000x30000 frame (height x width), the model expects 24x32",
        ),
        "png": (
            dict(images={"front": [png]}),
            f"not a decodable JPEG ({len(png)} bytes starting 89 50 4e 47",
        ),
        "garbage": (dict(images={"front": [b"\x00" * 64]}), "not a decodable JPEG (64 bytes"),
        "truncated": (dict(images={"front": [ok_frame[0][:300]]}), "not a decodable JPEG"),
        "grayscale": (dict(images={"front": [gray]}), "expected an 8-bit colour (3-channel)"),
        "missing camera": (
            dict(images={"rear": ok_frame}),
            "missing camera(s) ['front']; the model reads ['front']",
        ),
        "no frames": (dict(images={"front": []}), "images['front']: no frames"),
        "state width": (
            dict(state=encode_state(np.zeros((1, 5), np.float32))),
            "state: width 5, the model expects (B, 3) float32",
        ),
        "state dtype": (
            dict(state=st_save({"state": np.zeros((1, 3), np.float64)})),
            "state: expected (B, S) float32, got float64 (1, 3)",
        ),
        "state rank": (
            dict(state=st_save({"state": np.zeros(3, np.float32)})),
            "expected (B, S) float32, got float32 (3,)",
        ),
        "state batch": (
            dict(state=encode_state(np.zeros((2, 3), np.float32))),
            "state: batch 2 differs from the images' batch 1",
        ),
        "state nan": (
            dict(state=encode_state(np.full((1, 3), np.nan, np.float32))),
            "state: contains NaN or inf",
        ),
        "state garbage": (dict(state=b"\xff" * 40), "state: not a safetensors blob (40 bytes)"),
        "state pickle": (
            dict(state=pickle.dumps({"state": _Exploit(marker)})),
            "state: not a safetensors blob",
        ),
    }
    channel, s = stub(srv)
    with channel:
        for name, (override, fragment) in cases.items():
            err = rpc_error(lambda o=override: s.Predict(request(q, **o), metadata=AUTH))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, err.details())
            assert fragment in err.details(), (name, err.details())
        assert good.progresses()  # answered during the bad requests and after them
        # Bytes that are not the protobuf message at all.
        for method, kind in (("Predict", "PredictRequest"), ("Info", "InfoRequest")):
            raw = channel.unary_unary(f"/robot_rl.reward.v1.RewardService/{method}")
            err = rpc_error(lambda raw=raw: raw(b"\x12\xff\xff\xff\xff\x0f", metadata=AUTH))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"is not a robot_rl.reward.v1.{kind} protobuf message" in err.details()
    assert not marker.exists()  # never unpickled
    assert good.progresses()
    good_frames = good.close()
    assert model.frames == good_frames  # the model computed the good client's frames only


def test_oversized_requests_get_resource_exhausted(
    served: tuple[MeanRed, RunningServer, GoodClient],
) -> None:
    model, srv, good = served
    q = query(200)
    frame = encode_images(q.images)["front"][0]
    channel, s = stub(srv)
    with channel:
        big = request(q, task_text="x" * (2 * MAX_BYTES))
        err = rpc_error(lambda: s.Predict(big, metadata=AUTH, timeout=WAIT_S))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"vs. {MAX_BYTES})" in err.details()  # "larger than max (524307 vs. 262144)"
        many = request(
            q, images={"front": [frame] * 17}, state=encode_state(np.zeros((17, 3), np.float32))
        )
        err = rpc_error(lambda: s.Predict(many, metadata=AUTH, timeout=WAIT_S))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"17 frames of {17 * 24 * 32} pixels in all > max_request_pixels" in err.details()
        for md in (
            (("authorization", "Bearer " + "x" * 20_000),),
            (*AUTH, ("x-junk", "y" * 20_000)),
        ):
            err = rpc_error(lambda md=md: s.Predict(request(q), metadata=md, timeout=WAIT_S))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "metadata size exceeds hard limit" in err.details() and "16384" in err.details()
    with RewardClient(srv.address, token=TOKEN, timeout_s=WAIT_S) as client:
        with pytest.raises(RewardServiceError, match="max_request_pixels") as refused:
            client.predict(query(201, batch=17))  # a real client's too-large batch: told why
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert good.progresses()
    good_frames = good.close()
    assert model.frames == good_frames


def test_decompression_bomb_is_refused_from_its_header() -> None:
    model = MeanRed(image_size=None)  # a model that takes any size: only the pixel budget holds
    with serve(model, token=TOKEN) as srv:
        good = GoodClient(srv.address)
        assert good.progresses()
        bomb = request(query(300), images={"front": [_declaring((30000, 30000))]})
        channel, s = stub(srv)
        with channel:
            err = rpc_error(lambda: s.Predict(bomb, metadata=AUTH, timeout=WAIT_S))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "1 frames of 900000000 pixels in all > max_request_pixels=16777216" in err.details()
        assert "nothing was decoded" in err.details()
        assert good.progresses()
        good_frames = good.close()
        assert model.frames == good_frames


def test_wrong_or_missing_token_is_refused(
    served: tuple[MeanRed, RunningServer, GoodClient],
) -> None:
    model, srv, good = served
    channel, s = stub(srv)
    with channel:
        for md, fragment in (
            ((), "missing 'authorization' metadata"),
            ((("authorization", "Bearer nope"),), "wrong token"),
            ((("authorization", TOKEN),), "wrong token"),
        ):
            for call in (
                lambda md=md: s.Predict(request(query(400)), metadata=md, timeout=WAIT_S),
                lambda md=md: s.Info(reward_pb2.InfoRequest(), metadata=md, timeout=WAIT_S),
            ):
                err = rpc_error(call)
                assert err.code() == grpc.StatusCode.UNAUTHENTICATED
                assert fragment in err.details()
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING  # no token needed
    assert good.progresses()
    good_frames = good.close()
    assert model.frames == good_frames


FLOOD = 200


def test_flood_is_refused_at_once_and_the_good_client_is_answered(
    served: tuple[MeanRed, RunningServer, GoodClient],
) -> None:
    """200 clients (half without a token) call at once while the model is busy: 8 calls
    (max_concurrent_rpcs) are taken, every other one is refused at once (RESOURCE_EXHAUSTED or
    UNAUTHENTICATED), not queued behind the model; a good client's call refused as busy is sent
    again until it is answered, and the taken calls are answered correctly."""
    model, srv, good = served
    model.gate = threading.Event()
    model.entered.clear()  # set again by a call that sees the gate closed
    channels = [grpc.insecure_channel(srv.address) for _ in range(FLOOD)]
    late = RewardClient(srv.address, token=TOKEN, timeout_s=WAIT_S)
    try:
        q = query(500)
        calls = [
            reward_pb2_grpc.RewardServiceStub(c).Predict.future(
                request(q), metadata=AUTH if i % 2 else (), timeout=WAIT_S
            )
            for i, c in enumerate(channels)
        ]
        # All 8 slots held: one request in the model, 7 waiting for it (max_batch=1).
        assert until(lambda: model.entered.is_set() and srv.stats()["queued"] == 7)
        assert until(lambda: sum(c.done() for c in calls) >= FLOOD - 8)
        refused = [c for c in calls if c.done()]  # answered while the model is still held
        for c in refused:
            assert c.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAUTHENTICATED)
            if c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                assert c.details() == "Concurrent RPC limit exceeded!"
        assert any(c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for c in refused)
        q_late = query(501)
        answer = late.predict_future(q_late)  # refused as busy while every slot is held
        assert until(lambda: late.busy_refusals >= 1)
        model.gate.set()
        np.testing.assert_array_equal(answer.result(WAIT_S).success_prob, expected(q_late))
        for c in calls:  # the taken ones are answered correctly once the model is free
            if c.exception() is None:
                np.testing.assert_array_equal(c.result().success_prob, expected(q))
        assert good.progresses()
    finally:
        model.gate = None
        late.close()
        for c in channels:
            c.close()
    admitted = sum(c.exception() is None for c in calls)
    good_frames = good.close()
    assert model.frames == good_frames + admitted + 1


def test_burst_of_clients_leaves_the_good_client_answered(
    served: tuple[MeanRed, RunningServer, GoodClient],
) -> None:
    """200 clients (half without a token) call at once, twice each, while the good client asks:
    each call is answered correctly or refused with a clear status, never lost or wrong."""
    model, srv, good = served
    channels = [grpc.insecure_channel(srv.address) for _ in range(FLOOD)]
    try:
        q = query(600, batch=2)
        calls = [
            reward_pb2_grpc.RewardServiceStub(c).Predict.future(
                request(q), metadata=AUTH if i % 2 else (), timeout=WAIT_S
            )
            for _ in range(2)
            for i, c in enumerate(channels)
        ]
        assert good.progresses()  # answered while the burst is served
        for c in calls:
            if c.exception() is None:
                np.testing.assert_array_equal(c.result().success_prob, expected(q))
            elif c.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                assert c.details() == "Concurrent RPC limit exceeded!"
            else:
                assert c.code() == grpc.StatusCode.UNAUTHENTICATED, c.details()
    finally:
        for c in channels:
            c.close()
    assert good.progresses()
    admitted = sum(c.exception() is None for c in calls)
    good_frames = good.close()
    assert model.frames == good_frames + 2 * admitted
