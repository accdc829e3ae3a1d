"""Kernels of the nn ops: GELU, convolution, pooling, normalization, LRN, dropout, embedding, cross-entropy.

The formulas, and where it changes float32 results their order of operations,
follow Paddle's CPU kernels (paddle/phi/kernels/cpu and funcs), so that
results match Paddle to about 1e-5. Scalars are cast to the data's dtype
first, as Paddle's ``static_cast<T>`` does.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided
from scipy.special import erf

from ....errors import ExecutionError
from .precision import compute_inputs
from .registry import kernel

# --- GELU ---------------------------------------------------------------------------------------------
_GELU_ALPHA = math.sqrt(2.0 / math.pi)  # M_2_SQRTPI * M_SQRT1_2
_GELU_CONSTANT = 0.044715


@kernel("Gelu")
def _gelu(node, args, transport):
    x = args[0]
    t = x.dtype.type
    if node.attrs["approximate"]:
        inner = np.tanh(t(_GELU_ALPHA) * (x + t(_GELU_CONSTANT) * x * x * x))
    else:
        inner = erf(x * t(math.sqrt(0.5)))
    return [(x * t(0.5) * (t(1) + inner)).astype(x.dtype)]


@kernel("GeluBackprop")
def _gelu_bp(node, args, transport):
    x, delta = args
    t = x.dtype.type
    if node.attrs["approximate"]:
        alpha = t(_GELU_ALPHA)
        beta = alpha * t(_GELU_CONSTANT) * t(3)
        x_sq = x * x
        tanh_out = np.tanh(alpha * x * (t(1) + t(_GELU_CONSTANT) * x_sq))
        slope = (t(1) - tanh_out * tanh_out) * (alpha + beta * x_sq)
        grad = delta * t(0.5) * (t(1) + tanh_out + x * slope)
    else:
        first = t(0.5) * (t(1) + erf(x * t(math.sqrt(0.5))))
        second = t(1 / math.sqrt(2 * math.pi)) * x * np.exp(t(-0.5) * x * x)
        grad = delta * (first + second)
    return [grad.astype(x.dtype)]


def _out_size(size, window, stride, pad_begin, pad_end, dilation=1, ceil_mode=False):
    """Window positions along one dim; the nodes' types may leave it dynamic, the data does not."""
    span = size + pad_begin + pad_end - (dilation * (window - 1) + 1)
    return (span + (stride - 1 if ceil_mode else 0)) // stride + 1


