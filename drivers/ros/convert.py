"""Conversions between robot_rl values and ROS 2 messages (the only place that does them).

Quaternion order: robot_rl poses are ``[x, y, z, qw, qx, qy, qz]`` (scalar first);
``geometry_msgs/Quaternion`` is ``(x, y, z, w)``. :func:`pose_to_msg` and :func:`msg_to_pose`
are the only functions that touch that order (``drivers/CONTRACT.md``).

Every ``msg_to_*`` function validates and raises :class:`ValueError` with a message that says
what is wrong (NaN, non-unit quaternion, wrong frame, wrong encoding/step/size), so that a node
can log the reason and count the rejection instead of executing a malformed message.

Times: ``builtin_interfaces/Time`` <-> float seconds (:func:`time_to_msg`, :func:`msg_to_time`).
Stamps carry the reading's time base unchanged (sim time for the twin, monotonic on hardware).
"""

from __future__ import annotations

import math
import re

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped, TwistStamped, WrenchStamped
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, Header, MultiArrayDimension

from robot_rl.core.arm import builtin_arm
from robot_rl.core.types import RobotState

FR3 = builtin_arm("fr3")

BASE_FRAME = "base"
"""``header.frame_id`` of poses, twists and wrenches (robot base frame)."""

ARM_JOINT_NAMES = FR3.joint_names
"""Default names in ``joint_states``: the FR3's ``joint1..joint7``. Every function that reads or
writes ``joint_states`` takes the arm's own names (``ArmDescription.joint_names``)."""

GRIPPER_JOINT_NAME = "gripper"
"""The one joint in ``gripper/state`` (position = closure 0..1)."""

RGB8 = "rgb8"
"""The image encoding of the contract."""

BGR8 = "bgr8"
"""Also accepted on receipt (channels swapped to RGB: lossless)."""

IMAGE_ENCODINGS = (RGB8, BGR8)

_ENCODING_HINTS = {
    **dict.fromkeys(
        ("mono8", "mono16", "16UC1", "32FC1"),
        "a single-channel (grey or depth) image: is a depth or mono stream published on this "
        "topic? It must carry the colour image as rgb8",
    ),
    **dict.fromkeys(
        ("rgba8", "bgra8"), "drop the alpha channel at the camera node and publish rgb8"
    ),
}

UNIT_QUAT_TOL = 1e-3
"""Largest accepted ``| |q| - 1 |`` of a received quaternion."""


# -- time --------------------------------------------------------------------------------------


def time_to_msg(stamp_s: float) -> Time:
    """Float seconds (>= 0) -> ``builtin_interfaces/Time`` (nanosecond resolution)."""
    if not math.isfinite(stamp_s) or stamp_s < 0:
        raise ValueError(f"stamp {stamp_s} s must be finite and >= 0")
    ns = round(stamp_s * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def msg_to_time(msg: Time) -> float:
    """``builtin_interfaces/Time`` -> float seconds."""
    return msg.sec + msg.nanosec * 1e-9


def header(stamp_s: float, frame_id: str = BASE_FRAME) -> Header:
    """A ``std_msgs/Header`` with the stamp in seconds and the frame."""
    return Header(stamp=time_to_msg(stamp_s), frame_id=frame_id)


# -- poses -------------------------------------------------------------------------------------


def _finite(values: np.ndarray, what: str) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what} contains NaN or inf: {a}")
    return a


def pose_to_msg(pose: np.ndarray) -> Pose:
    """robot_rl pose (7,) ``[x, y, z, qw, qx, qy, qz]`` -> ``geometry_msgs/Pose``.

    Raises:
        ValueError: Wrong shape or non-finite values.
    """
    p = np.asarray(pose, dtype=np.float64)
    if p.shape != (7,):
        raise ValueError(f"pose must have shape (7,) [x, y, z, qw, qx, qy, qz], got {p.shape}")
    _finite(p, "pose")
    msg = Pose()
    msg.position.x, msg.position.y, msg.position.z = (float(v) for v in p[:3])
    msg.orientation.w, msg.orientation.x, msg.orientation.y, msg.orientation.z = (
        float(v) for v in p[3:7]
    )
    return msg


