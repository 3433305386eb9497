"""Camera node: an OpenCV/V4L2 or RealSense camera -> ``<cam>/image_raw`` + ``<cam>/camera_info``.

    python -m drivers.cameras.node --kind opencv --source 0|/dev/video2|clip.avi \
        --name front --ns arm --rate-hz 30 [--width 640 --height 480] [--loop]
    python -m drivers.cameras.node --kind realsense --source SERIAL|recording.db3 \
        --name front --ns arm --rate-hz 30 [--width 640 --height 480 --fps 30] [--no-depth]

Node ``<name>_camera`` in namespace ``--ns``. Every ``1 / rate_hz`` s it takes the camera's
newest frame and, if it is new (``Frame.seq`` changed), publishes it as ``<name>/image_raw``
(sensor_msgs/Image ``rgb8``) and ``<name>/camera_info`` (same stamp), both with IMAGE QoS
(``drivers/CONTRACT.md``); a RealSense also publishes the depth aligned to colour as
``<name>/depth/image_raw`` (``16UC1``, little-endian, units of ``depth_scale_m``: 1 mm on most
models). A frame is published once: a stalled camera shows up as missing messages (deadline)
and old stamps, never as repeated old frames. ``header.frame_id`` is the camera name.

For ``--kind realsense`` the source is a serial number, or a recording (``.db3`` / ``.bag``)
to play back. The node exits with status 1 if the camera fails (a supervisor restarts it) and
with 0 when a file source without ``--loop`` has been played to its end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from drivers.ros import convert, qos

from .common import CameraError, CameraIntrinsics
from .opencv_camera import OpenCVCamera, OpenCVCameraConfig, parse_source
from .realsense import RealSenseCamera, RealSenseConfig

DEPTH_ENCODING = "16UC1"


def camera_info_msg(intr: CameraIntrinsics | None, h: int, w: int, stamp_s: float, frame: str):
    """``sensor_msgs/CameraInfo`` from intrinsics (unknown intrinsics: size only, K zero)."""
    msg = CameraInfo(header=convert.header(stamp_s, frame), height=h, width=w)
    if intr is not None:
        msg.distortion_model = intr.distortion_model
        msg.d = [float(c) for c in intr.coeffs]
        msg.k = intr.k
        msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        msg.p = intr.p
    return msg


def depth_to_msg(depth: np.ndarray, stamp_s: float, frame: str) -> Image:
    """(H, W) uint16 -> ``sensor_msgs/Image`` ``16UC1`` (little-endian, step = 2 W)."""
    d = np.asarray(depth)
    if d.ndim != 2 or d.dtype != np.uint16:
        raise ValueError(f"depth must be (H, W) uint16, got {d.shape} {d.dtype}")
    h, w = d.shape
    msg = Image(header=convert.header(stamp_s, frame), height=h, width=w)
    msg.encoding = DEPTH_ENCODING
    msg.is_bigendian = 0
    msg.step = 2 * w
    msg.data = np.ascontiguousarray(d, dtype="<u2").tobytes()
    return msg


def msg_to_depth(msg: Image) -> np.ndarray:
    """``16UC1`` ``sensor_msgs/Image`` -> (H, W) uint16 (a fresh array).

    Raises:
        ValueError: Other encoding, big-endian data, or sizes that do not add up.
    """
    if msg.encoding != DEPTH_ENCODING or msg.is_bigendian:
        raise ValueError(f"depth image must be little-endian {DEPTH_ENCODING}, got {msg.encoding}")
    h, w = int(msg.height), int(msg.width)
    if msg.step != 2 * w or len(msg.data) != h * msg.step:
        raise ValueError(f"depth image {h}x{w}: step {msg.step}, {len(msg.data)} bytes")
    return np.frombuffer(msg.data, dtype="<u2").reshape(h, w).astype(np.uint16)


def build_camera(args: argparse.Namespace) -> OpenCVCamera | RealSenseCamera:
    """The camera for the CLI arguments (not yet connected)."""
    if args.kind == "opencv":
        return OpenCVCamera(
            OpenCVCameraConfig(
                name=args.name,
                source=parse_source(args.source),
                width=args.width,
                height=args.height,
                fps=args.fps,
                threaded=True,
                loop=args.loop,
            )
        )
    if args.kind == "realsense":
        is_file = args.source is not None and Path(args.source).suffix in (".db3", ".bag")
        return RealSenseCamera(
            RealSenseConfig(
                name=args.name,
                serial=None if is_file else args.source,
                playback_path=args.source if is_file else None,
                width=args.width if is_file else (args.width or 640),
                height=args.height if is_file else (args.height or 480),
                fps=int(args.fps or 30),
                depth=args.depth,
                threaded=True,
                loop_playback=args.loop,
            )
        )
    raise ValueError(f"unknown camera kind {args.kind!r}")


class CameraNode(Node):
    """Thin ROS adapter: publishes each new frame of one camera."""

    def __init__(self, camera: Any, namespace: str, rate_hz: float) -> None:
        super().__init__(f"{camera.name}_camera", namespace=namespace)
        if not rate_hz > 0:
            raise ValueError(f"rate_hz {rate_hz} must be > 0")
        self.camera = camera
        name = camera.name
        self.image_pub = self.create_publisher(Image, f"{name}/image_raw", qos.IMAGE)
        self.info_pub = self.create_publisher(CameraInfo, f"{name}/camera_info", qos.IMAGE)
        self.depth_pub = None
        if isinstance(camera, RealSenseCamera) and camera.config.depth:
            self.depth_pub = self.create_publisher(Image, f"{name}/depth/image_raw", qos.IMAGE)
        self._last_seq = 0
        self.exit_code: int | None = None
        self.timer = self.create_timer(1.0 / rate_hz, self._tick)

    def _tick(self) -> None:
        if self.exit_code is not None:
            return
        cam = self.camera
        try:
            if isinstance(cam, RealSenseCamera):
                frame, depth = cam.read_with_depth()
            else:
                frame, depth = cam.read(), None
        except CameraError as e:
            self.get_logger().error(str(e))
            self.exit_code = 1
            return
        if frame.seq != self._last_seq:
            self._last_seq = frame.seq
            h, w = frame.image.shape[:2]
            self.image_pub.publish(convert.image_to_msg(frame.image, frame.stamp_s, cam.name))
            self.info_pub.publish(camera_info_msg(cam.intrinsics, h, w, frame.stamp_s, cam.name))
            if depth is not None and self.depth_pub is not None:
                self.depth_pub.publish(depth_to_msg(depth.depth, frame.stamp_s, cam.name))
        elif cam.ended:
            self.get_logger().info(f"camera {cam.name}: source ended")
            self.exit_code = 0


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", required=True, choices=("opencv", "realsense"))
    p.add_argument(
        "--source",
        default=None,
        help="opencv: device index, /dev/video* or video file; realsense: serial or .db3/.bag",
    )
    p.add_argument("--name", required=True, help="camera name (topic prefix)")
    p.add_argument("--ns", default="arm", help="ROS namespace of the arm")
    p.add_argument("--rate-hz", type=float, default=30.0, help="publish check rate (Hz)")
    p.add_argument("--width", type=int, default=None)
    p.add_argument("--height", type=int, default=None)
    p.add_argument("--fps", type=float, default=None, help="device rate / file playback rate")
    p.add_argument("--loop", action="store_true", help="file sources: play in a loop")
    p.add_argument(
        "--depth", action=argparse.BooleanOptionalAction, default=True, help="realsense depth"
    )
    args, ros_args = p.parse_known_args(argv)
    if args.kind == "opencv" and args.source is None:
        p.error("--kind opencv needs --source")
    return args, ros_args


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (1: camera failure, 0: file ended or Ctrl-C)."""
    args, ros_args = _parse(argv)
    camera = build_camera(args)
    try:
        camera.connect()
    except CameraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rclpy.init(args=[sys.argv[0], *ros_args])
    node = CameraNode(camera, args.ns, args.rate_hz)
    try:
        while rclpy.ok() and node.exit_code is None:
            rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass  # Ctrl-C / SIGTERM: shut down cleanly
    finally:
        camera.disconnect()
        node.destroy_node()
        rclpy.try_shutdown()
    return node.exit_code or 0


if __name__ == "__main__":
    sys.exit(main())
