"""``robot-rl arm calibrate``: record an SO-101's joint ranges by hand and write its calibration.

    robot-rl arm calibrate --port /dev/ttyACM0 --out so101.json [--seconds 30]

Switches every servo's torque off (support the arm first: it has no brakes), then records the
present positions (one SYNC_READ per sample) for ``--seconds`` while you move each joint, one
after the other, through its whole range, and open and close the jaw fully. A live table shows
each joint's range so far. From the recording, :func:`drivers.feetech.calibration.
calibrate_from_recording` takes the extremes as limits and the middle as zero (the SO-101
kinematics' convention), and the file is written atomically. Nothing is written to the servos.

The same file serves the follower (``python -m drivers.so101.node --calibration``) and a leader
arm (``--device so101_leader --leader-calibration``). A joint that barely moved, or whose range
crosses the encoder's 4095 -> 0 seam, is refused with a message that says what to do; so are a
missing servo (named) and a port that cannot be opened (exit code 2).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drivers.feetech import calibration as cal
from drivers.feetech.bus import SO101_SERVO_IDS, FeetechBus
from drivers.feetech.protocol import FeetechError


class ArmCalibrateError(ValueError):
    """The arm cannot be calibrated as asked (port, servo, existing file); says what to do."""


@dataclass(frozen=True)
class ArmCalibrateConfig:
    """Record an SO-101's joint ranges by hand (torque off) and write its calibration file."""

    port: str
    """Serial device of the arm's bus board, e.g. /dev/ttyACM0."""
    out: Path
    """The calibration file to write (JSON)."""
    ids: tuple[int, ...] = SO101_SERVO_IDS
    """Servo ids: the five arm joints in chain order, then the gripper."""
    seconds: float = 30.0
    """How long to record while you move every joint through its range, s."""
    rate_hz: float = 50.0
    """Samples per second."""
    directions: tuple[int, ...] = (1, 1, 1, 1, 1)
    """Per arm joint, +1 or -1: the sign of the joint angle against the servo's ticks."""
    gripper_direction: int = 1
    """+1: the gripper's ticks grow as it closes; -1: they shrink."""
    overwrite: bool = False
    """Replace an existing --out file."""
    baudrate: int = 1_000_000
    """Bus speed, bits/s (STS3215 factory setting: 1000000)."""
    timeout_s: float = 0.05
    """Longest wait for a servo's answer, s."""
    progress: bool = True
    """Show the live table of ranges (on stderr)."""
    json: bool = False
    """Print exactly one JSON object on stdout."""

    def __post_init__(self) -> None:
        n = len(cal.SO101_ARM_JOINTS)
        if len(self.ids) != n + 1 or len(set(self.ids)) != n + 1:
            raise ValueError(
                f"--ids needs {n + 1} distinct servo ids ({n} joints, then the gripper), "
                f"got {self.ids}"
            )
        if len(self.directions) != n or any(d not in (1, -1) for d in self.directions):
            raise ValueError(f"--directions needs {n} values of +1 or -1, got {self.directions}")
        if self.gripper_direction not in (1, -1):
            raise ValueError(f"--gripper-direction must be 1 or -1, got {self.gripper_direction}")
        if not self.seconds > 0 or not self.rate_hz > 0:
            raise ValueError("--seconds and --rate-hz must be positive")


def _open_bus(cfg: ArmCalibrateConfig) -> FeetechBus:
    try:
        bus = FeetechBus(cfg.port, cfg.baudrate, cfg.ids, cfg.timeout_s)
    except OSError as e:
        raise ArmCalibrateError(f"cannot open {cfg.port}: {e}") from e
    names = (*cal.SO101_ARM_JOINTS, cal.SO101_GRIPPER)
    for servo_id, name in zip(cfg.ids, names, strict=True):
        try:
            bus.ping(servo_id)
        except FeetechError as e:
            bus.close()
            raise ArmCalibrateError(
                f"servo {servo_id} ({name}) did not answer on {cfg.port}: check its cable, its id "
                f"and the arm's power ({e})"
            ) from e
    return bus


