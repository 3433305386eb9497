"""Import a LeRobot dataset directory (codebase v2.1 or v3.0) into a robot_rl episode log.

Layouts read::

    v3.0  meta/info.json, meta/episodes/chunk-*/file-*.parquet (per-episode video spans),
          data/chunk-*/file-*.parquet (many episodes per file),
          videos/<video_key>/chunk-*/file-*.mp4 (many episodes per file, back to back)
    v2.1  meta/info.json, data/chunk-*/episode_*.parquet (one episode per file),
          videos/chunk-*/<video_key>/episode_*.mp4 (one episode per file)

The mapping of features to our keys (:class:`ImportMapping`; each choice overridable, the
automatic one printed by ``robot-rl dataset import``):

- **state**: ``observation.state`` (default) or the named numeric features, concatenated;
- **cameras**: every ``observation.images.<name>`` (video or image feature) -> camera ``<name>``;
- **action**: ``action``; its values enter the log as the policy's [-1, 1] action. Actions
  already in [-1, 1] (robot_rl's own exports) are kept as they are; others are scaled from the
  dataset's per-dimension min / max (``action_norm``), and the bounds are stored in the log's
  metadata (``lerobot_import.action_low`` / ``action_high``) to map them back;
- **reward / done**: ``next.reward`` (default 0), ``next.done``, ``next.truncated``;
  ``complementary_info.intervened`` and ``complementary_info.policy_action`` where present.

Step ``t`` of an episode is frame ``t``'s observation and action; its next observation is frame
``t + 1``'s. LeRobot keeps no observation after an episode's last action, so the last step's next
observation repeats its own (the episode ends there: terminated if ``next.done`` says so and it
was not truncated). Features that cannot be mapped (strings, images of another rank) are listed
with why; a mapping that names a feature the dataset lacks is refused naming what it has.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from robot_rl.core import keys
from robot_rl.core.batch import ObsLayout
from robot_rl.core.specs import ArraySpec
from robot_rl.replay.log import EpisodeLog

VERSIONS = ("v2.1", "v3.0")
_IMAGE_PREFIX = "observation.images."


class LeRobotImportError(ValueError):
    """A dataset that cannot be imported as asked; the message says what to change."""


@dataclass(frozen=True)
class ImportMapping:
    """Which LeRobot features become which of our keys (None: automatic, module docstring)."""

    state: tuple[str, ...] | None = None
    cameras: tuple[str, ...] | None = None
    """Features, each ``feature`` or ``name=feature``."""
    action: str = "action"
    action_norm: Literal["auto", "none", "minmax"] = "auto"


def read_info(root: Path) -> dict[str, Any]:
    path = Path(root) / "meta" / "info.json"
    if not path.is_file():
        raise LeRobotImportError(f"{root} is not a LeRobot dataset: no meta/info.json")
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LeRobotImportError(f"{path} is not valid JSON ({e}); the dataset is damaged") from e
    version = str(info.get("codebase_version", ""))
    if version not in VERSIONS:
        raise LeRobotImportError(
            f"{root}: codebase_version {version!r}; this importer reads {', '.join(VERSIONS)} "
            "(convert older datasets with lerobot's conversion script first)"
        )
    if not isinstance(info.get("features"), dict) or not info.get("fps"):
        raise LeRobotImportError(f"{path} has no features or fps")
    return info


@dataclass(frozen=True)
class ImportPlan:
    """What :func:`plan_import` chose."""

    state: tuple[tuple[str, int], ...]
    cameras: tuple[tuple[str, str, tuple[int, int, int]], ...]
    """(camera name, feature, (H, W, 3))."""
    action: tuple[str, int]
    left_out: tuple[tuple[str, str], ...]

    def describe(self) -> dict[str, Any]:
        return {
            "state": [{"feature": f, "size": n} for f, n in self.state],
            "cameras": {name: f for name, f, _ in self.cameras},
            "action": {"feature": self.action[0], "size": self.action[1]},
            "left_out": [{"feature": f, "why": why} for f, why in self.left_out],
        }


_BOOKKEEPING = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
_KNOWN = {"next.reward", "next.done", "next.truncated", "complementary_info.intervened",
          "complementary_info.policy_action", "complementary_info.policy_version"}  # fmt: skip


def _size(ft: dict[str, Any]) -> int:
    return int(np.prod(ft.get("shape") or [1]))


def _numeric(ft: dict[str, Any]) -> bool:
    return str(ft.get("dtype")) in ("float32", "float64", "int64", "int32", "int16", "bool")


def plan_import(info: dict[str, Any], mapping: ImportMapping | None = None) -> ImportPlan:
    """The mapping of this dataset's features (module docstring).

    Raises:
        LeRobotImportError: A named feature is missing or of the wrong kind, or there is no
            action or nothing to observe.
    """
    mapping = mapping or ImportMapping()
    feats: dict[str, dict[str, Any]] = info["features"]

    def need(name: str, what: str) -> dict[str, Any]:
        if name not in feats:
            raise LeRobotImportError(
                f"{what} {name!r} is not a feature of this dataset; it has: {', '.join(feats)}"
            )
        return feats[name]

    act = need(mapping.action, "action feature")
    if not _numeric(act) or len(act.get("shape") or [1]) != 1:
        raise LeRobotImportError(f"action feature {mapping.action!r} is {act}, not a 1-D vector")
    if mapping.state is not None:
        state = []
        for f in mapping.state:
            ft = need(f, "state feature")
            if not _numeric(ft):
                raise LeRobotImportError(f"state feature {f!r} is {ft['dtype']}, not numbers")
            state.append((f, _size(ft)))
    else:
        state = (
            [("observation.state", _size(feats["observation.state"]))]
            if ("observation.state" in feats)
            else []
        )
    if mapping.cameras is not None:
        chosen = []
        for item in mapping.cameras:
            name, _, f = item.rpartition("=")
            need(f, "camera feature")
            chosen.append((name or f.removeprefix(_IMAGE_PREFIX), f))
    else:
        chosen = [(f.removeprefix(_IMAGE_PREFIX), f) for f in feats if f.startswith(_IMAGE_PREFIX)]
    cameras = []
    for name, f in chosen:
        ft = feats[f]
        shape = [int(d) for d in ft.get("shape") or []]
        names = ft.get("names") or []
        if ft.get("dtype") not in ("video", "image") or len(shape) != 3:
            raise LeRobotImportError(f"camera feature {f!r} is {ft.get('dtype')} {shape}")
        if names and names[0] in ("channels", "channel") and shape[0] in (1, 3):
            shape = shape[1:] + shape[:1]  # (C, H, W) -> (H, W, C)
        if shape[2] != 3:
            raise LeRobotImportError(f"camera feature {f!r} has {shape[2]} channels, not 3 (RGB)")
        cameras.append((name, f, (shape[0], shape[1], 3)))
    if not state and not cameras:
        raise LeRobotImportError(
            "nothing to observe: no observation.state and no observation.images.*; name the "
            f"state features (--state) among: {', '.join(feats)}"
        )
    used = {f for f, _ in state} | {f for _, f, _ in cameras} | {mapping.action}
    left_out = []
    for f, ft in feats.items():
        if f in used or f in _BOOKKEEPING or f in _KNOWN:
            continue
        why = (
            "not chosen (name it in --state)" if _numeric(ft) else f"{ft.get('dtype')}: not numbers"
        )
        left_out.append((f, why))
    return ImportPlan(tuple(state), tuple(cameras), (mapping.action, _size(act)), tuple(left_out))


def _read_tables(root: Path, info: dict[str, Any]) -> Any:
    """Every frame row of the dataset, sorted by (episode_index, frame_index), as pandas."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(
            "LeRobot import needs pyarrow and pandas: pip install 'robot_rl[export]'"
        ) from e
    files = sorted((root / "data").glob("chunk-*/*.parquet"))
    if not files:
        raise LeRobotImportError(f"{root}/data holds no parquet files")
    frames = []
    for path in files:
        try:
            frames.append(pq.read_table(path).to_pandas())
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise LeRobotImportError(f"{path} is not a readable parquet file ({e})") from e
    import pandas as pd

    df = pd.concat(frames, ignore_index=True)
    missing = [c for c in ("episode_index", "frame_index") if c not in df.columns]
    if missing:
        raise LeRobotImportError(f"{root}: the data has no {missing} column")
    return df.sort_values(["episode_index", "frame_index"], kind="stable").reset_index(drop=True)