def msg_to_pose(msg: Pose, unit_tol: float = UNIT_QUAT_TOL) -> np.ndarray:
    """``geometry_msgs/Pose`` -> robot_rl pose (7,) ``[x, y, z, qw, qx, qy, qz]``.

    The quaternion must be unit norm within ``unit_tol``; it is then renormalised exactly (sign
    kept). A non-unit quaternion is rejected, not normalised: it means the sender mixed up the
    field order or sent garbage.

    Raises:
        ValueError: NaN/inf, or a quaternion whose norm is off 1 by more than ``unit_tol``.
    """
    p, q = msg.position, msg.orientation
    pose = _finite([p.x, p.y, p.z, q.w, q.x, q.y, q.z], "pose")
    bad = _renormalise_quat(pose, unit_tol)
    if bad is not None:
        raise ValueError(f"pose quaternion (x={q.x}, y={q.y}, z={q.z}, w={q.w}) {bad}")
    return pose


def _renormalise_quat(pose: np.ndarray, unit_tol: float) -> str | None:
    """Divide ``pose[3:7]`` by its norm in place and return None; when the norm is off 1 by more
    than ``unit_tol`` (a sender that mixed up the order or sent garbage) leave it and return
    the end of the error message. (The caller formats its part only then: this runs for every
    message.)"""
    n = float(np.linalg.norm(pose[3:7]))
    if abs(n - 1.0) > unit_tol:
        return f"has norm {n:.6g}; send a unit quaternion (tolerance {unit_tol})"
    pose[3:7] /= n
    return None


def pose_stamped_to_msg(
    pose: np.ndarray, stamp_s: float, frame_id: str = BASE_FRAME
) -> PoseStamped:
    """robot_rl pose (7,) + stamp -> ``geometry_msgs/PoseStamped``."""
    return PoseStamped(header=header(stamp_s, frame_id), pose=pose_to_msg(pose))


def msg_to_pose_stamped(
    msg: PoseStamped, frame_id: str = BASE_FRAME, unit_tol: float = UNIT_QUAT_TOL
) -> tuple[np.ndarray, float]:
    """``geometry_msgs/PoseStamped`` -> (pose (7,), stamp_s), checking the frame.

    Raises:
        ValueError: ``header.frame_id`` is not ``frame_id``, or the pose is malformed.
    """
    _check_frame(msg.header, frame_id)
    return msg_to_pose(msg.pose, unit_tol), msg_to_time(msg.header.stamp)


def _check_frame(h: Header, frame_id: str) -> None:
    if h.frame_id != frame_id:
        got = h.frame_id
        if len(got) > 64:  # a flood of huge frame ids must not flood the log too
            got = f"{got[:32]}... ({len(got)} chars)"
        raise ValueError(f"header.frame_id is {got!r}; expected {frame_id!r}")


# -- twist, wrench -----------------------------------------------------------------------------


def twist_stamped_to_msg(
    twist: np.ndarray, stamp_s: float, frame_id: str = BASE_FRAME
) -> TwistStamped:
    """(6,) ``[v (m/s), w (rad/s)]`` -> ``geometry_msgs/TwistStamped``."""
    t = _vec6(twist, "twist")
    msg = TwistStamped(header=header(stamp_s, frame_id))
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = t[:3]
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = t[3:]
    return msg


def msg_to_twist(msg: TwistStamped, frame_id: str | None = BASE_FRAME) -> tuple[np.ndarray, float]:
    """``geometry_msgs/TwistStamped`` -> ((6,) ``[v, w]``, stamp_s); ``frame_id=None`` skips the
    frame check (teleop twists are unit-less device readings)."""
    if frame_id is not None:
        _check_frame(msg.header, frame_id)
    lin, ang = msg.twist.linear, msg.twist.angular
    t = _finite([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z], "twist")
    return t, msg_to_time(msg.header.stamp)


def wrench_stamped_to_msg(
    wrench: np.ndarray, stamp_s: float, frame_id: str = BASE_FRAME
) -> WrenchStamped:
    """(6,) ``[f (N), tau (N m)]`` -> ``geometry_msgs/WrenchStamped``."""
    w = _vec6(wrench, "wrench")
    msg = WrenchStamped(header=header(stamp_s, frame_id))
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = w[:3]
    msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = w[3:]
    return msg


def msg_to_wrench(msg: WrenchStamped, frame_id: str = BASE_FRAME) -> tuple[np.ndarray, float]:
    """``geometry_msgs/WrenchStamped`` -> ((6,) ``[f, tau]``, stamp_s)."""
    _check_frame(msg.header, frame_id)
    f, t = msg.wrench.force, msg.wrench.torque
    return _finite([f.x, f.y, f.z, t.x, t.y, t.z], "wrench"), msg_to_time(msg.header.stamp)


