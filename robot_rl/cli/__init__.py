"""The ``robot-rl`` command line: it parses arguments into the typed configs of
:mod:`robot_rl.app`, calls the workflow's function, and prints the result (or ``--json``). No
workflow logic lives here: a notebook calls the same functions (README, "Programmatic use").
Importing it has no side effects; :func:`robot_rl.cli.main.main` chooses the headless OpenGL
backend before MuJoCo is imported.

Modules:
    main: the tyro parser (:func:`~robot_rl.cli.main.parse`) and entry point (``robot-rl``).
    commands: the ``dataset`` and ``reward`` subcommand groups.
    reports: what each command prints for a person.
    up: ``robot-rl up`` (the node supervisor of :mod:`robot_rl.app.nodes` with a live table).
"""
