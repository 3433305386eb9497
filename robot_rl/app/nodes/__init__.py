"""A setup's nodes as supervised processes: supervisor (start, restart, stop), up (``robot-rl up``),
ros_env (the env over a setup's ROS 2 topics), supervision (a dead required node is the cause
of what fails), proc_cpu (where the CPU goes)."""
