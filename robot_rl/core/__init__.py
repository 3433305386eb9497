"""robot_rl.core: types, specs, Protocols, config, clock, frames, safety.

Imports nothing else from the repo, and never rclpy, mujoco, torch or a VLM library (checked
by import-linter).
"""
