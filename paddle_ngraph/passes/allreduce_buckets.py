"""Bucketed AllReduce, written once: how values are grouped into buckets, which buckets may travel
compressed, and the AllReduce node of each bucket.

Used by every place that reduces a list of values across ranks: the gradients before their
optimizer updates (``InsertAllReduce``), a dygraph backward's gradient results
(``average_gradient_results``), the gradients left to Paddle's updates (``average_results``),
local SGD's parameter differences (``local_sgd.build_sync``); ZeRO-1's reduce-scatter buckets
(``ShardOptimizer``) are grouped by ``plan_buckets`` too.

The grouping depends only on the values' sizes and keys, in the order given (the ready order:
the order backward produces them), so every rank builds the same collectives in the same order.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from ..ir import Output
from ..ir.ops import AllReduce, compression_for


def plan_buckets(sizes: Sequence[int], keys: Sequence[Hashable], bucket_bytes: int,
                 min_buckets: int = 1) -> tuple[list[list[int]], int]:
    """Groups items (``sizes`` in bytes and ``keys``, in ready order) into buckets of consecutive
    items: a new bucket where the key differs from the bucket's first item's (a dtype: one
    message has one dtype) or where ``bucket_bytes`` would be exceeded (0: one item per bucket).
    The size is lowered so that there are at least ``min_buckets``: a bucket can only be sent
    once complete, so one bucket for a whole small model would leave nothing to overlap with the
    backward pass. Returns the buckets (item indices) and the size used."""
    cap = bucket_bytes
    if cap > 0 and min_buckets > 1:
        cap = min(cap, -(-sum(sizes) // min_buckets))
    buckets: list[list[int]] = []
    size = 0
    for k, (nbytes, key) in enumerate(zip(sizes, keys)):
        if not buckets or cap == 0 or (size > 0 and size + nbytes > cap) or keys[buckets[-1][0]] != key:
            buckets.append([])
            size = 0
        buckets[-1].append(k)
        size += nbytes
    return buckets, cap


def plan_value_buckets(values: Sequence[Output], bucket_bytes: int,
                       min_buckets: int = 1) -> tuple[list[list[int]], int]:
    """``plan_buckets`` for IR values: their sizes, a new bucket at each dtype change."""
    return plan_buckets([v.type.nbytes() for v in values], [v.dtype for v in values], bucket_bytes, min_buckets)


def dtype_groups(values: Sequence[Output]) -> list[list[int]]:
    """One group per dtype (in order of first appearance), whatever the values' sizes and order."""
    groups: dict = {}
    for k, value in enumerate(values):
        groups.setdefault(value.dtype, []).append(k)
    return list(groups.values())


def emit_allreduce(values: Sequence[Output], groups: list[list[int]], reduction: str, compress: str,
                   names: Callable[[int], tuple[str, str]], ranks=()) -> list[Output]:
    """One AllReduce per group of ``values`` (indices, as ``plan_buckets`` returns them), compressed
    where ``compression_for`` allows; ``names(i)`` gives bucket i's (bucket attribute, node name);
    ``ranks``: the group of ranks the AllReduces run over (ir/groups.py; ``()``: every rank).
    Returns the reduced value of each of ``values``, in their order."""
    reduced: list = [None] * len(values)
    for i, group in enumerate(groups):
        members = [values[k] for k in group]
        bucket, node_name = names(i)
        node = AllReduce(*members, reduction=reduction, bucket=bucket, name=node_name, group=tuple(ranks),
                         compress=compression_for(members[0].dtype, reduction, compress))
        for j, k in enumerate(group):
            reduced[k] = node.output(j)
    return reduced


def allreduce_in_buckets(values: Sequence[Output], reduction: str, compress: str = "none",
                         bucket_bytes: int = 32 << 20, min_buckets: int = 1,
                         names: Callable[[int], tuple[str, str]] = lambda i: (f"grad_bucket_{i}",
                                                                              f"allreduce_bucket_{i}"),
                         ranks=()) -> tuple[list[Output], list[list[int]], int]:
    """``values`` (in ready order) reduced by bucketed AllReduce: ``plan_value_buckets``, then
    ``emit_allreduce``. Returns the reduced values (in the order of ``values``), the buckets
    (indices into ``values``) and the bucket size used."""
    groups, cap = plan_value_buckets(values, bucket_bytes, min_buckets)
    return emit_allreduce(values, groups, reduction, compress, names, ranks), groups, cap
