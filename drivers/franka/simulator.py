"""Start and stop franka-sim (in its own venv and process) from robot_rl's side.

:class:`FrankaSim` writes our FR3 MJCF (:mod:`drivers.franka.sim_mjcf`), starts
``drivers/franka/sim_server.py`` with franka-sim's interpreter and ``FR3_MJCF`` pointing at it,
and waits for the server's ``FRANKA_SIM_READY`` line (a real FCI handshake), never a fixed
sleep. The server's log goes to a file (a filled pipe would stall its 1 kHz threads).

libfranka always talks to port 1337 (1338 for the gripper), so only one simulator can run per
address; :func:`port_in_use` tells whether another one already holds it.

    with FrankaSim(enforce_motion_limits=True) as sim:
        backend = FrankaBackend(FrankaConfig(robot_ip=sim.host))
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from drivers.franka.sim_mjcf import write_fr3_mjcf

REPO = Path(__file__).resolve().parents[2]
VENV_SCRIPT = REPO / "scripts" / "franka_sim_venv.sh"
SERVER_SCRIPT = Path(__file__).resolve().parent / "sim_server.py"
DEFAULT_VENV = REPO / ".venv-franka-sim"
FCI_PORT = 1337
GRIPPER_PORT = 1338


class FrankaSimError(RuntimeError):
    """franka-sim could not be set up or did not come up; the message says what to do."""


def sim_python(create: bool = False) -> Path:
    """The franka-sim venv's interpreter (``$FRANKA_SIM_VENV`` or ``.venv-franka-sim``).

    Args:
        create: Run ``scripts/franka_sim_venv.sh`` when the venv is missing or incomplete.

    Raises:
        FrankaSimError: The venv is not usable (and could not be created).
    """
    venv = Path(os.environ.get("FRANKA_SIM_VENV", DEFAULT_VENV))
    check = subprocess.run(
        ["bash", str(VENV_SCRIPT), "--check"],
        env={**os.environ, "FRANKA_SIM_VENV": str(venv)},
        capture_output=True,
        check=False,
    )
    if check.returncode == 0:
        return venv / "bin" / "python"
    if not create:
        raise FrankaSimError(f"no usable franka-sim venv at {venv}; run bash {VENV_SCRIPT}")
    made = subprocess.run(
        ["bash", str(VENV_SCRIPT)],
        env={**os.environ, "FRANKA_SIM_VENV": str(venv)},
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        raise FrankaSimError(f"creating the franka-sim venv failed:\n{made.stderr[-3000:]}")
    return venv / "bin" / "python"


def port_in_use(host: str, port: int) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class FrankaSim:
    """A franka-sim server process on ``host`` (see the module docstring).

    Args:
        host: Loopback address to bind.
        enforce_motion_limits: Abort motions that break the FCI limits with a reflex.
        enforce_comm_constraints: Abort after 20 consecutive lost command cycles.
        gripper: Also serve the Franka Hand (kinematic) on port 1338.
        create_venv: Create the franka-sim venv if it is missing.
        ready_timeout_s: Give up if the server is not ready within this time, s.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        enforce_motion_limits: bool = True,
        enforce_comm_constraints: bool = False,
        gripper: bool = True,
        create_venv: bool = True,
        ready_timeout_s: float = 60.0,
    ) -> None:
        self.host = host
        self.enforce_motion_limits = enforce_motion_limits
        self.enforce_comm_constraints = enforce_comm_constraints
        self.gripper = gripper
        self.create_venv = create_venv
        self.ready_timeout_s = ready_timeout_s
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    def start(self) -> None:
        """Start the server and block until it answers the FCI handshake."""
        python = sim_python(create=self.create_venv)
        for port in (FCI_PORT, GRIPPER_PORT) if self.gripper else (FCI_PORT,):
            if port_in_use(self.host, port):
                raise FrankaSimError(
                    f"{self.host}:{port} is already in use (another franka-sim or robot client?); "
                    "libfranka's ports are fixed, stop the other server first"
                )
        self._tmp = tempfile.TemporaryDirectory(prefix="franka-sim-")
        mjcf = write_fr3_mjcf(Path(self._tmp.name) / "fr3.xml")
        self.log_path = Path(self._tmp.name) / "server.log"
        cmd = [str(python), str(SERVER_SCRIPT), "--host", self.host]
        if self.enforce_motion_limits:
            cmd.append("--enforce-motion-limits")
        if self.enforce_comm_constraints:
            cmd.append("--enforce-comm-constraints")
        if not self.gripper:
            cmd.append("--no-gripper")
        env = {**os.environ, "FR3_MJCF": str(mjcf), "PYTHONUNBUFFERED": "1"}
        env.pop("PYTHONPATH", None)  # franka-sim's venv must not see robot_rl's packages
        with open(self.log_path, "w") as log:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True
            )
        ready = threading.Event()
        lines: list[str] = []

        def read_stdout() -> None:  # drains stdout for the life of the process
            assert self._proc is not None and self._proc.stdout is not None
            for line in self._proc.stdout:
                lines.append(line.rstrip())
                if line.startswith("FRANKA_SIM_READY"):
                    ready.set()

        threading.Thread(target=read_stdout, name="franka-sim-stdout", daemon=True).start()
        deadline = time.monotonic() + self.ready_timeout_s
        while not ready.wait(0.05):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise FrankaSimError(
                    f"franka-sim did not become ready ({' '.join(lines[-3:]) or 'no output'}); "
                    f"server log tail:\n{tail}"
                )

    def stop(self) -> None:
        """SIGTERM the server (clean shutdown), SIGKILL after 10 s; remove the temp files."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=5.0)
        self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log (for error messages)."""
        if self.log_path is None or not self.log_path.exists():
            return "<no log>"
        return self.log_path.read_text(errors="replace")[-chars:]

    def __enter__(self) -> FrankaSim:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
