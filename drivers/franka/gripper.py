"""Franka Hand over libfranka's gripper protocol (TCP port 1338), behind a closure target.

libfranka's gripper calls block until the fingers stop (``move``, ``grasp``), so one worker
thread owns the ``franka.Gripper``: :meth:`FrankaGripper.set_target` only stores the latest
closure target in [0, 1] (0 open, 1 closed) and returns. The worker executes a new target when
it differs from the last executed one by more than ``deadband``: ``grasp`` (with wide
tolerances, so it succeeds whatever the object's width) at or above ``grasp_threshold``,
``move`` to the width otherwise. Between commands it reads the width at ``poll_hz``.

The reported closure is ``1 - width / max_width``; it is refreshed after each command and each
poll, so during a blocking move it lags (by at most the move's duration).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GripperConfig:
    """Franka Hand settings.

    Attributes:
        speed_m_s: Finger speed of ``move`` and ``grasp``, m/s (hand: <= 0.1).
        force_n: Grasping force, N (hand: <= 70).
        grasp_threshold: A closure target at or above this grasps instead of moving.
        deadband: Closure change below which a new target is ignored.
        poll_hz: Width reading rate while idle, Hz.
        home_on_connect: Run ``homing`` (calibrates the width) when connecting.
    """

    speed_m_s: float = 0.1
    force_n: float = 40.0
    grasp_threshold: float = 0.9
    deadband: float = 0.05
    poll_hz: float = 20.0
    home_on_connect: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.speed_m_s <= 0.2 or not 0 < self.force_n <= 140:
            raise ValueError("speed_m_s must be in (0, 0.2] and force_n in (0, 140]")
        if not 0 < self.grasp_threshold <= 1 or not 0 <= self.deadband < 1:
            raise ValueError("grasp_threshold must be in (0, 1] and deadband in [0, 1)")


class FrankaGripper:
    """The Franka Hand at ``robot_ip`` (see the module docstring)."""

    def __init__(self, robot_ip: str, config: GripperConfig) -> None:
        self.robot_ip = robot_ip
        self.config = config
        self._gripper = None
        self._max_width_m = 0.08
        self._cond = threading.Condition()
        self._target: float | None = None
        self._executed: float | None = None
        self._closure = 0.0
        self._busy = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def connect(self) -> None:
        """Connect to the gripper server, read its width, start the worker."""
        import pylibfranka as franka

        self._gripper = franka.Gripper(self.robot_ip)
        if self.config.home_on_connect:
            self._gripper.homing()
        self._read()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="franka-gripper", daemon=True)
        self._thread.start()

    def disconnect(self) -> None:
        """Stop the worker (waits for a running command) and drop the connection."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._gripper = None

    @property
    def closure(self) -> float:
        """Latest measured closure in [0, 1]."""
        with self._cond:
            return self._closure

    def set_target(self, closure: float) -> None:
        """Set the closure target in [0, 1]; executed asynchronously."""
        c = float(closure)
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"gripper closure must be in [0, 1] (0 open, 1 closed), got {c}")
        with self._cond:
            self._target = c
            self._cond.notify_all()

    @property
    def idle(self) -> bool:
        """The latest target has been executed (no command running or waiting)."""
        with self._cond:
            return not self._busy and not self._pending()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until the latest target has been executed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy and not self._pending(), timeout_s)

    def _pending(self) -> bool:
        if self._target is None:
            return False
        return self._executed is None or abs(self._target - self._executed) > self.config.deadband

    def _run(self) -> None:
        period = 1.0 / self.config.poll_hz
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or self._pending(), period)
                if self._stop:
                    return
                target = self._target if self._pending() else None
                self._busy = target is not None
            try:
                if target is not None:
                    self._execute(target)
                self._read()
            except Exception as exc:  # noqa: BLE001 - libfranka gripper errors: report, go on
                log.warning("gripper command failed: %s", exc)
                self.error = str(exc)
            finally:
                with self._cond:
                    if target is not None:
                        self._executed = target
                    self._busy = False
                    self._cond.notify_all()

    def _execute(self, closure: float) -> None:
        cfg = self.config
        width = self._max_width_m * (1.0 - closure)
        if closure >= cfg.grasp_threshold:
            wide = self._max_width_m
            self._gripper.grasp(width, cfg.speed_m_s, cfg.force_n, wide, wide)
        else:
            self._gripper.move(width, cfg.speed_m_s)

    def _read(self) -> None:
        state = self._gripper.read_once()
        if state.max_width > 0:
            self._max_width_m = float(state.max_width)
        closure = 1.0 - float(state.width) / self._max_width_m
        with self._cond:
            self._closure = min(1.0, max(0.0, closure))
