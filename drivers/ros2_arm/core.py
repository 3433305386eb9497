"""The generic ROS 2 backend's logic, plain Python (no ROS): :class:`Ros2ArmCore`.

:class:`drivers.ros2_arm.backend.Ros2ArmBackend` feeds it the driver's messages (already
decoded) with their arrival times and asks it, once per backend tick, what to send
(:meth:`Ros2ArmCore.next_output`). Times are ``time.monotonic()`` seconds, passed in.

What reaches the driver (the invariants the unit tests try to break):

- only targets the bridge handed over (``command``, ``hold``, ``start_move``), never anything
  before the first of them, and nothing while :meth:`Ros2ArmCore.error` reports an error;
- ``joint`` mode: every joint command ``q`` lies within the arm's joint limits and within
  ``max_step_rad = joint_vel_max_rad_s * speed_scale / bridge_hz`` of the previous command, per
  joint, whatever the target (far away, behind a joint limit, at a singularity), whatever IK
  returns (clipped again here). The previous command is the base of the next IK step, so the
  commands form a speed-limited path the arm follows. Two exceptions, both where the previous
  command no longer describes the arm, and both restart from the measured joints (the first
  command then lies within a step of where the arm is): after :meth:`Ros2ArmCore.clear_error`,
  and when the arm is more than ``max_tracking_error_rad`` from our last command (moved by
  something else: freedrive, the pendant; or stopped: a protective stop) or its measured joints
  jumped (faster than the joints can move: a driver restart, re-homing, the twin's scene reset;
  nothing is sent until :data:`~drivers.ros2_arm.state.JUMP_SETTLE_MSGS` joint states confirm
  it, and a glitch that reverts changes nothing). Then the arm is held where it is (a target
  from before is stale: the bridge's per-step limit was measured against another pose), a move
  under way goes on from there, and :attr:`Ros2ArmCore.rebases` counts it (``cartesian`` mode:
  the same on a jump, the target becomes the measured TCP).

Errors (:meth:`Ros2ArmCore.error`): no joint state yet, joint states (or the TCP pose topic)
older than ``max_state_age_s``, a measured joint outside its limits (these clear themselves once
fresh data within the limits is back), and IK failing (latched until
:meth:`Ros2ArmCore.clear_error`). A move (a reset) pauses while the state is stale (nothing is
sent: the driver holds) and goes on when fresh state is back; stale for longer than
:data:`MOVE_STALE_GRACE_S` in a row, the move fails with the staleness (a moment's hole in a
driver's stream, e.g. DDS delivery pausing 0.3 s on a loaded machine, need not end a reset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drivers.ik import DiffIK, DiffIKConfig
from drivers.ros2_arm.config import Ros2ArmConfig
from drivers.ros2_arm.state import JUMP_MARGIN_RAD, DriverState, checked_pose, pose_distance
from robot_rl.core import frames
from robot_rl.core.types import RobotState

GRIPPER_KEEPALIVE_S = 1.0
"""An unchanged gripper command is sent again at most this often (late-joining drivers)."""


@dataclass
class Output:
    """What one tick sends: ``joints`` (N,) rad (``joint`` mode) or ``pose`` (7,) TCP target."""

    joints: np.ndarray | None = None
    pose: np.ndarray | None = None


MOVE_STALE_GRACE_S = 1.0
"""A move paused on stale state fails once the state has been stale this long in a row, s."""


@dataclass
class _Move:
    goal: np.ndarray  # (7,) T_base_tcp
    gripper: float
    start_s: float
    interp: np.ndarray  # the moving target on the straight line to the goal (7,)
    stale_since_s: float | None = None  # paused on stale state since (None: not paused)


def make_ik(config: Ros2ArmConfig) -> DiffIK | None:
    """The arm's differential IK at the backend tick (None without a kinematics file)."""
    path = config.kinematics_path
    if path is None:
        return None
    base = DiffIKConfig.for_arm(config.arm, config.tick_s)
    ik_cfg = DiffIKConfig(
        dt_s=base.dt_s, orientation_cost=base.orientation_cost, speed_scale=config.speed_scale
    )
    return DiffIK(path, config.arm, ik_cfg)


