"""Gymnasium envs over robot_rl's Protocols, and the env checker every env must pass."""

from robot_rl.envs.checker import EnvCheckError, check_env
from robot_rl.envs.robot_env import RobotEnv

__all__ = ["EnvCheckError", "RobotEnv", "check_env"]
