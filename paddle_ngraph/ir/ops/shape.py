"""Ops that only move data: reshape, broadcast, transpose, concat, stack."""
from __future__ import annotations

import numpy as np

from ..node import Node, register_op
from ..types import TensorType, dims_compatible, normalize_axis
from .checks import checked_axis

__all__ = ["Reshape", "BroadcastTo", "Transpose", "Concat", "Stack"]


@register_op
class Reshape(Node):
    """Reshape to ``shape``; one entry may be -1 (inferred from the element count)."""

    op_type = "Reshape"
    attributes = {"shape": ()}
    num_inputs = 1

    def infer(self):
        src = self.input_type(0)
        shape = [int(d) for d in self.attrs["shape"]]
        self.check(shape.count(-1) <= 1, f"at most one -1 in target shape {shape}")
        if -1 in shape and src.is_static:
            known = int(np.prod([d for d in shape if d != -1]))
            total = int(np.prod(src.shape))
            self.check(known > 0 and total % known == 0, f"cannot reshape {src} to {shape}")
            shape[shape.index(-1)] = total // known
        elif src.is_static and -1 not in shape:
            self.check(int(np.prod(src.shape)) == int(np.prod(shape)), f"cannot reshape {src} to {shape}")
        return [TensorType(src.dtype, shape)]


@register_op
class BroadcastTo(Node):
    """Broadcast input 0 to the shape of input 1 (NumPy rules)."""

    op_type = "BroadcastTo"
    num_inputs = 2

    def infer(self):
        src, like = self.input_type(0), self.input_type(1)
        self.check(src.rank <= like.rank, f"cannot broadcast {src} to {like}")
        for a, b in zip(reversed(src.shape), reversed(like.shape)):
            self.check(a == 1 or dims_compatible(a, b), f"cannot broadcast {src} to {like}")
        return [TensorType(src.dtype, like.shape)]


@register_op
class Transpose(Node):
    op_type = "Transpose"
    attributes = {"perm": ()}
    num_inputs = 1

    def infer(self):
        src = self.input_type(0)
        perm = [int(p) for p in self.attrs["perm"]]
        self.check(sorted(perm) == list(range(src.rank)), f"perm {perm} is not a permutation of rank {src.rank}")
        return [TensorType(src.dtype, [src.shape[p] for p in perm])]


@register_op
class Concat(Node):
    op_type = "Concat"
    attributes = {"axis": 0}

    def infer(self):
        self.check(len(self.inputs) >= 1, "needs at least one input")
        first = self.input_type(0)
        axis = normalize_axis(self.attrs["axis"], first.rank)
        self.check(0 <= axis < first.rank, f"axis {self.attrs['axis']} out of range for rank {first.rank}")
        total = 0
        for i in range(len(self.inputs)):
            t = self.input_type(i)
            self.check(t.dtype == first.dtype and t.rank == first.rank, f"input {i} is {t}, input 0 is {first}")
            for d in range(first.rank):
                if d != axis:
                    self.check(dims_compatible(t.shape[d], first.shape[d]), f"input {i} is {t}, input 0 is {first}")
            total = -1 if total < 0 or t.shape[axis] < 0 else total + t.shape[axis]
        shape = list(first.shape)
        shape[axis] = total
        return [TensorType(first.dtype, shape)]


@register_op
class Stack(Node):
    """Stacks same-typed inputs along a new axis ``axis`` (in [-(rank+1), rank])."""

    op_type = "Stack"
    attributes = {"axis": 0}

    def infer(self):
        self.check(len(self.inputs) >= 1, "needs at least one input")
        first = self.input_type(0)
        for i in range(1, len(self.inputs)):
            t = self.input_type(i)
            self.check(t.dtype == first.dtype and t.rank == first.rank
                       and all(dims_compatible(a, b) for a, b in zip(t.shape, first.shape)),
                       f"input {i} is {t}, input 0 is {first}")
        axis = checked_axis(self, self.attrs["axis"], first.rank + 1)
        shape = list(first.shape)
        shape.insert(axis, len(self.inputs))
        return [TensorType(first.dtype, shape)]
