"""The ``robot-rl`` command line. With :mod:`robot_rl.app` (where the workflows move in stage
10) it is the composition root: the only place that picks concrete classes (the MuJoCo twin,
the ROS 2 drivers) and wires them into :class:`robot_rl.envs.RobotEnv` and the wrappers
(STYLE.md #11). Importing it has no side effects; :func:`robot_rl.cli.main.main` chooses the
headless OpenGL backend before MuJoCo is imported.

Modules:
    main: the tyro parser and entry point (``robot-rl``).
    rollout: ``robot-rl rollout`` (episodes with a scripted / random / zero policy).
    envs_cmd: ``robot-rl envs`` (tasks and their observation / action specs).
    video: episode video writer (camera frames side by side plus a text banner).
"""
