"""Kernels of the elementwise ops (ir/ops/elementwise.py): arithmetic, comparisons, logical ops,
unary math, Select."""
from __future__ import annotations

import numpy as np

from .registry import kernel, output_dtype


_BINARY = {
    "Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Divide": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum, "Power": np.power,
    "Equal": np.equal, "NotEqual": np.not_equal, "Less": np.less, "LessEqual": np.less_equal,
    "Greater": np.greater, "GreaterEqual": np.greater_equal,
    "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or,
}


@kernel(*_BINARY)
def _binary(node, args, transport):
    a, b = args
    if node.op_type == "Divide" and np.issubdtype(a.dtype, np.integer):
        return [np.floor_divide(a, b).astype(output_dtype(node))]
    return [np.asarray(_BINARY[node.op_type](a, b)).astype(output_dtype(node), copy=False)]


_UNARY = {
    "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Negative": np.negative, "Abs": np.abs,
    "LogicalNot": np.logical_not,
}


@kernel(*_UNARY)
def _unary(node, args, transport):
    return [np.asarray(_UNARY[node.op_type](args[0])).astype(output_dtype(node), copy=False)]


@kernel("Select")
def _select(node, args, transport):
    return [np.where(args[0], args[1], args[2]).astype(output_dtype(node))]
