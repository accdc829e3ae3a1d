"""Matrix multiplication with batch broadcasting (numpy.matmul semantics)."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import TensorType, broadcast_shapes, dims_compatible

__all__ = ["MatMul"]


@register_op
class MatMul(Node):
    op_type = "MatMul"
    attributes = {"transpose_a": False, "transpose_b": False}
    num_inputs = 2

    def infer(self):
        a, b = self.input_type(0), self.input_type(1)
        self.check(a.dtype == b.dtype, f"input dtypes differ: {a} and {b}")
        self.check(a.dtype.is_float, f"needs floating-point inputs, got {a}")
        self.check(a.rank >= 1 and b.rank >= 1, f"inputs must have rank >= 1, got {a} and {b}")
        sa, sb = list(a.shape), list(b.shape)
        if len(sa) == 1:
            sa = [1] + sa
        if len(sb) == 1:
            sb = sb + [1]
        if self.attrs["transpose_a"]:
            sa[-1], sa[-2] = sa[-2], sa[-1]
        if self.attrs["transpose_b"]:
            sb[-1], sb[-2] = sb[-2], sb[-1]
        self.check(
            dims_compatible(sa[-1], sb[-2]),
            f"contraction dimensions differ: {a} x {b} "
            f"(transpose_a={self.attrs['transpose_a']}, transpose_b={self.attrs['transpose_b']})",
        )
        batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
        self.check(batch is not None, f"batch dimensions of {a} and {b} do not broadcast")
        shape = list(batch) + [sa[-2], sb[-1]]
        if a.rank == 1:
            shape.pop(-2)
        if b.rank == 1:
            shape.pop(-1)
        return [TensorType(a.dtype, shape)]
