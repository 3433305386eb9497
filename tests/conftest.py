"""Test-wide settings: headless MuJoCo rendering (set before any mujoco import)."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")
