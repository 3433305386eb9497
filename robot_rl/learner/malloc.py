"""Keep freed tensor memory in the process: glibc's malloc tuned for a learner's update loop.

A pixel update allocates the same large temporaries every step (a batch of 256 feature maps
as float32 is 21 MB per camera). glibc serves allocations above its mmap threshold with fresh
``mmap`` pages and returns them to the OS on free, so every update page-faults tens of MB of
zeroed memory again: measured 97 -> 66 ms per pixel update on this 2-core machine once the
memory is kept (``bench/learner_throughput.py --only cached``). :func:`keep_freed_memory`
raises the mmap threshold to glibc's maximum (32 MB on 64-bit) and the trim threshold, so the
heap keeps and reuses those blocks. The process's peak memory does not grow (the blocks are
the same); its resident size stays at that peak instead of shrinking between updates.

A process-wide setting, applied explicitly by the learner (never at import); a no-op where the
C library is not glibc.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024
"""glibc's upper limit for M_MMAP_THRESHOLD on 64-bit (4 MiB * sizeof(long))."""
TRIM_THRESHOLD = 1024 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Tune glibc malloc (see the module docstring). Returns whether it applied."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
        return ok and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    except (OSError, AttributeError):  # not glibc
        return False
