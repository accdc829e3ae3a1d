"""Kernels of max and average pooling and their backprops (ir/ops/pool.py): one window at a time,
as Paddle's Pool2dFunctor."""
from __future__ import annotations

import numpy as np

from .conv import window_count
from .registry import kernel


def _pool_windows(node, in_hw, out_hw):
    """Yields (oh, ow, h0, h1, w0, w1, count): window bounds clipped to the data, and the divisor
    of an average (clipped size if exclusive or adaptive, else the window clipped to the padded data)."""
    a = node.attrs
    exclusive = a["adaptive"] or a.get("exclusive", True)  # MaxPool has no divisor and no such attribute
    ranges = []
    for d in range(2):
        size, out = in_hw[d], out_hw[d]
        bounds = []
        for i in range(out):
            if a["adaptive"]:
                start, end = (i * size) // out, -((-(i + 1) * size) // out)
                bounds.append((start, end, end - start))
            else:
                start = i * a["strides"][d] - a["pads_begin"][d]
                end = min(start + a["window"][d], size + a["pads_end"][d])
                bounds.append((max(start, 0), min(end, size), end - start))
        ranges.append(bounds)
    for oh, (h0, h1, hn) in enumerate(ranges[0]):
        for ow, (w0, w1, wn) in enumerate(ranges[1]):
            count = (h1 - h0) * (w1 - w0) if exclusive else hn * wn
            yield oh, ow, h0, h1, w0, w1, count


def _pool_out_hw(node, in_hw):
    a = node.attrs
    if a["adaptive"]:
        return tuple(a["window"])
    return tuple(window_count(in_hw[d], a["window"][d], a["strides"][d], a["pads_begin"][d], a["pads_end"][d],
                           ceil_mode=a["ceil_mode"]) for d in range(2))


@kernel("MaxPool", "AvgPool")
def _pool(node, args, transport):
    x = args[0]
    out = np.zeros(x.shape[:2] + _pool_out_hw(node, x.shape[2:]), x.dtype)
    for oh, ow, h0, h1, w0, w1, count in _pool_windows(node, x.shape[2:], out.shape[2:]):
        window = x[:, :, h0:h1, w0:w1]
        if node.op_type == "MaxPool":
            out[:, :, oh, ow] = window.max(axis=(2, 3))
        else:
            out[:, :, oh, ow] = window.sum(axis=(2, 3)) / x.dtype.type(count)
    return [out]


@kernel("MaxPoolBackprop", "AvgPoolBackprop")
def _pool_bp(node, args, transport):
    x, delta = args
    grad = np.zeros_like(x)
    n_idx, c_idx = np.indices(x.shape[:2])
    for oh, ow, h0, h1, w0, w1, count in _pool_windows(node, x.shape[2:], delta.shape[2:]):
        d = delta[:, :, oh, ow]
        if node.op_type == "MaxPoolBackprop":
            first_max = x[:, :, h0:h1, w0:w1].reshape(x.shape[0], x.shape[1], -1).argmax(axis=2)
            grad[n_idx, c_idx, h0 + first_max // (w1 - w0), w0 + first_max % (w1 - w0)] += d
        else:
            # Paddle's Pool2dGradFunctor scales by a float32 1/count, whatever the dtype.
            grad[:, :, h0:h1, w0:w1] += (x.dtype.type(np.float32(1.0 / count)) * d)[:, :, None, None]
    return [grad]
