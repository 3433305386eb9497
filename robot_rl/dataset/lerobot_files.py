"""File writers of a LeRobot v3.0 export: chunked parquet files and concatenated mp4 videos.

LeRobot v3.0 stores many episodes per file: ``data/chunk-{c:03d}/file-{f:03d}.parquet`` and
``videos/{video_key}/chunk-{c:03d}/file-{f:03d}.mp4``. A file grows until it reaches its size
limit (``data_files_size_in_mb``, ``video_files_size_in_mb``; checked between episodes, so an
episode never straddles two files), then the next file starts; a chunk folder holds at most
``chunks_size`` files. Episode rows in ``meta/episodes`` say which file holds an episode and,
for videos, where it starts and ends in that file (``from_timestamp`` / ``to_timestamp``,
seconds from the file's first frame).

Videos are encoded with the ffmpeg binary bundled with ``imageio-ffmpeg``, at a constant frame
rate, one episode at a time, and appended to the current file by a stream copy, so frame ``k``
of a file has presentation time ``k / fps`` exactly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"

VideoCodec = Literal["libsvtav1", "h264"]
# ffmpeg encoder -> the codec name a decoder reports (``video.codec`` in info.json)
CODEC_NAMES = {"libsvtav1": "av1", "h264": "h264"}
_ENCODERS = {"libsvtav1": "libsvtav1", "h264": "libx264"}
PIX_FMT = "yuv420p"


def next_file(chunk_index: int, file_index: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after ``(chunk_index, file_index)``."""
    if file_index == chunks_size - 1:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1


def _mb(path: Path) -> float:
    return path.stat().st_size / 2**20 if path.exists() else 0.0


class ParquetFiles:
    """Append episode tables to size-limited parquet files (one row group per episode).

    Args:
        root: Export root.
        template: Path template with ``chunk_index`` and ``file_index``.
        schema: The pyarrow schema of every table.
        max_file_mb: Start a new file once the current one is at least this large.
        chunks_size: Files per chunk folder.
    """

    def __init__(
        self, root: Path, template: str, schema: Any, max_file_mb: float, chunks_size: int
    ) -> None:
        self.root, self.template, self.schema = root, template, schema
        self.max_file_mb, self.chunks_size = max_file_mb, chunks_size
        self.chunk_index, self.file_index = 0, 0
        self._writer: Any = None
        self._path: Path | None = None
        self.paths: list[Path] = []

    def append(self, table: Any) -> tuple[int, int]:
        """Write one episode's rows; returns the (chunk, file) that holds them."""
        import pyarrow.parquet as pq

        if self._writer is not None and _mb(self._path) >= self.max_file_mb:
            self._writer.close()
            self._writer = None
            self.chunk_index, self.file_index = next_file(
                self.chunk_index, self.file_index, self.chunks_size
            )
        if self._writer is None:
            rel = self.template.format(chunk_index=self.chunk_index, file_index=self.file_index)
            self._path = self.root / rel
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                str(self._path), self.schema, compression="snappy", use_dictionary=True
            )
            self.paths.append(self._path)
        self._writer.write_table(table.cast(self.schema))
        return self.chunk_index, self.file_index

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@dataclass(frozen=True)
class VideoSettings:
    """How camera streams are encoded.

    Attributes:
        fps: Frames per second (LeRobot: an integer).
        codec: ``libsvtav1`` (AV1, LeRobot's default) or ``h264`` (libx264).
        crf: Constant rate factor (lower is better quality, bigger files).
        gop: Keyframe interval in frames (small: fast random access, as LeRobot's 2).
        preset: libsvtav1 speed preset (0 slow .. 13 fast); LeRobot uses 12.
    """

    fps: int
    codec: VideoCodec = "libsvtav1"
    crf: int = 30
    gop: int = 2
    preset: int = 12

    def __post_init__(self) -> None:
        if self.codec not in _ENCODERS:
            raise ValueError(f"codec must be one of {sorted(_ENCODERS)}, got {self.codec!r}")
        if self.fps < 1:
            raise ValueError(f"fps must be >= 1, got {self.fps}")
        if not 0 <= self.crf <= 63:
            raise ValueError(f"crf must be in [0, 63], got {self.crf}")
        if self.gop < 1:
            raise ValueError(f"gop must be >= 1 frame, got {self.gop}")

    def output_params(self) -> list[str]:
        params = ["-g", str(self.gop), "-crf", str(self.crf)]
        if self.codec == "libsvtav1":
            params += ["-preset", str(self.preset)]
        return params


@dataclass(frozen=True)
class VideoSpan:
    """Where one episode of one camera lives: file indices and its time span in that file."""

    chunk_index: int
    file_index: int
    from_timestamp: float
    to_timestamp: float


