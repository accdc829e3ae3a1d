"""Kernels of the normalizations (ir/ops/norm.py): batch norm (also from per-rank sums), layer norm,
LRN, and their backprops.

The formulas, and where it changes float32 results their order of operations, follow Paddle's
CPU kernels (paddle/phi/kernels/cpu and funcs), so that results match Paddle to about 1e-5.
Scalars are cast to the data's dtype first, as Paddle's ``static_cast<T>`` does.
"""
from __future__ import annotations

import numpy as np

from .registry import kernel


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
# The sums are float64 (ir/ops/norm.py): products are formed in the data type, as the single-rank
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
