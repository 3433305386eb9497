"""Real-time scheduling for the acting process (``robot-rl actor --realtime-priority``).

An actor that shares its computer with a learner, a camera driver and (in a rehearsal) the
twin loses ticks to waiting for a CPU, not to its own work: in the pixel rehearsals the acting
thread was on a CPU for a quarter of its overrun ticks' time. Under ``SCHED_FIFO`` the kernel
runs it as soon as it is ready and before every normally scheduled process, as libfranka runs
its control loop (``RealtimeConfig::kEnforce``, priority 80 by default). The actor sleeps
between ticks, so it takes only the CPU its ticks need; the kernel's real-time throttling
(``/proc/sys/kernel/sched_rt_runtime_us``, 95% of each second by default) keeps a runaway one
from locking the machine.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

MAX_PRIORITY = 99
"""The highest SCHED_FIFO priority Linux has."""

_HOW = (
    "run the actor as root, or give its user a real-time priority limit (a line "
    "'<user> - rtprio 99' in /etc/security/limits.d/, then log in again: the setup libfranka "
    "asks for), or leave --realtime-priority at 0 (normal scheduling)"
)


def check_priority(priority: int) -> None:
    """Refuse a priority SCHED_FIFO does not have (0 means normal scheduling)."""
    if not 0 <= priority <= MAX_PRIORITY:
        raise ValueError(
            f"--realtime-priority must be 0 (normal scheduling) or 1..{MAX_PRIORITY} "
            f"(SCHED_FIFO), got {priority}"
        )


def set_realtime_priority(priority: int) -> list[int]:
    """Put every thread of this process under SCHED_FIFO at ``priority`` (threads it starts
    later inherit it); 0 does nothing. Returns the thread ids changed.

    Linux schedules threads, not processes (``sched_setscheduler(0, ...)`` changes the calling
    thread only), so each thread already running is changed by its id: torch's, gRPC's and the
    ROS executor's threads all keep the actor's time. Raises ValueError saying what to fix when
    the process may not use real-time scheduling, before any thread has changed. A thread
    that sets its own policy afterwards keeps it (Mesa puts its low-priority workers under
    SCHED_BATCH or SCHED_IDLE): :func:`thread_scheduling` reports what each ran at.
    Processes the actor starts inherit it too (Linux keeps the policy across fork and exec):
    the simulated human's node, and the setup's nodes under ``--launch``."""
    check_priority(priority)
    if priority == 0:
        return []
    if not hasattr(os, "SCHED_FIFO"):
        raise ValueError("--realtime-priority needs Linux's SCHED_FIFO; this OS has none")
    param = os.sched_param(priority)
    tids = [int(p.name) for p in Path("/proc/self/task").iterdir()]
    try:  # this thread first: if it may not, none has changed
        os.sched_setscheduler(0, os.SCHED_FIFO, param)
    except PermissionError as e:
        limit = _rtprio_limit()
        raise ValueError(
            f"--realtime-priority {priority}: this process may not use real-time scheduling "
            f"(its rtprio limit is {limit}): {_HOW}"
        ) from e
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


def _rtprio_limit() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def thread_scheduling() -> dict:
    """How this process's threads are scheduled now: {"SCHED_FIFO 80": 12, "SCHED_OTHER": 1}
    (policy and priority -> how many threads), for the actor's report."""
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
