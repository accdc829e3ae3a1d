"""Collective communication ops, present in the IR from the start.

AllReduce, Broadcast, AllGather and ReduceScatter take a list of tensors (a
bucket) and return one output per input, so that gradient fusion is a change of
grouping, not of op type. Each runs over its ``group``: the global ranks it
involves, in increasing order; ``()`` (the default) is every rank of the job
(ir/groups.py: the groups of tensor parallelism).
"""
from __future__ import annotations

from ..node import Node, register_op
from ..groups import check_group
from ..types import DType, TensorType

__all__ = ["AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv", "REDUCTIONS", "COMPRESSIONS",
           "COMPRESSIBLE_REDUCTIONS", "compression_for", "COLLECTIVE_OPS", "STATISTICS_BUCKET", "is_statistics"]

REDUCTIONS = ("sum", "prod", "min", "max", "avg")
# Wire formats of a compressed AllReduce (distributed/compress.py): "none" sends float32 as is.
COMPRESSIONS = ("none", "bf16", "fp16")
# The reductions a compressed AllReduce computes (distributed/compress.py): it sums in float32.
COMPRESSIBLE_REDUCTIONS = ("sum", "avg")
# Every op type of this module: the ops that communicate.
COLLECTIVE_OPS = frozenset({"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv"})
# Bucket label prefix of the collectives that the step's own computation waits for (the batch-norm
# sums of sync_batch_norm, in the forward and the backward pass), as opposed to gradient buckets,
# which only the optimizer updates read: the scheduler must not hold back what follows them.
STATISTICS_BUCKET = "statistics:"


def compression_for(dtype: DType, reduction: str, compress: str) -> str:
    """The wire format of one AllReduce of ``dtype`` values: ``compress`` where the 16-bit scheme is
    defined (float32 values summed or averaged: it accumulates in float32), else "none" (the values
    travel as they are). The one statement of the rule: passes choose with it, AllReduce checks it."""
    if compress != "none" and dtype == DType.float32 and reduction in COMPRESSIBLE_REDUCTIONS:
        return compress
    return "none"


def is_statistics(node) -> bool:
    return node.op_type in COLLECTIVE_OPS and str(node.attrs.get("bucket", "")).startswith(STATISTICS_BUCKET)


class Collective(Node):
    attributes = {"bucket": "", "group": ()}

    def check_inputs(self):
        self.check(len(self.inputs) >= 1, "needs at least one tensor")
        self.attrs["group"] = check_group(self.attrs["group"])

    def infer(self):
        self.check_inputs()
        return [self.input_type(i) for i in range(len(self.inputs))]


@register_op
class AllReduce(Collective):
    """``compress`` (bf16|fp16) sends float32 tensors as 16-bit values and sums them in float32,
    with the same bits on every rank (distributed/compress.py); only sum and avg, only float32."""

    op_type = "AllReduce"
    attributes = {"reduction": "sum", "bucket": "", "compress": "none", "group": ()}

    def infer(self):
        reduction, compress = self.attrs["reduction"], self.attrs["compress"]
        self.check(reduction in REDUCTIONS, f"reduction '{reduction}' is not one of {REDUCTIONS}")
        self.check(compress in COMPRESSIONS, f"compress '{compress}' is not one of {COMPRESSIONS}")
        types = super().infer()
        if compress != "none":
            self.check(reduction in COMPRESSIBLE_REDUCTIONS,
                       f"compress '{compress}' needs reduction sum or avg, not '{reduction}'")
            for i, t in enumerate(types):
                self.check(compression_for(t.dtype, reduction, compress) == compress,
                           f"compress '{compress}' needs float32 inputs; input {i} is {t.dtype.value}")
        return types


@register_op
class Broadcast(Collective):
    op_type = "Broadcast"
    attributes = {"root": 0, "bucket": "", "group": ()}


@register_op
class AllGather(Collective):
    """Concatenates along ``axis`` the tensors of the group's ranks, in rank order; ``world_size``
    is the group's size."""

    op_type = "AllGather"
    attributes = {"world_size": 1, "bucket": "", "group": (), "axis": 0}

    def infer(self):
        self.check_inputs()
        n = int(self.attrs["world_size"])
        self.check(n >= 1, "world_size must be >= 1")
        self.check(not self.attrs["group"] or len(self.attrs["group"]) == n,
                   f"world_size {n} is not the size of group {self.attrs['group']}")
        out = []
        for i in range(len(self.inputs)):
            t = self.input_type(i)
            self.check(t.rank >= 1, f"input {i} must have rank >= 1")
            axis = int(self.attrs["axis"])
            self.check(-t.rank <= axis < t.rank, f"axis {axis} is out of range for input {i} ({t})")
            axis %= t.rank
            self.attrs["axis"] = axis
            shape = list(t.shape)
            shape[axis] = shape[axis] * n if shape[axis] >= 0 else -1
            out.append(TensorType(t.dtype, shape))
        return out


@register_op
class ReduceScatter(Collective):
    """Reduces across ranks, each rank keeping its 1/world_size slice of axis 0."""

    op_type = "ReduceScatter"
    attributes = {"world_size": 1, "reduction": "sum", "bucket": "", "group": ()}

    def infer(self):
        self.check_inputs()
        n = int(self.attrs["world_size"])
        self.check(not self.attrs["group"] or len(self.attrs["group"]) == n,
                   f"world_size {n} is not the size of group {self.attrs['group']}")
        self.check(self.attrs["reduction"] in REDUCTIONS, f"reduction must be one of {REDUCTIONS}")
        out = []
        for i in range(len(self.inputs)):
            t = self.input_type(i)
            self.check(t.rank >= 1 and t.shape[0] >= 0 and t.shape[0] % n == 0,
                       f"input {i} ({t}): axis 0 must be static and divisible by world_size {n}")
            out.append(TensorType(t.dtype, [t.shape[0] // n, *t.shape[1:]]))
        return out


@register_op
class Send(Node):
    """Sends input 0 to ``peer``; its output is the same tensor (a control token)."""

    op_type = "Send"
    attributes = {"peer": 0, "tag": 0}
    num_inputs = 1

    def infer(self):
        return [self.input_type(0)]


@register_op
class Recv(Node):
    op_type = "Recv"
    attributes = {"peer": 0, "tag": 0, "dtype": "float32", "shape": ()}
    num_inputs = 0

    def infer(self):
        return [TensorType(DType.parse(self.attrs["dtype"]), self.attrs["shape"])]
