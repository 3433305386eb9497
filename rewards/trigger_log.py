"""An append-only, on-disk log of success-detector triggers, for audit and hard-negative mining.

Layout of a log directory::

    triggers.jsonl                      one JSON object per trigger, one line each
    frames/<trigger_id>/<camera>_s<step>.png   the window's frames (RGB written as PNG)

Each JSON line names its frame files (paths relative to the directory), so a person can look at
a trigger, mark it false, and :func:`hard_negatives` hands those frames back for retraining.

Crash safety: a trigger's PNG files are written before its JSON line, and every line is flushed
and fsynced, so a line never points at missing files. A torn last line (no newline, from a crash
mid-write) is skipped by :func:`read_triggers` and cut off when a :class:`TriggerLog` reopens the
directory; any other malformed line is an error.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import cv2
import numpy as np

TRIGGERS_FILE = "triggers.jsonl"
FRAMES_DIR = "frames"


@dataclass(frozen=True)
class TriggerRecord:
    """One logged trigger, as read back from ``triggers.jsonl`` (pixels not loaded).

    Attributes:
        trigger_id: Unique id within the log directory; also the name of its frames folder.
        episode: Episode index given to the detector.
        step: Step at which the trigger happened (the last step of the window).
        wall_time_s: Unix time (``time.time()``) when the line was written, seconds.
        reason: Detector reason: ``"confirmed"``, ``"cascade_rejected"`` or ``"human"``.
        accepted: Whether the detector declared success (False for a cascade rejection or a
            human ``"failure"``).
        steps: Steps of the window, oldest first.
        probs: Classifier success probability at each window step.
        fired: Whether each window step fired (prob >= threshold and all gates passed).
        judge_prob: The cascade judge's probability, or None if the judge was not called.
        frame_files: Per window step, camera name -> PNG path relative to the log directory
            (an empty mapping for a step logged without frames).
        meta: Detector settings at trigger time (threshold, k, n, judge_threshold, ...).
    """

    trigger_id: str
    episode: int
    step: int
    wall_time_s: float
    reason: str
    accepted: bool
    steps: tuple[int, ...]
    probs: tuple[float, ...]
    fired: tuple[bool, ...]
    judge_prob: float | None
    frame_files: tuple[Mapping[str, str], ...]
    meta: Mapping[str, object]


@dataclass(frozen=True)
class HardNegative:
    """One frame of a trigger a person marked false: a negative example the classifier liked.

    Attributes:
        trigger_id: The trigger it came from.
        episode: Episode of the trigger.
        step: Step of this frame.
        prob: Classifier probability the detector saw for this frame.
        fired: Whether this frame fired.
        images: Camera name -> (H, W, 3) uint8 RGB, as given to the detector.
    """

    trigger_id: str
    episode: int
    step: int
    prob: float
    fired: bool
    images: Mapping[str, np.ndarray]


class TriggerLog:
    """Appends triggers to ``directory`` (created if missing; an existing log is appended to).

    Args:
        directory: Log directory.
        wall_clock: Returns Unix time in seconds; injectable for tests.
        lazy: Create the directory and open the file at the first append, so that a log that
            never triggers leaves nothing behind (e.g. inside a run directory that must stay
            empty until the run starts).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        wall_clock: Callable[[], float] = time.time,
        lazy: bool = False,
    ) -> None:
        self._dir = Path(directory)
        self._clock = wall_clock
        self._file: BinaryIO | None = None
        self._count = 0
        self._closed = False
        if not lazy:
            self._open()

    def _open(self) -> BinaryIO:
        if self._closed:
            raise ValueError(f"trigger log {self._dir} is closed")
        if self._file is not None:
            return self._file
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / TRIGGERS_FILE
        data = path.read_bytes() if path.exists() else b""
        # Count torn lines too, so a crashed writer's frames folder is never reused.
        self._count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        if data and not data.endswith(b"\n"):
            # Drop the torn line a crashed writer left, so the next record starts on its own line.
            with path.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
        self._file = path.open("ab")
        return self._file

    @property
    def directory(self) -> Path:
        """The log directory."""
        return self._dir

    def append(
        self,
        *,
        episode: int,
        step: int,
        reason: str,
        accepted: bool,
        steps: Sequence[int],
        probs: Sequence[float],
        fired: Sequence[bool],
        judge_prob: float | None,
        frames: Sequence[Mapping[str, np.ndarray] | None],
        meta: Mapping[str, object] | None = None,
    ) -> str:
        """Write one trigger's frames as PNG, then its JSON line; returns its ``trigger_id``.

        Args:
            episode: Episode index.
            step: Step of the trigger.
            reason: Why it was logged (detector reason).
            accepted: Whether the detector declared success.
            steps: (T,) window steps, oldest first.
            probs: (T,) classifier probabilities of the window.
            fired: (T,) fired flags of the window.
            judge_prob: Judge probability, or None.
            frames: (T,) per step, camera name -> (H, W, 3) uint8 RGB, or None for no frames.
            meta: JSON-serialisable detector settings.

        Raises:
            ValueError: If the window arrays differ in length or a frame is not (H, W, 3) uint8.
            OSError: If a PNG cannot be written.
        """
        out = self._open()
        n = len(steps)
        if not (len(probs) == len(fired) == len(frames) == n):
            raise ValueError(
                f"window lengths differ: steps {n}, probs {len(probs)}, fired {len(fired)}, "
                f"frames {len(frames)}; pass one entry per window step"
            )
        trigger_id = f"t{self._count:06d}_e{episode}_s{step}"
        frame_files: list[dict[str, str]] = []
        for s, step_frames in zip(steps, frames, strict=True):
            files: dict[str, str] = {}
            for camera, image in (step_frames or {}).items():
                rel = f"{FRAMES_DIR}/{trigger_id}/{camera}_s{s}.png"
                _write_png(self._dir / rel, image, camera)
                files[camera] = rel
            frame_files.append(files)
        record = {
            "trigger_id": trigger_id,
            "episode": int(episode),
            "step": int(step),
            "wall_time_s": float(self._clock()),
            "reason": reason,
            "accepted": bool(accepted),
            "steps": [int(s) for s in steps],
            "probs": [float(p) for p in probs],
            "fired": [bool(f) for f in fired],
            "judge_prob": None if judge_prob is None else float(judge_prob),
            "frame_files": frame_files,
            "meta": dict(meta or {}),
        }
        out.write(json.dumps(record).encode() + b"\n")
        out.flush()
        os.fsync(out.fileno())
        self._count += 1
        return trigger_id

    def close(self) -> None:
        """Close the JSON-lines file (further appends fail)."""
        if self._file is not None:
            self._file.close()
        self._closed = True

    def __enter__(self) -> TriggerLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_png(path: Path, image: np.ndarray, camera: str) -> None:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(
            f"frame of camera {camera!r} has shape {image.shape} dtype {image.dtype}; "
            "the trigger log stores (H, W, 3) uint8 RGB images"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
        raise OSError(f"cv2.imwrite could not write {path}")


def read_triggers(directory: str | os.PathLike[str]) -> list[TriggerRecord]:
    """Read every trigger logged in ``directory``, in write order.

    Raises:
        FileNotFoundError: If ``directory`` holds no ``triggers.jsonl``.
        ValueError: If a line other than a torn last line is not a valid record.
    """
    path = Path(directory) / TRIGGERS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no {TRIGGERS_FILE} in {directory}: is this a trigger log dir?")
    # The last piece is "" when the file ends with a newline, else a line torn by a crash.
    lines = path.read_text().split("\n")[:-1]
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            r = TriggerRecord(
                trigger_id=d["trigger_id"],
                episode=int(d["episode"]),
                step=int(d["step"]),
                wall_time_s=float(d["wall_time_s"]),
                reason=d["reason"],
                accepted=bool(d["accepted"]),
                steps=tuple(int(s) for s in d["steps"]),
                probs=tuple(float(p) for p in d["probs"]),
                fired=tuple(bool(f) for f in d["fired"]),
                judge_prob=None if d["judge_prob"] is None else float(d["judge_prob"]),
                frame_files=tuple(dict(f) for f in d["frame_files"]),
                meta=dict(d["meta"]),
            )
            if not len(r.steps) == len(r.probs) == len(r.fired) == len(r.frame_files):
                raise TypeError("window fields differ in length")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path} line {lineno} is not a trigger record: {e}") from e
        records.append(r)
    return records


