"""Graph inputs, constants, and ops that only move or retype data."""
from __future__ import annotations

import numpy as np

from ..node import Node, register_op
from ..bfloat16 import to_bfloat16
from ..types import DType, TensorType, dims_compatible, normalize_axis

__all__ = ["Parameter", "Constant", "Convert", "Reshape", "BroadcastTo", "Transpose", "Concat", "Slice"]


@register_op
class Parameter(Node):
    """A graph input. ``role`` says what it holds: feed, parameter, state or constant input."""

    op_type = "Parameter"
    attributes = {"dtype": "float32", "shape": (), "role": "feed"}
    num_inputs = 0

    def infer(self):
        return [TensorType(self.attrs["dtype"], self.attrs["shape"])]


@register_op
class Constant(Node):
    """``dtype`` None: the value's NumPy dtype. A bfloat16 constant keeps its bits in ``value``
    (uint16) and says so in ``dtype``: a uint16 value given for it is taken as those bits, any
    other is rounded to bfloat16 as Paddle's conversion does."""

    op_type = "Constant"
    attributes = {"value": None, "dtype": None}
    num_inputs = 0

    def __init__(self, value, dtype=None, name=None):
        dtype = None if dtype is None else DType.parse(dtype)
        if dtype is DType.bfloat16:
            array = np.asarray(value)
            array = array.copy() if array.dtype == np.uint16 else to_bfloat16(array)
            super().__init__(name=name, value=array, dtype=dtype.value)
            return
        array = np.asarray(value, dtype=None if dtype is None else dtype.numpy)
        super().__init__(name=name, value=array)

    def infer(self):
        value = self.attrs["value"]
        dtype = DType.bfloat16 if self.attrs["dtype"] == DType.bfloat16.value else DType.from_numpy(value.dtype)
        return [TensorType(dtype, value.shape)]


@register_op
class Convert(Node):
    op_type = "Convert"
    attributes = {"dtype": "float32"}
    num_inputs = 1

    def infer(self):
        return [TensorType(self.attrs["dtype"], self.input_type(0).shape)]


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
class Slice(Node):
    """Slice along ``axes`` with Python semantics for negative and out-of-range bounds."""

    op_type = "Slice"
    attributes = {"axes": (), "starts": (), "ends": ()}
    num_inputs = 1

    def infer(self):
        src = self.input_type(0)
        shape = list(src.shape)
        axes, starts, ends = self.attrs["axes"], self.attrs["starts"], self.attrs["ends"]
        self.check(len(axes) == len(starts) == len(ends),
                   f"axes, starts and ends differ in length ({len(axes)}, {len(starts)}, {len(ends)})")
        seen = set()
        for axis, start, end in zip(axes, starts, ends):
            axis = normalize_axis(axis, src.rank)
            self.check(0 <= axis < src.rank, f"axis {axis} out of range for {src}")
            # Slicing an axis twice has no one meaning (the kernels would apply only the last).
            self.check(axis not in seen, f"axis {axis} is sliced twice (axes {list(axes)})")
            seen.add(axis)
            if shape[axis] >= 0:
                shape[axis] = len(range(*slice(start, end).indices(shape[axis])))
        return [TensorType(src.dtype, shape)]
