"""Camera frames that do not match the setup are rejected, counted, logged and explained.

- ``convert.msg_to_image`` (no ROS graph): every bad frame gives a message with what was found
  and what is expected; rgb8, bgr8 (channels swapped) and padded rows decode exactly.
- ``RosCamera`` over DDS: a publisher node in the test's own rclpy context sends bad frames to
  ``/arm/front/image_raw``; the env side never gets a numpy error or a wrong image, its
  stale-frame error says which frames were rejected and why, the rejections are logged, and
  valid frames afterwards are accepted again.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

pytest.importorskip("rclpy")

from sensor_msgs.msg import Image  # noqa: E402

from drivers.ros import convert  # noqa: E402
from robot_rl.core.types import StaleSensorError  # noqa: E402

H, W = 16, 24  # the setup's size
TOPIC = "/arm/front/image_raw"


def _rgb(h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _msg(
    encoding: str = "rgb8",
    h: int = H,
    w: int = W,
    step: int | None = None,
    data: bytes | None = None,
    stamp_s: float = 1.0,
) -> Image:
    """An Image with the given fields; by default a valid rgb8 frame of the setup's size."""
    msg = Image(header=convert.header(stamp_s, "front"), height=h, width=w, encoding=encoding)
    msg.step = 3 * w if step is None else step
    msg.data = _rgb(h, w).tobytes() if data is None else data
    return msg


MONO = (
    "a single-channel (grey or depth) image: is a depth or mono stream published on this topic? "
    "It must carry the colour image as rgb8"
)
BAD_FRAMES = [
    (
        _msg("mono8", data=bytes(H * W), step=W),
        f"encoding mono8, expected rgb8 (or bgr8, converted): {MONO}",
    ),
    (
        _msg("16UC1", data=bytes(2 * H * W), step=2 * W),
        f"encoding 16UC1, expected rgb8 (or bgr8, converted): {MONO}",
    ),
    (
        _msg("bgra8", data=bytes(4 * H * W), step=4 * W),
        "encoding bgra8, expected rgb8 (or bgr8, converted): drop the alpha channel at the "
        "camera node and publish rgb8",
    ),
    (
        _msg(""),
        "encoding (empty), expected rgb8 (or bgr8, converted): publish rgb8 from the camera node",
    ),
    (
        _msg(h=48, w=64),
        "size 48x64 (HxW), expected 16x24 (the setup's cameras entry): set the camera node's "
        "resolution or the setup's height/width to the same size",
    ),
    (
        _msg(step=3 * W - 1, data=bytes(H * (3 * W - 1))),
        f"step {3 * W - 1} bytes per row, expected at least 3 * width = {3 * W} for rgb8",
    ),
    (
        _msg(data=bytes(H * 3 * W - 5)),
        f"data is {H * 3 * W - 5} bytes, expected height * step = {H} * {3 * W} = {H * 3 * W}",
    ),
    (_msg(data=b""), f"data is 0 bytes, expected height * step = {H} * {3 * W} = {H * 3 * W}"),
]


@pytest.mark.parametrize(("msg", "message"), BAD_FRAMES, ids=[m[:24] for _, m in BAD_FRAMES])
def test_a_bad_frame_is_refused_with_found_and_expected(msg: Image, message: str) -> None:
    with pytest.raises(ValueError) as e:
        convert.msg_to_image(msg, (H, W))
    assert str(e.value) == message


def test_rgb8_bgr8_and_padded_rows_decode_exactly() -> None:
    rgb = _rgb(seed=1)
    got, stamp = convert.msg_to_image(convert.image_to_msg(rgb, 2.5, "front"), (H, W))
    np.testing.assert_array_equal(got, rgb)
    assert stamp == 2.5 and got.flags.writeable and got.flags.c_contiguous
    bgr = _msg("bgr8", data=np.ascontiguousarray(rgb[:, :, ::-1]).tobytes())
    np.testing.assert_array_equal(convert.msg_to_image(bgr, (H, W))[0], rgb)
    padded = np.zeros((H, 3 * W + 8), dtype=np.uint8)  # 8 bytes of padding per row
    padded[:, : 3 * W] = rgb.reshape(H, 3 * W)
    got = convert.msg_to_image(_msg(step=3 * W + 8, data=padded.tobytes()), (H, W))[0]
    np.testing.assert_array_equal(got, rgb)


