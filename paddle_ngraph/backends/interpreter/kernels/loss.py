"""Kernels of the losses (ir/ops/loss.py): softmax cross-entropy and cross-entropy on probabilities,
with their backprops.

The formulas, and where it changes float32 results their order of operations, follow Paddle's
CPU kernels (paddle/phi/kernels/cpu and funcs), so that results match Paddle to about 1e-5.
Scalars are cast to the data's dtype first, as Paddle's ``static_cast<T>`` does.
"""
from __future__ import annotations

import numpy as np

from ....errors import ExecutionError
from .registry import kernel


@kernel("SoftmaxCrossEntropy")
def _softmax_ce(node, args, transport):
    logits, label = args
    axis = node.attrs["axis"] % logits.ndim
    # Paddle's softmax clips the shifted logits at -64 (phi's ValueClip): probabilities stay above
    # e^-64, a hard-label loss at most 64.
    shifted = np.maximum(logits - np.max(logits, axis=axis, keepdims=True), logits.dtype.type(-64))
    log_sum = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    log_softmax = shifted - log_sum
    softmax = np.exp(log_softmax).astype(logits.dtype)
    if node.attrs["soft_label"]:
        loss = -np.sum(label * log_softmax, axis=axis, keepdims=True)
    else:
        ignore = label == node.attrs["ignore_index"]
        safe = np.where(ignore, 0, label).astype(np.int64)
        if np.any((safe < 0) | (safe >= logits.shape[axis])):
            raise ExecutionError(f"label out of range [0, {logits.shape[axis]}) in node '{node.name}'")
        loss = -np.take_along_axis(log_softmax, safe, axis=axis)
        loss = np.where(ignore, 0, loss)
    return [softmax, loss.astype(logits.dtype)]


@kernel("SoftmaxCrossEntropyBackprop")
def _softmax_ce_bp(node, args, transport):
    softmax, label, loss_grad = args
    axis = node.attrs["axis"] % softmax.ndim
    if node.attrs["soft_label"]:
        grad = (softmax - label) * loss_grad
    else:
        ignore = label == node.attrs["ignore_index"]
        safe = np.where(ignore, 0, label).astype(np.int64)
        onehot = np.zeros_like(softmax)
        np.put_along_axis(onehot, safe, 1, axis=axis)
        grad = (softmax - onehot) * loss_grad
        grad = np.where(ignore, 0, grad)
    return [grad.astype(softmax.dtype)]


# --- cross-entropy on probabilities ------------------------------------------------------------------
def _tolerable_log(x):
    """Paddle's TolerableValue(log(x)): infinities become +-1e20."""
    bound = x.dtype.type(1e20)
    with np.errstate(divide="ignore"):
        return np.clip(np.log(x), -bound, bound)


def _hard_label(node, x, label):
    """(label index without ignored entries, ignored mask), both shaped like the loss."""
    ignore = label == node.attrs["ignore_index"]
    index = np.where(ignore, 0, label).astype(np.int64)
    if np.any((index < 0) | (index >= x.shape[-1])):
        raise ExecutionError(f"node '{node.name}' ({node.op_type}): label out of range [0, {x.shape[-1]})")
    return index, ignore


@kernel("CrossEntropy")
def _cross_entropy(node, args, transport):
    x, label = args
    if node.attrs["soft_label"]:
        return [(-(label * _tolerable_log(x)).sum(axis=-1, keepdims=True)).astype(x.dtype)]
    index, ignore = _hard_label(node, x, label)
    match = np.where(ignore, 0, np.take_along_axis(x, index, axis=-1)).astype(x.dtype)
    loss = np.where(ignore, 0, -_tolerable_log(match)).astype(x.dtype)
    return [loss, match]


@kernel("CrossEntropyBackprop")
def _cross_entropy_bp(node, args, transport):
    x, label, delta = args
    if node.attrs["soft_label"]:
        return [(-label * delta / x).astype(x.dtype)]
    index, ignore = _hard_label(node, x, label)
    match = np.take_along_axis(x, index, axis=-1)
    grad = np.zeros_like(x)
    np.put_along_axis(grad, index, np.where(ignore, 0, -delta / np.where(ignore, 1, match)), axis=-1)
    return [grad]
