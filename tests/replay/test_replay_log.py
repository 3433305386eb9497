"""EpisodeLog: zarr round trip, metadata, recovery flags, corrupt-store errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import replay_data as rd
import zarr

from robot_rl.replay import (
    CorruptLogError,
    EpisodeLog,
    UnfinishedEpisodeError,
    salvage,
)

LENGTHS = (7, 1, 12)


@pytest.fixture()
def log_path(tmp_path):
    path = tmp_path / "log.zarr"
    with EpisodeLog.create(
        path, rd.layout(), rd.ACTION_DIM, {"task": "t"}, flush_every_steps=4
    ) as log:
        for ep, n in enumerate(LENGTHS):
            rd.write_episode(log, ep, n, source="demo" if ep < 2 else "online", success=ep != 1)
    return path


def _assert_episode_matches(got: dict, ep: int, length: int, lay) -> None:
    for t in range(length):
        want = rd.step(lay, ep, t, length, pv=ep)
        np.testing.assert_array_equal(got["obs"]["state"][t], want["obs_learner"]["state"])
        np.testing.assert_array_equal(
            got["next_obs"]["state"][t], want["next_obs_learner"]["state"]
        )
        for c in lay.images:
            np.testing.assert_array_equal(
                got["obs"]["images"][c][t], want["obs_learner"]["images"][c]
            )
            np.testing.assert_array_equal(
                got["next_obs"]["images"][c][t], want["next_obs_learner"]["images"][c]
            )
        np.testing.assert_array_equal(got["action"][t], want["action"])
        assert got["reward"][t] == np.float32(want["reward"])
        assert got["terminated"][t] == want["terminated"]
        assert got["policy_version"][t] == ep
        assert got["stamp_s"][t] == want["stamp_s"]


def test_an_episode_read_without_its_frames_has_everything_else(log_path):
    with EpisodeLog.open(log_path) as log:
        full, bare = log.read_episode(2), log.read_episode(2, images=False)
    assert "images" not in bare["obs"] and "images" not in bare["next_obs"]
    for part in ("obs", "next_obs"):
        np.testing.assert_array_equal(bare[part]["state"], full[part]["state"])
    for k in ("action", "reward", "terminated", "truncated", "intervened", "stamp_s"):
        np.testing.assert_array_equal(bare[k], full[k])
    assert bare["meta"] == full["meta"]


def test_round_trip_is_bit_identical(log_path):
    lay = rd.layout()
    with EpisodeLog.open(log_path) as log:
        assert log.layout == lay and log.action_dim == rd.ACTION_DIM
        assert log.meta == {"task": "t"}
        assert log.num_episodes == 3 and log.num_steps == sum(LENGTHS)
        for ep, n in enumerate(LENGTHS):
            got = log.read_episode(ep)
            assert got["obs"]["images"]["front"].dtype == np.uint8
            assert got["obs"]["state"].dtype == np.float32
            _assert_episode_matches(got, ep, n, lay)
        metas = log.episodes
    assert [m.length for m in metas] == list(LENGTHS)
    assert [m.source for m in metas] == ["demo", "demo", "online"]
    assert [m.success for m in metas] == [True, False, True]
    assert all(m.finished and m.recovered is None for m in metas)
    assert metas[2].seed == 2 and metas[2].policy_version_max == 2
    assert metas[0].reward_model_id == "test@1"


def test_next_obs_is_stored_once(log_path):
    # T + 1 observation rows per episode, no second copy for next_obs.
    root = zarr.open_group(str(log_path), mode="r")
    n_rows = sum(n + 1 for n in LENGTHS)
    assert root["data/obs/images/front"].shape[0] == n_rows
    assert root["data/obs/state"].shape[0] == n_rows
    assert root["data/action"].shape[0] == sum(LENGTHS)
    np.testing.assert_array_equal(root["meta/episode_ends"][:], np.cumsum(LENGTHS))
    assert root["data/obs/images/front"].chunks[0] == 1  # one chunk per step: cheap appends


def test_append_after_reopen(log_path):
    with EpisodeLog.open(log_path, mode="a") as log:
        rd.write_episode(log, 3, 5)
    with EpisodeLog.open(log_path) as log:
        assert log.num_episodes == 4
        _assert_episode_matches(log.read_episode(3), 3, 5, rd.layout())
        _assert_episode_matches(log.read_episode(0), 0, LENGTHS[0], rd.layout())


def test_read_only_open_refuses_writes(log_path):
    with EpisodeLog.open(log_path, mode="r") as log, pytest.raises(RuntimeError, match="read-only"):
        log.begin_episode("demo")


def test_create_refuses_to_overwrite(log_path):
    with pytest.raises(FileExistsError):
        EpisodeLog.create(log_path, rd.layout(), rd.ACTION_DIM)


def test_a_log_being_created_is_never_seen_half_made(tmp_path, monkeypatch):
    """A reader polling for a log (the rehearsal's report reads the actor's log while it runs)
    must never open a store whose arrays exist but whose attributes do not yet: the store is
    built beside its path and renamed into place. Checked at the last write of the build."""
    import robot_rl.replay.schema as schema

    path = tmp_path / "log.zarr"
    seen = []
    real = schema.commit_record

    def build_step(*args):
        seen.append(path.exists())  # the commit group is written just before the attributes
        return real(*args)

    monkeypatch.setattr(schema, "commit_record", build_step)
    with EpisodeLog.create(path, rd.layout(), rd.ACTION_DIM) as log:
        assert seen == [False]
        rd.write_episode(log, 0, 3)
    monkeypatch.undo()
    with EpisodeLog.open(path) as log:
        assert log.num_episodes == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.zarr"]  # no leftover
    with pytest.raises(FileExistsError, match="exists"):
        EpisodeLog.create(path, rd.layout(), rd.ACTION_DIM)


def test_rows_read_back_right_after_a_flush_equal_the_stored_ones(tmp_path):
    """The writer reads its last flushed rows from memory (the actor's outbox sends each step
    just after its flush); what it returns must be what the store holds, dtypes included, and a
    caller that edits the result must not change a later read."""
    lay = rd.layout()
    path = tmp_path / "log.zarr"
    checked = 0
    with EpisodeLog.create(path, lay, rd.ACTION_DIM, flush_every_steps=3) as log:
        for ep, n in enumerate((5, 40)):  # the second outgrows the rows kept in memory
            log.begin_episode("online", policy_version=ep, seed=ep)
            for t in range(n):
                log.append(**rd.step(lay, ep, t, n, pv=ep))
                em = log.open_episode
                if em is None or em.length == 0:
                    continue
                lo = max(0, em.length - 4)
                mine = log.read_episode(em.index, lo, em.length)
                files = EpisodeLog.open(path, mode="r", unfinished="truncate")
                want = files.read_episode(em.index, lo, em.length)
                files.close()
                for k in ("action", "reward", "terminated", "policy_version", "stamp_s"):
                    assert mine[k].dtype == want[k].dtype
                    np.testing.assert_array_equal(mine[k], want[k])
                for part in ("obs", "next_obs"):
                    np.testing.assert_array_equal(mine[part]["state"], want[part]["state"])
                    for c in lay.images:
                        got, exp = mine[part]["images"][c], want[part]["images"][c]
                        assert got.dtype == exp.dtype
                        np.testing.assert_array_equal(got, exp)
                mine["reward"][:] = -7.0  # a caller's edit stays in its copy
                again = log.read_episode(em.index, lo, em.length)
                assert not np.any(again["reward"] == -7.0)
                checked += 1
            log.end_episode(success=True)
    assert checked > 10


def test_discontinuous_obs_is_rejected(tmp_path):
    lay = rd.layout()
    with EpisodeLog.create(tmp_path / "x.zarr", lay, rd.ACTION_DIM) as log:
        log.begin_episode("online")
        log.append(**rd.step(lay, 0, 0, 5))
        bad = rd.step(lay, 0, 1, 5)
        bad["obs_learner"] = rd.obs(lay, 9, 9)
        with pytest.raises(ValueError, match="next_obs_learner"):
            log.append(**bad)


def test_abort_episode_discards_it(tmp_path):
    lay = rd.layout()
    path = tmp_path / "x.zarr"
    with EpisodeLog.create(path, lay, rd.ACTION_DIM, flush_every_steps=2) as log:
        rd.write_episode(log, 0, 3)
        log.begin_episode("online")
        for t in range(5):
            log.append(**rd.step(lay, 1, t, 10))
        log.abort_episode()
        rd.write_episode(log, 2, 4)
    with EpisodeLog.open(path, unfinished="error") as log:
        assert [m.length for m in log.episodes] == [3, 4]
        _assert_episode_matches(log.read_episode(1), 2, 4, lay)


def _open_unfinished(tmp_path):
    """A log with 2 finished episodes and one open episode of 6 flushed steps (not closed)."""
    lay = rd.layout()
    path = tmp_path / "u.zarr"
    log = EpisodeLog.create(path, lay, rd.ACTION_DIM, flush_every_steps=3)
    rd.write_episode(log, 0, 4)
    rd.write_episode(log, 1, 2)
    log.begin_episode("online", policy_version=7, seed=11)
    for t in range(6):
        log.append(**rd.step(lay, 2, t, 100, pv=7))
    return path, log  # the writer is abandoned, as if the process had died


@pytest.mark.parametrize("mode", ["r", "a"])
def test_unfinished_episode_truncate(tmp_path, mode):
    path, _ = _open_unfinished(tmp_path)
    with EpisodeLog.open(path, unfinished="truncate", mode=mode) as log:
        assert log.num_episodes == 3
        m = log.episodes[-1]
        assert (m.length, m.finished, m.recovered, m.success, m.seed) == (
            6,
            True,
            "truncated",
            None,
            11,
        )
        ep = log.read_episode(2)
        assert ep["truncated"].tolist() == [False] * 5 + [True]
        np.testing.assert_array_equal(
            ep["next_obs"]["state"][-1], rd.obs(log.layout, 2, 6)["state"]
        )
    with EpisodeLog.open(path, unfinished="error" if mode == "a" else "truncate") as log:
        assert log.num_episodes == 3  # written for mode "a"; recomputed for "r"


@pytest.mark.parametrize("mode", ["r", "a"])
def test_unfinished_episode_drop(tmp_path, mode):
    path, _ = _open_unfinished(tmp_path)
    with EpisodeLog.open(path, unfinished="drop", mode=mode) as log:
        assert [m.length for m in log.episodes] == [4, 2]
        if mode == "a":
            rd.write_episode(log, 5, 3)
    with (
        EpisodeLog.open(path, unfinished="error")
        if mode == "a"
        else EpisodeLog.open(path, unfinished="drop") as log
    ):
        assert [m.length for m in log.episodes] == ([4, 2, 3] if mode == "a" else [4, 2])
        if mode == "a":
            _assert_episode_matches(log.read_episode(2), 5, 3, log.layout)


def test_unfinished_episode_error(tmp_path):
    path, _ = _open_unfinished(tmp_path)
    with pytest.raises(UnfinishedEpisodeError, match="unfinished='truncate'"):
        EpisodeLog.open(path, unfinished="error")


def test_missing_array_is_a_clear_error(log_path):
    shutil.rmtree(log_path / "data" / "reward")
    with pytest.raises(CorruptLogError, match=r"missing arrays \['data/reward'\].*salvage"):
        EpisodeLog.open(log_path)


def test_short_array_is_a_clear_error_and_salvage_keeps_complete_episodes(log_path, tmp_path):
    # Shrink the image array as an incomplete copy would: the last episode loses rows.
    arr = zarr.open_array(str(log_path / "data" / "obs" / "images" / "wrist"), mode="r+")
    arr.resize((arr.shape[0] - 3, *arr.shape[1:]))
    with pytest.raises(CorruptLogError, match="data/obs/images/wrist has .* rows but .* committed"):
        EpisodeLog.open(log_path)
    out = tmp_path / "salvaged.zarr"
    assert salvage(log_path, out).copied == 2
    with EpisodeLog.open(out, unfinished="error") as log:
        assert [m.length for m in log.episodes] == list(LENGTHS[:2])
        for ep, n in enumerate(LENGTHS[:2]):
            _assert_episode_matches(log.read_episode(ep), ep, n, log.layout)


def test_inconsistent_commit_record_is_a_clear_error(log_path):
    commit = log_path / "commit" / "zarr.json"
    doc = json.loads(commit.read_text())
    doc["attributes"]["num_episodes"] = 5
    commit.write_text(json.dumps(doc))
    with pytest.raises(CorruptLogError, match="5 episodes are committed"):
        EpisodeLog.open(log_path)


def test_not_a_log(tmp_path):
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w")
    with pytest.raises(CorruptLogError, match="not a robot_rl episode log"):
        EpisodeLog.open(tmp_path / "other.zarr")
    with pytest.raises(FileNotFoundError):
        EpisodeLog.open(tmp_path / "nothing.zarr")


def test_time_based_flush_makes_steps_durable(tmp_path):
    lay = rd.layout()
    path = tmp_path / "t.zarr"
    log = EpisodeLog.create(path, lay, rd.ACTION_DIM, flush_every_steps=1000, flush_interval_s=1e-9)
    log.begin_episode("online")
    for t in range(3):
        log.append(**rd.step(lay, 0, t, 100))
    with EpisodeLog.open(path, unfinished="truncate", mode="r") as reader:
        assert reader.episodes[0].length == 3


@pytest.mark.parametrize("unfinished", ["truncate", "drop"])
def test_crash_between_data_and_commit_ignores_uncommitted_rows(tmp_path, unfinished):
    # Fault injection (no mock of a component): the writer dies after a flush wrote its arrays
    # but before the commit record, the worst point of a flush.
    lay = rd.layout()
    path = tmp_path / "c.zarr"
    log = EpisodeLog.create(path, lay, rd.ACTION_DIM, flush_every_steps=3)
    rd.write_episode(log, 0, 4)
    log.begin_episode("online", seed=1)
    for t in range(6):  # two flushes, committed
        log.append(**rd.step(lay, 1, t, 100))

    def die() -> None:
        raise KeyboardInterrupt("killed")

    log._write_commit = die
    with pytest.raises(KeyboardInterrupt):
        for t in range(6, 9):
            log.append(**rd.step(lay, 1, t, 100))
    root = zarr.open_group(str(path), mode="r")
    written = [rd.step(lay, 1, t, 100)["reward"] for t in range(6, 9)]
    np.testing.assert_allclose(root["data/reward"][10:13], written)  # past the commit record
    with EpisodeLog.open(path, unfinished=unfinished, mode="a") as log2:
        lengths = [m.length for m in log2.episodes]
        assert lengths == ([4, 6] if unfinished == "truncate" else [4])
        if unfinished == "truncate":
            _assert_episode_matches(log2.read_episode(0), 0, 4, lay)
            ep = log2.read_episode(1)
            np.testing.assert_array_equal(ep["next_obs"]["state"][-1], rd.obs(lay, 1, 6)["state"])
        rd.write_episode(log2, 7, 2)
    root = zarr.open_group(str(path), mode="r")
    n = sum(lengths) + 2
    assert root["data/reward"].shape[0] == n  # uncommitted rows were trimmed, then appended to
    with EpisodeLog.open(path, unfinished="error") as log3:
        _assert_episode_matches(log3.read_episode(len(lengths)), 7, 2, lay)


def test_a_background_flush_writes_what_the_owner_buffered_while_appends_go_on(
    tmp_path, monkeypatch
):
    """auto_flush=False: appends stay in RAM until the owner flushes; a background flush (a
    real-time loop starts it before it waits for its robot) makes them durable while the owner
    appends more; a second one is not started while the first writes; every other write waits
    for it."""
    import threading

    import robot_rl.replay.log as log_module

    gate = threading.Event()  # holds the background flush at its first array write
    real_write = log_module.write_rows

    def held_write(*args, **kw):
        if threading.current_thread() is not threading.main_thread():
            assert gate.wait(30.0)
        return real_write(*args, **kw)

    monkeypatch.setattr(log_module, "write_rows", held_write)
    lay = rd.layout()
    path = tmp_path / "bg.zarr"
    log = EpisodeLog.create(path, lay, rd.ACTION_DIM, flush_every_steps=2, auto_flush=False)
    log.begin_episode("online")
    for t in range(5):
        log.append(**rd.step(lay, 0, t, 10))
    assert log.flush_due() and log.open_episode is not None
    assert log.open_episode.length == 0  # nothing durable: the owner did not flush
    assert log.flush_in_background() and log.flushing
    for t in range(5, 8):  # the owner goes on while the flush writes
        log.append(**rd.step(lay, 0, t, 10))
    assert log.flush_due() and not log.flush_in_background()  # the first one still writes
    assert log.open_episode.length == 0
    gate.set()
    log.join_flush()
    assert not log.flushing
    assert log.open_episode.length == 5  # what the flush took; steps 5-7 still buffered
    assert log.flush_in_background()
    log.end_episode(success=True)  # waits for that flush, writes the rest
    assert log.episodes[0].length == 8
    with EpisodeLog.open(path, mode="r") as reader:  # on disk too, bit-identical
        assert reader.episodes[0].length == 8
        np.testing.assert_array_equal(
            reader.read_episode(0)["obs"]["state"][5], rd.obs(lay, 0, 5)["state"]
        )
    log.begin_episode("online")
    for t in range(2):
        log.append(**rd.step(lay, 1, t, 10))
    assert log.flush_in_background()
    log.close()  # waits for the flush and writes the rest
    with EpisodeLog.open(path, unfinished="truncate", mode="r") as reader:
        assert [e.length for e in reader.episodes] == [8, 2]
