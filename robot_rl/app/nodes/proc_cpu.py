"""Where the CPU goes: CPU seconds of process trees, by role, from Linux ``/proc``.

The rehearsal runs the twin, the actor, the learner and the simulated human on one machine;
its learner rate depends on the CPU the others leave. :class:`CpuMeter` samples the CPU time
(user + system) of every process under given root processes (the learner, the actor, ``up``)
and names each by its role and, for ``python -m <module>`` children, the module (the twin,
the human, ...). A process is counted from the first sample that sees it (its time before the
meter started is not counted) to the last one: call :meth:`CpuMeter.sample` about once a second
and once at the end; a child that lives and ends between two samples is missed.

Linux only (``/proc``); elsewhere :meth:`CpuMeter.sample` records nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass
class _Proc:
    pid: int
    ppid: int
    start: int  # start time in ticks since boot: (pid, start) names one process
    cpu_s: float


def _stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after "(comm)" (which may hold spaces): fields[0] is the state
    (field 3 of proc(5)), so field k of proc(5) is fields[k - 3]. Raises OSError if gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads; a zombie keeps them).

    Raises:
        OSError: No such process (or not Linux).
    """
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime 14, stime 15


def _read(pid: int) -> _Proc | None:
    try:
        fields = _stat(pid)
    except OSError:  # gone, or not Linux
        return None
    ppid, start = int(fields[1]), int(fields[19])  # ppid 4, starttime 22
    return _Proc(pid, ppid, start, (int(fields[11]) + int(fields[12])) * _TICK_S)


def _module(pid: int) -> str | None:
    """``<module>`` of ``python -m <module>`` (e.g. sim.ros_node), else None."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for a, b in zip(argv, argv[1:], strict=False):
        if a == b"-m" and b:
            return b.decode(errors="replace")
    return None


class CpuMeter:
    """CPU seconds per role of the process trees under ``roots`` (role -> pid).

    A root is named by its role; a descendant by ``role/module`` when it runs ``python -m
    module`` under another module than its root's, else by its root's role.
    """

    def __init__(self, roots: Mapping[str, int]) -> None:
        self.roots = dict(roots)
        self._first: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}
        self._label: dict[tuple[int, int], str] = {}
        self.t0 = time.monotonic()
        self.t1 = self.t0
        self._stat0 = self._stat1 = _machine()
        self.sample()

    def add_root(self, role: str, pid: int) -> None:
        """Also measure the tree under ``pid`` (a process started after the meter)."""
        self.roots[role] = pid
        self.sample()

    def sample(self) -> None:
        """Read the CPU time of every process under the roots now."""
        try:
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return
        procs = {p.pid: p for p in map(_read, pids) if p is not None}
        children: dict[int, list[int]] = {}
        for p in procs.values():
            children.setdefault(p.ppid, []).append(p.pid)
        for role, root in self.roots.items():
            if root not in procs:
                continue
            root_mod = _module(root)
            stack = [(root, role)]
            while stack:
                pid, label = stack.pop()
                p = procs[pid]
                key = (pid, p.start)
                if key not in self._label:
                    mod = _module(pid) if pid != root else None
                    if mod is not None and mod != root_mod:
                        label = f"{role}/{mod.rsplit('.', 1)[-1]}"
                    self._label[key] = label
                    self._first[key] = p.cpu_s
                self._last[key] = p.cpu_s
                stack += [(c, self._label[key]) for c in children.get(pid, ())]
        self.t1 = time.monotonic()
        self._stat1 = _machine()

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds per label between the first and the last sample that saw each process."""
        out: dict[str, float] = {}
        for key, label in self._label.items():
            out[label] = out.get(label, 0.0) + self._last[key] - self._first[key]
        return out

    def shares(self) -> dict[str, float]:
        """Cores used on average per label over the meter's time (1.0: one core all along),
        and ``machine``: the cores the whole machine was busy (every process, ours or not)."""
        wall = max(self.t1 - self.t0, 1e-9)
        out = {k: round(v / wall, 3) for k, v in sorted(self.cpu_s().items())}
        if self._stat0 is not None and self._stat1 is not None:
            busy = (self._stat1[0] - self._stat0[0]) * _TICK_S
            out["machine"] = round(busy / wall, 3)
        return out


def _machine() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat (busy: all but idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    total = sum(vals[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return total - vals[3] - vals[4], total
