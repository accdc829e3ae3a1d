"""Matrix multiplication with batch broadcasting (numpy.matmul semantics)."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import TensorType, broadcast_shapes, dims_compatible
from .precision import ATTRIBUTE as _PRECISION, check_compute_precision

__all__ = ["MatMul"]


@register_op
class MatMul(Node):
    op_type = "MatMul"
    attributes = {"transpose_a": False, "transpose_b": False, **_PRECISION}
    num_inputs = 2

    def infer(self):
        a, b = self.input_type(0), self.input_type(1)
        self.check(a.dtype == b.dtype, f"input dtypes differ: {a} and {b}")
        self.check(a.dtype.is_float, f"needs floating-point inputs, got {a}")
        check_compute_precision(self, a.dtype)
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


FUSED_ACTIVATIONS = ("none", "relu")


@register_op
class MatMulBias(Node):
    """``activation(a @ b + bias)`` for 2-D ``a`` and ``b`` and a bias over the last dimension.

    Not produced by the frontend: the fusion pass of the CPU backend builds it from
    MatMul -> Add (-> Relu), which oneDNN runs as one matmul with post-ops. With
    ``compute_precision`` "bf16" only the product's inputs are rounded: the bias is added to the
    float32 product in float32.
    """

    op_type = "MatMulBias"
    attributes = {"transpose_a": False, "transpose_b": False, "activation": "none", **_PRECISION}
    num_inputs = 3

    def infer(self):
        a, b, bias = (self.input_type(i) for i in range(3))
        self.check(a.rank == 2 and b.rank == 2, f"inputs must be 2-D, got {a} and {b}")
        self.check(self.attrs["activation"] in FUSED_ACTIVATIONS,
                   f"activation '{self.attrs['activation']}' is not one of {FUSED_ACTIVATIONS}")
        out = MatMul.infer(self)[0]
        self.check(bias.dtype == a.dtype and bias.rank == 1 and dims_compatible(bias.shape[0], out.shape[-1]),
                   f"bias {bias} must be a vector of the output's last dimension ({out})")
        return [out]


__all__.append("MatMulBias")
