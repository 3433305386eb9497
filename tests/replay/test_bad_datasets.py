"""Bad datasets on disk: every loader refuses them with an error that names the dataset, the
episode / array / row and the fix, and nothing stored is lost or changed (every file is hashed
before and after). The datasets are tiny logs written by the real EpisodeLog; the damage is done
to the files, as a disk error, an interrupted copy or a buggy writer would."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import replay_data as rd
import zarr

from robot_rl.cli.main import main
from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.learner.routing import Router
from robot_rl.replay import (
    CorruptLogError,
    EpisodeLog,
    NonFiniteDataError,
    ReplayBuffer,
    load_checked_demos,
    load_demos,
    rebuild_buffer,
    salvage,
)

LENGTHS = (6, 4, 5)
LAYOUT = rd.layout(image_px=8, cams=("front",))


def tree_digest(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path``, by relative path."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def write_log(path: Path, bad: dict[tuple[int, int], tuple[str, float]] | None = None) -> Path:
    """Episodes of LENGTHS through the real EpisodeLog; ``bad[(ep, t)] = (key, value)`` puts
    ``value`` (NaN / inf) into the action, reward or next state that step ``t`` appends."""
    bad = bad or {}
    with EpisodeLog.create(path, LAYOUT, rd.ACTION_DIM, {"task": "t"}, flush_every_steps=3) as log:
        for ep, n in enumerate(LENGTHS):
            log.begin_episode("demo", policy_version=ep, seed=ep)
            nxt = None
            for t in range(n):
                kw = rd.step(LAYOUT, ep, t, n, pv=ep)
                if nxt is not None:
                    kw["obs_learner"] = nxt
                key, value = bad.get((ep, t), (None, None))
                if key in ("action", "policy_action"):
                    kw[key] = kw[key].copy()
                    kw[key][1] = value
                elif key == "reward":
                    kw["reward"] = value
                elif key == "state":
                    kw["next_obs_learner"]["state"] = kw["next_obs_learner"]["state"].copy()
                    kw["next_obs_learner"]["state"][2] = value
                nxt = kw["next_obs_learner"]
                log.append(**kw)
            log.end_episode(success=True)
    return path


@pytest.fixture()
def good(tmp_path) -> Path:
    return write_log(tmp_path / "demos.zarr")


def _chunk_files(array_dir: Path) -> list[Path]:
    return sorted(p for p in (array_dir / "c").rglob("*") if p.is_file())


# -- NaN / inf -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("action", np.nan, "action at step 2"),
        ("policy_action", np.inf, "policy_action at step 2"),
        ("reward", -np.inf, "reward at step 2"),
        ("state", np.nan, "obs/state at observation 3"),  # next obs of step 2 = observation 3
    ],
)
def test_nonfinite_values_refuse_the_whole_load(tmp_path, key, value, where):
    path = write_log(tmp_path / "d.zarr", {(1, 2): (key, value)})
    before = tree_digest(path)
    with pytest.raises(NonFiniteDataError) as err:
        load_demos(path)
    msg = str(err.value)
    assert str(path) in msg and f"episode 1 (demo): {where}" in msg, msg
    assert f"robot-rl dataset info {path}" in msg
    assert f"robot-rl dataset salvage {path} --out NEW_PATH" in msg
    assert "episode 0" not in msg and "episode 2" not in msg
    assert tree_digest(path) == before


def test_every_bad_episode_is_listed_at_once(tmp_path):
    path = write_log(
        tmp_path / "d.zarr",
        {(0, 5): ("reward", np.nan), (2, 0): ("action", np.inf), (2, 3): ("action", np.nan)},
    )
    with pytest.raises(NonFiniteDataError, match="in 2 episode") as err:
        load_demos(path)
    msg = str(err.value)
    assert "episode 0 (demo): reward at step 5" in msg
    assert "episode 2 (demo): action at step 0 (2 rows)" in msg


def test_nonfinite_refuses_the_resume_rebuild_too(tmp_path):
    """A run's own log on resume: rebuild_buffer (embedded) and Router.rebuild (learner)."""
    path = write_log(tmp_path / "run.zarr", {(2, 1): ("state", np.inf)})
    before = tree_digest(path)
    with EpisodeLog.open(path) as log:
        buf = ReplayBuffer(100, LAYOUT, rd.ACTION_DIM)
        with pytest.raises(NonFiniteDataError, match="episode 2 .*obs/state at observation 2"):
            rebuild_buffer(log, buf)
        assert len(buf) == 0  # checked before anything is added
        router = Router("online", ReplayBuffer(100, LAYOUT, rd.ACTION_DIM), None)
        with pytest.raises(NonFiniteDataError, match="episode 2"):
            router.rebuild(log, ("demo",))
        assert len(router.online) == 0
        # Only the episodes that are read count: a buffer that holds just the last episode.
        with pytest.raises(NonFiniteDataError):
            rebuild_buffer(log, ReplayBuffer(3, LAYOUT, rd.ACTION_DIM))
        assert rebuild_buffer(log, ReplayBuffer(100, LAYOUT, rd.ACTION_DIM), ("online",)) == 0
    assert tree_digest(path) == before


