"""Networks and algorithms (stage 2). Imports robot_rl.core only."""
