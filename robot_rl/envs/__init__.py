"""Gymnasium envs over robot_rl's Protocols."""

from robot_rl.envs.robot_env import RobotEnv

__all__ = ["RobotEnv"]
