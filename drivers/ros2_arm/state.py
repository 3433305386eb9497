"""What the vendor driver reports, plain Python (no ROS): :class:`DriverState`.

The backend hands it each decoded message with its arrival time (``time.monotonic()``); it keeps
the newest joint state (reordered to the arm's joints), the TCP pose (the driver's, else FK),
wrench and gripper, builds the :class:`RobotState`, and says what is wrong with them: nothing
yet, older than ``max_state_age_s``, a joint outside its limits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from drivers.ik import DiffIK
from drivers.ros2_arm.config import Ros2ArmConfig
from robot_rl.core import frames
from robot_rl.core.types import RobotState

LIMIT_TOL_RAD = 1e-6
"""A measured joint this far beyond its limit counts as outside."""
JUMP_MARGIN_RAD = 0.05
"""A joint that moved more than its speed limit allows since the previous joint state, plus
this, jumped: the measurement jumped (a driver restart or re-homing, an encoder glitch, the
twin's scene reset), the arm did not move there."""
JUMP_SETTLE_MSGS = 3
"""Joint states after a jump before the new measurement is trusted (a glitch reverts sooner)."""
_TWIST_DT_S = 1e-5  # directional finite difference of FK along the joint velocities


class JointStateError(ValueError):
    """A joint state that cannot be used (joints missing, lengths, NaN); the message says what
    the driver sent and what to change."""


def pose_distance(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(metres, radians) between two poses (7,)."""
    return (
        float(np.linalg.norm(a[:3] - b[:3])),
        float(np.linalg.norm(frames.quat_error(a[3:7], b[3:7]))),
    )


def checked_pose(pose: np.ndarray) -> np.ndarray:
    """``pose`` as a finite (7,) with a unit quaternion (renormalised).

    Raises:
        ValueError: Wrong shape, NaN/inf or a quaternion far from unit length.
    """
    p = np.array(pose, dtype=np.float64)
    if p.shape != (7,) or not np.all(np.isfinite(p)):
        raise ValueError(f"pose must be a finite (7,) [x, y, z, qw, qx, qy, qz]: {p}")
    n = float(np.linalg.norm(p[3:7]))
    if abs(n - 1.0) > 1e-3:
        raise ValueError(f"quaternion {p[3:7]} has norm {n:.6g}; it must be a unit quaternion")
    p[3:7] /= n
    return p


class DriverState:
    """The newest measurements of one arm behind a vendor ROS 2 driver.

    Args:
        config: Topics (for messages), the arm, ``max_state_age_s``, the gripper map.
        ik: The arm's FK (None: the driver's TCP pose topic is the only pose).
    """

    def __init__(self, config: Ros2ArmConfig, ik: DiffIK | None) -> None:
        self.config, self.arm, self.ik = config, config.arm, ik
        self.joint_low = np.asarray(self.arm.joint_low_rad, dtype=np.float64)
        self.joint_high = np.asarray(self.arm.joint_high_rad, dtype=np.float64)
        self.q: np.ndarray | None = None
        """(N,) the measured joints, rad, in the arm's order (None before the first)."""
        self.qd = np.zeros(self.arm.num_joints)
        self.q_recv_s: float | None = None
        self.joint_msgs = 0
        """Complete joint states taken."""
        self._vmax = np.asarray(self.arm.joint_vel_max_rad_s, dtype=np.float64)
        self.jumps = 0
        """Joint states whose joints jumped (see :data:`JUMP_MARGIN_RAD`)."""
        self.last_jump_msg = -JUMP_SETTLE_MSGS
        """:attr:`joint_msgs` at the last jump."""
        self._stamp_s = 0.0
        self.other_names: list[str] = []
        """Names of the last joint state that carried none of the arm's joints (ignored)."""
        self._fk: tuple[int, np.ndarray, np.ndarray] | None = None  # (joint_msgs, pose, twist)
        self.pose: np.ndarray | None = None  # from tcp_pose_topic
        self.pose_recv_s: float | None = None
        self._pose_twist = np.zeros(6)
        self.wrench = np.zeros(6)
        self.gripper: float | None = None
        """Measured gripper closure in [0, 1] (None: no gripper state)."""
        self.rejected = 0
        """Driver messages that could not be used."""
        self.last_rejection: str | None = None

    def reject(self, reason: str) -> None:
        """Count an unusable driver message."""
        self.rejected += 1
        self.last_rejection = reason

    def on_joint_state(
        self,
        names: Sequence[str],
        position: Sequence[float],
        velocity: Sequence[float],
        now_s: float,
        stamp_s: float = 0.0,
    ) -> bool:
        """Take a ``JointState`` that arrived at ``now_s`` (``stamp_s``: its header stamp in the
        driver's clock, which times the jump check when it is set; else the arrivals do).

        Returns:
            True if taken, False if it carries none of the arm's joints (another publisher's,
            e.g. a gripper on the same topic: ignored, names kept in :attr:`other_names`).

        Raises:
            JointStateError: Some of the arm's joints are missing, lengths differ, or a value is
                not finite (the message names the joints sent and the description's).
        """
        names = list(names)
        index = {n: i for i, n in enumerate(names)}
        wanted = self.arm.joint_names
        missing = [j for j in wanted if j not in index]
        if len(missing) == len(wanted):
            self.other_names = names
            return False
        topic = self.config.joint_states_topic
        if missing:
            raise JointStateError(
                f"{topic} carries joints {names} but not {missing} of arm {self.arm.name!r} "
                f"(its joint_names: {list(wanted)}); make the description's joint_names the "
                "driver's names"
            )
        if len(position) != len(names):
            raise JointStateError(f"{topic}: {len(position)} positions for {len(names)} names")
        order = [index[j] for j in wanted]
        q = np.asarray(position, dtype=np.float64)[order]
        if len(velocity) == len(names):
            qd = np.asarray(velocity, dtype=np.float64)[order]
        elif len(velocity) == 0:
            qd = np.zeros(len(wanted))
        else:
            raise JointStateError(f"{topic}: {len(velocity)} velocities for {len(names)} names")
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))):
            raise JointStateError(f"{topic}: a joint position or velocity is not finite: {q}")
        if self.q is not None and self.q_recv_s is not None:
            # The driver's stamps time the measurements; arrivals bunch up on a loaded machine.
            stamped = stamp_s > 0 and stamp_s > self._stamp_s > 0
            dt = stamp_s - self._stamp_s if stamped else max(now_s - self.q_recv_s, 0.0)
            if np.any(np.abs(q - self.q) > self._vmax * dt + JUMP_MARGIN_RAD):
                self.jumps += 1
                self.last_jump_msg = self.joint_msgs + 1
        self.q, self.qd, self.q_recv_s, self._stamp_s = q, qd, now_s, stamp_s
        self.joint_msgs += 1
        return True

    @property
    def settling(self) -> bool:
        """The joints jumped less than :data:`JUMP_SETTLE_MSGS` joint states ago."""
        return self.joint_msgs - self.last_jump_msg < JUMP_SETTLE_MSGS

    def on_tcp_pose(self, pose: np.ndarray, now_s: float) -> None:
        """Take the driver's TCP pose (7,) in the base frame that arrived at ``now_s``."""
        p = checked_pose(pose)
        if (
            self.pose is not None
            and self.pose_recv_s is not None
            and now_s - self.pose_recv_s > 1e-4
        ):
            w = frames.quat_error(p[3:7], self.pose[3:7])
            self._pose_twist = np.concatenate([p[:3] - self.pose[:3], w]) / (
                now_s - self.pose_recv_s
            )
        self.pose, self.pose_recv_s = p, now_s

    def on_wrench(self, wrench: np.ndarray) -> None:
        """Take the external wrench (6,) at the TCP, base frame."""
        w = np.asarray(wrench, dtype=np.float64)
        if w.shape != (6,) or not np.all(np.isfinite(w)):
            raise ValueError(f"wrench must be a finite (6,): {w}")
        self.wrench = w

    def on_gripper_state(self, names: Sequence[str], position: Sequence[float]) -> bool:
        """Take the gripper's ``JointState`` (joint ``gripper_joint``, else the first).

        Returns:
            False if the message does not carry that joint (ignored).
        """
        names = list(names)
        joint = self.config.gripper_joint
        i = names.index(joint) if joint in names else (0 if joint is None and names else -1)
        if i < 0 or i >= len(position) or not np.isfinite(position[i]):
            return False
        self.gripper = self.config.driver_to_closure(position[i])
        return True

    @property
    def has_state(self) -> bool:
        """A complete joint state (and, if configured, a TCP pose) has arrived."""
        return self.q is not None and (self.config.tcp_pose_topic is None or self.pose is not None)

    def _kinematics(self) -> tuple[np.ndarray, np.ndarray]:
        """(pose (7,), twist (6,)) of the measured joints by FK, cached per joint state."""
        assert self.ik is not None and self.q is not None
        if self._fk is None or self._fk[0] != self.joint_msgs:
            p0 = self.ik.fk(self.q)
            p1 = self.ik.fk(self.q + self.qd * _TWIST_DT_S)
            twist = np.concatenate([p1[:3] - p0[:3], frames.quat_error(p1[3:7], p0[3:7])])
            self._fk = (self.joint_msgs, p0, twist / _TWIST_DT_S)
        return self._fk[1], self._fk[2]

    def tcp_pose(self) -> np.ndarray:
        """(7,) the measured ``T_base_tcp`` (the driver's, else FK of the joint states)."""
        if self.pose is not None:
            return self.pose.copy()
        return self._kinematics()[0].copy()

    def read_state(self, gripper_command: float) -> RobotState:
        """The newest state, stamped with the joint state's arrival time; the gripper closure is
        the measured one, else ``gripper_command``.

        Raises:
            RuntimeError: Nothing arrived yet (call after the backend connected).
        """
        if not self.has_state or self.q_recv_s is None or self.q is None:
            raise RuntimeError(f"no joint state from {self.config.joint_states_topic} yet")
        # The twist: the joint velocities through FK if we have it, else the driver's poses.
        twist = self._pose_twist if self.ik is None else self._kinematics()[1]
        return RobotState(
            stamp_s=self.q_recv_s,
            tcp_pose=self.tcp_pose(),
            tcp_vel=twist.copy(),
            tcp_wrench=self.wrench.copy(),
            gripper_pos=float(gripper_command if self.gripper is None else self.gripper),
            joint_pos=self.q.copy(),
            joint_vel=self.qd.copy(),
        )

    def error(self, now_s: float) -> str | None:
        """Nothing yet, stale (``max_state_age_s``), or a joint outside its limits; else None."""
        c = self.config
        if self.q is None or self.q_recv_s is None:
            return f"no joint state with the arm's joints on {c.joint_states_topic} yet"
        stale = self.stale(now_s)
        if stale is not None:
            return stale
        low = self.q < self.joint_low - LIMIT_TOL_RAD
        out = np.flatnonzero(low | (self.q > self.joint_high + LIMIT_TOL_RAD))
        if out.size:
            i = int(out[0])
            return (
                f"joint {self.arm.joint_names[i]!r} at {self.q[i]:.4f} rad is outside its limits "
                f"[{self.joint_low[i]:.4f}, {self.joint_high[i]:.4f}]; move it back inside "
                "(pendant / freedrive), then clear_error"
            )
        return None

    def stale(self, now_s: float) -> str | None:
        """The joint states (or the TCP pose topic) are older than ``max_state_age_s``: the
        message, else None (also before the first joint state: :meth:`error` says that)."""
        c = self.config
        if self.q_recv_s is None:
            return None
        ages = [(c.joint_states_topic, now_s - self.q_recv_s)]
        if c.tcp_pose_topic is not None:
            recv = self.pose_recv_s
            ages.append((c.tcp_pose_topic, np.inf if recv is None else now_s - recv))
        for topic, age in ages:
            if age > c.max_state_age_s:
                why = f"; last rejected: {self.last_rejection}" if self.last_rejection else ""
                return (
                    f"{topic} is {age:.3f} s old (max_state_age_s {c.max_state_age_s}){why}; is "
                    "the driver running?"
                )
        return None
