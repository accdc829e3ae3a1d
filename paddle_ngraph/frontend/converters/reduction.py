"""reduce_mean/reduce_sum (legacy) and mean/sum (PIR), with grads."""
from __future__ import annotations

from ...ir import ops


def _axes_keep(ctx):
    """Legacy: attrs dim/keep_dim/reduce_all; PIR: axis operand (full_int_array) and keepdim."""
    if ctx.has_input("axis"):
        axes = [int(a) for a in ctx.const_input("axis").reshape(-1)]
    else:
        axes = [int(a) for a in ctx.attr("dim", "axis", default=[])]
    if ctx.attr("reduce_all", default=False):
        axes = []
    return axes, bool(ctx.attr("keep_dim", "keepdim", default=False))


def reduce_mean(ctx):
    axes, keep = _axes_keep(ctx)
    ctx.set_output(("Out", "out"), ops.ReduceMean(ctx.input("X", "x"), axes=axes, keep_dims=keep).output())


def reduce_sum(ctx):
    axes, keep = _axes_keep(ctx)
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.ReduceSum(x, axes=axes, keep_dims=keep).output())


def reduce_mean_grad(ctx):
    axes, keep = _axes_keep(ctx)
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReduceMeanBackprop(x, dout, axes=axes, keep_dims=keep).output())


def reduce_sum_grad(ctx):
    axes, keep = _axes_keep(ctx)
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReduceSumBackprop(x, dout, axes=axes, keep_dims=keep).output())
