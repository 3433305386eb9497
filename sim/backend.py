"""Build the twin for a task: world, robot, cameras, task, clock, expert. The CLI's composition
root (``robot_rl.cli.factory``) calls :func:`make_sim_backend` and wraps the result in
``robot_rl.envs.RobotEnv``.

CONTRACT (all helpers code against this; fill in, do not change, without telling the others):

    backend = make_sim_backend("pick_cube", SimConfig(...), EnvConfig(...), safety=None)
    backend.robot    # sim.robot.SimRobot, implements robot_rl.core.protocols.Robot
    backend.cameras  # tuple[sim.camera.SimCamera, ...], in SimConfig.cameras order
    backend.task     # implements robot_rl.core.protocols.Task (reads backend.world)
    backend.clock    # sim.world.SimClock, implements Clock; tick() steps physics one control period
    backend.world    # sim.world.SimWorld: model, data, step helpers, render helpers
    backend.make_expert()  # a fresh scripted expert: .reset(rng) and .act(obs, info) -> action
    backend.safety   # the SafetyConfig in force (task default unless overridden)

    TASKS: dict[str, TaskInfo]  # explicit registry (no registration by import)
    TaskInfo.description, TaskInfo.default_safety (SafetyConfig), TaskInfo.max_episode_steps
"""
