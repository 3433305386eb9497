"""Every key name robot_rl puts in an observation dict or an ``info`` dict, in one place.

Other modules import these constants; a string literal for one of these keys anywhere else is
a bug (STYLE.md #6).
"""

from __future__ import annotations

# Top-level keys of the gymnasium observation dict.
STATE = "state"  # Dict of named state parts (or one flat vector after FlattenState)
IMAGES = "images"  # Dict camera name -> (H, W, 3) uint8
STAMPS = "stamps"  # Dict sensor name -> () float64 monotonic seconds; "state" for the robot
# Learner batches only (never an env observation): camera -> (B, h, w, C) uint8 features of a
# frozen backbone, in place of IMAGES (robot_rl.core.features).
FEATURES = "features"

# Named state parts (all in the robot base frame unless a wrapper says otherwise).
TCP_POSE = "tcp_pose"  # (7,) [x, y, z, qw, qx, qy, qz], metres
TCP_VEL = "tcp_vel"  # (6,) [vx, vy, vz, wx, wy, wz], m/s and rad/s
TCP_WRENCH = "tcp_wrench"  # (6,) [fx, fy, fz, tx, ty, tz] external wrench at the TCP, N and N m
GRIPPER_POS = "gripper_pos"  # (1,) 0 = fully open, 1 = fully closed
JOINT_POS = "joint_pos"  # (7,) rad
JOINT_VEL = "joint_vel"  # (7,) rad/s

STATE_PARTS = (TCP_POSE, TCP_VEL, TCP_WRENCH, GRIPPER_POS, JOINT_POS, JOINT_VEL)
DEFAULT_STATE_PARTS = (TCP_POSE, TCP_VEL, TCP_WRENCH, GRIPPER_POS)

# Stamp of the robot state inside STAMPS (cameras use their own names).
STAMP_STATE = "state"

# Camera names the twin provides; real setups may name theirs freely.
CAM_FRONT = "front"
CAM_WRIST = "wrist"

# info keys. info carries diagnostics only: never actions, never anything a learner must read
# to be correct (STYLE.md #6).
INFO_SUCCESS = "is_success"  # bool, task success at this step
INFO_TRUE_SUCCESS = "true_success"  # bool, the env's own success under a learned reward (truth)
INFO_TASK_REWARD = "task_reward"  # float, the env's own reward when another replaces it
INFO_REWARD = "learned_reward"  # Dict: success_prob (NaN while pending), pending (bool)
INFO_FAILURE = "is_failure"  # bool, task failure (e.g. object dropped off the table)
INFO_PRIVILEGED = "privileged"  # Dict of sim-only truth; policies never read it
INFO_SAFETY = "safety"  # Dict of bools: which safety limits clipped this step's command
INFO_OVERRUNS = "tick_overruns"  # int, cumulative control-tick overruns this episode
INFO_OBS_AGE = "obs_age_s"  # float, age of the observation's oldest sensor reading when assembled
INFO_ACTION_AGE = "action_age_s"  # float, that observation's age when its action was sent
INFO_COMMAND = "command"  # (8,) executed command: target pose (7) + gripper (1)
