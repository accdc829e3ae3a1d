"""``precision: bf16`` (O1 mixed precision): marks the compute-bound ops to compute in bfloat16.

The ops whose cost is their multiply-adds -- MatMul, MatMulBias, Convolution and its two
backward ops (ConvolutionBackpropData, ConvolutionBackpropFilter) -- get
``compute_precision="bf16"`` when they are float32: each rounds its inputs to bfloat16 (round to
nearest even), accumulates the products in float32 and outputs float32 (ir/ops/precision.py;
the INTERPRETER's kernels are the reference, backends/interpreter/kernels/precision.py). Every
other op is left as it is: softmax, normalization, losses, reductions, elementwise ops, the
collectives and the optimizer updates keep computing in float32.

Why an attribute of the op rather than Convert nodes around it, as Paddle's AMP inserts cast ops:

- every tensor of the graph stays float32, so the master weights (the parameters the optimizer
  updates), the optimizer state, the gradients the AllReduce sums (float32, or bf16 on the wire
  with ``compress: bf16``, which encodes float32 itself) and everything the other passes and the
  memory plan see are unchanged: precision combines with zero_stage, accumulate_steps, compress
  and recompute without any of them knowing about it;
- it is how oneDNN runs it: a matmul or convolution primitive with bf16 source and weights
  descriptors and an f32 destination, the reorders of its inputs doing the conversion, so a
  native kernel needs no bf16 buffer in the memory plan and no separate conversion step;
- a Convert(float32 -> bfloat16) node would put bfloat16 tensors in the graph, which only the
  matmul and convolution would read: a value rounded once and read by two ops (a weight read by
  the forward matmul and the backward data matmul) would be rounded twice with the attribute,
  which costs time but never changes a bit (rounding is a function of the value).

The rounding happens at the same places on every backend that honours the attribute; the CPU
backend does not yet (backends/cpu/precision.py says so once and runs float32).
"""
from __future__ import annotations

from ..ir import Function
from ..ir.ops.precision import PRECISIONS
from ..ir.types import DType
from .base import FunctionPass

BF16_OPS = ("MatMul", "MatMulBias", "Convolution", "ConvolutionBackpropData", "ConvolutionBackpropFilter")


def _input_dtype(node) -> DType:
    return node.inputs[0].type.dtype


class MixedPrecision(FunctionPass):
    """Marks the float32 ops of ``BF16_OPS``; ``marked`` lists their names in graph order."""

    name = "mixed_precision"

    def __init__(self, precision: str = "bf16"):
        if precision not in PRECISIONS:
            from ..errors import ConfigError

            raise ConfigError(f"mixed_precision: precision '{precision}' is not one of {', '.join(PRECISIONS)}")
        self.precision = precision
        self.marked: list[str] = []

    def run(self, function: Function) -> bool:
        if self.precision != "bf16":
            return False
        changed = False
        for node in function.ordered_nodes():
            if node.op_type in BF16_OPS and _input_dtype(node) == DType.float32:
                if node.attrs["compute_precision"] != "bf16":
                    node.attrs["compute_precision"] = "bf16"
                    changed = True
                self.marked.append(node.name)
        return changed


def bf16_nodes(function: Function) -> list:
    """The nodes of ``function`` that compute in bfloat16."""
    return [n for n in function.ordered_nodes() if n.attrs.get("compute_precision") == "bf16"]


def clear_bf16(function: Function) -> int:
    """Sets every node of ``function`` back to computing in its inputs' dtype; returns how many
    were marked. For a backend that runs ``function`` in float32 instead."""
    nodes = bf16_nodes(function)
    for node in nodes:
        node.attrs["compute_precision"] = "default"
    return len(nodes)
