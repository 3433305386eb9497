"""The "Programmatic use" blocks of the README and of docs/programmatic.md run as written (fewer
steps and episodes): the application layer is usable from a notebook without the command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python_blocks(page: str, section: str | None = None) -> list[str]:
    """The python code blocks of ``page`` (under its heading ``## section``, if given)."""
    text = (REPO / page).read_text()
    if section is not None:
        start = text.index(f"## {section}\n")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end > 0 else None]
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_trains_on_the_twin_from_python(tmp_path: Path) -> None:
    readme = _python_blocks("README.md", "Programmatic use")
    docs = _python_blocks("docs/programmatic.md")
    assert readme and len(docs) >= 3, "the page lost its code blocks"
    train = readme[0]
    assert train in docs, "docs/programmatic.md shows another training example than the README"
    assert "steps=10_000" in train and "episodes=10" in train, train
    small = train.replace("steps=10_000", "steps=400").replace("episodes=10", "episodes=2")
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    out = subprocess.run(
        [sys.executable, "-c", small], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rate, curve = out.stdout.split()[-2:]
    assert 0.0 <= float(rate) <= 1.0
    assert (tmp_path / curve).is_file() and (tmp_path / "demos.zarr").is_dir()
    assert (tmp_path / "runs" / "nb").is_dir()
    one_env = subprocess.run(
        [sys.executable, "-c", _block(docs, "make_env_from_setup")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert one_env.returncode == 0, one_env.stderr[-3000:]


def _block(blocks: list[str], needle: str) -> str:
    found = [b for b in blocks if needle in b]
    assert len(found) == 1, f"want one block using {needle}, got {len(found)}"
    return found[0]


def test_the_builders_parts_train_on_the_twin(tmp_path: Path) -> None:
    """docs/programmatic.md "The parts of a training run": build_agent + build_envs + Trainer,
    as train does, runs and evaluates."""
    code = _block(_python_blocks("docs/programmatic.md", "The parts of a training run"), "compose")
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert 0.0 <= float(out.stdout.split()[-1]) <= 1.0
    assert (tmp_path / "runs" / "parts" / "eval.jsonl").is_file()
