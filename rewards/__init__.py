"""Reward models (stage 5). Imports robot_rl.core only."""