def _vec6(values: np.ndarray, what: str) -> list[float]:
    a = np.asarray(values, dtype=np.float64)
    if a.shape != (6,):
        raise ValueError(f"{what} must have shape (6,), got {a.shape}")
    return [float(v) for v in _finite(a, what)]


# -- joint states ------------------------------------------------------------------------------


def joint_state_to_msg(
    names: tuple[str, ...], position: np.ndarray, velocity: np.ndarray | None, stamp_s: float
) -> JointState:
    """Joint names + positions (+ velocities) -> ``sensor_msgs/JointState`` (no frame)."""
    pos = np.asarray(position, dtype=np.float64).reshape(-1)
    if pos.shape != (len(names),):
        raise ValueError(f"{len(names)} joint names but position has shape {pos.shape}")
    msg = JointState(header=header(stamp_s, ""), name=list(names))
    msg.position = [float(v) for v in pos]
    if velocity is not None:
        vel = np.asarray(velocity, dtype=np.float64).reshape(-1)
        if vel.shape != pos.shape:
            raise ValueError(f"velocity shape {vel.shape} != position shape {pos.shape}")
        msg.velocity = [float(v) for v in vel]
    return msg


def msg_to_joint_state(
    msg: JointState, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, float]:
    """``sensor_msgs/JointState`` -> (position, velocity (zeros if absent), stamp_s), reordered
    to ``names``.

    Raises:
        ValueError: A name is missing, or lengths do not match, or values are not finite.
    """
    got = list(msg.name)
    missing = [n for n in names if n not in got]
    if missing or len(msg.position) != len(got):
        raise ValueError(
            f"joint state names {got} with {len(msg.position)} positions; expected names "
            f"{list(names)} with one position each"
        )
    idx = [got.index(n) for n in names]
    pos = _finite(np.asarray(msg.position, dtype=np.float64)[idx], "joint position")
    if len(msg.velocity) == len(got):
        vel = _finite(np.asarray(msg.velocity, dtype=np.float64)[idx], "joint velocity")
    elif len(msg.velocity) == 0:
        vel = np.zeros(len(names))
    else:
        raise ValueError(f"{len(msg.velocity)} joint velocities for {len(got)} joints")
    return pos, vel, msg_to_time(msg.header.stamp)


# -- RobotState --------------------------------------------------------------------------------


def robot_state_to_msgs(
    state: RobotState, joint_names: tuple[str, ...] = ARM_JOINT_NAMES
) -> tuple[JointState, PoseStamped, TwistStamped, WrenchStamped, JointState]:
    """:class:`RobotState` -> (``joint_states``, ``ee_pose``, ``ee_twist``, ``ee_wrench``,
    ``gripper/state``), all stamped with ``state.stamp_s``; ``joint_states`` names the arm's
    joints ``joint_names`` (one per value of ``state.joint_pos``).

    Raises:
        ValueError: ``joint_names`` and the state's joints differ in number.
    """
    s = state.stamp_s
    if len(joint_names) != np.size(state.joint_pos):
        raise ValueError(
            f"{len(joint_names)} joint names {list(joint_names)} for a state with "
            f"{np.size(state.joint_pos)} joint positions"
        )
    return (
        joint_state_to_msg(joint_names, state.joint_pos, state.joint_vel, s),
        pose_stamped_to_msg(state.tcp_pose, s),
        twist_stamped_to_msg(state.tcp_vel, s),
        wrench_stamped_to_msg(state.tcp_wrench, s),
        joint_state_to_msg((GRIPPER_JOINT_NAME,), np.array([state.gripper_pos]), None, s),
    )


def msgs_to_robot_state(
    joints: JointState,
    ee_pose: PoseStamped,
    ee_twist: TwistStamped,
    ee_wrench: WrenchStamped,
    gripper: JointState,
    joint_names: tuple[str, ...] = ARM_JOINT_NAMES,
) -> RobotState:
    """The five state messages -> :class:`RobotState`, stamped with ``ee_pose``'s stamp; the
    joints ``joint_names`` are read from ``joint_states`` in that order.

    Does not check that the stamps agree (the env side decides its synchronisation policy);
    use :func:`stamps_of` for that.

    Raises:
        ValueError: Any message is malformed.
    """
    q, dq, _ = msg_to_joint_state(joints, joint_names)
    pose, stamp_s = msg_to_pose_stamped(ee_pose)
    twist, _ = msg_to_twist(ee_twist)
    wrench, _ = msg_to_wrench(ee_wrench)
    g, _, _ = msg_to_joint_state(gripper, (GRIPPER_JOINT_NAME,))
    return RobotState(
        stamp_s=stamp_s,
        tcp_pose=pose,
        tcp_vel=twist,
        tcp_wrench=wrench,
        gripper_pos=float(np.clip(g[0], 0.0, 1.0)),
        joint_pos=q,
        joint_vel=dq,
    )