class Ros2ArmCore:
    """State, errors, IK ticks and moves of one arm behind a vendor ROS 2 driver.

    Not thread-safe: the backend serialises every call under one lock.

    Args:
        config: The setup (mode, topics for messages, limits, speeds, gripper map).
        ik: The arm's differential IK (and FK); needed in ``joint`` mode and when the driver
            publishes no TCP pose.
    """

    def __init__(self, config: Ros2ArmConfig, ik: DiffIK | None) -> None:
        if ik is None and (config.mode == "joint" or config.tcp_pose_topic is None):
            raise ValueError("this mode needs the arm's IK / FK (drivers.ik.DiffIK)")
        self.config, self.arm, self.ik = config, config.arm, ik
        self.state = DriverState(config, ik)
        """The driver's measurements (the backend feeds it)."""
        self.joint_low, self.joint_high = self.state.joint_low, self.state.joint_high
        vmax = np.asarray(self.arm.joint_vel_max_rad_s, dtype=np.float64)
        self.max_step_rad = vmax * config.speed_scale * config.tick_s
        """(N,) the largest change of a joint command between two ticks, rad."""
        self.move_step_rad = self.max_step_rad * config.move_speed_scale
        self._gripper_goal = 0.0
        self._gripper_sent: tuple[float, float] | None = None  # (driver value, time)
        self._q_cmd: np.ndarray | None = None  # the last joint command (or its seed)
        self._joint_goal: np.ndarray | None = None
        self._pose_goal: np.ndarray | None = None
        self._cart_target: np.ndarray | None = None
        self._move: _Move | None = None
        self._move_end = "no move started"
        self._latched: str | None = None
        self.active = False
        """A target was handed over: the ticks send commands (until then nothing is sent)."""
        self.max_tracking_error_rad = 0.0
        """The largest distance of a measured joint from our last command so far, rad."""
        self.rebases = 0
        """Times the arm was found moved by something else and held where it was."""
        self._jump_seen = self.state.last_jump_msg
        self._q_seen: tuple[np.ndarray, float] | None = None  # (joints, arrival) at the last tick
        self._vmax = vmax
        self.last_rebase: str | None = None

    # -- state ---------------------------------------------------------------------------

    def tcp_pose(self) -> np.ndarray:
        """(7,) the measured ``T_base_tcp``."""
        return self.state.tcp_pose()

    def read_state(self) -> RobotState:
        """The newest state (the gripper: measured, else the last command)."""
        return self.state.read_state(self._gripper_goal)

    def error(self, now_s: float) -> str | None:
        """The current error (module docstring), or None when the arm can move."""
        return self._latched or self.state.error(now_s)

    def clear_error(self, now_s: float) -> bool:
        """Drop a latched error; True if the arm can move (fresh data, joints within limits).
        On success the commands restart from the measured joints and hold there."""
        self._latched = None
        if self.error(now_s) is not None:
            return False
        assert self.state.q is not None
        self._q_cmd = np.clip(self.state.q, self.joint_low, self.joint_high)
        self._move, self._move_end = None, "ended by clear_error"
        self._joint_goal, self._pose_goal = self._q_cmd.copy(), None
        if self.active:
            self._cart_target = self.tcp_pose()
        return True

    # -- targets ---------------------------------------------------------------------------

    def command(self, pose: np.ndarray, gripper: float, now_s: float) -> np.ndarray | None:
        """Track ``pose`` (7,), already safe; gripper closure in [0, 1]. Ends a move.

        Returns:
            ``cartesian`` mode: the target to publish at once (None while in error or while a
            jump of the joints settles); ``joint`` mode: None (the ticks publish).
        """
        target = checked_pose(pose)
        self._move, self._move_end = None, "ended by a command"
        self._gripper_goal = min(max(float(gripper), 0.0), 1.0)
        self.active = True
        if self.config.mode == "joint":
            self._pose_goal, self._joint_goal = target, None
            return None
        self._cart_target = target
        return None if self.error(now_s) or self.state.settling else target.copy()

    def hold(self, now_s: float) -> np.ndarray | None:
        """Hold the measured joints (``joint``) / TCP pose (``cartesian``); ends a move.

        Returns:
            ``cartesian`` mode: the target to publish at once (else None).
        """
        self._move, self._move_end = None, "ended by hold"
        if self.state.q is None:
            return None
        self.active = True
        if self.config.mode == "joint":
            self._joint_goal = np.clip(self.state.q, self.joint_low, self.joint_high)
            self._pose_goal = None
            return None
        self._cart_target = self.tcp_pose()
        return None if self.error(now_s) or self.state.settling else self._cart_target.copy()

    def start_move(self, pose: np.ndarray, gripper: float, now_s: float) -> None:
        """Move smoothly to ``pose`` (7,): a target moving along the straight line from the
        measured TCP at ``move_speed_m_s`` / ``move_speed_rad_s``, tracked (``joint`` mode) by IK
        ticks at most ``move_speed_scale`` of the joint speeds."""
        goal = checked_pose(pose)
        self._gripper_goal = min(max(float(gripper), 0.0), 1.0)
        start = self.tcp_pose() if self.state.has_state else goal
        self._move = _Move(goal, self._gripper_goal, now_s, interp=start)
        self._move_end = "under way"
        self._pose_goal = self._joint_goal = None
        self.active = True

    def move_done(self, now_s: float) -> bool:
        """True once the TCP is within the move tolerances of the goal and the gripper arrived
        (or had ``gripper_timeout_s``); the arm then keeps tracking the goal.

        Raises:
            RuntimeError: No move under way (ended by hold, a command, clear_error), an error,
                or ``move_timeout_s`` passed (the message says how far the TCP is).
        """
        m, c = self._move, self.config
        if m is None:
            raise RuntimeError(f"no move under way ({self._move_end})")
        stale = None if self._latched else self.state.stale(now_s)
        if stale is not None:
            if m.stale_since_s is None:
                m.stale_since_s = now_s
            if now_s - m.stale_since_s <= MOVE_STALE_GRACE_S:
                return False  # paused: the ticks send nothing while stale
            raise RuntimeError(
                f"the move stopped: {stale} (stale for {now_s - m.stale_since_s:.2f} s of the move)"
            )
        err = self.error(now_s)
        if err is not None:
            raise RuntimeError(f"the move stopped: {err}")
        m.stale_since_s = None
        if self.state.settling or self._jump_seen != self.state.last_jump_msg:
            return False  # the measurement jumped: not yet trusted, not yet rebased
        dpos, drot = pose_distance(self.tcp_pose(), m.goal)
        if now_s - m.start_s > c.move_timeout_s:
            self.hold(now_s)
            self._move_end = "timed out"
            raise RuntimeError(
                f"the move did not arrive within move_timeout_s {c.move_timeout_s} s (the TCP is "
                f"{dpos * 1e3:.1f} mm and {drot:.3f} rad from the goal); is the goal reachable?"
            )
        grip = self.state.gripper
        grip_done = (
            grip is None
            or abs(grip - m.gripper) <= c.gripper_tolerance
            or now_s - m.start_s >= c.gripper_timeout_s
        )
        if not (dpos <= c.move_tolerance_m and drot <= c.move_tolerance_rad and grip_done):
            return False
        self._move, self._move_end = None, "arrived"
        if c.mode == "joint":
            self._pose_goal = m.goal
        else:
            self._cart_target = m.goal
        return True

    def gripper_output(self, now_s: float) -> float | None:
        """The gripper command in driver units when it should be sent now (changed, or
        :data:`GRIPPER_KEEPALIVE_S` since the last), else None (also without a command topic)."""
        if self.config.gripper_command_topic is None or not self.active:
            return None
        value = self.config.closure_to_driver(self._gripper_goal)
        sent = self._gripper_sent
        if sent is not None and sent[0] == value and now_s - sent[1] < GRIPPER_KEEPALIVE_S:
            return None
        self._gripper_sent = (value, now_s)
        return value

    # -- ticks -----------------------------------------------------------------------------

    def next_output(self, now_s: float) -> Output | None:
        """What this tick sends (None: nothing; before the first target and during an error)."""
        q_meas = self.state.q
        if not self.active or q_meas is None or self.error(now_s) is not None:
            return None
        if self.state.settling:
            return None  # the joints jumped: send nothing until the measurement settles
        jumped = self._persistent_jump(q_meas)
        if self.config.mode == "cartesian":
            if jumped:
                self._rebase(f"the joints jumped (joint states #{self._jump_seen})")
            if self._move is not None:
                return Output(pose=self._advance_move(self._move))
            return None if self._cart_target is None else Output(pose=self._cart_target.copy())
        assert self.ik is not None
        if self._q_cmd is None:  # the first command starts from the measured joints
            self._q_cmd = np.clip(q_meas, self.joint_low, self.joint_high)
        deviation = np.abs(q_meas - self._q_cmd)
        self.max_tracking_error_rad = max(self.max_tracking_error_rad, float(deviation.max()))
        i = int(np.argmax(deviation))
        if deviation[i] > self.config.max_tracking_error_rad or jumped:
            self._rebase(
                f"joint {self.arm.joint_names[i]!r} was {deviation[i]:.3f} rad from the last "
                f"command ({'its measurement jumped' if jumped else 'max_tracking_error_rad'}"
                f" {self.config.max_tracking_error_rad})"
            )
        base = self._q_cmd
        cap, goal_pose = self.max_step_rad, self._pose_goal
        if self._move is not None:
            goal_pose, cap = self._advance_move(self._move), self.move_step_rad
        if goal_pose is not None:
            try:
                q = self.ik.step(base, goal_pose)
            except ValueError as e:
                self._latched = f"IK failed: {e}"
                return None
        elif self._joint_goal is not None:
            q = self._joint_goal
        else:
            q = base.copy()
        if not np.all(np.isfinite(q)):
            self._latched = f"IK returned a non-finite joint command {q}"
            return None
        # The invariant, whatever IK returned: the step scaled down (direction kept) to the cap,
        # clipped for exactness, then to the limits (base lies within them, so that keeps it).
        dq = q - base
        ratio = float(np.max(np.abs(dq) / cap))
        if ratio > 1.0:
            dq = dq / ratio
        q = np.clip(np.clip(base + dq, base - cap, base + cap), self.joint_low, self.joint_high)
        self._q_cmd = q
        return Output(joints=q.copy())

    def _persistent_jump(self, q_meas: np.ndarray) -> bool:
        """A jump of the measured joints has settled since the last tick and they stayed where
        they jumped to (further from where the last tick saw them than the joints can move)."""
        settled = self._jump_seen != self.state.last_jump_msg
        self._jump_seen = self.state.last_jump_msg
        seen, self._q_seen = self._q_seen, (q_meas.copy(), self.state.q_recv_s or 0.0)
        if not settled or seen is None:
            return False
        allowed = self._vmax * max(self._q_seen[1] - seen[1], 0.0) + JUMP_MARGIN_RAD
        return bool(np.any(np.abs(q_meas - seen[0]) > allowed))

    def _rebase(self, why: str) -> None:
        """The arm is not where we commanded it: hold it where it is (a move goes on from
        there); counted in :attr:`rebases`."""
        self.rebases += 1
        self.last_rebase = f"{why}: held where the arm is"
        assert self.state.q is not None
        self._q_cmd = np.clip(self.state.q, self.joint_low, self.joint_high)
        self._joint_goal, self._pose_goal = self._q_cmd.copy(), None
        self._cart_target = self.tcp_pose()
        if self._move is not None:
            self._move.interp = self.tcp_pose()

    def _advance_move(self, m: _Move) -> np.ndarray:
        """The move's target one tick further along the straight line to its goal, at
        ``move_speed_m_s`` and ``move_speed_rad_s`` (7,)."""
        c, p = self.config, m.interp
        dp = m.goal[:3] - p[:3]
        dist = float(np.linalg.norm(dp))
        pos = p[:3] + dp * min(1.0, c.move_speed_m_s * c.tick_s / dist) if dist > 0 else p[:3]
        e = frames.quat_error(m.goal[3:7], p[3:7])
        ang = float(np.linalg.norm(e))
        frac = min(1.0, c.move_speed_rad_s * c.tick_s / ang) if ang > 0 else 0.0
        quat = frames.quat_mul(frames.quat_from_rotvec(e * frac), p[3:7])
        m.interp = frames.pose(pos, quat)
        return m.interp.copy()

    @property
    def last_joint_command(self) -> np.ndarray | None:
        """(N,) the last joint command, rad (None before the first)."""
        return None if self._q_cmd is None else self._q_cmd.copy()
