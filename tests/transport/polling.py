"""Waiting on a condition by polling, never for a fixed time (shared by the transport tests)."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(cond: Callable[[], bool], timeout_s: float) -> bool:
    """True once ``cond()`` holds, False if it still does not after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
