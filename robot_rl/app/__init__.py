"""The application layer: each workflow as plain functions over typed configs, callable from a
notebook; ``robot_rl.cli`` only parses arguments and calls them. This is the composition root:
the one place that imports the concrete backends (``sim``, ``drivers``, ``rewards``) and wires
them to the runtime packages, which see them only through ``robot_rl.core``'s Protocols.

- :mod:`robot_rl.app.build`: an env (twin or robot) and its wrappers from a task name and
  configs.

Import the submodules directly (``build`` imports MuJoCo: set ``MUJOCO_GL`` first).
"""