def robot_state_layout(num_joints: int) -> str:
    """Label of the one dimension of the ``robot_state`` message (``std_msgs/Float64MultiArray``)
    for an arm of ``num_joints`` joints: the order of its ``21 + 2 num_joints`` values."""
    n = int(num_joints)
    return f"stamp_s,tcp_pose[7],tcp_vel[6],tcp_wrench[6],gripper_pos,joint_pos[{n}],joint_vel[{n}]"


def robot_state_size(num_joints: int) -> int:
    """Number of values in the ``robot_state`` message of an arm of ``num_joints`` joints."""
    return 21 + 2 * int(num_joints)


ROBOT_STATE_LAYOUT = robot_state_layout(7)
"""The label for a 7-joint arm (the FR3; the only label before arms were data)."""
ROBOT_STATE_SIZE = robot_state_size(7)

_LAYOUT_RE = re.compile(
    r"stamp_s,tcp_pose\[7\],tcp_vel\[6\],tcp_wrench\[6\],gripper_pos,"
    r"joint_pos\[([1-9][0-9]?)\],joint_vel\[\1\]"
)


def robot_state_to_array_msg(state: RobotState) -> Float64MultiArray:
    """:class:`RobotState` -> the ``robot_state`` message: the five state topics' values in one
    message (:func:`robot_state_layout` of the state's joint count), so that a subscriber that
    wants the whole state runs one callback per state instead of five. The stamp is the one the
    header of the other state topics decodes to (nanosecond-rounded), so the two agree exactly.

    Raises:
        ValueError: NaN/inf anywhere, a negative stamp, or joint positions and velocities of
            different lengths.
    """
    n_j = int(np.size(state.joint_pos))
    if np.size(state.joint_vel) != n_j or n_j < 1:
        raise ValueError(
            f"robot state has {n_j} joint positions and {np.size(state.joint_vel)} velocities"
        )
    stamp = msg_to_time(time_to_msg(state.stamp_s))
    n = robot_state_size(n_j)
    data = np.empty(n)
    data[0] = stamp
    data[1:8] = state.tcp_pose
    data[8:14] = state.tcp_vel
    data[14:20] = state.tcp_wrench
    data[20] = state.gripper_pos
    data[21 : 21 + n_j] = state.joint_pos
    data[21 + n_j :] = state.joint_vel
    _finite(data, "robot state")
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=robot_state_layout(n_j), size=n, stride=n)]
    msg.data = data.tolist()
    return msg


def array_msg_to_robot_state(
    msg: Float64MultiArray, unit_tol: float = UNIT_QUAT_TOL, num_joints: int | None = None
) -> tuple[RobotState, float]:
    """The ``robot_state`` message -> (:class:`RobotState`, stamp). The gripper is clipped to
    [0, 1] and the quaternion renormalised, as from the separate topics.

    Args:
        msg: The message.
        unit_tol: Largest accepted ``| |q| - 1 |`` of the TCP quaternion.
        num_joints: The arm's joint count the receiver expects (None: any, from the label).

    Raises:
        ValueError: Another layout (a bridge of another version), another joint count than
            ``num_joints`` (the bridge serves another arm than the setup describes), the wrong
            number of values, NaN/inf, a negative stamp, or a non-unit quaternion.
    """
    labels = [d.label for d in msg.layout.dim]
    match = _LAYOUT_RE.fullmatch(labels[0]) if len(labels) == 1 else None
    if match is None:
        raise ValueError(
            f"robot_state layout {labels} is not [{robot_state_layout(num_joints or 7)!r}]: the "
            "bridge speaks another version of the contract; run the bridge and the env from one "
            "robot_rl"
        )
    n_j = int(match.group(1))
    if num_joints is not None and n_j != num_joints:
        raise ValueError(
            f"robot_state carries {n_j} arm joints but this env's arm description has "
            f"{num_joints}: the bridge drives another arm than the setup's `arm:` describes; "
            "name the arm the bridge serves (its status JSON says which)"
        )
    data = _finite(np.asarray(msg.data, dtype=np.float64), "robot state")
    if data.shape != (robot_state_size(n_j),):
        raise ValueError(
            f"robot_state has {data.size} values; {labels[0]} are {robot_state_size(n_j)}"
        )
    stamp = float(data[0])
    if stamp < 0:
        raise ValueError(f"robot_state stamp {stamp} s must be >= 0")
    pose = data[1:8].copy()
    bad = _renormalise_quat(pose, unit_tol)
    if bad is not None:
        raise ValueError(f"robot_state tcp_pose quaternion {pose[3:7]} (w, x, y, z) {bad}")
    state = RobotState(
        stamp_s=stamp,
        tcp_pose=pose,
        tcp_vel=data[8:14].copy(),
        tcp_wrench=data[14:20].copy(),
        gripper_pos=float(np.clip(data[20], 0.0, 1.0)),
        joint_pos=data[21 : 21 + n_j].copy(),
        joint_vel=data[21 + n_j :].copy(),
    )
    return state, stamp


