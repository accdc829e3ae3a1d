"""Reductions and their grads: reduce_mean/reduce_sum (legacy) and mean/sum (PIR), the mean of all
elements (legacy ``mean``, PIR ``mean_all``), and the norms gradient clipping emits
(squared_l2_norm, clip_by_norm; after Paddle's clip_by_norm_kernel_impl.h and
squared_l2_norm_*_impl.h), and p_norm (the vector p-norm of paddle.linalg.norm and
nn.PairwiseDistance, which triplet_margin_loss uses; after Paddle's p_norm_kernel.cc); max/min,
amax/amin, all/any and logsumexp; prod (legacy ``reduce_prod``) and cumsum.
"""
from __future__ import annotations

import math

import numpy as np

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


# --- p_norm: along one axis, or over every element (asvector) ------------------------------------------------
def _p_norm_attrs(ctx, x):
    """(porder, axes reduced, the norm's shape with the reduced axes kept as 1)."""
    porder = float(ctx.attr("porder", default=2.0))
    if ctx.attr("asvector", default=False):
        axes = list(range(x.type.rank))
    else:
        axes = [int(ctx.attr("axis", default=-1)) % max(x.type.rank, 1)]
    kept = [1 if i in axes else d for i, d in enumerate(x.shape)]
    if sum(d < 0 for d in kept) > 1:
        raise ctx.fail(f"at most one dynamic dim outside the reduced axes, got {x.type}")
    return porder, axes, kept


@converter("p_norm", "pd_op.p_norm")
def p_norm(ctx):
    """porder 0: count of non-zeros; +-inf: max/min of |x|; else (sum |x|^p)^(1/p)."""
    x = _x(ctx)
    porder, axes, _ = _p_norm_attrs(ctx, x)
    keep = bool(ctx.attr("keepdim", default=False))
    magnitude = ops.Abs(x).output()
    if porder == 0:
        norm = ops.ReduceSum(a.as_dtype(ops.NotEqual(x, a.c(0, x)).output(), x), axes=axes, keep_dims=keep).output()
    elif math.isinf(porder):
        reduce = ops.ReduceMax if porder > 0 else ops.ReduceMin
        norm = reduce(magnitude, axes=axes, keep_dims=keep).output()
    else:
        powered = ops.Power(magnitude, a.c(porder, x)).output()
        summed = ops.ReduceSum(powered, axes=axes, keep_dims=keep).output()
        # Paddle's porder is a float attribute: 1 / porder is rounded to float32 even for float64 x.
        norm = ops.Power(summed, a.c(float(np.float32(1.0) / np.float32(porder)), x)).output()
    _set_out(ctx, norm)


@converter("p_norm_grad", "pd_op.p_norm_grad")
def p_norm_grad(ctx):
    """+-inf: dout * sign(x) where |x| is the norm; else |x|^(p-1) / (norm^(p-1) + epsilon) * dout
    * sign(x); porder 0: zeros."""
    x, dout = _x(ctx), _dout(ctx)
    porder, _, kept = _p_norm_attrs(ctx, x)
    norm = ops.Reshape(ctx.input("Out", "out"), shape=kept).output()
    dout = ops.Reshape(dout, shape=kept).output()
    magnitude = ops.Abs(x).output()
    if porder == 0:
        _set_dx(ctx, ops.BroadcastTo(a.c(0, x), x).output())
        return
    if math.isinf(porder):
        picked = a.as_dtype(ops.Equal(magnitude, norm).output(), x)
        _set_dx(ctx, a.mul(a.mul(picked, a.sign(x)), dout))
        return
    exponent = a.c(porder - 1.0, x)
    epsilon = a.c(float(ctx.attr("epsilon", default=1e-12)), x)
    ratio = a.div(ops.Power(magnitude, exponent).output(), a.add(ops.Power(norm, exponent).output(), epsilon))
    _set_dx(ctx, a.mul(a.mul(ratio, dout), a.sign(x)))


# --- max, min (and amax, amin), all, any, logsumexp -------------------------------------------------
def _reduced_axes(ctx, x) -> list[int]:
    axes, _ = _axes_keep(ctx)
    return sorted({a % max(x.type.rank, 1) for a in axes}) or list(range(x.type.rank))


