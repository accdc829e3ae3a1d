"""Kernels of the indexing ops (ir/ops/indexing.py): Slice, Gather, the scatters, ReplaceSlice,
TopK, Accuracy, and the embedding lookup."""
from __future__ import annotations

import numpy as np

from ....errors import ExecutionError
from .registry import kernel


@kernel("Slice")
def _slice(node, args, transport):
    index = [slice(None)] * args[0].ndim
    for axis, start, end in zip(node.attrs["axes"], node.attrs["starts"], node.attrs["ends"]):
        index[axis] = slice(start, end)
    return [np.ascontiguousarray(args[0][tuple(index)])]


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


# --- embedding --------------------------------------------------------------------------------------
def _checked_ids(node, ids, rows):
    """Ids that index the table, padding_idx included; any other id must be in [0, rows)."""
    flat = ids.reshape(-1).astype(np.int64)
    bad = (flat < 0) | (flat >= rows)
    if np.any(bad):
        raise ExecutionError(f"node '{node.name}' ({node.op_type}): id {flat[bad][0]} out of range [0, {rows})")
    return flat


@kernel("EmbeddingLookup")
def _embedding(node, args, transport):
    weight, ids = args
    flat = _checked_ids(node, ids, weight.shape[0])
    out = weight[flat]
    out[flat == node.attrs["padding_idx"]] = 0
    return [out.reshape(ids.shape + (weight.shape[1],))]


@kernel("EmbeddingLookupBackprop")
def _embedding_bp(node, args, transport):
    weight, ids, delta = args
    flat = _checked_ids(node, ids, weight.shape[0])
    rows = delta.reshape(-1, weight.shape[1])
    keep = flat != node.attrs["padding_idx"]
    grad = np.zeros_like(weight)
    np.add.at(grad, flat[keep], rows[keep])
    return [grad]
