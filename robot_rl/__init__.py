"""robot_rl: sample-efficient RL on real robot arms, with a MuJoCo twin behind the same
interfaces. See README.md and ../shared/DESIGN.md."""

__version__ = "0.1.0"
