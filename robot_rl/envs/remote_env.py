"""A gymnasium env running in another Python interpreter, behind a pipe: ``--env-python``.

An env whose pins conflict with ours (a peer env that pins another MuJoCo or an older numpy)
cannot be imported beside robot_rl. :class:`RemoteEnv` starts ``PYTHON robot_rl/envs/
env_worker.py`` (that interpreter needs numpy and gymnasium and the env, not robot_rl), makes the
env there, and forwards ``reset`` / ``step`` over the worker's stdin / stdout in the frames of
:mod:`robot_rl.envs.env_wire` (numeric arrays as raw bytes, the rest JSON: nothing is
unpickled). Here it is an ordinary ``gym.Env`` with the same spaces, so
:class:`robot_rl.wrappers.foreign_env.ForeignEnv` maps it like any other.

What crosses: observations (nested dicts / tuples of arrays and numbers), rewards, the end
flags, and ``info`` (arrays, numbers, strings; other values arrive as their ``repr``). Costs:
one round trip per step over a pipe (tens of microseconds plus the arrays' bytes, measured in
bench/results/remote_env.jsonl). The worker's stderr goes to a file whose tail every error
quotes. If the worker dies, the next call raises :class:`RemoteEnvError` with that tail.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.envs import env_wire

WORKER = Path(__file__).resolve().parent / "env_worker.py"


class RemoteEnvError(RuntimeError):
    """The worker could not start, died, or answered with an error."""


def space_from_description(d: dict[str, Any], where: str = "space") -> gym.Space:
    """The gymnasium space the worker described (:func:`env_worker.describe_space`); a kind
    with no local equivalent becomes a :class:`UnknownSpace` that ForeignEnv refuses by name."""
    kind = d.get("type")
    if kind == "Box":
        low, high = np.asarray(d["low"]), np.asarray(d["high"])
        return gym.spaces.Box(low, high, low.shape, np.dtype(d["dtype"]))
    if kind == "Dict":
        return gym.spaces.Dict(
            {k: space_from_description(v, f"{where}.{k}") for k, v in d["spaces"].items()}
        )
    if kind == "Tuple":
        return gym.spaces.Tuple(
            [space_from_description(v, f"{where}[{i}]") for i, v in enumerate(d["spaces"])]
        )
    if kind == "Discrete":
        return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(d["nvec"]))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(d["n"])
    if kind == "Text":
        return gym.spaces.Text(int(d["max_length"]))
    return UnknownSpace(str(kind))


class UnknownSpace(gym.Space):
    """A space kind the worker's gymnasium has and ours cannot rebuild (refused downstream)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def __repr__(self) -> str:
        return f"UnknownSpace({self.kind})"

    def contains(self, x: Any) -> bool:
        return False


def _spec(env: str, max_episode_steps: int | None):
    """A local EnvSpec naming the remote id and its episode limit (what reports read)."""
    from gymnasium.envs.registration import EnvSpec

    try:
        return EnvSpec(id=env.rpartition(":")[2], max_episode_steps=max_episode_steps)
    except Exception:  # an id gymnasium's parser refuses here: no spec, as for a bare env
        return None


class RemoteEnv(gym.Env):
    """``gym.make(env_id, **kwargs)`` in the interpreter ``python`` (see the module docstring).

    Args:
        python: The other interpreter (e.g. ``/opt/their-venv/bin/python``).
        env: ``ID`` or ``module:ID``, resolved there.
        kwargs: ``gym.make`` keyword arguments (JSON values).
        env_vars: Extra environment variables of the worker (over ours).

    Raises:
        RemoteEnvError: The interpreter does not start, lacks numpy / gymnasium, or cannot make
            the env (the message carries the worker's error).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        python: str | os.PathLike,
        env: str,
        kwargs: dict[str, Any] | None = None,
        env_vars: dict[str, str] | None = None,
    ) -> None:
        self.python = str(python)
        self.env_name = env
        if not Path(self.python).exists():
            raise RemoteEnvError(f"--env-python {self.python} does not exist")
        self._stderr = tempfile.NamedTemporaryFile(  # noqa: SIM115 (lives with the worker)
            prefix="robot_rl_env_worker_", suffix=".log", delete=False
        )
        try:
            self._proc = subprocess.Popen(
                [self.python, str(WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env={**os.environ, **(env_vars or {})},
            )
        except OSError as e:
            self._stderr.close()
            raise RemoteEnvError(f"--env-python {self.python} does not start: {e}") from e
        self._closed = False
        try:
            made = self._call({"cmd": "make", "env": env, "kwargs": kwargs or {}})
            self.observation_space = space_from_description(made["observation_space"])
            self.action_space = space_from_description(made["action_space"])
        except BaseException:
            self.close()
            raise
        self.max_episode_steps: int | None = made.get("max_episode_steps")
        self.spec = _spec(env, self.max_episode_steps)
        self.versions: dict[str, str] = dict(made.get("versions") or {})
        """The worker's python, gymnasium, numpy (and mujoco, if the env imported it)."""

    def _stderr_tail(self, n: int = 2000) -> str:
        try:
            text = Path(self._stderr.name).read_text(errors="replace")
        except OSError:
            return ""
        return text[-n:].strip()

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise RemoteEnvError(f"{self.env_name}: the env is closed")
        proc = self._proc
        try:
            assert proc.stdin is not None and proc.stdout is not None
            env_wire.write(proc.stdin, request)
            answer = env_wire.read(proc.stdout)
        except (BrokenPipeError, env_wire.WireError) as e:
            answer, cause = None, e
        else:
            cause = None
        if answer is None:
            code = proc.poll()
            if code is None:
                try:
                    code = proc.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    code = None
            raise RemoteEnvError(
                f"the env worker ({self.python}) for {self.env_name} "
                f"{'exited with code ' + str(code) if code is not None else 'stopped answering'}"
                f"{f' ({cause})' if cause else ''}; its stderr ends:\n{self._stderr_tail()}\n"
                "(it needs numpy and gymnasium, and the env's module importable there)"
            )
        if not answer.get("ok"):
            raise RemoteEnvError(
                f"{self.env_name} in {self.python}: {answer.get('error')}\n"
                f"{answer.get('traceback', '')}".rstrip()
            )
        return answer

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        answer = self._call({"cmd": "reset", "seed": seed, "options": options})
        return answer["obs"], answer["info"]

    def step(self, action: Any):
        a = np.asarray(action)
        answer = self._call({"cmd": "step", "action": a})
        return (
            answer["obs"],
            float(answer["reward"]),
            bool(answer["terminated"]),
            bool(answer["truncated"]),
            answer["info"],
        )

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        proc = self._proc
        try:
            if proc.poll() is None and proc.stdin is not None:
                env_wire.write(proc.stdin, {"cmd": "close"})
                proc.stdin.close()
            proc.wait(timeout=10.0)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
            self._stderr.close()
            Path(self._stderr.name).unlink(missing_ok=True)
