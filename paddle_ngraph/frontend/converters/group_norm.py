"""group_norm and instance_norm (both IRs), with their grads, composed of reductions.

Their statistics follow Paddle's CPU kernels, which differ:
- group_norm: var = max(E[x^2] - mean^2, 0), y = (x - mean) / sqrt(var + eps) * scale + bias;
  Mean and Variance outputs are [N, groups], Variance is the variance itself.
- instance_norm: var = E[(x - mean)^2], inv_std = 1 / sqrt(var + eps); SavedMean and
  SavedVariance are [N * C], SavedVariance holds inv_std.
The grads are the usual normalization gradient, computed from x and the saved statistics:
dx = inv_std * (g - mean(g) - x_hat * mean(g * x_hat)) over each normalized group, g = dy * scale.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from .helpers import constant


def _epsilon(ctx, dtype) -> Output:
    # Paddle's epsilon attribute is a float (float32) cast to the data type.
    return constant(np.float32(ctx.attr("epsilon", default=1e-5)), dtype)


def _inv_std(ctx, variance: Output) -> Output:
    std = ops.Sqrt(ops.Add(variance, _epsilon(ctx, variance.dtype)).output()).output()
    return ops.Divide(constant(1, variance.dtype), std).output()


def _channel_param(ctx, names, x_nc: Output) -> Output | None:
    """Scale or bias [C] shaped to broadcast over channel-first x; None when absent."""
    if not ctx.has_input(*names):
        return None
    return ops.Reshape(ctx.input(*names), shape=[-1] + [1] * (x_nc.type.rank - 2)).output()


def _affine(ctx, x_hat: Output) -> Output:
    scale = _channel_param(ctx, ("Scale", "scale"), x_hat)
    bias = _channel_param(ctx, ("Bias", "bias"), x_hat)
    y = x_hat if scale is None else ops.Multiply(x_hat, scale).output()
    return y if bias is None else ops.Add(y, bias).output()


def _scaled(ctx, delta: Output) -> Output:
    scale = _channel_param(ctx, ("Scale", "scale"), delta)
    return delta if scale is None else ops.Multiply(delta, scale).output()


def _norm_grad(g: Output, x_hat: Output, inv_std: Output, axes: list[int], subtract_mean: bool = True) -> Output:
    """dx from g = dy * scale and x_hat (same shape), normalized over ``axes``."""
    mean_gx = ops.ReduceMean(ops.Multiply(g, x_hat).output(), axes=axes, keep_dims=True).output()
    if subtract_mean:
        g = ops.Subtract(g, ops.ReduceMean(g, axes=axes, keep_dims=True).output()).output()
    return ops.Multiply(ops.Subtract(g, ops.Multiply(x_hat, mean_gx).output()).output(), inv_std).output()


def _param_grads(ctx, x_hat: Output, delta: Output):
    """Scale and bias grads: sums over every axis but the channel axis 1."""
    axes = [0] + list(range(2, delta.type.rank))
    if ctx.has_output("Scale@GRAD", "scale_grad"):
        grad = ops.ReduceSum(ops.Multiply(delta, x_hat).output(), axes=axes, keep_dims=False).output()
        ctx.set_output(("Scale@GRAD", "scale_grad"), grad)
    if ctx.has_output("Bias@GRAD", "bias_grad"):
        ctx.set_output(("Bias@GRAD", "bias_grad"), ops.ReduceSum(delta, axes=axes, keep_dims=False).output())


# --- group_norm ------------------------------------------------------------------------------------------
def _channels_first(ctx):
    """(to_nc, from_nc): transposes for NHWC-style layouts (channel last), else identity."""
    layout = ctx.attr("data_layout", "data_format", default="NCHW")
    if layout not in ("NCHW", "NHWC", "NCL", "NLC", "NCDHW", "NDHWC", "AnyLayout"):
        raise ctx.fail(f"data layout {layout!r} is not supported")
    if layout not in ("NHWC", "NLC", "NDHWC"):
        return (lambda v: v), (lambda v: v)

    def to_nc(v):
        r = v.type.rank
        return ops.Transpose(v, perm=[0, r - 1] + list(range(1, r - 1))).output()

    def from_nc(v):
        r = v.type.rank
        return ops.Transpose(v, perm=[0] + list(range(2, r)) + [1]).output()
    return to_nc, from_nc


def _grouped(ctx, x: Output) -> tuple[Output, list[int]]:
    """x (channel first) as [N, groups, C/groups * spatial], and x's shape with -1 for N."""
    groups = int(ctx.attr("groups"))
    channels = x.shape[1]
    if x.type.rank < 3 or any(d < 0 for d in x.shape[1:]):
        raise ctx.fail(f"group_norm needs an input of rank >= 3 with static non-batch dims, got {x.type}")
    if groups <= 0 or channels % groups:
        raise ctx.fail(f"{channels} channels do not split into {groups} groups")
    per_group = channels // groups * int(np.prod(x.shape[2:]))
    return ops.Reshape(x, shape=[-1, groups, per_group]).output(), [-1] + list(x.shape[1:])


