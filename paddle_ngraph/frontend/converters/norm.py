"""batch_norm (and sync_batch_norm), layer_norm and lrn (legacy; PIR batch_norm_ and layer_norm), with their grads."""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.ops.collective import STATISTICS_BUCKET
from .helpers import constant


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


def layer_norm(ctx):
    x = ctx.input("X", "x")
    attrs = _layer_norm_attrs(ctx)
    begin = attrs["begin_norm_axis"]
    scale = _scale_or(ctx, ("Scale", "scale"), x, begin, 1.0)
    bias = _scale_or(ctx, ("Bias", "bias"), x, begin, 0.0)
    node = ops.LayerNorm(x, scale, bias, **attrs)
    for i, slot in enumerate([("Y", "out"), ("Mean", "mean"), ("Variance", "variance")]):
        ctx.set_output(slot, node.output(i))


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


def lrn(ctx):
    node = ops.LRN(ctx.input("X"), **_lrn_attrs(ctx))
    ctx.set_output("Out", node.output(0))
    ctx.set_output("MidOut", node.output(1))


def lrn_grad(ctx):
    node = ops.LRNBackprop(ctx.input("X"), ctx.input("Out"), ctx.input("MidOut"), ctx.input("Out@GRAD"), **_lrn_attrs(ctx))
    ctx.set_output("X@GRAD", node.output())
