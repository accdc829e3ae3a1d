"""The reference of ``compute_precision`` "bf16" (ir/ops/precision.py), shared by the matmul and
convolution kernels: the inputs are rounded to bfloat16 first, then the kernel computes as it
always does, in float32.

That is the definition of "bf16 products accumulated in float32": a product of two bfloat16
values (8 significant bits each) has at most 16 significant bits, so it is exact in float32, and
what remains is the float32 summation of exact products. A native kernel computing in bf16 with
float32 accumulation differs from this reference only by its order of summation.

MatMulBias adds its bias to the float32 product unrounded (the bias is not an input of the
product), and the rounding of the data is the same whether the data is a forward activation or
a gradient (the backward ops round ``delta`` too).
"""
from __future__ import annotations

from ....ir.bfloat16 import round_to_bf16

# The inputs of each op that enter its products (MatMulBias's third input, the bias, does not).
_PRODUCT_INPUTS = {"MatMulBias": 2}


def compute_inputs(node, args) -> list:
    """``args`` as the op's products see them: rounded to bfloat16 (held in float32) under
    ``compute_precision`` "bf16", else unchanged."""
    if node.attrs.get("compute_precision", "default") != "bf16":
        return list(args)
    count = _PRODUCT_INPUTS.get(node.op_type, len(args))
    return [round_to_bf16(a) for a in args[:count]] + list(args[count:])
