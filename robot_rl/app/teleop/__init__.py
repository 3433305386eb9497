"""Teleoperation over ROS 2: record (demonstrations), label (success frames), their shared loop
(teleop_env, record_loop) and the simulated human's answers (human_answers)."""
