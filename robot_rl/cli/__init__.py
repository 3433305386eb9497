"""The ``robot-rl`` command line: it parses arguments into the typed configs of
:mod:`robot_rl.app`, calls the workflow's function, and prints the result (or ``--json``). No
workflow logic lives here: a notebook calls the same functions (README, "Programmatic use").
Importing it has no side effects; :func:`robot_rl.cli.main.main` chooses the headless OpenGL
backend before MuJoCo is imported.

Modules:
    main: the tyro parser (:func:`~robot_rl.cli.main.parse`) and entry point (``robot-rl``).
    commands: the ``dataset``, ``reward`` and ``arm`` subcommand groups.
    reports, data_reports: what each command prints for a person.
    common: the OpenGL choice, JSON output, the bad-input exit.
    up: the live table of ``robot-rl up`` (the workflow is :mod:`robot_rl.app.nodes.up`).

Subcommands:
    rollout  run episodes in the MuJoCo twin with a scripted / random / zero policy.
    envs     list tasks with their observation and action specs.
    collect  record demonstrations (zarr) for training.
    train    train SAC with demo mixing (embedded: one process); checkpoints, resume, plot.
    learner  the distributed learner: serves actors over gRPC, learns, publishes weights.
    actor    a distributed actor: acts, logs, streams to a learner, loads its weights.
    eval     evaluate a run's latest checkpoint (deterministic policy), optional video.
    up       start and supervise the ROS 2 nodes of a setup (launch/*.yaml).
    record   teleoperate over ROS 2 and record demonstrations (zarr).
    label    teleoperate over ROS 2 and label frames success / not (zarr) for reward models.
    dataset  summarise a dataset (info), export it to the LeRobot format (export), or copy the
             good episodes of a damaged one (salvage).
    reward   success classifiers: twin frames (frames), train, eval, serve (gRPC).
    arm      bring up an arm: check it through its setup (check), calibrate an SO-101
             (calibrate).

Rendering: MuJoCo picks its OpenGL backend from ``MUJOCO_GL`` when it is imported. Unless the
variable is already set, :func:`robot_rl.cli.main.main` sets it to ``osmesa`` (software
rendering, needs only ``libosmesa6``; 1-3 ms per 128x128 frame on 2 CPU cores) when no display
is present, before anything imports MuJoCo. EGL is faster on a GPU machine: export
``MUJOCO_GL=egl`` to use it.

Exit codes: 0 success, 2 bad input (unknown task, invalid option, missing / existing run,
corrupt dataset or checkpoint; the message says what to change), 3 a required node of the setup
died (``up``, and commands that started it with ``--launch``: the message names the node, its
exit status and log, see :mod:`robot_rl.app.nodes.supervision`), 4 ``arm check`` found a problem
(the report says which), 1 anything else (a traceback).
``ROBOT_RL_DEBUG=1`` prints the traceback for bad input too (when the message is not enough).
"""