def test_ros_camera_rejects_bad_frames_says_why_and_recovers(
    a2_domain: int, ros_client_factory, caplog: pytest.LogCaptureFixture
) -> None:
    from drivers.ros import qos
    from drivers.ros_camera import RosCamera, RosCameraConfig

    caplog.set_level(logging.WARNING, logger="drivers.ros_session")
    pub_node = ros_client_factory(a2_domain)  # plays the camera node
    pub = pub_node.publisher(Image, TOPIC, qos.IMAGE)
    now = [10.0]
    cam = RosCamera(RosCameraConfig("front", H, W, max_age_s=0.2), lambda: now[0])

    def send(msg: Image, arrived, what: str) -> None:
        """Publish ``msg`` until the camera has taken it in (best effort QoS may drop one)."""
        for _ in range(15):
            pub.publish(msg)
            try:
                pub_node.wait_for(arrived, 2.0, what)
                return
            except TimeoutError:
                continue
        raise TimeoutError(f"the camera never received {what}")

    def rejected_one(msg: Image, what: str) -> int:
        before = cam.rejections()[0]
        send(msg, lambda: cam.rejections()[0] > before, what)
        return cam.rejections()[1]

    try:
        cam.connect()
        pub_node.wait_for(lambda: pub.get_subscription_count() > 0, 30, "discovery")
        with pytest.raises(StaleSensorError, match=f"no frame on {TOPIC} yet"):
            cam.read()

        # Only bad frames so far: no frame at all, and the error says why.
        mono = _msg("mono8", data=bytes(H * W), step=W, stamp_s=9.9)
        rejected_one(mono, "a mono8 frame")
        n = rejected_one(mono, "a second mono8 frame")
        assert n >= 2
        with pytest.raises(StaleSensorError) as e:
            cam.read()
        assert str(e.value) == (
            f"camera 'front': no valid frame on {TOPIC} yet; the last {cam.rejections()[1]} frames "
            f"on {TOPIC} were rejected: {BAD_FRAMES[0][1]}"
        )

        # A valid frame is accepted; the next bad ones never replace it.
        rgb = _rgb(seed=2)
        send(convert.image_to_msg(rgb, 10.0, "front"), lambda: cam.rejections()[1] == 0, "rgb8")
        frame = cam.read()
        np.testing.assert_array_equal(frame.image, rgb)
        assert frame.stamp_s == 10.0 and frame.seq >= 1
        seq = frame.seq
        for msg, _ in BAD_FRAMES[1:]:
            msg.header = convert.header(10.4, "front")
            rejected_one(msg, f"a {msg.encoding or 'no-encoding'} {msg.height}x{msg.width} frame")
        np.testing.assert_array_equal(cam.read().image, rgb)  # still the valid one, still fresh
        total, in_row, last = cam.rejections()
        assert in_row >= len(BAD_FRAMES) - 1 and total >= in_row + 2
        assert last == BAD_FRAMES[-1][1]

        # Time passes: the stale-frame error says the newer frames were rejected, and why.
        now[0] = 10.5
        with pytest.raises(StaleSensorError) as e:
            cam.read()
        expected = (
            f"camera 'front': newest valid frame on {TOPIC} is 0.500 s old at clock time 10.500 s "
            f"(limit max_age_s=0.2); the last N frames on {TOPIC} were rejected: {last}"
        )
        assert re.fullmatch(re.escape(expected).replace("N", r"\d+"), str(e.value)), e.value
        # Lockstep: the wait for the new step's frames names the rejections too.
        with cam.session.cond:
            cam.session.robot_time_s, cam.session.robot_call_started_s = 10.5, 0.0
        with pytest.raises(StaleSensorError, match=f"{TOPIC} \\(newest stamp 10.0; the last "):
            cam.session.wait_synced(0.05, "sim/step")

        # Valid frames again (bgr8 is converted): accepted, fresh, the run of rejections ends.
        send(
            _msg("bgr8", data=np.ascontiguousarray(rgb[:, :, ::-1]).tobytes(), stamp_s=10.45),
            lambda: cam.rejections()[1] == 0,
            "a bgr8 frame",
        )
        frame = cam.read()
        np.testing.assert_array_equal(frame.image, rgb)
        assert frame.stamp_s == 10.45 and frame.seq > seq
    finally:
        cam.disconnect()

    logged = [r.getMessage() for r in caplog.records if r.name == "drivers.ros_session"]
    assert any(
        m.startswith(f"the last frame on {TOPIC} was rejected: encoding mono8, expected rgb8")
        for m in logged
    ), logged
    assert any(m.startswith(f"{TOPIC}: valid frames again after ") for m in logged), logged
