"""How the INTERPRETER computes an op on bfloat16 values, as Paddle's CPU kernels do: on the
float32 values of the inputs (widening is exact), with the op's float32 reference kernel, the
outputs rounded once to bfloat16 (nearest even). Checked against Paddle's bfloat16 CPU kernels
(multiply, subtract, sum, scale: the same bits; tests/frontend/test_amp_bf16.py).

One rule for every op rather than a bfloat16 variant of each kernel: a converter that splits a
Paddle op into several IR nodes rounds after each, which is what Paddle's kernels that compute in
bfloat16 step by step do (``scale``: x * bf16(scale), rounded, + bf16(bias), rounded). ``Convert``
is the exception: it defines the conversions themselves (kernels/tensor.py).
"""
from __future__ import annotations

from ...ir import bfloat16
from ...ir.types import DType, TensorType

# Ops whose kernel already handles bfloat16 bits itself.
_OWN_BFLOAT16 = frozenset({"Constant", "Convert"})


def touches_bfloat16(node) -> bool:
    return (any(i.type.dtype is DType.bfloat16 for i in node.inputs)
            or any(t.dtype is DType.bfloat16 for t in node.output_types))


class _AsFloat32:
    """The node as its float32 reference kernel sees it: bfloat16 outputs declared float32."""

    def __init__(self, node):
        self._node = node
        self.output_types = [TensorType(DType.float32, t.shape) if t.dtype is DType.bfloat16 else t
                             for t in node.output_types]

    def __getattr__(self, name):
        return getattr(self._node, name)


def kernel_for(node, kernels):
    """The kernel that runs ``node``: its reference kernel, under the bfloat16 rule if it reads or
    makes bfloat16 values."""
    kernel = kernels[node.op_type]
    if node.op_type in _OWN_BFLOAT16 or not touches_bfloat16(node):
        return kernel
    widened = [i.type.dtype is DType.bfloat16 for i in node.inputs]
    rounded = [t.dtype is DType.bfloat16 for t in node.output_types]
    as_float32 = _AsFloat32(node)

    def run(_node, args, transport):
        args = [bfloat16.widen(a) if w else a for a, w in zip(args, widened)]
        outs = kernel(as_float32, args, transport)
        return [bfloat16.round_nearest_even(o) if r else o for o, r in zip(outs, rounded)]

    return run
