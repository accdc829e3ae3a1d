"""Reductions and their grads: reduce_mean/reduce_sum (legacy) and mean/sum (PIR), the mean of all
elements (legacy ``mean``, PIR ``mean_all``), and the norms gradient clipping emits
(squared_l2_norm, clip_by_norm; after Paddle's clip_by_norm_kernel_impl.h and
squared_l2_norm_*_impl.h).
"""
from __future__ import annotations

from ...ir import ops
from . import arith as a
from .arith import dout_input as _dout, set_dx as _set_dx, set_out as _set_out, x_input as _x
from .registry import converter


def _axes_keep(ctx):
    """Legacy: attrs dim/keep_dim/reduce_all; PIR: axis operand (full_int_array) and keepdim."""
    if ctx.has_input("axis"):
        axes = [int(a) for a in ctx.const_input("axis").reshape(-1)]
    else:
        axes = [int(a) for a in ctx.attr("dim", "axis", default=[])]
    if ctx.attr("reduce_all", default=False):
        axes = []
    return axes, bool(ctx.attr("keep_dim", "keepdim", default=False))


@converter("reduce_mean", "pd_op.mean")
def reduce_mean(ctx):
    axes, keep = _axes_keep(ctx)
    ctx.set_output(("Out", "out"), ops.ReduceMean(ctx.input("X", "x"), axes=axes, keep_dims=keep).output())


@converter("reduce_sum", "pd_op.sum")
def reduce_sum(ctx):
    axes, keep = _axes_keep(ctx)
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.ReduceSum(x, axes=axes, keep_dims=keep).output())


@converter("reduce_mean_grad", "pd_op.mean_grad")
def reduce_mean_grad(ctx):
    axes, keep = _axes_keep(ctx)
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReduceMeanBackprop(x, dout, axes=axes, keep_dims=keep).output())


@converter("reduce_sum_grad", "pd_op.sum_grad")
def reduce_sum_grad(ctx):
    axes, keep = _axes_keep(ctx)
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReduceSumBackprop(x, dout, axes=axes, keep_dims=keep).output())


@converter("mean")
def mean(ctx):
    """The fluid ``mean`` op: the mean of all elements, a 0-D tensor."""
    ctx.set_output("Out", ops.ReduceMean(ctx.input("X"), axes=[]).output())


@converter("mean_grad")
def mean_grad(ctx):
    grad = ops.ReduceMeanBackprop(ctx.input("X"), ctx.input("Out@GRAD"), axes=[])
    ctx.set_output("X@GRAD", grad.output())


@converter("pd_op.mean_all")
def mean_all(ctx):
    """PIR ``mean_all``: the mean of every element, a 0-D tensor (legacy ``mean``)."""
    _set_out(ctx, ops.ReduceMean(_x(ctx), axes=[]).output())


@converter("pd_op.mean_all_grad")
def mean_all_grad(ctx):
    _set_dx(ctx, ops.ReduceMeanBackprop(_x(ctx), _dout(ctx), axes=[]).output())


def _sum_of_squares(x):
    return ops.ReduceSum(a.mul(x, x), axes=[], keep_dims=False).output()


@converter("squared_l2_norm", "pd_op.squared_l2_norm")
def squared_l2_norm(ctx):
    """sum(x^2) over every element, shaped [1] as Paddle's."""
    _set_out(ctx, ops.Reshape(_sum_of_squares(_x(ctx)), shape=[1]).output())


@converter("squared_l2_norm_grad", "pd_op.squared_l2_norm_grad")
def squared_l2_norm_grad(ctx):
    """(dout * x) * 2, dout being the single-element gradient of the norm."""
    x, dout = _x(ctx), _dout(ctx)
    if dout.type.rank:
        dout = ops.Reshape(dout, shape=[]).output()
    _set_dx(ctx, a.mul(a.mul(dout, x), a.c(2, x)))


@converter("clip_by_norm", "pd_op.clip_by_norm")
def clip_by_norm(ctx):
    """x * max_norm / ||x|| when ||x|| > max_norm, else x.

    Paddle computes x * scaling with scaling = temp + (1 - temp) * max_norm / (norm + eps), temp
    = (norm <= max_norm), eps = 1e-6 only when the norm is ~0; where temp is 1 that is exactly 1.
    """
    x = _x(ctx)
    max_norm = a.c(float(ctx.attr("max_norm")), x)
    norm = ops.Sqrt(_sum_of_squares(x)).output()
    scaling = a.select(a.le(norm, max_norm), a.c(1, x), a.div(max_norm, norm))
    _set_out(ctx, a.mul(x, scaling))