def _kept(ctx, x, value):
    """``value``, reduced over x's axes, reshaped to keep the reduced axes as 1s (for broadcasting
    against x)."""
    axes = _reduced_axes(ctx, x)
    return ops.Reshape(value, shape=[1 if i in axes else d for i, d in enumerate(x.shape)]).output()


_EXTREMA = {"max": ops.ReduceMax, "min": ops.ReduceMin, "amax": ops.ReduceMax, "amin": ops.ReduceMin}


@converter("reduce_max", "reduce_min", "reduce_amax", "reduce_amin", "pd_op.max", "pd_op.min", "pd_op.amax",
           "pd_op.amin")
def reduce_extremum(ctx):
    axes, keep = _axes_keep(ctx)
    reduce = _EXTREMA[ctx.op_type.removeprefix("pd_op.").removeprefix("reduce_")]
    _set_out(ctx, reduce(_x(ctx), axes=axes, keep_dims=keep).output())


@converter("reduce_max_grad", "reduce_min_grad", "reduce_amax_grad", "reduce_amin_grad", "pd_op.max_grad",
           "pd_op.min_grad", "pd_op.amax_grad", "pd_op.amin_grad")
def reduce_extremum_grad(ctx):
    """The gradient is shared evenly among the elements equal to the extremum: Paddle 3.3.1's
    max/min gradients do so as its amax/amin's do (measured against its CPU kernels)."""
    x = _x(ctx)
    out, dout = _kept(ctx, x, ctx.input("Out", "out")), _kept(ctx, x, _dout(ctx))
    hit = a.as_dtype(ops.Equal(x, out).output(), x)
    hits = ops.ReduceSum(hit, axes=_reduced_axes(ctx, x), keep_dims=True).output()
    _set_dx(ctx, a.mul(hit, a.div(dout, hits)))


@converter("reduce_all", "reduce_any", "pd_op.all", "pd_op.any")
def reduce_logical(ctx):
    """all = the minimum of the 0/1 values, any = their maximum."""
    axes, keep = _axes_keep(ctx)
    x = _x(ctx)
    reduce = ops.ReduceMin if ctx.op_type.endswith("all") else ops.ReduceMax
    as_int = ops.Convert(x, dtype="int32").output()
    _set_out(ctx, ops.Convert(reduce(as_int, axes=axes, keep_dims=keep).output(), dtype="bool").output())


def _logsumexp_axes_keep(ctx, x):
    axes = [int(v) for v in ctx.attr("axis", default=[])]
    if ctx.attr("reduce_all", default=False):
        axes = []
    return sorted({v % max(x.type.rank, 1) for v in axes}) or list(range(x.type.rank)), bool(
        ctx.attr("keepdim", default=False))


@converter("logsumexp", "pd_op.logsumexp")
def logsumexp(ctx):
    """log(sum(exp(x - max))) + max, as Paddle's kernel (logsumexp_kernel_impl.h) computes it."""
    x = _x(ctx)
    axes, keep = _logsumexp_axes_keep(ctx, x)
    top = ops.ReduceMax(x, axes=axes, keep_dims=True).output()
    total = ops.ReduceSum(a.exp(a.sub(x, top)), axes=axes, keep_dims=True).output()
    out = a.add(a.log(total), top)
    if not keep:
        out = ops.Reshape(out, shape=[d for i, d in enumerate(x.shape) if i not in axes]).output()
    _set_out(ctx, out)


@converter("logsumexp_grad", "pd_op.logsumexp_grad")
def logsumexp_grad(ctx):
    """dx = dout * exp(x - out)."""
    x = _x(ctx)
    axes, _ = _logsumexp_axes_keep(ctx, x)
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)]
    out = ops.Reshape(ctx.input("Out", "out"), shape=shape).output()
    dout = ops.Reshape(_dout(ctx), shape=shape).output()
    _set_dx(ctx, a.mul(dout, a.exp(a.sub(x, out))))


