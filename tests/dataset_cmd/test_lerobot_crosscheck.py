"""Our LeRobot export and import against the real ``lerobot`` package, both directions, frames
compared: slow, and run only when an interpreter that has lerobot is named in
``ROBOT_RL_LEROBOT_PYTHON`` (it cannot live in this venv: see README;
``scripts/lerobot_venv.sh`` makes one)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
from cli_helpers import run_cli as robot_rl
from dataset_helpers import FPS, IMG, episodes_of

# -- the real LeRobot loader (optional, slow) ---------------------------------------------------

LOADER = textwrap.dedent(
    """
    import json, sys
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    ds = LeRobotDataset(sys.argv[2], root=sys.argv[1], video_backend="torchcodec",
                        delta_timestamps={"observation.images.front": [-0.1, 0.0],
                                          "action": [0.0, 0.1]})
    out = {"len": len(ds), "episodes": ds.num_episodes, "fps": ds.fps, "items": []}
    for i in range(len(ds)):
        it = ds[i]
        out["items"].append({
            "episode_index": int(it["episode_index"]), "frame_index": int(it["frame_index"]),
            "task": it["task"], "action": it["action"][0].tolist(),
            "action_is_pad": it["action_is_pad"].tolist(),
            "state": it["observation.state"].tolist(),
            "front": list(it["observation.images.front"].shape),
            "front_now": (it["observation.images.front"][1] * 255).round().byte().tolist(),
            "wrist": list(it["observation.images.wrist"].shape),
        })
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_lerobot_loader_reads_the_export(exported, pixels):
    python = os.environ.get("ROBOT_RL_LEROBOT_PYTHON")
    if not python:
        pytest.skip("set ROBOT_RL_LEROBOT_PYTHON: a python with lerobot (scripts/lerobot_venv.sh)")
    proc = subprocess.run(
        [python, "-c", LOADER, str(exported), "local/pick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=exported.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    eps = episodes_of(pixels)
    assert out["len"] == sum(e["meta"].length for e in eps) and out["episodes"] == 4
    assert out["fps"] == FPS
    items = iter(out["items"])
    errs = []
    for k, ep in enumerate(eps):
        for t in range(ep["meta"].length):
            it = next(items)
            assert (it["episode_index"], it["frame_index"]) == (k, t)
            assert it["task"] == "pick up the red cube"
            assert np.allclose(it["action"], ep["action"][t])
            assert it["action_is_pad"] == [False, t == ep["meta"].length - 1]
            assert np.allclose(it["state"], ep["obs"]["state"][t])
            assert it["front"] == [2, 3, IMG, IMG] and it["wrist"] == [3, IMG, IMG]
            now = np.asarray(it["front_now"], dtype=np.int16).transpose(1, 2, 0)  # (H, W, 3)
            err = np.abs(now - ep["obs"]["images"]["front"][t]).mean()
            errs.append(err)
    assert max(errs) < 8, errs  # the frame of this episode and step (lossy video)


FRAME_SRC = textwrap.dedent(
    """
    import numpy as np

    def written_frame(ep, t, side=64):
        # A 64x64 frame that says its episode (the background) and step (a bright square).
        img = np.zeros((side, side, 3), np.uint8)
        img[:, :, 0] = 40 + 80 * ep
        img[:, :, 2] = np.linspace(0, 200, side, dtype=np.uint8)[None, :]
        c = 4 + 4 * t
        img[20:36, c : c + 12] = (250, 250, 60)
        return img

    def written_state(ep, t):
        return np.array([ep, t, 0.5], np.float32)

    def written_action(ep, t):
        return np.array([0.9 * np.sin(t), ep - 0.5], np.float32)
    """
)

WRITER = FRAME_SRC + textwrap.dedent(
    """
    import sys
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root, vcodec = sys.argv[1], sys.argv[2]
    feats = {
        "observation.state": {"dtype": "float32", "shape": (3,), "names": ["ep", "t", "c"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
        "observation.images.top": {"dtype": "video", "shape": (64, 64, 3),
                                   "names": ["height", "width", "channels"]},
    }
    ds = LeRobotDataset.create("local/written", fps=10, features=feats, root=root,
                               use_videos=True, vcodec=vcodec)
    for ep in range(2):
        for t in range(12):
            ds.add_frame({"observation.state": written_state(ep, t),
                          "action": written_action(ep, t),
                          "observation.images.top": written_frame(ep, t), "task": "push"})
        ds.save_episode()
    ds.finalize()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("vcodec", ["libsvtav1", "h264"])
def test_a_dataset_lerobot_writes_imports_with_its_frames_and_actions(tmp_path, vcodec):
    """The other direction: lerobot's own LeRobotDataset writer (v3.0; AV1, its default codec,
    and H.264) makes a dataset; ``robot-rl dataset import`` gives back every action and state
    exactly and every frame at its step (lossy video: close, and closer to its own step than to
    either neighbour)."""
    python = os.environ.get("ROBOT_RL_LEROBOT_PYTHON")
    if not python:
        pytest.skip(
            "set ROBOT_RL_LEROBOT_PYTHON to a python with lerobot (scripts/lerobot_venv.sh)"
        )
    root = tmp_path / "written"
    proc = subprocess.run([python, "-c", WRITER, str(root), vcodec], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    back = tmp_path / "back.zarr"
    proc = robot_rl("dataset", "import", str(root), "--out", str(back), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["codebase_version"] == "v3.0" and out["mapping"]["cameras"] == {
        "top": "observation.images.top"
    }
    space: dict = {}
    exec(FRAME_SRC, space)  # the writer's own frame, state and action functions
    eps = episodes_of(back)
    assert len(eps) == 2
    for ep, got in enumerate(eps):
        n = got["meta"].length
        assert n == 12
        want_a = np.stack([space["written_action"](ep, t) for t in range(n)])
        np.testing.assert_array_equal(got["action"], want_a)
        want_s = np.stack([space["written_state"](ep, t) for t in range(n)])
        np.testing.assert_array_equal(got["obs"]["state"][:n], want_s)
        frames = got["obs"]["images"]["top"][:n].astype(float)
        want = np.stack([space["written_frame"](ep, t) for t in range(n)]).astype(float)
        assert frames.shape[1:3] == (IMG, IMG) or frames.shape[1:3] == (64, 64)
        if frames.shape[1:3] != want.shape[1:3]:  # the import's square resize
            import cv2

            want = np.stack([cv2.resize(w, frames.shape[1:3][::-1], interpolation=cv2.INTER_AREA)
                             for w in want.astype(np.uint8)]).astype(float)  # fmt: skip
        err = np.abs(frames - want).mean(axis=(1, 2, 3))
        assert err.max() < 8, err
        own = err[1:-1]
        prev = np.abs(frames[1:-1] - want[:-2]).mean(axis=(1, 2, 3))
        nxt = np.abs(frames[1:-1] - want[2:]).mean(axis=(1, 2, 3))
        assert (own < prev).all() and (own < nxt).all()
