"""Kernels of MatMul and MatMulBias (ir/ops/matmul.py)."""
from __future__ import annotations

import numpy as np

from .precision import compute_inputs
from .registry import kernel, output_dtype


@kernel("MatMul")
def _matmul(node, args, transport):
    a, b = compute_inputs(node, args)
    if node.attrs["transpose_a"] and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if node.attrs["transpose_b"] and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    return [np.asarray(np.matmul(a, b), dtype=output_dtype(node), order="C")]


@kernel("MatMulBias")
def _matmul_bias(node, args, transport):
    out = _matmul(node, args[:2], transport)[0] + args[2]
    if node.attrs["activation"] == "relu":
        out = np.maximum(out, 0)
    return [out.astype(output_dtype(node), copy=False)]
