"""Rendering works from any thread, under OSMesa and EGL (``sim/gl.py``).

The twin node renders from executor threads and its pacing thread; EGL refuses a context made
current in one thread from another (``EGL_BAD_ACCESS``). Every GL call of a world runs on its
render thread, so the same frame comes out whichever thread asks, under either backend.
CI runs this file under ``MUJOCO_GL=osmesa`` and ``egl`` (``scripts/test.sh``); the subprocess
test below also covers both backends in a single run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")

from robot_rl.core.config import EnvConfig  # noqa: E402
from sim.backend import make_sim_backend  # noqa: E402
from sim.config import SimConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _backend():
    cfg = SimConfig(cameras=("front", "wrist"), image_height=48, image_width=48)
    b = make_sim_backend("pick_cube", cfg, EnvConfig())
    b.task.reset(np.random.default_rng(0))
    for c in b.cameras:
        c.connect()
    return b


def test_frames_are_the_same_from_any_thread_and_after_close():
    b = _backend()
    try:
        world = b.world
        main = {c.name: world.render(c.name, 48, 48) for c in b.cameras}
        assert all(img.shape == (48, 48, 3) and img.dtype == np.uint8 for img in main.values())
        assert main["front"].std() > 0  # a scene, not a blank buffer
        got: dict[str, list[np.ndarray]] = {c.name: [] for c in b.cameras}
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                for c in b.cameras:
                    got[c.name].append(world.render(c.name, 48, 48))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for name, imgs in got.items():
            assert len(imgs) == 3
            for img in imgs:
                np.testing.assert_array_equal(img, main[name])
        # Closing frees the contexts on their thread; the world renders again afterwards.
        world.close()
        np.testing.assert_array_equal(world.render("front", 48, 48), main["front"])
        # Physics moved: a new frame differs (the camera really renders the current state).
        world.step(200)
        frame = b.cameras[1].read()
        assert frame.image.shape == (48, 48, 3)
    finally:
        b.close()


_CHILD = """
import threading, numpy as np
from robot_rl.core.config import EnvConfig
from sim.backend import make_sim_backend
from sim.config import SimConfig
b = make_sim_backend("reach", SimConfig(cameras=("front",), image_height=32, image_width=32),
                     EnvConfig())
b.task.reset(np.random.default_rng(0))
cam = b.cameras[0]; cam.connect()
first = cam.read().image
out = {}
def other():
    b.world.step(10)
    out["img"] = cam.read().image
t = threading.Thread(target=other); t.start(); t.join()
assert out["img"].shape == first.shape == (32, 32, 3) and first.std() > 0
b.close()
print("rendered in two threads")
"""


@pytest.mark.parametrize("backend", ["osmesa", "egl"])
def test_each_headless_backend_renders_from_a_second_thread(backend):
    # PYOPENGL_PLATFORM: set by importing mujoco in this process; the child picks its own.
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}
    env["MUJOCO_GL"] = backend
    probe = [sys.executable, "-c", "import mujoco; mujoco.GLContext(8, 8).make_current()"]
    if subprocess.run(probe, env=env, capture_output=True, timeout=120).returncode != 0:
        pytest.fail(
            f"MUJOCO_GL={backend} cannot make a context here; scripts/install.sh installs "
            "libosmesa6 and libegl1 libegl-mesa0 libgl1-mesa-dri"
        )
    r = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rendered in two threads" in r.stdout
