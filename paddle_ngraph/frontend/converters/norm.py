"""batch_norm (and sync_batch_norm), layer_norm, lrn (legacy), group_norm and instance_norm
(both IRs), with their grads.

group_norm and instance_norm are composed of reductions. Their statistics follow Paddle's CPU
kernels, which differ:
- group_norm: var = max(E[x^2] - mean^2, 0), y = (x - mean) / sqrt(var + eps) * scale + bias;
  Mean and Variance outputs are [N, groups], Variance is the variance itself.
- instance_norm: var = E[(x - mean)^2], inv_std = 1 / sqrt(var + eps); SavedMean and
  SavedVariance are [N * C], SavedVariance holds inv_std.
Their grads are the usual normalization gradient, computed from x and the saved statistics:
dx = inv_std * (g - mean(g) - x_hat * mean(g * x_hat)) over each normalized group, g = dy * scale.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.ops.collective import STATISTICS_BUCKET
from .helpers import constant
from .registry import converter


# --- batch_norm ----------------------------------------------------------------------------------
def _batch_norm_attrs(ctx, x: Output) -> dict:
    layout = ctx.attr("data_layout", "data_format", default="NCHW")
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ctx.fail(f"data layout {layout!r} is not supported (NCHW or NHWC)")
    return dict(epsilon=float(ctx.attr("epsilon", default=1e-5)),
                channel_axis=x.type.rank - 1 if layout == "NHWC" else 1)


def _uses_global_stats(ctx) -> bool:
    """Paddle normalizes with the running statistics in test mode (unless trainable_statistics)
    or when use_global_stats is set; otherwise with the batch statistics."""
    test_mode = ctx.attr("is_test", default=False) and not ctx.attr("trainable_statistics", default=False)
    return bool(test_mode or ctx.attr("use_global_stats", default=False))


# sync_batch_norm is Paddle's own (SyncBatchNorm.convert_sync_batchnorm): batch_norm over the batch of all
# ranks, converted by the same function (``_over_ranks``).
@converter("batch_norm", "pd_op.batch_norm", "pd_op.batch_norm_", "sync_batch_norm", "pd_op.sync_batch_norm_")
def batch_norm(ctx):
    x, scale, bias = ctx.input("X", "x"), ctx.input("Scale", "scale"), ctx.input("Bias", "bias")
    mean, variance = ctx.input("Mean", "mean"), ctx.input("Variance", "variance")
    if ctx.has_input("MomentumTensor", "momentum_tensor"):
        raise ctx.fail("momentum given as a tensor is not supported")
    attrs = _batch_norm_attrs(ctx, x)
    if _uses_global_stats(ctx):
        y = ops.BatchNormInference(x, scale, bias, mean, variance, **attrs).output()
        ctx.set_output(("Y", "out"), y)
        # The running statistics are left as they are.
        ctx.set_output(("MeanOut", "mean_out"), mean)
        ctx.set_output(("VarianceOut", "variance_out"), variance)
        return
    momentum = float(ctx.attr("momentum", default=0.9))
    if _over_ranks(ctx):
        sums = ops.BatchNormSums(x, **attrs).output()
        sums = ops.AllReduce(sums, reduction="sum", bucket=f"{STATISTICS_BUCKET}{ctx.output_name('Y', 'out')}",
                             name=f"allreduce_bn_sums_{ctx.output_name('Y', 'out')}").output(0)
        node = ops.BatchNormTrainingFromSums(x, scale, bias, mean, variance, sums, momentum=momentum, **attrs)
    else:
        node = ops.BatchNormTraining(x, scale, bias, mean, variance, momentum=momentum, **attrs)
    for i, slot in enumerate([("Y", "out"), ("MeanOut", "mean_out"), ("VarianceOut", "variance_out"),
                              ("SavedMean", "saved_mean"), ("SavedVariance", "saved_variance")]):
        ctx.set_output(slot, node.output(i))  # SavedVariance holds 1/sqrt(var + eps), as in Paddle


@converter("batch_norm_grad", "pd_op.batch_norm_grad", "sync_batch_norm_grad", "pd_op.sync_batch_norm_grad")
def batch_norm_grad(ctx):
    x, scale, delta = ctx.input("X", "x"), ctx.input("Scale", "scale"), ctx.input("Y@GRAD", "out_grad")
    attrs = _batch_norm_attrs(ctx, x)
    if _uses_global_stats(ctx):
        mean, variance = ctx.input("MeanOut", "mean_out"), ctx.input("VarianceOut", "variance_out")
        node = ops.BatchNormInferenceBackprop(x, scale, mean, variance, delta, **attrs)
    else:
        mean, inv_std = ctx.input("SavedMean", "saved_mean"), ctx.input("SavedVariance", "saved_variance")
        if _over_ranks(ctx):
            _batch_norm_grad_over_ranks(ctx, x, scale, mean, inv_std, delta, attrs)
            return
        node = ops.BatchNormTrainingBackprop(x, scale, mean, inv_std, delta, **attrs)
    _set_norm_grads(ctx, node)


def _over_ranks(ctx) -> bool:
    """Whether this training-mode batch norm takes its statistics over the batch of all ranks:
    every one under ``transpile(..., sync_batch_norm=True)``, Paddle's own sync_batch_norm when
    there are several ranks (in one process it is batch_norm)."""
    return ctx.session.sync_batch_norm or ("sync_batch_norm" in ctx.op_type and ctx.session.nranks > 1)


def _batch_norm_grad_over_ranks(ctx, x, scale, mean, inv_std, delta, attrs):
    """dx from the sums of the whole batch (an AllReduce of each rank's); dscale and dbias are this
    rank's own sums, as in Paddle's sync_batch_norm_grad: the gradient AllReduce averages them like
    any parameter gradient, which with a mean loss is what one process on the whole batch gets."""
    local = ops.BatchNormBackpropSums(x, mean, inv_std, delta, **attrs)
    if ctx.has_output("X@GRAD", "x_grad"):
        name = ctx.output_name("X@GRAD", "x_grad")
        sums = ops.AllReduce(local.output(0), reduction="sum", bucket=f"{STATISTICS_BUCKET}{name}",
                             name=f"allreduce_bn_grad_sums_{name}").output(0)
        dx = ops.BatchNormTrainingBackpropFromSums(x, scale, mean, inv_std, delta, sums, **attrs).output()
        ctx.set_output(("X@GRAD", "x_grad"), dx)
    for i, slot in ((1, ("Scale@GRAD", "scale_grad")), (2, ("Bias@GRAD", "bias_grad"))):
        if ctx.has_output(*slot):
            ctx.set_output(slot, local.output(i))


def _set_norm_grads(ctx, node):
    for i, slot in enumerate([("X@GRAD", "x_grad"), ("Scale@GRAD", "scale_grad"), ("Bias@GRAD", "bias_grad")]):
        if ctx.has_output(*slot):
            ctx.set_output(slot, node.output(i))


# --- layer_norm ----------------------------------------------------------------------------------
def _layer_norm_attrs(ctx) -> dict:
    return dict(begin_norm_axis=int(ctx.attr("begin_norm_axis", default=1)), epsilon=float(ctx.attr("epsilon", default=1e-5)))


def _scale_or(ctx, names, x: Output, begin: int, fill: float) -> Output:
    """The optional scale/bias input, or the identity value (ones/zeros) when the layer has none."""
    if ctx.has_input(*names):
        return ctx.input(*names)
    normalized = x.shape[begin:]
    if any(d < 0 for d in normalized):
        raise ctx.fail(f"layer_norm without {names[0]} needs static normalized dims, got {x.type}")
    return constant(np.full([int(np.prod(normalized))], fill), x.dtype)


@converter("layer_norm", "pd_op.layer_norm")
def layer_norm(ctx):
    x = ctx.input("X", "x")
    attrs = _layer_norm_attrs(ctx)
    begin = attrs["begin_norm_axis"]
    scale = _scale_or(ctx, ("Scale", "scale"), x, begin, 1.0)
    bias = _scale_or(ctx, ("Bias", "bias"), x, begin, 0.0)
    node = ops.LayerNorm(x, scale, bias, **attrs)
    for i, slot in enumerate([("Y", "out"), ("Mean", "mean"), ("Variance", "variance")]):
        ctx.set_output(slot, node.output(i))


@converter("layer_norm_grad", "pd_op.layer_norm_grad")
def layer_norm_grad(ctx):
    x = ctx.input("X", "x")
    attrs = _layer_norm_attrs(ctx)
    scale = _scale_or(ctx, ("Scale", "scale"), x, attrs["begin_norm_axis"], 1.0)
    node = ops.LayerNormBackprop(x, scale, ctx.input("Mean", "mean"), ctx.input("Variance", "variance"),
                                 ctx.input("Y@GRAD", "out_grad"), **attrs)
    _set_norm_grads(ctx, node)


# --- lrn (legacy only: Paddle 3 builds F.local_response_norm from pooling ops) ---------------------------
def _lrn_attrs(ctx) -> dict:
    if ctx.attr("data_format", default="AnyLayout") not in ("AnyLayout", "NCHW"):
        raise ctx.fail(f"data_format {ctx.attr('data_format')!r} is not supported (NCHW only)")
    return dict(size=int(ctx.attr("n")), k=float(ctx.attr("k")), alpha=float(ctx.attr("alpha")), beta=float(ctx.attr("beta")))


@converter("lrn")
def lrn(ctx):
    node = ops.LRN(ctx.input("X"), **_lrn_attrs(ctx))
    ctx.set_output("Out", node.output(0))
    ctx.set_output("MidOut", node.output(1))


@converter("lrn_grad")
def lrn_grad(ctx):
    node = ops.LRNBackprop(ctx.input("X"), ctx.input("Out"), ctx.input("MidOut"), ctx.input("Out@GRAD"), **_lrn_attrs(ctx))
    ctx.set_output("X@GRAD", node.output())


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


@converter("group_norm", "pd_op.group_norm")
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


@converter("group_norm_grad", "pd_op.group_norm_grad")
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


@converter("instance_norm", "pd_op.instance_norm")
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


@converter("instance_norm_grad", "pd_op.instance_norm_grad")
def instance_norm_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Y@GRAD", "y_grad")
    axes = _spatial_axes(ctx, x)
    mean = _per_instance(ctx.input("SavedMean", "saved_mean"), x)
    inv_std = _per_instance(ctx.input("SavedVariance", "saved_variance"), x)
    x_hat = ops.Multiply(ops.Subtract(x, mean).output(), inv_std).output()
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), _norm_grad(_scaled(ctx, delta), x_hat, inv_std, axes))
    _param_grads(ctx, x_hat, delta)