# --- prod, cumsum ---------------------------------------------------------------------------------
def _refuse_out_dtype(ctx):
    """Legacy reduce ops cast x to ``out_dtype`` first when it is set; Paddle's Python API casts
    with an op of its own instead, so only a hand-built program sets it."""
    if int(ctx.attr("out_dtype", default=-1)) != -1:
        raise ctx.fail(f"out_dtype {ctx.attr('out_dtype')} (a cast inside the reduction) is not converted")


@converter("reduce_prod", "pd_op.prod")
def reduce_prod(ctx):
    _refuse_out_dtype(ctx)
    axes, keep = _axes_keep(ctx)
    _set_out(ctx, ops.ReduceProd(_x(ctx), axes=axes, keep_dims=keep).output())


@converter("reduce_prod_grad", "pd_op.prod_grad")
def reduce_prod_grad(ctx):
    """dx = (dout * out) * (1 / x), as Paddle's ProdGradFunctor (reduce_functor.h) computes it. Where x
    is 0 that is 0 * inf = NaN, which Paddle 3.3.1 returns too (and 0 for the other elements of a
    product with one zero, where the exact gradient is the product of the others): its result, not
    the exact gradient, is what this reproduces."""
    _refuse_out_dtype(ctx)
    x = _x(ctx)
    out, dout = _kept(ctx, x, ctx.input("Out", "out")), _kept(ctx, x, _dout(ctx))
    _set_dx(ctx, a.mul(a.mul(dout, out), a.div(a.c(1, x), x)))


def _cumsum_attrs(ctx, x):
    """(axis, flatten, exclusive, reverse); PIR passes the axis as a constant input."""
    axis = int(ctx.attr_or_const_input(("axis",), ("axis",), default=-1))
    flatten = bool(ctx.attr("flatten", default=False))
    if not flatten and x.type.rank and not -x.type.rank <= axis < x.type.rank:
        raise ctx.fail(f"axis {axis} out of range for {x.type}")
    return axis, flatten, bool(ctx.attr("exclusive", default=False)), bool(ctx.attr("reverse", default=False))


def _running_sum(ctx, x, *, reverse: bool):
    """x's cumsum as the op's attributes say, reversed or not: flatten sums x as one row (Paddle's
    output is then 1-D).

    Paddle's kernel (cum_kernel.cc) copies an input of one element whatever the attributes, so an
    exclusive cumsum of one element is that element, not 0: the same here when the shape says so;
    refused when a dynamic dim may make it one element at run time."""
    axis, flatten, exclusive, _ = _cumsum_attrs(ctx, x)
    known = int(np.prod([d for d in x.shape if d >= 0], dtype=np.int64))
    if known == 1 and x.type.is_static:
        return ops.Reshape(x, shape=[1] if flatten else list(x.shape)).output()
    if known == 1 and exclusive:
        raise ctx.fail(f"exclusive cumsum of {x.type}: its dynamic dims may leave it one element at run "
                       f"time, which Paddle copies")
    row = x
    if flatten:
        row, axis = ops.Reshape(x, shape=[-1]).output(), 0
    return ops.CumSum(row, axis=axis, exclusive=exclusive, reverse=reverse).output()


@converter("cumsum", "pd_op.cumsum")
def cumsum(ctx):
    x = _x(ctx)
    _set_out(ctx, _running_sum(ctx, x, reverse=_cumsum_attrs(ctx, x)[3]))


@converter("cumsum_grad", "pd_op.cumsum_grad")
def cumsum_grad(ctx):
    """dx = the cumsum of dout in the other direction (exclusive stays), shaped as x: Paddle's
    CumsumGradKernel. Legacy programs have this op too (Paddle 3.3.1's backward of cumsum)."""
    x, dout = _x(ctx), _dout(ctx)
    _, flatten, _, reverse = _cumsum_attrs(ctx, x)
    dx = _running_sum(ctx, dout, reverse=not reverse)
    if flatten:
        if list(x.shape).count(-1) > 1:
            raise ctx.fail(f"flatten with more than one dynamic dim ({x.type})")
        dx = ops.Reshape(dx, shape=list(x.shape)).output()
    _set_dx(ctx, dx)
