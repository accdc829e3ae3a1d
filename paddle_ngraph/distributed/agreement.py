"""Whether every rank holds the same key, in one small AllReduce.

Ranks that are about to run collectives must agree on what they run: the same program at the
same step (the static engine's input check), the same captured backward (the dygraph engine's
check at each synchronized backward). A rank that went another way would otherwise wait in a
collective the others never join. The maximum of the key and of its negative gives the largest
and the smallest key among the ranks at once; they are equal only where every rank gave the same.
"""
from __future__ import annotations

import numpy as np

# Keys travel as float64: integers up to 2**53 are exact.
_EXACT = 2 ** 53


def agree(transport, key: int, flags=(), name: str = "agreement") -> tuple[bool, list[int]]:
    """(whether every rank gave ``key``, the maximum over the ranks of each of ``flags``), from one
    AllReduce (max) of ``[key, -key, *flags]``. Every rank of ``transport`` must call it."""
    if not 0 <= key < _EXACT:
        raise ValueError(f"agreement key {key} is not an integer in [0, 2**53)")
    values = transport.allreduce(np.array([key, -key, *flags], dtype=np.float64), "max", name=name)
    return bool(values[0] == -values[1]), [int(v) for v in values[2:]]
