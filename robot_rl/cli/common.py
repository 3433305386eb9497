"""What every command shares: the headless OpenGL choice, one JSON line on stdout, the exit
code 2 for bad input."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import MutableMapping


def emit_json(obj: dict) -> None:
    """Print ``obj`` as one JSON line; a closed pipe (``| head``) is not an error."""
    try:
        print(json.dumps(obj), flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def error(message: str) -> int:
    print(f"robot-rl: error: {message}", file=sys.stderr)
    if os.environ.get("ROBOT_RL_DEBUG"):
        import traceback

        traceback.print_exc()
    return 2


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input (options, files, data): exit 2 with their message."""
    from robot_rl.learner.checkpoint import CheckpointError
    from robot_rl.replay.schema import CorruptLogError, UnfinishedEpisodeError

    return (
        ValueError,  # includes UnknownTaskError, SpecError and configs' __post_init__
        FileExistsError,  # includes RunExistsError
        FileNotFoundError,  # includes NothingToResumeError
        CorruptLogError,
        UnfinishedEpisodeError,
        CheckpointError,
    )


def configure_headless_gl(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Choose MuJoCo's OpenGL backend before MuJoCo is imported.

    Keeps an explicit ``MUJOCO_GL``; otherwise on Linux without ``DISPLAY`` /
    ``WAYLAND_DISPLAY`` sets ``osmesa``. Returns the value in force (None: MuJoCo's default).
    """
    env = os.environ if environ is None else environ
    if "MUJOCO_GL" not in env and sys.platform.startswith("linux"):
        if not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
            env["MUJOCO_GL"] = "osmesa"
    return env.get("MUJOCO_GL")