def _group_stats(ctx, xg: Output) -> tuple[Output, Output]:
    """Paddle's one-pass mean and variance per group (keep_dims)."""
    mean = ops.ReduceMean(xg, axes=[2], keep_dims=True).output()
    square_mean = ops.ReduceMean(ops.Multiply(xg, xg).output(), axes=[2], keep_dims=True).output()
    variance = ops.Subtract(square_mean, ops.Multiply(mean, mean).output()).output()
    return mean, ops.Maximum(variance, constant(0, xg.dtype)).output()


def group_norm(ctx):
    to_nc, from_nc = _channels_first(ctx)
    x = to_nc(ctx.input("X", "x"))
    xg, shape = _grouped(ctx, x)
    mean, variance = _group_stats(ctx, xg)
    x_hat = ops.Multiply(ops.Subtract(xg, mean).output(), _inv_std(ctx, variance)).output()
    ctx.set_output(("Y", "y"), from_nc(_affine(ctx, ops.Reshape(x_hat, shape=shape).output())))
    groups = xg.shape[1]
    ctx.set_output(("Mean", "mean"), ops.Reshape(mean, shape=[-1, groups]).output())
    ctx.set_output(("Variance", "variance"), ops.Reshape(variance, shape=[-1, groups]).output())


def group_norm_grad(ctx):
    to_nc, from_nc = _channels_first(ctx)
    x, delta = to_nc(ctx.input("X", "x")), to_nc(ctx.input("Y@GRAD", "y_grad"))
    xg, shape = _grouped(ctx, x)
    grouped = [-1] + list(xg.shape[1:])
    mean = ops.Reshape(ctx.input("Mean", "mean"), shape=grouped[:2] + [1]).output()
    inv_std = _inv_std(ctx, ops.Reshape(ctx.input("Variance", "variance"), shape=grouped[:2] + [1]).output())
    xg_hat = ops.Multiply(ops.Subtract(xg, mean).output(), inv_std).output()
    if ctx.has_output("X@GRAD", "x_grad"):
        g = ops.Reshape(_scaled(ctx, delta), shape=grouped).output()
        # Paddle's CPU group_norm_grad sums the mean(dy * scale) term only when there is a Scale
        # input (dp_bias); without one it leaves that term out, and so do we, to match its training.
        dx = _norm_grad(g, xg_hat, inv_std, [2], subtract_mean=ctx.has_input("Scale", "scale"))
        dx = ops.Reshape(dx, shape=shape).output()
        ctx.set_output(("X@GRAD", "x_grad"), from_nc(dx))
    _param_grads(ctx, ops.Reshape(xg_hat, shape=shape).output(), delta)


# --- instance_norm (channel first) -------------------------------------------------------------------------
def _spatial_axes(ctx, x: Output) -> list[int]:
    if x.type.rank < 3:
        raise ctx.fail(f"instance_norm needs an input of rank >= 3, got {x.type}")
    return list(range(2, x.type.rank))


def _per_instance(value: Output, like: Output) -> Output:
    """A [N * C] statistic as [N, C, 1, ...] to broadcast over like."""
    return ops.Reshape(value, shape=[-1, like.shape[1]] + [1] * (like.type.rank - 2)).output()


def instance_norm(ctx):
    x = ctx.input("X", "x")
    axes = _spatial_axes(ctx, x)
    mean = ops.ReduceMean(x, axes=axes, keep_dims=True).output()
    centred = ops.Subtract(x, mean).output()
    variance = ops.ReduceMean(ops.Multiply(centred, centred).output(), axes=axes, keep_dims=True).output()
    inv_std = _inv_std(ctx, variance)
    ctx.set_output(("Y", "y"), _affine(ctx, ops.Multiply(centred, inv_std).output()))
    ctx.set_output(("SavedMean", "saved_mean"), ops.Reshape(mean, shape=[-1]).output())
    ctx.set_output(("SavedVariance", "saved_variance"), ops.Reshape(inv_std, shape=[-1]).output())


def instance_norm_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Y@GRAD", "y_grad")
    axes = _spatial_axes(ctx, x)
    mean = _per_instance(ctx.input("SavedMean", "saved_mean"), x)
    inv_std = _per_instance(ctx.input("SavedVariance", "saved_variance"), x)
    x_hat = ops.Multiply(ops.Subtract(x, mean).output(), inv_std).output()
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), _norm_grad(_scaled(ctx, delta), x_hat, inv_std, axes))
    _param_grads(ctx, x_hat, delta)
