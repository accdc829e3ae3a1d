"""Kernels of the reductions and their backprops, and of CumSum (ir/ops/reduction.py)."""
from __future__ import annotations

import numpy as np

from .registry import kernel, output_dtype


_REDUCE = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min,
           "ReduceProd": np.prod}


@kernel(*_REDUCE)
def _reduce(node, args, transport):
    x = args[0]
    axes = tuple(node.reduced_axes()) if x.ndim else None
    out = _REDUCE[node.op_type](x, axis=axes, keepdims=node.attrs["keep_dims"])
    return [np.asarray(out, dtype=output_dtype(node))]


@kernel("ReduceMeanBackprop")
def _reduce_mean_bp(node, args, transport):
    x, delta = args
    axes = node.reduced_axes() if x.ndim else []
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    grad = np.broadcast_to(np.reshape(delta, kept), x.shape) / x.dtype.type(count)
    return [np.ascontiguousarray(grad, dtype=x.dtype)]


@kernel("ReduceSumBackprop")
def _reduce_sum_bp(node, args, transport):
    x, delta = args
    axes = node.reduced_axes() if x.ndim else []
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    return [np.ascontiguousarray(np.broadcast_to(np.reshape(delta, kept), x.shape), dtype=x.dtype)]


@kernel("CumSum")
def _cumsum(node, args, transport):
    """np.cumsum in x's dtype (NumPy would widen int32 to int64), along the axis or its reverse;
    exclusive: shifted by one along the axis, with 0 first."""
    x = args[0]
    if x.size == 0:
        return [np.array(x, dtype=output_dtype(node))]
    axis = int(node.attrs["axis"]) % x.ndim
    if node.attrs["reverse"]:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if node.attrs["exclusive"]:
        head = np.zeros_like(np.take(out, [0], axis=axis))
        out = np.concatenate([head, np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis=axis)
    if node.attrs["reverse"]:
        out = np.flip(out, axis)
    return [np.ascontiguousarray(out, dtype=output_dtype(node))]