def stamps_of(*msgs: object) -> list[float]:
    """``header.stamp`` of each message, seconds."""
    return [msg_to_time(m.header.stamp) for m in msgs]  # type: ignore[attr-defined]


# -- images ------------------------------------------------------------------------------------


def image_to_msg(image: np.ndarray, stamp_s: float, frame_id: str) -> Image:
    """(H, W, 3) uint8 RGB -> ``sensor_msgs/Image`` (``rgb8``, row-major, step = 3 W).

    Raises:
        ValueError: Not an (H, W, 3) uint8 array.
    """
    a = np.asarray(image)
    if a.ndim != 3 or a.shape[2] != 3 or a.dtype != np.uint8:
        raise ValueError(f"image must be (H, W, 3) uint8 RGB, got {a.shape} {a.dtype}")
    h, w = a.shape[:2]
    msg = Image(header=header(stamp_s, frame_id), height=h, width=w, encoding=RGB8)
    msg.is_bigendian = 0
    msg.step = 3 * w
    msg.data = np.ascontiguousarray(a).tobytes()
    return msg


def msg_to_image(msg: Image, size: tuple[int, int] | None = None) -> tuple[np.ndarray, float]:
    """``sensor_msgs/Image`` -> ((H, W, 3) uint8 RGB, a fresh array; stamp_s).

    Accepted: ``rgb8``, and ``bgr8`` (its channels swapped: a lossless reordering); rows may be
    padded (``step > 3 * width``, the padding is dropped). Everything else is refused rather
    than converted: another encoding (``mono8``, ``rgba8``/``bgra8``, ``16UC1``, Bayer, YUV)
    would drop or invent information or means the wrong stream (depth) is wired in, and another
    size than ``size`` would change the field of view or aspect the policy sees (crop and resize
    belong in the env wrappers, configured explicitly).

    Args:
        msg: The message.
        size: Expected (height, width), pixels (None: any). Checked before the data is read.

    Raises:
        ValueError: Another encoding, another size, ``step < 3 * width``, or a data length that
            is not ``height * step``; the message says what was found and what is expected.
    """
    enc = msg.encoding
    if enc not in IMAGE_ENCODINGS:
        raise ValueError(
            f"encoding {enc or '(empty)'}, expected {RGB8} (or bgr8, converted): "
            f"{_ENCODING_HINTS.get(enc, 'publish rgb8 from the camera node')}"
        )
    h, w, step, n = int(msg.height), int(msg.width), int(msg.step), len(msg.data)
    if size is not None and (h, w) != tuple(size):
        raise ValueError(
            f"size {h}x{w} (HxW), expected {size[0]}x{size[1]} (the setup's cameras entry): set "
            "the camera node's resolution or the setup's height/width to the same size"
        )
    if h <= 0 or w <= 0:
        raise ValueError(f"size {h}x{w} (HxW), expected a positive height and width")
    if step < 3 * w:
        raise ValueError(
            f"step {step} bytes per row, expected at least 3 * width = {3 * w} for {enc}"
        )
    if n != h * step:
        raise ValueError(f"data is {n} bytes, expected height * step = {h} * {step} = {h * step}")
    rows = np.frombuffer(msg.data, dtype=np.uint8).reshape(h, step)
    image = rows[:, : 3 * w].reshape(h, w, 3)
    if enc == BGR8:
        image = image[:, :, ::-1]
    return np.array(image, dtype=np.uint8, order="C"), msg_to_time(msg.header.stamp)
