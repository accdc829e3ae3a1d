"""Kernels of the indexing, stack and accuracy ops (ir/ops/tensor_ops.py) and of LambUpdate."""
from __future__ import annotations

import numpy as np

from ....errors import ExecutionError
from .registry import kernel


def _axis(node, rank: int) -> int:
    return int(node.attrs["axis"]) % rank


def _check_bounds(node, index: np.ndarray, size: int):
    # NumPy would wrap negative indices; Paddle rejects them, so do we.
    if index.size and (index.min() < 0 or index.max() >= size):
        raise ExecutionError(f"node '{node.name}' ({node.op_type}): index out of range [0, {size}): "
                             f"min {index.min()}, max {index.max()}")


@kernel("Gather")
def _gather(node, args, transport):
    x, index = args
    axis = _axis(node, x.ndim)
    _check_bounds(node, index, x.shape[axis])
    return [np.ascontiguousarray(np.take(x, index, axis=axis))]


@kernel("ScatterAdd")
def _scatter_add(node, args, transport):
    data, index, updates = args
    axis = _axis(node, data.ndim)
    _check_bounds(node, index, data.shape[axis])
    out = data.copy()
    # Move the scattered axis first; a 0-D index addresses one slice, which has no such axis.
    target = np.moveaxis(out, axis, 0)
    np.add.at(target, index, updates if index.ndim == 0 else np.moveaxis(updates, axis, 0))
    return [out]


@kernel("ScatterElementsAdd")
def _scatter_elements_add(node, args, transport):
    data, indices, updates = args
    axis = _axis(node, data.ndim)
    _check_bounds(node, indices, data.shape[axis])
    position = list(np.indices(indices.shape, sparse=True))
    position[axis] = indices
    out = data.copy()
    np.add.at(out, tuple(position), updates)
    return [out]


@kernel("ReplaceSlice")
def _replace_slice(node, args, transport):
    data, update = args
    index = [slice(None)] * data.ndim
    for axis, start, end in zip(node.attrs["axes"], node.attrs["starts"], node.attrs["ends"]):
        index[axis] = slice(start, end)
    out = data.copy()
    out[tuple(index)] = update
    return [out]


@kernel("Stack")
def _stack(node, args, transport):
    return [np.stack(args, axis=_axis(node, args[0].ndim + 1))]


@kernel("TopK")
def _top_k(node, args, transport):
    x = args[0]
    axis, k = _axis(node, x.ndim), int(node.attrs["k"])
    # A stable sort keeps the lower index first among equal values.
    keys = -x if node.attrs["largest"] else x
    order = np.argsort(keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, indices, axis=axis), indices]


@kernel("Accuracy")
def _accuracy(node, args, transport):
    indices, label = args
    n = indices.shape[0]
    label = label.reshape(-1)[:n]
    if np.any(label < 0):
        raise ExecutionError(f"node '{node.name}' (Accuracy): labels must be >= 0, got {label.min()}")
    correct = int(np.count_nonzero(np.any(indices == label[:, None], axis=1)))
    accuracy = np.float32(correct) / np.float32(n) if n else np.float32(0)
    return [np.asarray(accuracy, dtype=np.float32), np.asarray(correct, dtype=np.int32), np.asarray(n, dtype=np.int32)]


@kernel("LambUpdate")
def _lamb(node, args, transport):
    """Paddle's CPU lamb (phi/kernels/impl/lamb_kernel_impl.h), in its order of operations."""
    param, grad, lr, m1, m2, b1p, b2p = args
    a = node.attrs
    t = param.dtype.type
    beta1, beta2, eps, decay = t(a["beta1"]), t(a["beta2"]), t(a["epsilon"]), t(a["weight_decay"])
    m1_out = beta1 * m1 + (t(1) - beta1) * grad
    m2_out = beta2 * m2 + (t(1) - beta2) * grad * grad
    m1_hat = m1_out / (t(1) - b1p.reshape(()).astype(param.dtype))
    m2_hat = m2_out / (t(1) - b2p.reshape(()).astype(param.dtype))
    step = m1_hat / (np.sqrt(m2_hat) + eps) + decay * param
    ratio = t(1)
    # Paddle computes the norms only in these cases; otherwise both stay 0 and the ratio is 1.
    if decay > 0 or a["always_adapt"]:
        p_norm, s_norm = np.sqrt(np.sum(param * param)), np.sqrt(np.sum(step * step))
        if p_norm > 0 and s_norm > 0:
            ratio = t(p_norm / s_norm)
    p_out = param - lr.reshape(()).astype(param.dtype) * ratio * step
    return [p_out.astype(param.dtype), m1_out.astype(param.dtype), m2_out.astype(param.dtype),
            (b1p * beta1).astype(b1p.dtype), (b2p * beta2).astype(b2p.dtype)]
