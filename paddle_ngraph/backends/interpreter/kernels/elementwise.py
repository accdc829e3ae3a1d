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


def _paddle_float_mod(a, b):
    """Paddle's RemainderFunctor for floats: fmod, plus b when the remainder is non-zero and its
    sign differs from b's (a zero result keeps fmod's sign, where np.mod takes b's)."""
    res = np.fmod(a, b)
    return np.where((res != 0) & ((res < 0) != (b < 0)), res + b, res)


@kernel("Mod", "FloorDivide")
def _mod_floor_divide(node, args, transport):
    """Integers: NumPy's floor_divide / mod, which are Paddle's functors except x // 0 == x % 0 == 0
    (Paddle raises) and MIN // -1 == MIN (wraps). Floats: np.floor_divide is npy_divmod, the
    algorithm Paddle's FloorDivideFunctor copies; the modulo is Paddle's own formula."""
    a, b = args
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if node.op_type == "FloorDivide":
            out = np.floor_divide(a, b)
        elif np.issubdtype(a.dtype, np.integer):
            out = np.mod(a, b)
        else:
            out = _paddle_float_mod(a, b)
    return [np.asarray(out).astype(output_dtype(node), copy=False)]


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
