"""OnlineRewarder: a reward model plus the success detector labelling env steps in order.

In process with a tiny deterministic model (success probability = mean red of the frame), and
over a real gRPC reward server on 127.0.0.1 whose model blocks until the test opens a gate
(so which steps are late is decided by the test, not by timing).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from rewards.detector import DetectorConfig
from rewards.online import OnlineRewarder
from rewards.trigger_log import TriggerLog
from robot_rl.core.learned_reward import StepLabel, StepRewarder
from robot_rl.core.protocols import RewardModel, RewardQuery, RewardResult

CAM = "front"
WAIT_S = 30.0  # upper bound on waits for answers; never reached when things work


class MeanRed:
    """A real RewardModel: success probability = mean red channel / 255 of ``front``.

    Reward is ``p - 1``. ``nan_red``: a frame of that red level gets a NaN probability. With a
    ``gate``, ``predict`` sets ``entered`` and blocks until the gate opens (a slow model).
    """

    model_id = "mean-red"
    model_version = "1"
    cameras = (CAM,)

    def __init__(self, nan_red: int | None = None, gate: threading.Event | None = None) -> None:
        self.nan_red = nan_red
        self.gate = gate
        self.entered = threading.Event()
        self.frames = 0

    def predict(self, query: RewardQuery) -> RewardResult:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
        red = np.asarray(query.images[CAM])[..., 0].astype(np.float64)
        p = red.mean(axis=(1, 2)) / 255.0
        if self.nan_red is not None:
            p[np.isclose(red.mean(axis=(1, 2)), self.nan_red)] = np.nan
        self.frames += len(p)
        p = p.astype(np.float32)
        return RewardResult(p, p - 1.0, self.model_id, self.model_version)


def frame(red: int) -> dict[str, np.ndarray]:
    """One step's frames: a uniform (8, 8, 3) image of this red level."""
    img = np.zeros((8, 8, 3), np.uint8)
    img[..., 0] = red
    return {CAM: img}


HIGH, LOW = 230, 25  # p = 0.90 and 0.10


def rewarder(model: RewardModel, k: int = 2, n: int = 3, **kw) -> OnlineRewarder:
    return OnlineRewarder(model, DetectorConfig(threshold=0.5, k=k, n=n), (CAM,), **kw)


def run(r: OnlineRewarder, episode: int, reds: list[int]) -> list[StepLabel]:
    """Submit one step per red level, collecting after each (as the reward wrapper does)."""
    out = []
    for t, red in enumerate(reds):
        r.submit(episode, t, frame(red), None)
        out += r.collect((episode, t), 0.0)
    return out


# -- in process ------------------------------------------------------------------------------


def test_in_process_labels_every_step_in_order_with_the_models_reward():
    model = MeanRed()
    r = rewarder(model, k=3, n=3)
    assert isinstance(r, StepRewarder)
    assert (r.model_id, r.model_version, r.cameras) == ("mean-red", "1", (CAM,))
    r.begin_episode(0)
    reds = [0, 51, 102, 153, 255]
    labels = run(r, 0, reds)
    assert [(lab.episode, lab.step) for lab in labels] == [(0, t) for t in range(5)]
    for lab, red in zip(labels, reds, strict=True):
        assert lab.success_prob == pytest.approx(red / 255.0, abs=1e-6)
        assert lab.reward == pytest.approx(red / 255.0 - 1.0, abs=1e-6)
        assert not (lab.failed or lab.terminated or lab.success) and lab.error == ""
    assert r.in_flight == 0 and model.frames == 5


def test_k_of_n_confirms_at_the_kth_firing_frame_in_the_window():
    r = rewarder(MeanRed(), k=2, n=3)
    r.begin_episode(0)
    # Fires at 0 and 3 only: never 2 within 3 frames.
    labels = run(r, 0, [HIGH, LOW, LOW, HIGH, LOW, LOW])
    assert not any(lab.terminated for lab in labels)
    r.begin_episode(1)
    labels = run(r, 1, [LOW, HIGH, LOW, HIGH, HIGH])
    assert [lab.terminated for lab in labels] == [False, False, False, True, False]
    assert labels[3].success
    # After the confirmation the episode is over for the detector: a later high frame is
    # labelled (its reward counts) but terminates nothing.
    assert labels[4].reward == pytest.approx(HIGH / 255 - 1, abs=1e-6)
    assert not labels[4].success


def test_detector_window_is_per_episode():
    r = rewarder(MeanRed(), k=2, n=3)
    r.begin_episode(0)
    run(r, 0, [LOW, HIGH])  # one fired frame at the end of episode 0
    r.begin_episode(1)
    labels = run(r, 1, [HIGH, LOW, LOW])  # one fired frame: without carry-over, no k=2
    assert not any(lab.terminated for lab in labels)
    labels = r.collect(None, 0.0)
    assert labels == []


