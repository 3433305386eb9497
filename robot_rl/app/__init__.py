"""The application layer: each workflow as plain functions over typed configs, callable from a
notebook; ``robot_rl.cli`` only parses arguments and calls them. This is the composition root:
the one place that imports the concrete backends (``sim``, ``drivers``, ``rewards``) and wires
them to the runtime packages, which see them only through ``robot_rl.core``'s Protocols.

Workflows (one per ``robot-rl`` command; each a ``run_*`` function over a frozen dataclass
config, returning a JSON-able dict):

- :mod:`robot_rl.app.collect`: scripted demonstrations into a zarr dataset (``collect``).
- :mod:`robot_rl.app.train`: embedded training, direct or over ROS 2 (``train``), with
  :mod:`~robot_rl.app.train_ros` (the env side over a setup) and
  :mod:`~robot_rl.app.run_settings` (what a run stores and resumes with).
- :mod:`robot_rl.app.distributed`: the learner process (``learner``);
  :mod:`robot_rl.app.actor_cmd`: the actor process (``actor``).
- :mod:`robot_rl.app.evaluate` (``eval``) and :mod:`robot_rl.app.rollout` (``rollout``), with
  :mod:`~robot_rl.app.video` for episode videos.
- :mod:`robot_rl.app.record` and :mod:`robot_rl.app.label`: teleoperation over ROS 2 into
  demos or labelled frames (``record``, ``label``), on :mod:`~robot_rl.app.teleop_env` and
  :mod:`~robot_rl.app.record_loop`.
- :mod:`robot_rl.app.reward` (``reward frames|train|eval|serve``), with
  :mod:`~robot_rl.app.reward_frames` and :mod:`~robot_rl.app.reward_env` (a learned reward
  around a training env).
- :mod:`robot_rl.app.dataset` (``dataset info|export|salvage``), :mod:`robot_rl.app.envs`
  (``envs``).

Building blocks:

- :mod:`robot_rl.app.build`: an env (the twin) and its wrappers from a task name and configs.
- :mod:`robot_rl.app.ros_env`: the same env over a setup's ROS 2 topics (twin node or robot),
  optionally starting the setup's nodes first.
- :mod:`robot_rl.app.nodes`: the supervisor that starts, restarts and stops a setup's nodes.
- :mod:`robot_rl.app.supervision`: what a dead required node does to the env and the command
  that uses it (a clear report, exit code 3).

Configs carry ``tyro.conf`` markers (annotations only: they tell the CLI to flatten nested
option names); they are plain dataclasses, built and used without tyro.

Import the submodules directly (``build`` imports MuJoCo: set ``MUJOCO_GL`` first).
"""
