"""The application layer: each workflow as plain functions over typed configs, callable from a
notebook; ``robot_rl.cli`` only parses arguments and calls them. This is the composition root:
the one place that imports the concrete backends (``sim``, ``drivers``, ``rewards``) and wires
them to the runtime packages, which see them only through ``robot_rl.core``'s Protocols.

- :mod:`robot_rl.app.build`: an env (the twin) and its wrappers from a task name and configs.
- :mod:`robot_rl.app.ros_env`: the same env over a setup's ROS 2 topics (twin node or robot),
  optionally starting the setup's nodes first.
- :mod:`robot_rl.app.nodes`: the supervisor that starts, restarts and stops a setup's nodes.
- :mod:`robot_rl.app.supervision`: what a dead required node does to the env and the command
  that uses it (a clear report, exit code 3).

Import the submodules directly (``build`` imports MuJoCo: set ``MUJOCO_GL`` first).
"""
