"""``robot-rl actor --realtime-priority``: the acting process under SCHED_FIFO, or no actor.

An actor that shares its computer with a learner, a camera driver and (in a rehearsal) the
twin loses ticks to waiting for a CPU, not to its own work: in the pixel rehearsals the acting
thread was on a CPU for a quarter of its overrun ticks' time. :mod:`robot_rl.core.realtime`
does the scheduling; here a refusal stops the actor before it acts (asked for real-time, it
must not run without it).
"""

from __future__ import annotations

from robot_rl.core import realtime as rt


def check_priority(priority: int) -> None:
    """Refuse a priority SCHED_FIFO does not have (0 means normal scheduling)."""
    if priority != 0:
        rt.check_priority(priority, "--realtime-priority", "or 0: normal scheduling")


def set_realtime_priority(priority: int) -> list[int]:
    """Every thread of this process (and those it starts) under SCHED_FIFO at ``priority``;
    0 does nothing. Returns the thread ids changed. Raises ValueError saying what to fix when
    the process may not, before any thread has changed. Processes the actor starts inherit it
    too: the simulated human's node, and the setup's nodes under ``--launch``."""
    check_priority(priority)
    if priority == 0:
        return []
    try:
        return rt.run_threads_fifo(priority)
    except OSError as e:
        raise ValueError(
            f"--realtime-priority {priority}: this process may not use real-time scheduling "
            f"({e}; its rtprio limit is {rt.rtprio_limit()}): {rt.HOW_TO_ALLOW}, or leave "
            "--realtime-priority at 0 (normal scheduling)"
        ) from e


def freeze_setup_objects() -> None:
    """Move every object the process holds now (its setup: modules, the policy, the env, the
    ROS 2 nodes) out of the garbage collector's reach (``gc.freeze``), so that a full
    collection scans only what acting made since. A full collection holds the GIL throughout
    (~0.1 s per 200k objects on this machine), so every thread of the actor waits for it: the
    one overrun of a 30-minute pixel rehearsal was 0.3 s with the acting thread blocked, not
    on a CPU and not waiting for one. Call it once, after the setup and before acting."""
    import gc

    gc.collect()  # what the setup left as garbage goes now, not frozen forever
    gc.freeze()