def load_frames(
    directory: str | os.PathLike[str], record: TriggerRecord
) -> list[dict[str, np.ndarray]]:
    """Load a trigger's frames: per window step, camera name -> (H, W, 3) uint8 RGB.

    Raises:
        FileNotFoundError: If a PNG named by the record is missing or unreadable.
    """
    out = []
    for files in record.frame_files:
        step_frames = {}
        for camera, rel in files.items():
            bgr = cv2.imread(str(Path(directory) / rel), cv2.IMREAD_COLOR)
            if bgr is None:
                raise FileNotFoundError(
                    f"trigger {record.trigger_id}: frame {rel} is missing or unreadable"
                )
            step_frames[camera] = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        out.append(step_frames)
    return out


def hard_negatives(
    directory: str | os.PathLike[str], false_ids: Iterable[str], *, fired_only: bool = True
) -> list[HardNegative]:
    """Frames of the triggers a person marked false, for retraining the classifier.

    Args:
        directory: Trigger log directory.
        false_ids: ``trigger_id`` values a person judged to be false successes.
        fired_only: Keep only frames that fired (the ones the classifier scored above
            threshold); False keeps every frame of the window.

    Returns:
        One :class:`HardNegative` per frame with images, in log order then step order.

    Raises:
        KeyError: If an id is not in the log (lists the unknown ids).
    """
    wanted = set(false_ids)
    records = [r for r in read_triggers(directory) if r.trigger_id in wanted]
    unknown = wanted - {r.trigger_id for r in records}
    if unknown:
        raise KeyError(f"trigger ids not in {directory}: {sorted(unknown)}")
    out = []
    for r in records:
        for s, p, f, images in zip(
            r.steps, r.probs, r.fired, load_frames(directory, r), strict=True
        ):
            if images and (f or not fired_only):
                out.append(HardNegative(r.trigger_id, r.episode, s, p, f, images))
    return out
