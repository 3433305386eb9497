"""The frame table of a LeRobot v3.0 export: features (info.json), the parquet schema, the
columns of one episode, and the frame rate.

Step ``t`` of an episode becomes frame ``t``: ``observation.*`` = the observation before the
step, ``action`` = the action executed (policy space, [-1, 1]), ``next.reward`` = the step's
reward, ``next.done`` = True on the episode's last frame, ``next.truncated`` = the step hit a
time limit (bootstrap), and the robot_rl extras ``complementary_info.intervened``,
``complementary_info.policy_action`` and ``complementary_info.policy_version``. The final
observation of each episode (after its last action) has no frame, as in LeRobot.
``timestamp`` is ``frame_index / fps``: LeRobot finds video frames by that time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.core import keys
from robot_rl.replay.log import EpisodeLog

DEFAULT_FEATURES = {  # LeRobot adds these to every dataset, after the user's features
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
_ACTION_NAMES = {
    4: ["dx", "dy", "dz", "gripper"],
    7: ["dx", "dy", "dz", "rx", "ry", "rz", "gripper"],
}


def control_fps(log: EpisodeLog) -> int:
    """The log's control rate as an integer frame rate.

    Uses ``control_hz`` from the log's metadata when recorded, else the median step interval
    of ``stamp_s``. Raises ValueError when neither gives a whole number of frames per second.
    """
    meta = log.meta or {}
    hz = meta.get("control_hz", (meta.get("env") or {}).get("control_hz"))
    how = "control_hz in the log's metadata"
    if hz is None:
        dts = [np.diff(ep["stamp_s"]) for ep in _iter_steps(log) if len(ep["stamp_s"]) > 1]
        dts = np.concatenate(dts) if dts else np.zeros(0)
        dts = dts[dts > 0]
        if not len(dts):
            raise ValueError(
                f"{log.path}: cannot tell the control rate (its steps carry no time stamps, as "
                "an env robot_rl did not write gives none); pass --fps, the rate the env steps at"
            )
        hz, how = 1.0 / float(np.median(dts)), "the median interval of the step stamps"
    fps = round(float(hz))
    if fps < 1 or abs(fps - float(hz)) > 0.02 * fps:
        raise ValueError(f"{log.path}: {how} gives {hz:.3f} Hz, not a whole rate; pass --fps")
    return fps


def _iter_steps(log: EpisodeLog):
    """Per episode, the step arrays only (no image decoding): ``stamp_s``."""
    import zarr

    arr = zarr.open_group(str(log.path), mode="r")["data/stamp_s"]
    for em in log.episodes:
        yield {"stamp_s": arr[em.start_step : em.start_step + em.length]}


def build_features(log: EpisodeLog) -> dict[str, dict[str, Any]]:
    """The ``features`` of info.json for this log (video ``info`` blocks added later)."""
    a = log.action_dim
    a_names = _ACTION_NAMES.get(a, [f"action_{i}" for i in range(a)])
    feats: dict[str, dict[str, Any]] = {}
    if log.layout.state_dim:
        s = log.layout.state_dim
        names = [f"state_{i}" for i in range(s)]
        feats["observation.state"] = {"dtype": "float32", "shape": [s], "names": names}
    for cam, spec in log.layout.images.items():
        if "/" in cam:
            raise ValueError(f"camera name {cam!r} contains '/', which LeRobot forbids")
        feats[f"observation.images.{cam}"] = {
            "dtype": "video",
            "shape": list(spec.shape),
            "names": ["height", "width", "channels"],
        }
    feats["action"] = {"dtype": "float32", "shape": [a], "names": a_names}
    feats["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    feats["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    feats["next.truncated"] = {"dtype": "bool", "shape": [1], "names": None}
    feats["complementary_info.intervened"] = {"dtype": "bool", "shape": [1], "names": None}
    feats["complementary_info.policy_action"] = {"dtype": "float32", "shape": [a], "names": a_names}
    feats["complementary_info.policy_version"] = {"dtype": "int64", "shape": [1], "names": None}
    return {**feats, **DEFAULT_FEATURES}


def arrow_schema(features: dict[str, dict[str, Any]]) -> Any:
    """Parquet schema of the frame rows: shape (1,) -> scalar, (D,) -> fixed-size list."""
    import pyarrow as pa

    fields = []
    for name, ft in features.items():
        if ft["dtype"] == "video":
            continue
        t = pa.from_numpy_dtype(np.dtype(ft["dtype"]))
        shape = ft["shape"]
        fields.append(pa.field(name, t if shape == [1] else pa.list_(t, shape[0])))
    return pa.schema(fields)


def episode_columns(ep: dict[str, Any], ep_index: int, start: int, fps: int) -> dict[str, Any]:
    """The non-video frame columns of one episode (numpy, by feature name)."""
    n = len(ep["action"])
    done = np.zeros(n, dtype=bool)
    done[-1] = True
    cols: dict[str, Any] = {}
    if keys.STATE in ep["obs"]:
        cols["observation.state"] = np.asarray(ep["obs"][keys.STATE], dtype=np.float32)
    cols["action"] = np.asarray(ep["action"], dtype=np.float32)
    cols["next.reward"] = np.asarray(ep["reward"], dtype=np.float32)
    cols["next.done"] = done
    cols["next.truncated"] = np.asarray(ep["truncated"], dtype=bool)
    cols["complementary_info.intervened"] = np.asarray(ep["intervened"], dtype=bool)
    cols["complementary_info.policy_action"] = np.asarray(ep["policy_action"], dtype=np.float32)
    cols["complementary_info.policy_version"] = np.asarray(ep["policy_version"], dtype=np.int64)
    frame = np.arange(n, dtype=np.int64)
    cols["timestamp"] = (frame / fps).astype(np.float32)
    cols["frame_index"] = frame
    cols["episode_index"] = np.full(n, ep_index, dtype=np.int64)
    cols["index"] = start + frame
    cols["task_index"] = np.zeros(n, dtype=np.int64)
    return cols


def to_table(cols: dict[str, Any], schema: Any) -> Any:
    import pyarrow as pa

    arrays = []
    for f in schema:
        v = cols[f.name]
        if pa.types.is_fixed_size_list(f.type):
            flat = pa.array(np.ascontiguousarray(v).reshape(-1), type=f.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, f.type.list_size))
        else:
            arrays.append(pa.array(v, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)
