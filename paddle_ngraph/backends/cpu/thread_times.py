"""CPU time per thread of this process, grouped by thread name (Linux, /proc/self/task).

The CPU backend names its threads (native/cpu/src/executor.cc): ``pdng-compute`` runs the steps
when a rank has more than one compute thread, ``pdng-comm`` runs the collectives that overlap
with compute; OpenMP's workers and Open MPI's and oneCCL's helper threads have names of their own.
Comparing a thread's CPU time with the wall time it was busy shows whether it spins: a
communication thread that takes a core's worth of CPU while it waits for a peer takes it from
the rank's compute (or from another rank on the same cores).

    before = thread_times()
    ...  # training steps
    for name, seconds in sorted(cpu_by_name(before, thread_times()).items()):
        print(name, seconds)

Resolution: the kernel's clock tick (10 ms at 100 Hz), per thread; measure over many steps.
"""
from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_stat(text: str) -> tuple[str, float]:
    """(thread name, user + system CPU seconds) from the text of a /proc/<pid>/task/<tid>/stat file.

    The name sits between the first '(' and the last ')', and may itself hold spaces and
    parentheses; utime and stime are the 14th and 15th fields (proc(5)), in clock ticks.
    """
    open_paren, close_paren = text.index("("), text.rindex(")")
    name = text[open_paren + 1:close_paren]
    fields = text[close_paren + 2:].split()  # from field 3 (state) on
    utime, stime = int(fields[11]), int(fields[12])
    return name, (utime + stime) / _TICK


def thread_times(task_dir: str = "/proc/self/task") -> dict[int, tuple[str, float]]:
    """Thread id -> (name, CPU seconds so far) for every thread of this process (empty off Linux)."""
    result = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return result
    for tid in tids:
        try:
            with open(os.path.join(task_dir, tid, "stat")) as f:
                result[int(tid)] = parse_stat(f.read())
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between listdir and open
    return result


def cpu_by_name(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each thread name used between two thread_times() readings. A thread that
    started in between counts from zero; one that ended in between is lost (its time is gone
    from /proc), so read around a stretch during which the threads live."""
    used: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        start = before.get(tid, (name, 0.0))[1]
        used[name] = used.get(name, 0.0) + max(0.0, seconds - start)
    return used