class VideoFiles:
    """One camera stream: episodes appended to size-limited mp4 files.

    Each episode is encoded to its own temporary mp4 first (so its size is known exactly),
    then either starts the next file (when the current file plus the episode would reach
    ``max_file_mb``) or is appended to the current file by a stream copy (ffmpeg's concat
    demuxer, no re-encoding), as LeRobot's recorder does.

    Args:
        root: Export root.
        video_key: Feature name, e.g. ``observation.images.front``.
        size_hw: (H, W) of every frame; both even (yuv420p halves the chroma planes).
        settings: Encoding settings.
        max_file_mb: Start a new file when the current one plus the episode reaches this.
        chunks_size: Files per chunk folder.
    """

    def __init__(
        self,
        root: Path,
        video_key: str,
        size_hw: tuple[int, int],
        settings: VideoSettings,
        max_file_mb: float,
        chunks_size: int,
    ) -> None:
        h, w = size_hw
        if h % 2 or w % 2:
            raise ValueError(
                f"{video_key}: frames are {h}x{w} pixels; {PIX_FMT} video needs even sides. "
                "Record with an even --image-size"
            )
        self.root, self.video_key, self.size_hw = root, video_key, (h, w)
        self.settings, self.max_file_mb, self.chunks_size = settings, max_file_mb, chunks_size
        self.chunk_index, self.file_index = 0, 0
        self._tmp = root / ".video_tmp"
        self.paths: list[Path] = []
        self.frames_per_file: list[int] = []

    def append(self, frames: np.ndarray) -> VideoSpan:
        """Encode one episode's (T, H, W, 3) uint8 frames; returns where they went."""
        if frames.ndim != 4 or frames.shape[1:] != (*self.size_hw, 3) or frames.dtype != np.uint8:
            raise ValueError(
                f"{self.video_key}: expected (T, {self.size_hw[0]}, {self.size_hw[1]}, 3) uint8, "
                f"got {frames.shape} {frames.dtype}"
            )
        self._tmp.mkdir(parents=True, exist_ok=True)
        episode = self._tmp / f"{self.video_key}-episode.mp4"
        self._encode(frames, episode)
        if self.paths and _mb(self.paths[-1]) + _mb(episode) >= self.max_file_mb:
            self.chunk_index, self.file_index = next_file(
                self.chunk_index, self.file_index, self.chunks_size
            )
        if not self.paths or self.paths[-1] != self._file_path():
            path = self._file_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(episode, path)
            self.paths.append(path)
            self.frames_per_file.append(0)
        else:
            self._concat(self.paths[-1], episode)
        start = self.frames_per_file[-1]
        self.frames_per_file[-1] += len(frames)
        fps = self.settings.fps
        return VideoSpan(
            self.chunk_index, self.file_index, start / fps, self.frames_per_file[-1] / fps
        )

    def _file_path(self) -> Path:
        rel = VIDEO_PATH.format(
            video_key=self.video_key, chunk_index=self.chunk_index, file_index=self.file_index
        )
        return self.root / rel

    def _encode(self, frames: np.ndarray, path: Path) -> None:
        import imageio_ffmpeg

        h, w = self.size_hw
        gen = imageio_ffmpeg.write_frames(
            str(path),
            (w, h),
            pix_fmt_in="rgb24",
            pix_fmt_out=PIX_FMT,
            fps=self.settings.fps,
            codec=_ENCODERS[self.settings.codec],
            quality=None,
            macro_block_size=1,  # never resize: the frames are stored as recorded
            ffmpeg_log_level="error",
            output_params=self.settings.output_params(),
        )
        quiet = "SVT_LOG" not in os.environ  # SVT-AV1 logs to stderr unless told not to
        if quiet:
            os.environ["SVT_LOG"] = "1"  # errors only; restored once ffmpeg has started
        try:
            gen.send(None)  # start ffmpeg (it inherits the environment now)
        finally:
            if quiet:
                del os.environ["SVT_LOG"]
        for f in frames:
            gen.send(np.ascontiguousarray(f))
        gen.close()  # waits for ffmpeg to finish the file

    def _concat(self, current: Path, episode: Path) -> None:
        """``current`` := ``current`` followed by ``episode`` (stream copy, same settings)."""
        import imageio_ffmpeg

        listing = self._tmp / "concat.txt"
        listing.write_text(f"file '{current.resolve()}'\nfile '{episode.resolve()}'\n")
        joined = self._tmp / f"{self.video_key}-joined.mp4"
        cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-v", "error", "-f", "concat", "-safe", "0"]
        cmd += ["-i", str(listing), "-map", "0:v", "-c", "copy", str(joined)]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"ffmpeg could not append to {current}: {proc.stderr.strip()}")
        os.replace(joined, current)
        episode.unlink()

    def close(self) -> None:
        """Remove the temporary files (the mp4 files are complete after every append)."""
        if self._tmp.exists():
            shutil.rmtree(self._tmp, ignore_errors=True)

    def feature_info(self) -> dict[str, Any]:
        """The ``info`` block of this video feature in ``meta/info.json``."""
        h, w = self.size_hw
        return {
            "video.height": h,
            "video.width": w,
            "video.codec": CODEC_NAMES[self.settings.codec],
            "video.pix_fmt": PIX_FMT,
            "video.is_depth_map": False,
            "video.fps": self.settings.fps,
            "video.channels": 3,
            "has_audio": False,
        }
