"""Serve one gymnasium env to robot_rl from another interpreter (``--env-python``).

Run by :class:`robot_rl.envs.remote_env.RemoteEnv` as ``PYTHON path/to/env_worker.py``: it
needs only the standard library, numpy and gymnasium in that interpreter (not robot_rl), so an
env whose pins conflict with ours (another MuJoCo, an older numpy) runs in its own venv. It reads
requests on stdin and answers on stdout in the frames of :mod:`robot_rl.envs.env_wire`; whatever
the env prints goes to stderr, which robot_rl keeps for its error messages.

Requests: ``{"cmd": "make", "env": "module:ID", "kwargs": {...}}`` (the module imported first;
answers the spaces and the registered episode limit), ``{"cmd": "reset", "seed": s, "options":
o}``, ``{"cmd": "step", "action": array}``, ``{"cmd": "close"}``. An answer is ``{"ok": true,
...}`` or ``{"ok": false, "error": "..."}`` (the exception and its traceback); the worker exits on
``close`` or at the end of stdin.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0] or ".").resolve() == _HERE:
    sys.path.pop(0)  # run as a script: its folder (robot_rl/envs) must not shadow user modules


def _load_wire():
    spec = importlib.util.spec_from_file_location("_robot_rl_env_wire", _HERE / "env_wire.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def describe_space(space: Any) -> dict[str, Any]:
    """A gymnasium space as JSON with arrays (Box, Dict, Tuple, Discrete, MultiDiscrete,
    MultiBinary, Text; anything else by its class name, which robot_rl then refuses)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return {"type": "Box", "low": space.low, "high": space.high, "dtype": space.dtype.str}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: describe_space(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [describe_space(s) for s in space.spaces]}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": space.n}
    if isinstance(space, spaces.Text):
        return {"type": "Text", "max_length": int(space.max_length)}
    return {"type": type(space).__name__}


def _make(request: dict[str, Any]):
    import gymnasium as gym

    spec = str(request["env"])
    module, sep, env_id = spec.rpartition(":")
    if sep and module:
        importlib.import_module(module)
    kwargs = dict(request.get("kwargs") or {})
    env = gym.make(env_id or spec, **kwargs)
    versions = {"python": sys.version.split()[0], "gymnasium": gym.__version__}
    for name in ("numpy", "mujoco"):
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = getattr(mod, "__version__", "?")
    return env, {
        "observation_space": describe_space(env.observation_space),
        "action_space": describe_space(env.action_space),
        "max_episode_steps": env.spec.max_episode_steps if env.spec else None,
        "versions": versions,
    }


def serve(inp, out) -> int:
    """Answer requests until ``close`` or the end of ``inp``; the exit code."""
    wire = _load_wire()
    env = None
    try:
        while True:
            try:
                request = wire.read(inp)
            except wire.WireError as e:
                wire.write(out, {"ok": False, "error": f"malformed request: {e}"})
                return 2
            if request is None or request.get("cmd") == "close":
                return 0
            try:
                cmd = request.get("cmd")
                if cmd == "make":
                    if env is not None:
                        raise RuntimeError("the env is made already")
                    env, answer = _make(request)
                elif env is None:
                    raise RuntimeError(f"{cmd!r} before make")
                elif cmd == "reset":
                    obs, info = env.reset(seed=request.get("seed"), options=request.get("options"))
                    answer = {"obs": obs, "info": info}
                elif cmd == "step":
                    obs, reward, terminated, truncated, info = env.step(request["action"])
                    answer = {
                        "obs": obs,
                        "reward": float(reward),
                        "terminated": bool(terminated),
                        "truncated": bool(truncated),
                        "info": info,
                    }
                else:
                    raise ValueError(f"unknown request {cmd!r}")
                wire.write(out, {"ok": True, **answer})
            except Exception as e:  # the env's own error: tell robot_rl, keep serving
                text = "".join(traceback.format_exception_only(type(e), e)).strip()
                wire.write(out, {"ok": False, "error": text, "traceback": traceback.format_exc()})
    finally:
        if env is not None:
            env.close()


def main() -> int:
    # The protocol owns the real stdout; anything the env prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    sys.exit(main())
