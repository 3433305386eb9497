"""Gymnasium wrappers over robot_rl's observation layout, one job each.

They see envs only through gymnasium and :mod:`robot_rl.core.keys` (never ``sim`` or drivers).
Every action wrapper ships its inverse (``inverse_action``) so that a base-frame action (an
expert's, a human's) maps into the policy's action space. Wrappers never share memory between
successive observations: whatever they modify is a new array.

Typical stack, innermost first (see ``robot_rl.app.envs.build``)::

    RobotEnv -> SuccessReward -> ObjectState -> GripperDiscretize -> RelativeFrame -> FixedGripper
             -> PreviousAction -> ImageCropResize -> LearnedReward -> FlattenState -> TimeLimit
             -> Intervention (outermost)
"""

from robot_rl.wrappers.fixed_gripper import FixedGripper
from robot_rl.wrappers.flatten_state import FlattenState
from robot_rl.wrappers.gripper_discretize import GripperDiscretize
from robot_rl.wrappers.image_crop_resize import CropResize, ImageCropResize, crop_resize
from robot_rl.wrappers.intervention import Intervention, InterventionConfig
from robot_rl.wrappers.learned_reward import LearnedReward
from robot_rl.wrappers.object_state import ObjectState, ObjectStateMissingError
from robot_rl.wrappers.previous_action import PreviousAction
from robot_rl.wrappers.relative_frame import RelativeFrame, base_to_ee_action, ee_to_base_action
from robot_rl.wrappers.success_reward import SuccessReward
from robot_rl.wrappers.time_limit import TimeLimit

__all__ = [
    "CropResize",
    "FixedGripper",
    "FlattenState",
    "GripperDiscretize",
    "ImageCropResize",
    "Intervention",
    "InterventionConfig",
    "LearnedReward",
    "ObjectState",
    "ObjectStateMissingError",
    "PreviousAction",
    "RelativeFrame",
    "SuccessReward",
    "TimeLimit",
    "base_to_ee_action",
    "crop_resize",
    "ee_to_base_action",
]