def test_info_shows_nonfinite_and_salvage_writes_a_copy_without_them(tmp_path, capsys):
    path = write_log(tmp_path / "d.zarr", {(1, 0): ("action", np.nan)})
    before = tree_digest(path)
    assert main(["dataset", "info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert info["nonfinite"] == [
        {"episode": 1, "source": "demo", "key": "action", "row": 0, "count": 1}
    ]
    out = tmp_path / "fixed.zarr"
    assert main(["dataset", "salvage", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "copied 2 of 3 episodes" in text and "skipped episode 1: " in text, text
    assert "action at step 0" in text
    buf = load_demos(out)  # the copy loads
    assert len(buf) == LENGTHS[0] + LENGTHS[2]
    with EpisodeLog.open(out) as log:
        assert [e.length for e in log.episodes] == [LENGTHS[0], LENGTHS[2]]
        assert log.meta["salvaged_from"] == str(path)
        np.testing.assert_array_equal(
            log.read_episode(1)["action"], [rd.step(LAYOUT, 2, t, 5)["action"] for t in range(5)]
        )
    assert main(["dataset", "salvage", str(path), "--out", str(out)]) == 2  # never overwrites
    assert "exists" in capsys.readouterr().err
    assert tree_digest(path) == before


# -- damaged structure -----------------------------------------------------------------------


def test_truncated_array_names_the_array_rows_and_episodes(good, tmp_path):
    arr = zarr.open_array(str(good / "data" / "action"), mode="r+")
    arr.resize((LENGTHS[0] + 2, rd.ACTION_DIM))  # an interrupted copy: episodes 1, 2 cut
    before = tree_digest(good)
    with pytest.raises(CorruptLogError) as err:
        load_demos(good)
    msg = str(err.value)
    assert f"{good} is inconsistent" in msg
    assert "data/action has 8 rows but 15 are committed" in msg
    assert "episodes 1..2 are incomplete, episodes before 1 are whole" in msg
    assert f"robot-rl dataset salvage {good} --out NEW_PATH" in msg
    assert tree_digest(good) == before
    rep = salvage(good, tmp_path / "s.zarr")
    assert rep.copied == 1 and [i for i, _ in rep.skipped] == [1, 2]
    assert "data/action has 8 rows" in rep.skipped[0][1]
    assert tree_digest(good) == before


def test_damaged_chunk_names_the_episode_and_array(good, tmp_path):
    # Observation row 8 is episode 1's second frame (episode 0 owns rows 0..6).
    chunk = good / "data" / "obs" / "images" / "front" / "c" / "8" / "0" / "0" / "0"
    # A torn write that kept only part of the 16-byte Blosc header. (A Blosc chunk cut after its
    # header can decode to garbage without an error: zarr keeps no checksum; see README.)
    chunk.write_bytes(chunk.read_bytes()[:10])
    before = tree_digest(good)
    with pytest.raises(CorruptLogError) as err:
        load_demos(good)
    msg = str(err.value)
    assert str(good) in msg and "episode 1 (data/obs/images/front rows 7..11)" in msg, msg
    assert "chunk file is damaged" in msg and "robot-rl dataset salvage" in msg
    assert tree_digest(good) == before
    rep = salvage(good, tmp_path / "s.zarr")
    assert rep.copied == 2 and [i for i, _ in rep.skipped] == [1]
    assert len(load_demos(tmp_path / "s.zarr")) == LENGTHS[0] + LENGTHS[2]


def test_damaged_step_chunk_is_a_clear_error(good):
    (chunk,) = _chunk_files(good / "data" / "reward")
    chunk.write_bytes(chunk.read_bytes()[:-7])
    before = tree_digest(good)
    with pytest.raises(CorruptLogError, match=r"data/reward rows 0\.\.14 cannot be read"):
        load_demos(good)
    assert tree_digest(good) == before


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_missing_commit_record(good, tmp_path, capsys, damage):
    if damage == "deleted":
        shutil.rmtree(good / "commit")
    else:  # the group survives but its attributes were lost
        doc = json.loads((good / "commit" / "zarr.json").read_text())
        doc["attributes"] = {}
        (good / "commit" / "zarr.json").write_text(json.dumps(doc))
    before = tree_digest(good)
    with pytest.raises(CorruptLogError, match=r"commit record \(commit/zarr.json\) is missing"):
        load_demos(good)
    assert main(["dataset", "info", str(good)]) == 2
    err = capsys.readouterr().err
    assert "CorruptLogError" in err and str(good) in err and "dataset salvage" in err
    # The episode table survives: salvage gets every episode back.
    rep = salvage(good, tmp_path / "s.zarr")
    assert rep.copied == 3 and not rep.skipped
    with (
        EpisodeLog.open(tmp_path / "s.zarr") as log,
        EpisodeLog.open(write_log(tmp_path / "ref.zarr")) as ref,
    ):
        for i in range(3):
            a, b = log.read_episode(i), ref.read_episode(i)
            np.testing.assert_array_equal(a["obs"]["images"]["front"], b["obs"]["images"]["front"])
            np.testing.assert_array_equal(a["reward"], b["reward"])
    assert tree_digest(good) == before


# -- another observation layout --------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "action_dim", "phrase"),
    [
        (ObsLayout(7, LAYOUT.images), rd.ACTION_DIM, "state has 5 values, the env 7"),
        (
            ObsLayout(rd.STATE_DIM, {**LAYOUT.images, "wrist": ArraySpec((8, 8, 3), "uint8")}),
            rd.ACTION_DIM,
            "camera 'wrist' is missing (the env has it, (8, 8, 3))",
        ),
        (ObsLayout(rd.STATE_DIM, {}), rd.ACTION_DIM, "camera 'front' is extra"),
        (
            ObsLayout(rd.STATE_DIM, {"front": ArraySpec((16, 16, 3), "uint8")}),
            rd.ACTION_DIM,
            "camera 'front' is (8, 8, 3) uint8, the env's (16, 16, 3)",
        ),
        (LAYOUT, rd.ACTION_DIM + 4, "actions have 3 values, the env 7"),
    ],
)
def test_other_layout_is_refused_before_loading(good, layout, action_dim, phrase):
    before = tree_digest(good)
    with pytest.raises(ValueError) as err:
        load_checked_demos(good, layout, action_dim)
    msg = str(err.value)
    assert f"demos {good} do not fit the env" in msg and phrase in msg, msg
    assert f"robot-rl dataset info {good}" in msg
    assert tree_digest(good) == before
    assert len(load_checked_demos(good, LAYOUT, rd.ACTION_DIM)) == 15


def test_salvage_reports_an_episode_a_crash_left_open(good, tmp_path):
    with EpisodeLog.open(good, mode="a", flush_every_steps=1) as log:
        log.begin_episode("demo", seed=3)
        for t in range(2):
            log.append(**rd.step(LAYOUT, 3, t, 9))
    # closed without end_episode: the episode stays open in the commit record
    rep = salvage(good, tmp_path / "s.zarr")
    assert rep.copied == 3 and rep.skipped[0][0] == 3 and "never ended" in rep.skipped[0][1]
