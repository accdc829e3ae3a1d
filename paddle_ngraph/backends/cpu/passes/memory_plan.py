"""Memory planning: one arena per executable, offsets by first fit over lifetimes.

After nGraph's memory_layout pass: every arena root (see liveness) gets an offset
such that two roots alive at the same step never overlap; the arena is allocated
once when the executable is built, so a steady-state step allocates nothing.
"""
from __future__ import annotations

from ....ir import Function
from ....passes.base import FunctionPass
from .liveness import Liveness

ALIGNMENT = 64


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class MemoryPlan(FunctionPass):
    name = "memory_plan"

    def __init__(self, liveness: Liveness):
        self.liveness = liveness
        self.offsets: dict[tuple, int] = {}
        self.arena_bytes = 0
        self.unplanned_bytes = 0  # what one buffer per value would take, for reports

    def run(self, function: Function) -> bool:
        roots = sorted((r for r in self.liveness.roots.values() if r.kind == "arena"),
                       key=lambda r: (r.first, -r.nbytes))
        placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
        for root in roots:
            size = _align(max(root.nbytes, 1))
            self.unplanned_bytes += size
            busy = sorted((o, s) for o, s, first, last in placed if first <= root.last and root.first <= last)
            offset = 0
            for o, s in busy:
                if offset + size <= o:
                    break
                offset = max(offset, o + s)
            placed.append((offset, size, root.first, root.last))
            self.offsets[root.key] = offset
            self.arena_bytes = max(self.arena_bytes, offset + size)
        return False