def test_late_labels_of_an_ended_episode_never_terminate():
    r = rewarder(MeanRed(), k=1, n=1)
    r.begin_episode(0)
    for t in range(3):  # answered at once in process, but not collected before the reset
        r.submit(0, t, frame(HIGH), None)
    r.begin_episode(1)
    late = r.collect(None, 0.0)
    assert [(lab.episode, lab.step) for lab in late] == [(0, 0), (0, 1), (0, 2)]
    assert all(lab.success_prob > 0.5 and not lab.terminated for lab in late)
    # The new episode's detector is fresh: its first high frame confirms.
    labels = run(r, 1, [HIGH])
    assert labels[0].terminated and labels[0].success


def test_nan_from_the_model_is_a_failed_label_and_the_episode_goes_on():
    r = rewarder(MeanRed(nan_red=77), k=1, n=1)
    r.begin_episode(0)
    labels = run(r, 0, [LOW, 77, HIGH])
    assert [lab.failed for lab in labels] == [False, True, False]
    bad = labels[1]
    assert math.isnan(bad.reward) and math.isnan(bad.success_prob)
    assert "mean-red" in bad.error and "nan" in bad.error
    assert not bad.terminated
    assert labels[2].terminated and labels[2].success


def test_missing_camera_is_a_key_error_naming_it():
    r = rewarder(MeanRed())
    r.begin_episode(0)
    with pytest.raises(KeyError, match="front"):
        r.submit(0, 0, {"wrist": frame(1)[CAM]}, None)
    assert r.in_flight == 0


def test_episode_and_step_misuse_is_refused():
    r = rewarder(MeanRed())
    with pytest.raises(ValueError, match="begin_episode"):
        r.submit(0, 0, frame(1), None)
    r.begin_episode(3)
    with pytest.raises(ValueError, match="does not follow"):
        r.begin_episode(3)
    r.submit(3, 0, frame(1), None)
    with pytest.raises(ValueError, match="already submitted"):
        r.submit(3, 0, frame(1), None)
    with pytest.raises(ValueError, match="remote"):
        OnlineRewarder(None, DetectorConfig(), (CAM,))


