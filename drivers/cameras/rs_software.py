"""Write a RealSense recording without a camera, from a ``pyrealsense2.software_device``.

The software device is librealsense's own stand-in for hardware: it has colour and depth
sensors with the intrinsics we give, and frames we push go through librealsense's recorder into
a ROS 2 bag (``.db3``) exactly as a camera's would. :class:`drivers.cameras.realsense.
RealSenseCamera` then plays the file through its normal pipeline. Used by the tests (no camera
on CI machines) and to make demo recordings; it replaces only the device's frame source.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .common import CameraIntrinsics


def write_software_recording(
    path: str | Path,
    colors: Sequence[np.ndarray],
    depths: Sequence[np.ndarray] | None,
    intrinsics: CameraIntrinsics,
    fps: int = 30,
    depth_scale_m: float = 0.001,
    paced: bool = True,
) -> None:
    """Record colour (and depth) frames pushed through a software device to ``path`` (.db3).

    Depth and colour share the intrinsics and an identity extrinsic, so aligned depth equals
    the input depth wherever the alignment hits a pixel.

    Args:
        path: Output file; librealsense 2.59 requires the ``.db3`` extension.
        colors: (H, W, 3) uint8 RGB frames.
        depths: (H, W) uint16 frames (same count), or None for colour only.
        intrinsics: Of both streams; size must match the frames.
        fps: Nominal frame rate (frame timestamps are spaced 1/fps apart).
        depth_scale_m: Metres per depth unit.
        paced: Push frames 1/fps apart in wall time. The recorder stamps frames by arrival, so
            an unpaced recording plays back in real time as one burst.
    """
    import pyrealsense2 as rs

    w, h = intrinsics.width, intrinsics.height
    if depths is not None and len(depths) != len(colors):
        raise ValueError(f"{len(colors)} colour frames but {len(depths)} depth frames")
    intr = rs.intrinsics()
    intr.width, intr.height = w, h
    intr.fx, intr.fy, intr.ppx, intr.ppy = (
        intrinsics.fx,
        intrinsics.fy,
        intrinsics.cx,
        intrinsics.cy,
    )
    intr.model = rs.distortion.brown_conrady
    intr.coeffs = list(intrinsics.coeffs)

    dev = rs.software_device()
    dev.register_info(rs.camera_info.name, "robot_rl software device")
    dev.register_info(rs.camera_info.serial_number, "000000000000")
    sensors, profiles = [], []
    kinds = [(rs.stream.color, rs.format.rgb8, 3, "RGB Camera")]
    if depths is not None:
        kinds.append((rs.stream.depth, rs.format.z16, 2, "Stereo Module"))
    for uid, (stream, fmt, bpp, sensor_name) in enumerate(kinds):
        sensor = dev.add_sensor(sensor_name)
        vs = rs.video_stream()
        vs.type, vs.index, vs.uid = stream, 0, uid
        vs.width, vs.height, vs.fps, vs.bpp, vs.fmt = w, h, fps, bpp, fmt
        vs.intrinsics = intr
        profiles.append(sensor.add_video_stream(vs))
        sensors.append(sensor)
    if depths is not None:
        sensors[1].add_read_only_option(rs.option.depth_units, depth_scale_m)
        ident = rs.extrinsics()
        ident.rotation = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        ident.translation = [0.0, 0.0, 0.0]
        profiles[0].register_extrinsics_to(profiles[1], ident)
        profiles[1].register_extrinsics_to(profiles[0], ident)
    dev.create_matcher(rs.matchers.default)

    recorder = rs.recorder(str(path), dev)
    queue = rs.frame_queue(4 * len(colors) + 8)
    for sensor, profile in zip(sensors, profiles, strict=True):
        sensor.open(profile)
        sensor.start(queue)
    start_s = time.monotonic()
    for i, rgb in enumerate(colors):
        if paced:  # pacing a recording, not waiting for a condition
            time.sleep(max(0.0, start_s + i / fps - time.monotonic()))
        frames = [(np.ascontiguousarray(rgb, dtype=np.uint8), 3)]
        if depths is not None:
            frames.append((np.ascontiguousarray(depths[i], dtype=np.uint16), 2))
        for (pixels, bpp), sensor, profile in zip(frames, sensors, profiles, strict=False):
            if pixels.shape[:2] != (h, w):
                raise ValueError(f"frame {i} is {pixels.shape}, intrinsics say {h}x{w}")
            f = rs.software_video_frame()
            f.pixels, f.bpp, f.stride = pixels, bpp, bpp * w
            f.timestamp = i * 1000.0 / fps
            f.domain = rs.timestamp_domain.system_time
            f.frame_number = i
            f.profile = profile.as_video_stream_profile()
            if bpp == 2:
                f.depth_units = depth_scale_m
            sensor.on_video_frame(f)
        # the recorder writes asynchronously; let it take each frame set before the next
        for _ in range(len(frames)):
            queue.wait_for_frame(5000)
    for sensor in sensors:
        sensor.stop()
        sensor.close()
    del recorder  # closes the file