def _episode_rows(root: Path, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-episode metadata rows (v3.0: meta/episodes parquet; v2.1: episodes.jsonl)."""
    if info["codebase_version"] == "v2.1":
        path = root / "meta" / "episodes.jsonl"
        if not path.is_file():
            return []
        return [json.loads(s) for s in path.read_text().splitlines() if s.strip()]
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in sorted((root / "meta" / "episodes").glob("chunk-*/*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return rows


def _episode_successes(root: Path, info: dict[str, Any]) -> dict[int, bool | None]:
    """Episode index -> success where the dataset records it (robot_rl's exports do)."""
    out: dict[int, bool | None] = {}
    for row in _episode_rows(root, info):
        if "robot_rl/success" in row and "episode_index" in row:
            v = row["robot_rl/success"]
            out[int(row["episode_index"])] = None if v is None else bool(v)
    return out


def _video_spans(root: Path, info: dict[str, Any], feature: str) -> dict[int, tuple[Path, float]]:
    """episode index -> (mp4 file, the episode's first timestamp in it) for one video feature."""
    version = info["codebase_version"]
    spans: dict[int, tuple[Path, float]] = {}
    if version == "v2.1":
        template = info.get("video_path") or (
            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
        )
        chunks = int(info.get("chunks_size") or 1000)
        for ep in range(int(info.get("total_episodes") or 0)):
            rel = template.format(episode_chunk=ep // chunks, video_key=feature, episode_index=ep)
            spans[ep] = (root / rel, 0.0)
        return spans
    template = info.get("video_path") or (
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    )
    for row in _episode_rows(root, info):
        c = row.get(f"videos/{feature}/chunk_index")
        f = row.get(f"videos/{feature}/file_index")
        if c is None or f is None:
            continue
        rel = template.format(video_key=feature, chunk_index=int(c), file_index=int(f))
        spans[int(row["episode_index"])] = (
            root / rel,
            float(row.get(f"videos/{feature}/from_timestamp") or 0.0),
        )
    return spans


class _VideoCache:
    """Decoded mp4 files (RGB frames), one file at a time."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._frames: np.ndarray | None = None

    def frames(self, path: Path, shape: tuple[int, int, int]) -> np.ndarray:
        if path != self._path:
            if not path.is_file():
                raise LeRobotImportError(f"video {path} is missing")
            import imageio_ffmpeg

            h, w, _ = shape
            reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
            meta = next(reader)
            vw, vh = meta.get("size", (w, h))
            data = [np.frombuffer(b, np.uint8).reshape(vh, vw, 3) for b in reader]
            if (vh, vw) != (h, w):
                raise LeRobotImportError(f"video {path} is {vw}x{vh}, its feature says {w}x{h}")
            self._frames = np.stack(data) if data else np.zeros((0, h, w, 3), np.uint8)
            self._path = path
        assert self._frames is not None
        return self._frames


def _column(df: Any, name: str, n: int, dim: int | None = None, dtype=np.float32) -> np.ndarray:
    if name not in df.columns:
        return np.zeros((n, dim) if dim else n, dtype=dtype)
    values = df[name].to_numpy()
    if dim is None:
        return np.asarray([np.asarray(v).reshape(-1)[0] if np.ndim(v) else v for v in values],
                          dtype=dtype)  # fmt: skip
    return np.stack([np.asarray(v, dtype=dtype).reshape(-1) for v in values])


def import_lerobot(
    root: str | Path,
    out: str | Path,
    mapping: ImportMapping | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write the episode log ``out`` from the LeRobot dataset at ``root`` (module docstring).

    Raises:
        FileExistsError: ``out`` exists.
        LeRobotImportError: The dataset or the mapping cannot be used (the message says why).
    """
    root, out = Path(root), Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new --out")
    mapping = mapping or ImportMapping()
    info = read_info(root)
    plan = plan_import(info, mapping)
    df = _read_tables(root, info)
    fps = float(info["fps"])
    a_feature, a_dim = plan.action
    actions = _column(df, a_feature, len(df), a_dim)
    low, high = actions.min(axis=0), actions.max(axis=0)
    norm = mapping.action_norm
    if norm == "auto":
        norm = "none" if (low >= -1.0).all() and (high <= 1.0).all() else "minmax"
    if norm == "minmax":
        span = np.where(high > low, high - low, 1.0)
        actions = np.clip(2.0 * (actions - low) / span - 1.0, -1.0, 1.0).astype(np.float32)
    layout = ObsLayout(
        state_dim=sum(n for _, n in plan.state),
        images={name: ArraySpec(shape, "uint8") for name, _, shape in plan.cameras},
    )
    spans = {f: _video_spans(root, info, f) for _, f, _ in plan.cameras
             if info["features"][f]["dtype"] == "video"}  # fmt: skip
    meta = {
        "kind": "lerobot_import",
        "control_hz": fps,
        "lerobot_import": {
            "source": str(root.resolve()),
            "codebase_version": info["codebase_version"],
            "robot_type": info.get("robot_type"),
            "mapping": plan.describe(),
            "action_norm": norm,
            "action_low": low.tolist(),
            "action_high": high.tolist(),
        },
    }
    successes = _episode_successes(root, info)
    log = EpisodeLog.create(out, layout, a_dim, meta)
    cache = _VideoCache()
    episodes = df["episode_index"].unique()
    written = frames_total = 0
    try:
        for k, ep in enumerate(episodes):
            rows = df.index[df["episode_index"] == ep]
            part = df.loc[rows]
            n = len(part)
            obs = _episode_obs(part, plan, spans, cache, int(ep), fps, info)
            a = actions[rows]
            pa = (
                np.clip(_column(part, "complementary_info.policy_action", n, a_dim), -1, 1)
                if "complementary_info.policy_action" in part.columns and norm == "none"
                else a
            )
            reward = _column(part, "next.reward", n)
            done = _column(part, "next.done", n, dtype=bool)
            trunc = _column(part, "next.truncated", n, dtype=bool)
            intervened = _column(part, "complementary_info.intervened", n, dtype=bool)
            log.begin_episode("demo", policy_version=0, meta={"lerobot_episode_index": int(ep)})
            for t in range(n):
                last = t == n - 1
                nxt = t if last else t + 1
                log.append(
                    obs_learner=_at(obs, t),
                    action=a[t],
                    policy_action=pa[t],
                    reward=float(reward[t]),
                    terminated=bool(last and done[t] and not trunc[t]),
                    truncated=bool(last and (trunc[t] or not done[t])),
                    intervened=bool(intervened[t]),
                    policy_version=0,
                    stamp_s=float(nxt) / fps,
                    next_obs_learner=_at(obs, nxt),
                )
            success = successes.get(int(ep))
            log.end_episode(success=success, lerobot_episode_index=int(ep))
            written += 1
            frames_total += n
            if progress is not None:
                progress(k + 1, len(episodes))
    except BaseException:
        log.close()
        import shutil

        shutil.rmtree(out, ignore_errors=True)
        raise
    log.close()
    return {
        "out": str(out),
        "source": str(root),
        "codebase_version": info["codebase_version"],
        "episodes": written,
        "frames": frames_total,
        "fps": fps,
        "mapping": plan.describe(),
        "action_norm": norm,
    }


def _episode_obs(part, plan: ImportPlan, spans, cache: _VideoCache, ep: int, fps: float, info):
    n = len(part)
    obs: dict[str, Any] = {}
    if plan.state:
        obs[keys.STATE] = np.concatenate(
            [_column(part, f, n, size) for f, size in plan.state], axis=1
        ).astype(np.float32)
    if plan.cameras:
        images = {}
        ts = _column(part, "timestamp", n, dtype=np.float64)
        for name, f, shape in plan.cameras:
            if f not in spans:  # an image feature stored in the parquet rows
                images[name] = np.stack([_decode_image(v, shape) for v in part[f].to_numpy()])
                continue
            if ep not in spans[f]:
                raise LeRobotImportError(f"episode {ep} has no video span for {f}")
            path, start = spans[f][ep]
            frames = cache.frames(path, shape)
            idx = np.rint((start + ts) * fps).astype(int)
            if idx.max(initial=0) >= len(frames):
                raise LeRobotImportError(
                    f"{path} has {len(frames)} frames; episode {ep} needs frame {idx.max()}"
                )
            images[name] = frames[idx]
        obs[keys.IMAGES] = images
    return obs


def _decode_image(value: Any, shape: tuple[int, int, int]) -> np.ndarray:
    data = value.get("bytes") if isinstance(value, dict) else value
    import cv2

    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if img is None or img.shape != shape:
        raise LeRobotImportError(f"an image frame did not decode to {shape}")
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _at(obs: dict[str, Any], t: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if keys.STATE in obs:
        out[keys.STATE] = obs[keys.STATE][t]
    if keys.IMAGES in obs:
        out[keys.IMAGES] = {c: v[t] for c, v in obs[keys.IMAGES].items()}
    return out
