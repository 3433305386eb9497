"""ROS 2 nodes and hardware adapters (stage 3). Imports robot_rl.core only."""