# --- convolution: im2col + one matrix product per group, like Paddle's CPU conv -----------------
def _conv_out_hw(node, data, filters):
    a = node.attrs
    return tuple(_out_size(data.shape[2 + d], filters.shape[2 + d], a["strides"][d], a["pads_begin"][d],
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


# --- pooling: one window at a time, as Paddle's Pool2dFunctor ---------------------------------------
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
    return tuple(_out_size(in_hw[d], a["window"][d], a["strides"][d], a["pads_begin"][d], a["pads_end"][d],
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


# --- batch normalization ----------------------------------------------------------------------------
def _per_channel(node, x):
    """(axes to reduce, shape that broadcasts a per-channel vector against x, elements per channel)."""
    axis = int(node.attrs["channel_axis"])
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return tuple(i for i in range(x.ndim) if i != axis), shape, x.size // max(x.shape[axis], 1)


def _inv_std(variance, epsilon):
    t = variance.dtype.type
    return t(1) / np.sqrt(variance + t(epsilon))


def _normalize(x, scale, bias, mean, inv_std, shape):
    # Paddle folds the statistics into one scale and bias per channel.
    new_scale = inv_std * scale
    new_bias = bias - mean * inv_std * scale
    return (x * new_scale.reshape(shape) + new_bias.reshape(shape)).astype(x.dtype)


def _training_outputs(node, x, scale, bias, running_mean, running_var, mean, variance, shape):
    """A training batch norm's outputs from its batch statistics (the single-rank kernel's, or
    those of all ranks' sums): y, the updated running statistics, the saved mean and inv_std."""
    t = x.dtype.type
    inv_std = _inv_std(variance, node.attrs["epsilon"])
    momentum = t(node.attrs["momentum"])
    mean_out = running_mean * momentum + mean * (t(1) - momentum)
    var_out = running_var * momentum + variance * (t(1) - momentum)
    y = _normalize(x, scale, bias, mean, inv_std, shape)
    stats = running_mean.dtype
    return [y, mean_out.astype(stats), var_out.astype(stats), mean.astype(stats), inv_std.astype(stats)]


@kernel("BatchNormTraining")
def _batch_norm_training(node, args, transport):
    x, scale, bias, running_mean, running_var = args
    axes, shape, count = _per_channel(node, x)
    t = x.dtype.type
    mean = x.sum(axis=axes) / t(count)
    centered = x - mean.reshape(shape)
    variance = (centered * centered).sum(axis=axes) / t(count)
    return _training_outputs(node, x, scale, bias, running_mean, running_var, mean, variance, shape)


@kernel("BatchNormInference")
def _batch_norm_inference(node, args, transport):
    x, scale, bias, mean, variance = args
    _, shape, _ = _per_channel(node, x)
    return [_normalize(x, scale, bias, mean, _inv_std(variance, node.attrs["epsilon"]), shape)]


def _batch_norm_param_grads(node, x, mean, inv_std, delta):
    axes, shape, _ = _per_channel(node, x)
    x_hat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
    return delta.sum(axis=axes), (delta * x_hat).sum(axis=axes)


@kernel("BatchNormTrainingBackprop")
def _batch_norm_training_bp(node, args, transport):
    x, scale, mean, inv_std, delta = args
    _, shape, count = _per_channel(node, x)
    t = x.dtype.type
    dbias, dscale = _batch_norm_param_grads(node, x, mean, inv_std, delta)
    coeff = (scale * inv_std / t(count)).reshape(shape)
    centered = x - mean.reshape(shape)
    dx = coeff * (delta * t(count) - dbias.reshape(shape) - centered * inv_std.reshape(shape) * dscale.reshape(shape))
    return [dx.astype(x.dtype), dscale.astype(scale.dtype), dbias.astype(scale.dtype)]


@kernel("BatchNormInferenceBackprop")
def _batch_norm_inference_bp(node, args, transport):
    x, scale, mean, variance, delta = args
    _, shape, _ = _per_channel(node, x)
    inv_std = _inv_std(variance, node.attrs["epsilon"])
    dbias, dscale = _batch_norm_param_grads(node, x, mean, inv_std, delta)
    dx = delta * (scale * inv_std).reshape(shape)
    return [dx.astype(x.dtype), dscale.astype(scale.dtype), dbias.astype(scale.dtype)]


# --- batch normalization over several ranks -----------------------------------------------------------
# The sums are float64 (ir/ops/nn_extra.py): products are formed in the data type, as the single-rank
# kernels form them, and accumulated in float64; the statistics are rounded to the data type once.
@kernel("BatchNormSums")
def _batch_norm_sums(node, args, transport):
    x = args[0]
    axes, shape, count = _per_channel(node, x)
    wide = x.astype(np.float64)
    return [np.stack([wide.sum(axis=axes), (x * x).astype(np.float64).sum(axis=axes),
                      np.full(x.shape[int(node.attrs["channel_axis"])], float(count))])]


def _statistics_from_sums(sums, dtype):
    """(mean, biased variance) in ``dtype`` from float64 [sum, sum of squares, count]."""
    count = sums[2]
    mean = sums[0] / count
    variance = np.maximum(sums[1] / count - mean * mean, 0.0)  # rounding can make it -0.0
    return mean.astype(dtype), variance.astype(dtype)


@kernel("BatchNormTrainingFromSums")
def _batch_norm_training_from_sums(node, args, transport):
    x, scale, bias, running_mean, running_var, sums = args
    _, shape, _ = _per_channel(node, x)
    mean, variance = _statistics_from_sums(sums, x.dtype)
    return _training_outputs(node, x, scale, bias, running_mean, running_var, mean, variance, shape)


@kernel("BatchNormBackpropSums")
def _batch_norm_backprop_sums(node, args, transport):
    x, mean, inv_std, delta = args
    axes, shape, count = _per_channel(node, x)
    x_hat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
    sums = np.stack([delta.astype(np.float64).sum(axis=axes), (delta * x_hat).astype(np.float64).sum(axis=axes),
                     np.full(mean.shape[0], float(count))])
    return [sums, sums[1].astype(mean.dtype), sums[0].astype(mean.dtype)]


@kernel("BatchNormTrainingBackpropFromSums")
def _batch_norm_training_bp_from_sums(node, args, transport):
    x, scale, mean, inv_std, delta, sums = args
    _, shape, _ = _per_channel(node, x)
    t = x.dtype.type
    dbias, dscale, count = (row.astype(x.dtype) for row in sums)
    # The single-rank backprop's formula and order of operations, with the whole batch's sums.
    coeff = (scale * inv_std / count).reshape(shape)
    centered = x - mean.reshape(shape)
    dx = coeff * (delta * count.reshape(shape) - dbias.reshape(shape)
                  - centered * inv_std.reshape(shape) * dscale.reshape(shape))
    return [dx.astype(x.dtype)]


# --- layer normalization ------------------------------------------------------------------------------
def _rows(node, x):
    """x as (rows, normalized elements) and the shape of the statistics."""
    begin = int(node.attrs["begin_norm_axis"])
    return x.reshape(int(np.prod(x.shape[:begin])), -1), x.shape[:begin]


@kernel("LayerNorm")
def _layer_norm(node, args, transport):
    x, scale, bias = args
    x2, stats_shape = _rows(node, x)
    t = x.dtype.type
    mean = x2.sum(axis=1) / t(x2.shape[1])
    centered = x2 - mean[:, None]
    variance = (centered * centered).sum(axis=1) / t(x2.shape[1])
    y = centered / np.sqrt(variance + t(node.attrs["epsilon"]))[:, None] * scale + bias
    return [y.reshape(x.shape).astype(x.dtype), mean.reshape(stats_shape), variance.reshape(stats_shape)]


@kernel("LayerNormBackprop")
def _layer_norm_bp(node, args, transport):
    x, scale, mean, variance, delta = args
    x2, _ = _rows(node, x)
    dy = delta.reshape(x2.shape)
    t = x.dtype.type
    std = np.sqrt(variance.reshape(-1) + t(node.attrs["epsilon"]))[:, None]
    x_hat = (x2 - mean.reshape(-1)[:, None]) / std
    dbias, dscale = dy.sum(axis=0), (dy * x_hat).sum(axis=0)
    dy_scaled = dy * scale
    width = t(x2.shape[1])
    dx = (dy_scaled - dy_scaled.sum(axis=1, keepdims=True) / width
          - x_hat * (dy_scaled * x_hat).sum(axis=1, keepdims=True) / width) / std
    return [dx.reshape(x.shape).astype(x.dtype), dscale.astype(x.dtype), dbias.astype(x.dtype)]


# --- local response normalization (Paddle's LRNFunctor / LRNGradFunctor) ------------------------------
def _channel_offsets(size):
    """Channel offsets of the (odd) window around a channel."""
    return range(-(size // 2), size // 2 + 1)


def _shifted(v, offset, fill=0):
    """v[:, c + offset] at channel c, ``fill`` where c + offset is out of range."""
    out = np.full_like(v, fill)
    c = v.shape[1]
    if offset >= 0:
        out[:, :c - offset] = v[:, offset:]
    else:
        out[:, -offset:] = v[:, :c + offset]
    return out


@kernel("LRN")
def _lrn(node, args, transport):
    x = args[0]
    a = node.attrs
    t = x.dtype.type
    mid = np.full_like(x, a["k"])
    for offset in _channel_offsets(int(a["size"])):
        mid += t(a["alpha"]) * _shifted(x * x, offset)
    return [(x * mid ** t(-a["beta"])).astype(x.dtype), mid]


@kernel("LRNBackprop")
def _lrn_bp(node, args, transport):
    x, out, mid, delta = args
    a = node.attrs
    t = x.dtype.type
    ratio = t(-2) * t(a["alpha"]) * t(a["beta"])
    grad = mid ** t(-a["beta"]) * delta
    # The window is symmetric (size is odd), so the channels whose window holds x are x's own window.
    for offset in _channel_offsets(int(a["size"])):
        # Out-of-range channels contribute ratio * 0 * 0 * x / 1 = 0.
        ch_delta, ch_out, ch_mid = _shifted(delta, offset), _shifted(out, offset), _shifted(mid, offset, fill=1)
        grad += ratio * ch_delta * ch_out * x / ch_mid
    return [grad.astype(x.dtype)]


# --- dropout ----------------------------------------------------------------------------------------
_DROPOUT_RNG = np.random.default_rng()


@kernel("DropoutMask")
def _dropout_mask(node, args, transport):
    seed = node.attrs["seed"]
    rng = _DROPOUT_RNG if seed is None else np.random.default_rng(int(seed))
    # Paddle drops an element when its uniform draw is below the probability.
    return [(rng.random(args[0].shape) >= float(node.attrs["prob"])).astype(np.uint8)]


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
