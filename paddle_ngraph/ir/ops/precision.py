"""The ``compute_precision`` attribute of the compute-bound ops (matmul, convolution and its
backward ops), which the mixed-precision pass (passes/mixed_precision.py) sets.

``"default"``: the op computes in its inputs' dtype. ``"bf16"``: the op rounds each floating
input to bfloat16 (round to nearest even, a NaN stays a NaN), multiplies the rounded values and
accumulates their products in float32, and outputs float32. Only float32 ops take ``"bf16"``:
the tensors of the graph stay float32, so the conversion is part of the op, as oneDNN runs it (a
primitive with bf16 source and weights and an f32 destination, the reorders converting), and no
other op, no collective and no optimizer update sees a bfloat16 value.
"""
from __future__ import annotations

from ..node import Node
from ..types import DType

# The configuration key ``precision``: fp32, or bf16 (the pass marks the ops "bf16").
PRECISIONS = ("fp32", "bf16")
COMPUTE_PRECISIONS = ("default", "bf16")
ATTRIBUTE = {"compute_precision": "default"}


def check_compute_precision(node: Node, dtype: DType) -> None:
    value = node.attrs["compute_precision"]
    node.check(value in COMPUTE_PRECISIONS,
               f"compute_precision '{value}' is not one of {', '.join(COMPUTE_PRECISIONS)}")
    node.check(value == "default" or dtype == DType.float32,
               f"compute_precision '{value}' needs float32 inputs (bf16 rounding of float32 with float32 "
               f"accumulation), got {dtype.value}")
