"""Kernels of the convolution and its backprops (ir/ops/conv.py): im2col and one matrix product
per group, like Paddle's CPU conv.

The formulas, and where it changes float32 results their order of operations, follow Paddle's
CPU kernels (paddle/phi/kernels/cpu and funcs), so that results match Paddle to about 1e-5.
Scalars are cast to the data's dtype first, as Paddle's ``static_cast<T>`` does.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .precision import compute_inputs
from .registry import kernel


def window_count(size, window, stride, pad_begin, pad_end, dilation=1, ceil_mode=False):
    """Window positions along one dim; the nodes' types may leave it dynamic, the data does not."""
    span = size + pad_begin + pad_end - (dilation * (window - 1) + 1)
    return (span + (stride - 1 if ceil_mode else 0)) // stride + 1


def _conv_out_hw(node, data, filters):
    a = node.attrs
    return tuple(window_count(data.shape[2 + d], filters.shape[2 + d], a["strides"][d], a["pads_begin"][d],
                           a["pads_end"][d], a["dilations"][d]) for d in range(2))


def _pad_hw(x, pads_begin, pads_end):
    return np.pad(x, ((0, 0), (0, 0), (pads_begin[0], pads_end[0]), (pads_begin[1], pads_end[1])))


def _columns(node, padded, filter_hw, out_hw):
    """Windows of the padded data as (N, C, KH, KW, OH, OW), a strided view (no copy)."""
    n, c = padded.shape[:2]
    sn, sc, sh, sw = padded.strides
    (dh, dw), (th, tw) = node.attrs["dilations"], node.attrs["strides"]
    return as_strided(padded, (n, c, *filter_hw, *out_hw), (sn, sc, sh * dh, sw * dw, sh * th, sw * tw), writeable=False)


def _grouped(node, data, filters, out_hw):
    """Data columns as (N, groups, C/g*KH*KW, OH*OW) and filters as (groups, O/g, C/g*KH*KW)."""
    g = int(node.attrs["groups"])
    padded = _pad_hw(data, node.attrs["pads_begin"], node.attrs["pads_end"])
    cols = _columns(node, padded, filters.shape[2:], out_hw)
    n = data.shape[0]
    cols = cols.reshape(n, g, -1, out_hw[0] * out_hw[1])
    return cols, filters.reshape(g, filters.shape[0] // g, -1)


@kernel("Convolution")
def _convolution(node, args, transport):
    data, filters = compute_inputs(node, args)
    out_hw = _conv_out_hw(node, data, filters)
    cols, w = _grouped(node, data, filters, out_hw)
    out = np.matmul(w[None], cols)  # (N, g, O/g, OH*OW)
    return [out.reshape(data.shape[0], filters.shape[0], *out_hw).astype(data.dtype)]


def _delta_grouped(node, delta):
    g = int(node.attrs["groups"])
    n, o, oh, ow = delta.shape
    return delta.reshape(n, g, o // g, oh * ow)


@kernel("ConvolutionBackpropData")
def _convolution_bp_data(node, args, transport):
    data, filters, delta = compute_inputs(node, args)
    g = int(node.attrs["groups"])
    (pt, pl), (pb, pr) = node.attrs["pads_begin"], node.attrs["pads_end"]
    (dh, dw), (sh, sw) = node.attrs["dilations"], node.attrs["strides"]
    n, c, h, w = data.shape
    kh, kw = filters.shape[2:]
    oh, ow = delta.shape[2:]
    wg = filters.reshape(g, filters.shape[0] // g, -1)
    dcols = np.matmul(np.swapaxes(wg, 1, 2)[None], _delta_grouped(node, delta))
    dcols = dcols.reshape(n, c, kh, kw, oh, ow)
    # col2im: add each kernel tap's contribution back to the positions it read.
    padded = np.zeros((n, c, h + pt + pb, w + pl + pr), dtype=data.dtype)
    for i in range(kh):
        for j in range(kw):
            padded[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += dcols[:, :, i, j]
    return [np.ascontiguousarray(padded[:, :, pt:pt + h, pl:pl + w])]


@kernel("ConvolutionBackpropFilter")
def _convolution_bp_filter(node, args, transport):
    data, filters, delta = compute_inputs(node, args)
    cols, _ = _grouped(node, data, filters, delta.shape[2:])
    # Sum over the batch of delta[n] @ columns[n]^T, per group.
    grad = np.matmul(_delta_grouped(node, delta), np.swapaxes(cols, 2, 3)).sum(axis=0)
    return [grad.reshape(filters.shape).astype(data.dtype)]
