"""The application layer: each workflow as plain functions over typed configs, callable from a
notebook; ``robot_rl.cli`` only parses arguments and calls them. This is the composition root:
the one place that imports the concrete backends (``sim``, ``drivers``, ``rewards``) and wires
them to the runtime packages, which see them only through ``robot_rl.core``'s Protocols.

One package per workflow (each command a ``run_*`` function over a frozen dataclass config,
returning a JSON-able dict), from the bottom up (a package imports only those above it in
this list; the import contracts keep the packages acyclic):

- :mod:`robot_rl.app.envs`: the twin as an env (``build``: task name and configs -> env and
  wrappers), the envs listed (``envs``), scripted demonstrations (``collect``), policies that
  act without learning, episode videos.
- :mod:`robot_rl.app.nodes`: a setup's nodes as supervised processes (``up``), the env over a
  setup's ROS 2 topics (``ros_env``), what a dead required node does to a command
  (``supervision``), CPU accounting of processes.
- :mod:`robot_rl.app.rewards`: success classifiers (``reward frames|train|eval|serve``).
- :mod:`robot_rl.app.teleop`: a person (or the simulated human) at the teleop device over
  ROS 2: demonstrations (``record``) and labelled frames (``label``).
- :mod:`robot_rl.app.datasets`: zarr datasets summarised, exported, salvaged (``dataset``).
- :mod:`robot_rl.app.arms`: bringing up an arm (``arm check``, ``arm calibrate``).
- :mod:`robot_rl.app.training`: embedded training (``train``, direct or over ROS 2), the
  learner and actor processes (``learner``, ``actor``), evaluation and rollouts (``eval``,
  ``rollout``), and what a run stores and resumes with.
- :mod:`robot_rl.app.rehearsal`: the robot day on the twin played as a real robot
  (``rehearse``): every command above as its own process, and its report.

Configs carry ``tyro.conf`` markers (annotations only: they tell the CLI to flatten nested
option names); they are plain dataclasses, built and used without tyro.

Import the submodules directly (``envs.build`` imports MuJoCo: set ``MUJOCO_GL`` first).
"""
