"""Bringing up an arm: ``robot-rl arm check`` (arm_check) and ``robot-rl arm calibrate``
(arm_calibrate)."""
