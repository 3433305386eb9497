"""Real-time scheduling (SCHED_FIFO) for a process that must keep a robot's time.

Two processes ask for it: the Franka driver's 1 kHz control loop (``FrankaConfig
.realtime_priority``, as libfranka's ``RealtimeConfig::kEnforce`` runs its control thread) and
the acting process (``robot-rl actor --realtime-priority``). Both lose cycles to waiting for a
CPU, not to their own work, when a learner or camera driver shares the computer; under
``SCHED_FIFO`` the kernel runs a ready thread before every normally scheduled process. Both
sleep between cycles, so they take only the CPU their cycles need, and the kernel's real-time
throttling (``/proc/sys/kernel/sched_rt_runtime_us``, 95% of each second by default) keeps a
runaway one from locking the machine. Each caller decides what a refusal means: the actor
refuses to start, the Franka loop runs on at normal priority and says why.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

MAX_PRIORITY = 99
"""The highest SCHED_FIFO priority Linux has."""

HOW_TO_ALLOW = (
    "run it as root, or give its user a real-time priority limit (a line '<user> - rtprio 99' "
    "in /etc/security/limits.conf or a file in /etc/security/limits.d/, then log in again: "
    "the setup libfranka's docs ask for)"
)


def check_priority(priority: int, option: str, off: str) -> None:
    """Refuse a priority SCHED_FIFO does not have; ``option`` names the setting, ``off`` says
    how to ask for normal scheduling instead."""
    if not 1 <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"{option} must be a SCHED_FIFO priority in 1..{MAX_PRIORITY} ({off}), got {priority}"
        )


def run_threads_fifo(priority: int) -> list[int]:
    """Put every thread of this process under SCHED_FIFO at ``priority``; threads it starts
    later, and processes it starts, inherit it (Linux keeps the policy across clone, fork and
    exec). Returns the thread ids changed.

    Linux schedules threads, not processes (``sched_setscheduler(0, ...)`` changes the calling
    thread only), so each thread already running is changed by its id. Raises OSError when the
    process may not (PermissionError) or the OS has no SCHED_FIFO, before any thread has
    changed. A thread that sets its own policy afterwards keeps it (Mesa puts its low-priority
    workers under SCHED_BATCH or SCHED_IDLE): :func:`thread_scheduling` reports what each ran
    at."""
    check_priority(priority, "the priority", "use normal scheduling by not asking")
    if not hasattr(os, "SCHED_FIFO"):
        raise OSError("this OS has no SCHED_FIFO (Linux's real-time scheduling)")
    param = os.sched_param(priority)
    tids = [int(p.name) for p in Path("/proc/self/task").iterdir()]
    os.sched_setscheduler(0, os.SCHED_FIFO, param)  # this thread first: if refused, none changed
    me = threading.get_native_id()
    changed = [me]
    for tid in tids:
        if tid == me:
            continue
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, param)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        changed.append(tid)
    return changed


def rtprio_limit() -> str:
    """This process's real-time priority limit (RLIMIT_RTPRIO), for refusal messages."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def thread_scheduling() -> dict[str, int]:
    """How this process's threads are scheduled now: {"SCHED_FIFO 80": 12, "SCHED_OTHER": 1}
    (policy and priority -> how many threads), for reports."""
    names = {getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_FIFO", "SCHED_RR", "SCHED_BATCH",
                                         "SCHED_IDLE") if hasattr(os, n)}  # fmt: skip
    out: dict[str, int] = {}
    for p in Path("/proc/self/task").iterdir():
        try:
            policy = os.sched_getscheduler(int(p.name))
            prio = os.sched_getparam(int(p.name)).sched_priority
        except ProcessLookupError:
            continue
        key = names.get(policy, str(policy)) + (f" {prio}" if prio else "")
        out[key] = out.get(key, 0) + 1
    return out


_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def run_delay_s() -> float | None:
    """Seconds the calling thread has spent ready to run but waiting for a CPU, since it
    started (Linux schedstat's ``run_delay``); None where the kernel does not report it.

    Of a span's wall time, what the thread neither ran (``time.thread_time``) nor waited for a
    CPU (this) it was blocked: on a lock (Python's GIL held by another thread), IO, a page
    fault. So an actor tick's overrun tells the two fixes apart: a CPU wait is load beside it
    (real-time priority, fewer threads), a block is its own process's threads. ~15 us a read."""
    try:
        return int(_SCHEDSTAT.read_bytes().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class _GcClock:
    """Seconds spent in Python's garbage collector by any thread of this process (a
    ``gc.callbacks`` entry; the collecting thread holds the GIL, so the counters need no
    lock)."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._start: float | None = None

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.monotonic()
        elif self._start is not None:
            self.total_s += time.monotonic() - self._start
            self._start = None


_GC_CLOCK: _GcClock | None = None


def gc_seconds() -> float:
    """Seconds this process has spent collecting garbage (any thread), counted from the first
    call. A full collection holds the GIL for its whole length (~0.1 s per 200k objects here),
    so every other thread of the process stops meanwhile: for an actor's tick, time blocked."""
    global _GC_CLOCK
    if _GC_CLOCK is None:
        import gc

        _GC_CLOCK = _GcClock()
        gc.callbacks.append(_GC_CLOCK)
    return _GC_CLOCK.total_s