def test_confirmation_is_logged_with_its_frames_and_a_lazy_log_stays_absent(tmp_path):
    quiet, busy = tmp_path / "quiet", tmp_path / "busy"
    r = rewarder(MeanRed(), k=1, n=1, trigger_log=TriggerLog(quiet, lazy=True))
    r.begin_episode(0)
    run(r, 0, [LOW, LOW])
    assert not quiet.exists()  # nothing confirmed: the lazy log created nothing
    log = TriggerLog(busy, lazy=True)
    r = rewarder(MeanRed(), k=1, n=1, trigger_log=log)
    r.begin_episode(0)
    assert run(r, 0, [LOW, HIGH])[-1].terminated
    log.close()
    lines = (busy / "triggers.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"confirmed"' in lines[0]
    assert any(p.suffix == ".png" for p in busy.rglob("*"))


# -- through a real reward server ------------------------------------------------------------

grpc = pytest.importorskip("grpc", reason="reward serving needs the `serve` extra (grpcio)")
pytest.importorskip("grpc_health", reason="reward serving needs the `serve` extra")
from rewards.serve import AsyncRewardLabeller, RewardClient, serve  # noqa: E402


@pytest.fixture
def gated() -> Iterator[tuple[MeanRed, threading.Event, object]]:
    gate = threading.Event()
    model = MeanRed(gate=gate)
    srv = serve(model, max_wait_ms=1.0)
    try:
        yield model, gate, srv
    finally:
        gate.set()
        srv.stop(grace_s=0.0)


def remote(address: str, k: int = 2, n: int = 3, late_timeout_s: float = WAIT_S):
    client = RewardClient(address, timeout_s=WAIT_S)
    info = client.info()
    labeller = AsyncRewardLabeller(client, late_timeout_s=late_timeout_s)
    r = OnlineRewarder.remote(
        labeller, DetectorConfig(threshold=0.5, k=k, n=n), (CAM,), info.model_id,
        info.model_version,
    )  # fmt: skip
    return r, client


def collect_until(r: OnlineRewarder, keys: list[tuple[int, int]]) -> list[StepLabel]:
    """Collect until the labels of ``keys`` came (each wait bounded by WAIT_S)."""
    out: list[StepLabel] = []
    for key in keys:
        if key not in [(lab.episode, lab.step) for lab in out]:
            out += r.collect(key, WAIT_S)
        assert key in [(lab.episode, lab.step) for lab in out], f"no label for {key}"
    return out


def test_remote_late_labels_arrive_in_step_order_and_drain_returns_the_rest(gated):
    model, gate, srv = gated
    r, client = remote(srv.address, k=2, n=3)
    try:
        assert (r.model_id, r.model_version) == ("mean-red", "1")
        r.begin_episode(0)
        reds = [LOW, HIGH, HIGH, LOW, HIGH]
        pending = []
        for t, red in enumerate(reds):
            r.submit(0, t, frame(red), None)
            pending += r.collect((0, t), 0.01)  # the model is blocked: nothing comes in time
        assert pending == [] and r.in_flight == 5
        assert model.entered.wait(WAIT_S)
        gate.set()
        labels = collect_until(r, [(0, 0), (0, 1), (0, 2)])
        labels += r.drain(WAIT_S)
        assert [(lab.episode, lab.step) for lab in labels] == [(0, t) for t in range(5)]
        assert not any(lab.failed for lab in labels)
        for lab, red in zip(labels, reds, strict=True):  # JPEG keeps a flat colour
            assert lab.success_prob == pytest.approx(red / 255.0, abs=0.02)
            assert lab.reward == pytest.approx(lab.success_prob - 1.0, abs=1e-6)
        # Judged in step order by the detector: fired 1, 2 -> confirmed at step 2.
        assert [lab.terminated for lab in labels] == [False, False, True, False, False]
        assert r.in_flight == 0 and r.drain(0.0) == []
    finally:
        r.close()
        client.close()


def test_remote_drain_timeout_fails_the_unanswered_and_later_answers_are_ignored(gated):
    model, gate, srv = gated
    r, client = remote(srv.address)
    try:
        r.begin_episode(0)
        for t in range(3):
            r.submit(0, t, frame(HIGH), None)
        assert model.entered.wait(WAIT_S)
        failed = r.drain(0.05)
        assert [(lab.step, lab.failed) for lab in failed] == [(0, True), (1, True), (2, True)]
        assert all("no answer within 0.05 s" in lab.error for lab in failed)
        assert all(math.isnan(lab.reward) for lab in failed)
        gate.set()
        r.begin_episode(1)
        r.submit(1, 0, frame(LOW), None)
        got = collect_until(r, [(1, 0)])  # the late answers of episode 0 are not labelled twice
        assert [(lab.episode, lab.step) for lab in got] == [(1, 0)]
        assert r.drain(WAIT_S) == []
        assert r._answers == {}  # nothing kept for the given-up steps (no leak)
    finally:
        r.close()
        client.close()


def test_remote_server_stopped_gives_failed_labels_with_the_error():
    model = MeanRed()
    srv = serve(model, max_wait_ms=1.0)
    r, client = remote(srv.address, late_timeout_s=5.0)
    try:
        r.begin_episode(0)
        r.submit(0, 0, frame(HIGH), None)
        ok = collect_until(r, [(0, 0)])
        assert not ok[0].failed and ok[0].success_prob == pytest.approx(0.9, abs=0.02)
        srv.stop(grace_s=0.0)
        for t in (1, 2):
            r.submit(0, t, frame(HIGH), None)
        labels = r.drain(WAIT_S)
        assert [(lab.step, lab.failed) for lab in labels] == [(1, True), (2, True)]
        for lab in labels:
            assert "RewardServiceError" in lab.error or "RewardTimeout" in lab.error
            assert "reward server" in lab.error and not lab.terminated
    finally:
        srv.stop(grace_s=0.0)
        r.close()
        client.close()


# -- a person's verdict ------------------------------------------------------------------------


def test_a_persons_verdict_ends_the_episode_whatever_the_model_says():
    model = MeanRed(nan_red=77)
    r = rewarder(model, k=3, n=3)
    r.begin_episode(0)
    r.submit(0, 0, frame(LOW), None)
    r.submit(0, 1, frame(LOW), None, human="success")  # the model says 0.1: the person wins
    first, second = r.collect((0, 1), 0.0)
    assert not first.terminated and first.reward == pytest.approx(LOW / 255 - 1)
    assert second.terminated and second.success and second.reward == 0.0
    assert second.success_prob == 1.0
    r.begin_episode(1)
    r.submit(1, 0, frame(HIGH), None, human="failure")  # the model says 0.9: still failure
    (lab,) = r.collect((1, 0), 0.0)
    assert lab.terminated and not lab.success and lab.reward == pytest.approx(HIGH / 255 - 1)
    r.begin_episode(2)
    r.submit(2, 0, frame(77), None, human="success")  # no model answer: the person's stands
    (lab,) = r.collect((2, 0), 0.0)
    assert not lab.failed and lab.terminated and lab.success and lab.reward == 0.0
    with pytest.raises(ValueError, match="human must be"):
        r.submit(2, 1, frame(LOW), None, human="maybe")