def _table(low: np.ndarray, high: np.ndarray, elapsed_s: float, total_s: float):
    from rich.table import Table

    t = Table(
        title=f"move every joint through its range: {max(total_s - elapsed_s, 0):.0f} s left",
        title_justify="left",
    )
    for column in ("joint", "min", "max", "range (deg)", ""):
        t.add_column(column)
    names = (*cal.SO101_ARM_JOINTS, cal.SO101_GRIPPER)
    for i, name in enumerate(names):
        span = int(high[i] - low[i]) if np.isfinite(low[i]) else 0
        ok = span >= cal.MIN_RANGE_TICKS
        bar = "#" * min(span * 30 // 4096 + 1, 30) if span else ""
        t.add_row(
            name,
            str(int(low[i])) if span else "-",
            str(int(high[i])) if span else "-",
            f"{span * 360 / 4096:.0f}",
            f"[green]{bar}[/]" if ok else f"[yellow]{bar}[/]",
        )
    return t


def record_ticks(
    bus: FeetechBus,
    seconds: float,
    rate_hz: float,
    on_sample: Callable[[np.ndarray, float], None] | None = None,
) -> np.ndarray:
    """(T, N) present positions, one SYNC_READ every ``1 / rate_hz`` s for ``seconds``.

    Raises:
        FeetechError: A servo stopped answering.
    """
    period = 1.0 / rate_hz
    start = time.monotonic()
    samples = []
    next_s = start
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        samples.append(bus.sync_read_positions())
        if on_sample is not None:
            on_sample(samples[-1], now - start)
        next_s += period
        time.sleep(max(next_s - time.monotonic(), 0.0))  # the sampling period
    return np.asarray(samples)


def run_arm_calibrate(cfg: ArmCalibrateConfig) -> dict:
    """Torque off, record, compute, save (see the module docstring).

    Returns:
        ``out``, ``samples``, ``seconds`` recorded, and per joint (and ``gripper``) the servo
        id, min / max / zero ticks, direction and range in degrees.

    Raises:
        ArmCalibrateError: The port cannot be opened, a servo does not answer, --out exists.
        CalibrationError: A joint did not move through a range, or crossed the encoder seam.
    """
    if cfg.out.exists() and not cfg.overwrite:
        raise ArmCalibrateError(f"{cfg.out} exists; pass --overwrite to replace it")
    bus = _open_bus(cfg)
    try:
        bus.set_torque(None, False)
        n = len(cfg.ids)
        low, high = np.full(n, np.inf), np.full(n, -np.inf)
        live = None
        if cfg.progress:
            from rich.console import Console
            from rich.live import Live

            live = Live(
                _table(low, high, 0.0, cfg.seconds),
                console=Console(stderr=True),
                refresh_per_second=4,
            )
            live.start()

        def on_sample(ticks: np.ndarray, elapsed_s: float) -> None:
            np.minimum(low, ticks, out=low)
            np.maximum(high, ticks, out=high)
            if live is not None:
                live.update(_table(low, high, elapsed_s, cfg.seconds))

        try:
            t0 = time.monotonic()
            ticks = record_ticks(bus, cfg.seconds, cfg.rate_hz, on_sample)
            recorded_s = time.monotonic() - t0
        except FeetechError as e:
            raise ArmCalibrateError(f"recording stopped: {e}") from e
        finally:
            if live is not None:
                live.stop()
    finally:
        bus.close()
    calibration = cal.calibrate_from_recording(
        ticks,
        cal.SO101_ARM_JOINTS,
        cfg.ids[:-1],
        cfg.directions,
        (cal.SO101_GRIPPER, cfg.ids[-1], cfg.gripper_direction),
    )
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    cal.save(calibration, cfg.out)
    assert calibration.gripper is not None
    joints = {**calibration.joints, calibration.gripper[0]: calibration.gripper[1]}
    return {
        "out": str(cfg.out),
        "samples": int(ticks.shape[0]),
        "seconds": round(recorded_s, 3),
        "joints": {
            name: {
                "servo_id": j.servo_id,
                "min_ticks": j.min_ticks,
                "max_ticks": j.max_ticks,
                "offset_ticks": j.offset_ticks,
                "direction": j.direction,
                "range_deg": round((j.max_ticks - j.min_ticks) * 360 / 4096, 1),
            }
            for name, j in joints.items()
        },
    }
