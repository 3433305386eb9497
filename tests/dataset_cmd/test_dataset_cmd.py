"""``robot-rl dataset info|export|import``: on datasets recorded with the real twin (``collect``),
plus online episodes with interventions and an episode a "crash" left open, written through the
real EpisodeLog (``dataset_helpers``, fixtures in ``conftest``). The LeRobot export is read back
with pyarrow, pandas and imageio-ffmpeg; ``test_lerobot_crosscheck.py`` checks both directions
against LeRobot's own package."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli as robot_rl
from dataset_helpers import (
    FPS,
    IMG,
    ONLINE_IV,
    OPEN_STEPS,
    episodes_of,
    in_process,
)

from robot_rl.app.envs.collect import CollectConfig, LearnerEnvConfig, run_collect
from robot_rl.core import keys
from robot_rl.replay import EpisodeLog

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")
imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")


# -- info --------------------------------------------------------------------------------------


def test_info_json_matches_what_was_written(pixels):
    proc = robot_rl("dataset", "info", str(pixels), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    eps = episodes_of(pixels)
    lengths = [e["meta"].length for e in eps]
    assert r["episodes"] == 4 and r["steps"] == sum(lengths)
    assert lengths[2:] == [len(ONLINE_IV), OPEN_STEPS]
    assert r["by_source"]["demo"]["episodes"] == 2
    assert r["by_source"]["online"] == {
        "episodes": 2,
        "steps": len(ONLINE_IV) + OPEN_STEPS,
        "success_rate": 0.0,  # one failure; the unfinished episode's success is unknown
        "intervened_steps": int(ONLINE_IV.sum()),
        "intervened_episodes": 1,
    }
    assert r["success"] == {"episodes": 4, "known": 3, "successes": 2, "rate": 2 / 3}
    assert r["intervention"]["steps"] == int(ONLINE_IV.sum())
    assert r["intervention"]["step_rate"] == pytest.approx(ONLINE_IV.sum() / sum(lengths))
    assert r["intervention"]["episodes"] == 1 and r["intervention"]["episode_rate"] == 0.25
    assert r["cameras"] == {"front": [IMG, IMG, 3], "wrist": [IMG, IMG, 3]}
    assert r["state_dim"] == eps[0]["obs"][keys.STATE].shape[1] and r["action_dim"] == 4
    assert r["fps_from_stamps"] == pytest.approx(FPS)
    assert r["unfinished_episodes"] == [3]
    assert r["terminated_episodes"] == 2 and r["truncated_episodes"] == 2
    assert r["policy_versions"] == [0, 4]  # per-step versions: 3 + t // 4
    files = [p for p in pixels.rglob("*") if p.is_file()]
    assert r["size_bytes"] == sum(p.stat().st_size for p in files) > 0
    assert r["meta"]["env"]["task"] == "pick_cube"


def test_info_table_for_humans(state):
    proc = robot_rl("dataset", "info", str(state))
    assert proc.returncode == 0, proc.stderr
    for text in ("episodes", "success rate", "66.7%", "unfinished", "online", "demo"):
        assert text in proc.stdout


def test_info_and_export_reject_paths_that_are_not_datasets(tmp_path, state, capsys):
    import zarr

    zarr.open_group(str(tmp_path / "other.zarr"), mode="w", zarr_format=3)
    (tmp_path / "file.txt").write_text("not a dataset")
    for bad in (tmp_path / "missing.zarr", tmp_path / "other.zarr", tmp_path / "file.txt"):
        code, _, err = in_process(capsys, "dataset", "info", str(bad))
        assert code == 2 and "robot-rl: error:" in err and str(bad) in err, err
        code, _, err = in_process(
            capsys, "dataset", "export", str(bad), "--out", str(tmp_path / "o")
        )
        assert code == 2 and not (tmp_path / "o").exists(), err
    broken = tmp_path / "broken.zarr"
    shutil.copytree(state, broken)
    shutil.rmtree(broken / "data" / "action")
    proc = robot_rl("dataset", "info", str(broken))  # a real process: exit status 2
    assert proc.returncode == 2 and "CorruptLogError" in proc.stderr, proc.stderr


# -- export: layout and contents ---------------------------------------------------------------


def test_export_info_json_has_what_the_loader_needs(exported, pixels):
    info = json.loads((exported / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert info["fps"] == FPS and isinstance(info["fps"], int)
    assert info["total_episodes"] == 4 and info["total_tasks"] == 1
    assert info["total_frames"] == sum(e["meta"].length for e in episodes_of(pixels))
    assert info["splits"] == {"train": "0:4"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == (
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    )
    assert info["chunks_size"] == 1000
    assert info["data_files_size_in_mb"] > 0 and info["video_files_size_in_mb"] > 0
    f = info["features"]
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert f[name]["shape"] == [1]
    assert f["timestamp"]["dtype"] == "float32" and f["index"]["dtype"] == "int64"
    assert f["action"] == {"dtype": "float32", "shape": [4], "names": ["dx", "dy", "dz", "gripper"]}
    assert f["observation.state"]["dtype"] == "float32"
    assert f["next.reward"]["dtype"] == "float32" and f["next.done"]["dtype"] == "bool"
    for cam in ("front", "wrist"):
        v = f[f"observation.images.{cam}"]
        assert v["dtype"] == "video" and v["shape"] == [IMG, IMG, 3]
        assert v["names"] == ["height", "width", "channels"]
        assert v["info"]["video.codec"] == "av1" and v["info"]["video.pix_fmt"] == "yuv420p"
        assert v["info"]["video.fps"] == FPS and v["info"]["video.height"] == IMG
    assert all("/" not in name for name in f)


def test_export_frames_equal_the_zarr_source(exported, pixels):
    eps = episodes_of(pixels)
    info = json.loads((exported / "meta" / "info.json").read_text())
    data = pq.read_table(exported / "data" / "chunk-000" / "file-000.parquet")
    non_video = [k for k, v in info["features"].items() if v["dtype"] != "video"]
    assert data.column_names == non_video
    assert pa.types.is_fixed_size_list(data.schema.field("action").type)
    assert data.num_rows == info["total_frames"]
    meta = pq.read_table(exported / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    rows = meta.to_pylist()
    assert [r["episode_index"] for r in rows] == [0, 1, 2, 3]
    d = {c: np.asarray(data.column(c).to_pylist()) for c in data.column_names}
    assert np.array_equal(d["index"], np.arange(data.num_rows))
    start = 0
    for k, (ep, row) in enumerate(zip(eps, rows, strict=True)):
        n = ep["meta"].length
        sl = slice(start, start + n)
        assert row["length"] == n and row["tasks"] == ["pick up the red cube"]
        assert (row["dataset_from_index"], row["dataset_to_index"]) == (start, start + n)
        assert (row["data/chunk_index"], row["data/file_index"]) == (0, 0)
        assert row["robot_rl/source"] == ep["meta"].source
        assert row["robot_rl/success"] == ep["meta"].success
        assert np.array_equal(d["episode_index"][sl], np.full(n, k))
        assert np.array_equal(d["frame_index"][sl], np.arange(n))
        assert np.allclose(d["timestamp"][sl], np.arange(n) / FPS)
        assert np.array_equal(d["action"][sl].astype(np.float32), ep["action"])
        assert np.array_equal(d["observation.state"][sl].astype(np.float32), ep["obs"]["state"])
        assert np.array_equal(d["next.reward"][sl].astype(np.float32), ep["reward"])
        assert np.array_equal(d["next.done"][sl], np.arange(n) == n - 1)
        assert np.array_equal(d["next.truncated"][sl], ep["truncated"])
        assert np.array_equal(d["complementary_info.intervened"][sl], ep["intervened"])
        pa_ = d["complementary_info.policy_action"][sl].astype(np.float32)
        assert np.array_equal(pa_, ep["policy_action"])
        assert np.array_equal(d["complementary_info.policy_version"][sl], ep["policy_version"])
        for cam in ("front", "wrist"):
            key = f"videos/observation.images.{cam}"
            assert row[f"{key}/from_timestamp"] == pytest.approx(start / FPS)
            assert row[f"{key}/to_timestamp"] == pytest.approx((start + n) / FPS)
        start += n
    assert d["complementary_info.intervened"].sum() == ONLINE_IV.sum()
    tasks = pd.read_parquet(exported / "meta" / "tasks.parquet")
    assert tasks.index.name == "task" and list(tasks.index) == ["pick up the red cube"]
    assert tasks.loc["pick up the red cube", "task_index"] == 0


def test_export_videos_hold_every_frame_in_order(exported, pixels):
    eps = episodes_of(pixels)
    for cam in ("front", "wrist"):
        src = np.concatenate([e["obs"]["images"][cam] for e in eps])
        path = exported / "videos" / f"observation.images.{cam}" / "chunk-000" / "file-000.mp4"
        reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
        meta = next(reader)
        assert meta["size"] == (IMG, IMG) and meta["fps"] == FPS
        assert meta["codec"].startswith("av1")
        frames = np.stack([np.frombuffer(b, np.uint8).reshape(IMG, IMG, 3) for b in reader])
        assert frames.shape == src.shape  # one video frame per exported frame
        err = np.abs(frames.astype(np.int16) - src.astype(np.int16)).mean(axis=(1, 2, 3))
        assert err.max() < 8, err  # lossy (crf 30) but the same pictures, in order
        shifted = np.abs(frames[1:].astype(np.int16) - src[:-1]).mean()
        assert err.mean() < shifted


def test_export_stats_match_the_data(exported, pixels):
    eps = episodes_of(pixels)
    stats = json.loads((exported / "meta" / "stats.json").read_text())
    info = json.loads((exported / "meta" / "info.json").read_text())
    assert set(stats) == set(info["features"])
    action = np.concatenate([e["action"] for e in eps]).astype(np.float64)
    st = stats["action"]
    assert {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"} <= set(st)
    assert np.allclose(st["min"], action.min(0)) and np.allclose(st["max"], action.max(0))
    assert np.allclose(st["mean"], action.mean(0)) and np.allclose(st["std"], action.std(0))
    assert st["count"] == [len(action)]
    assert np.all(np.array(st["q01"]) <= np.array(st["q99"]))
    reward = np.concatenate([e["reward"] for e in eps]).astype(np.float64)
    assert np.allclose(stats["next.reward"]["mean"], [reward.mean()])
    assert np.allclose(stats["next.reward"]["std"], [reward.std()])
    assert stats["frame_index"]["max"] == [max(e["meta"].length for e in eps) - 1]
    for cam in ("front", "wrist"):
        img = np.concatenate([e["obs"]["images"][cam] for e in eps]).astype(np.float64) / 255
        s = stats[f"observation.images.{cam}"]
        assert np.array(s["mean"]).shape == (3, 1, 1)
        assert np.allclose(np.array(s["mean"])[:, 0, 0], img.mean(axis=(0, 1, 2)))
        assert np.allclose(np.array(s["std"])[:, 0, 0], img.std(axis=(0, 1, 2)))
        assert np.allclose(np.array(s["max"])[:, 0, 0], img.max(axis=(0, 1, 2)))
        assert s["count"] == [len(img)]  # < 100 frames per episode: every frame sampled
    meta = pq.read_table(exported / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    first = meta.to_pylist()[0]
    a0 = eps[0]["action"].astype(np.float64)
    assert np.allclose(first["stats/action/mean"], a0.mean(0))
    assert first["stats/action/count"] == [len(a0)]


def test_export_state_dataset_with_filters_and_no_cameras(state, tmp_path, capsys):
    out = tmp_path / "demos_only"
    code, stdout, err = in_process(
        capsys, "dataset", "export", str(state), "--out", str(out), "--sources", "demo", "--json"
    )
    assert code == 0, err
    assert json.loads(stdout)["episodes"] == 2
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["video_path"] is None
    assert not (out / "videos").exists()
    assert not any(v["dtype"] == "video" for v in info["features"].values())
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    eps = [e for e in episodes_of(state) if e["meta"].source == "demo"]
    assert data.num_rows == sum(e["meta"].length for e in eps)
    tasks = pd.read_parquet(out / "meta" / "tasks.parquet")
    assert list(tasks.index) == ["pick_cube"]  # the log's task name by default
    out2 = tmp_path / "success_only"
    code, _, err = in_process(
        capsys, "dataset", "export", str(state), "--out", str(out2), "--only-success",
        "--unfinished", "drop", "--fps", "5",
    )  # fmt: skip
    assert code == 0, err
    info2 = json.loads((out2 / "meta" / "info.json").read_text())
    assert info2["total_episodes"] == 2 and info2["fps"] == 5


def test_export_refuses_bad_requests_and_leaves_nothing_behind(state, tmp_path, capsys):
    out = tmp_path / "x"
    out.mkdir()
    code, _, err = in_process(capsys, "dataset", "export", str(state), "--out", str(out))
    assert code == 2 and "exists" in err
    y = str(tmp_path / "y")
    code, _, err = in_process(
        capsys, "dataset", "export", str(state), "--out", y, "--sources", "eval"
    )
    assert code == 2 and "no episode to export" in err
    code, _, err = in_process(capsys, "dataset", "export", str(state), "--out", y, "--sources", "x")
    assert code == 2
    odd = tmp_path / "odd.zarr"
    env = LearnerEnvConfig(task="pick_cube", obs="pixels", image_size=17, cameras=("front",))
    run_collect(CollectConfig(env=env, out=odd, episodes=1), progress=False)
    code, _, err = in_process(capsys, "dataset", "export", str(odd), "--out", str(tmp_path / "z"))
    assert code == 2 and "even" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.zarr", "x"]  # no partial export


# -- writers and statistics (no twin) ---------------------------------------------------------


def test_files_roll_over_into_new_files_and_chunks(tmp_path):
    from robot_rl.dataset.lerobot_files import ParquetFiles, VideoFiles, VideoSettings, next_file

    assert next_file(0, 0, 2) == (0, 1) and next_file(0, 1, 2) == (1, 0)
    rng = np.random.default_rng(0)
    vid = VideoFiles(tmp_path, "observation.images.cam", (16, 24), VideoSettings(fps=5), 1e-9, 2)
    lengths = [3, 4, 2]
    spans = [vid.append(rng.integers(0, 255, (n, 16, 24, 3), dtype=np.uint8)) for n in lengths]
    vid.close()
    # a (tiny) size limit: every episode after the first starts a new file; 2 files per chunk
    assert [(s.chunk_index, s.file_index) for s in spans] == [(0, 0), (0, 1), (1, 0)]
    assert all(s.from_timestamp == 0 for s in spans)
    assert [s.to_timestamp for s in spans] == [n / 5 for n in lengths]
    assert vid.frames_per_file == lengths
    for path, n in zip(vid.paths, lengths, strict=True):
        reader = imageio_ffmpeg.read_frames(str(path))
        meta = next(reader)
        assert meta["size"] == (24, 16) and sum(1 for _ in reader) == n
    assert vid.paths[2] == tmp_path / "videos/observation.images.cam/chunk-001/file-000.mp4"
    with pytest.raises(ValueError, match="even"):
        VideoFiles(tmp_path, "observation.images.odd", (15, 16), VideoSettings(fps=5), 1, 10)
    schema = pa.schema([pa.field("x", pa.int64())])
    pf = ParquetFiles(tmp_path, "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                      schema, 1000, 10)  # fmt: skip
    assert [pf.append(pa.table({"x": [i, i]})) for i in range(3)] == [(0, 0)] * 3
    pf.close()
    table = pq.read_table(pf.paths[0])
    assert table.column("x").to_pylist() == [0, 0, 1, 1, 2, 2]
    assert pq.ParquetFile(pf.paths[0]).metadata.num_row_groups == 3  # one per episode


def test_aggregated_stats_equal_the_stats_of_all_frames():
    from robot_rl.dataset import lerobot_stats as lst

    rng = np.random.default_rng(1)
    eps = [rng.normal(i, 1 + i, (n, 3)) for i, n in enumerate((5, 40, 17))]
    agg = lst.aggregate([lst.vector_stats(e) for e in eps])
    every = np.concatenate(eps)
    assert np.allclose(agg["mean"], every.mean(0)) and np.allclose(agg["std"], every.std(0))
    assert np.allclose(agg["min"], every.min(0)) and np.allclose(agg["max"], every.max(0))
    assert agg["count"].tolist() == [len(every)]
    scalar = lst.vector_stats(np.array([True, False, False, True]))
    assert scalar["mean"].tolist() == [0.5] and scalar["max"].shape == (1,)
    assert len(lst.image_sample_indices(1000)) == 177  # LeRobot's sample count at 1000 frames
    frames = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    st = lst.image_stats(frames)
    assert st["mean"].shape == (3, 1, 1) and st["count"].tolist() == [3]
    assert np.allclose(st["mean"][:, 0, 0], frames.reshape(-1, 3).mean(0) / 255)


# -- import ------------------------------------------------------------------------------------


def test_import_of_an_export_gives_back_its_frames_and_actions(exported, pixels, tmp_path):
    """LeRobot v3.0 -> zarr: our own export comes back with the same actions, states, rewards,
    intervention flags and successes, and every camera frame at its step (lossy video: close,
    and closer to its own step than to any other)."""
    back = tmp_path / "back.zarr"
    proc = robot_rl("dataset", "import", str(exported), "--out", str(back), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["codebase_version"] == "v3.0" and out["action_norm"] == "none"
    assert out["mapping"]["cameras"] == {
        "front": "observation.images.front",
        "wrist": "observation.images.wrist",
    }
    src, got = episodes_of(pixels), episodes_of(back)
    assert len(got) == len(src) == 4
    for a, b in zip(src, got, strict=True):
        n = a["meta"].length
        assert b["meta"].length == n and b["meta"].success == a["meta"].success
        np.testing.assert_array_equal(b["action"], a["action"])
        np.testing.assert_array_equal(b["intervened"], a["intervened"])
        np.testing.assert_allclose(b["reward"], a["reward"], rtol=1e-6)
        np.testing.assert_allclose(b["obs"]["state"][:n], a["obs"]["state"][:n], rtol=1e-6)
        for cam in ("front", "wrist"):
            A = a["obs"]["images"][cam][:n].astype(float)
            B = b["obs"]["images"][cam][:n].astype(float)
            assert np.abs(A - B).mean() < 8
            own = np.abs(A[1:] - B[1:]).mean()
            assert own < np.abs(A[1:] - B[:-1]).mean() and own < np.abs(A[:-1] - B[1:]).mean()
    shown = robot_rl("dataset", "import", str(exported), "--out", str(tmp_path / "again.zarr"))
    assert shown.returncode == 0 and "front <- observation.images.front" in shown.stdout


def _write_v21(root: Path, episodes: int = 2, n: int = 5) -> None:
    """A LeRobot v2.1 dataset written here by hand: one parquet file per episode, joint-space
    actions in degrees, an extra environment state and a language column, no videos."""
    feats = {
        "observation.state": {"dtype": "float32", "shape": [3], "names": ["a", "b", "c"]},
        "observation.environment_state": {"dtype": "float32", "shape": [2], "names": None},
        "action": {"dtype": "float32", "shape": [2], "names": ["j1", "j2"]},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "language": {"dtype": "string", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    path = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    info = {"codebase_version": "v2.1", "fps": 30, "features": feats, "chunks_size": 1000,
            "total_episodes": episodes, "data_path": path}  # fmt: skip
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "data" / "chunk-000").mkdir(parents=True)
    for ep in range(episodes):
        t = np.arange(n)
        df = pd.DataFrame({
            "observation.state": [np.array([ep, k, 1.0], np.float32) for k in t],
            "observation.environment_state": [np.array([k, -k], np.float32) for k in t],
            "action": [np.array([-90.0 + 45 * k, 10.0 * ep], np.float32) for k in t],
            "next.done": t == n - 1,
            "language": ["pick"] * n,
            "timestamp": (t / 30).astype(np.float32),
            "frame_index": t, "episode_index": np.full(n, ep), "index": ep * n + t,
            "task_index": np.zeros(n, np.int64),
        })  # fmt: skip
        df.to_parquet(root / "data" / "chunk-000" / f"episode_{ep:06d}.parquet")


def test_import_of_a_v21_dataset_maps_and_scales_what_it_is_told(tmp_path):
    src = tmp_path / "v21"
    _write_v21(src)
    out = tmp_path / "v21.zarr"
    proc = robot_rl("dataset", "import", str(src), "--out", str(out), "--state",
                    "observation.state", "observation.environment_state", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["codebase_version"] == "v2.1" and res["episodes"] == 2 and res["frames"] == 10
    assert res["action_norm"] == "minmax"  # degrees: outside [-1, 1]
    left = {x["feature"]: x["why"] for x in res["mapping"]["left_out"]}
    assert "not numbers" in left["language"]
    log = EpisodeLog.open(out)
    eps = [log.read_episode(i) for i in range(2)]
    np.testing.assert_allclose(eps[1]["obs"]["state"][2], [1, 2, 1, 2, -2])
    imp = log.meta["lerobot_import"]
    low, high = np.array(imp["action_low"]), np.array(imp["action_high"])
    np.testing.assert_allclose(low, [-90, 0]) and np.testing.assert_allclose(high, [90, 10])
    a = eps[0]["action"]
    assert a.min() >= -1 and a.max() <= 1
    back = low + (a + 1) / 2 * (high - low)
    np.testing.assert_allclose(back, [[-90 + 45 * k, 0] for k in range(5)], atol=1e-4)
    assert eps[0]["terminated"].tolist() == [False] * 4 + [True]


def test_import_refuses_what_it_cannot_read_saying_why(tmp_path, state):
    proc = robot_rl("dataset", "import", str(state), "--out", str(tmp_path / "x.zarr"))
    assert proc.returncode == 2 and "no meta/info.json" in proc.stderr
    src = tmp_path / "v21"
    _write_v21(src)
    proc = robot_rl("dataset", "import", str(src), "--out", str(tmp_path / "y.zarr"), "--state",
                    "observation.qpos")  # fmt: skip
    assert proc.returncode == 2 and "'observation.qpos' is not a feature" in proc.stderr
    assert "observation.environment_state" in proc.stderr and not (tmp_path / "y.zarr").exists()
    info = json.loads((src / "meta" / "info.json").read_text())
    (src / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v1.6"}))
    proc = robot_rl("dataset", "import", str(src), "--out", str(tmp_path / "z.zarr"))
    assert proc.returncode == 2 and "codebase_version 'v1.6'" in proc.stderr
