"""Unary math (exp, log, abs, pow, reciprocal, sqrt, rsqrt, sign), where, mean_all, and the ops
gradient clipping emits (clip, clip_by_norm, squared_l2_norm), with their grads.

Formulas and operand order follow Paddle's CPU kernels (phi activation_functor.h,
clip_kernel_impl.h, clip_by_norm_kernel_impl.h, squared_l2_norm_*_impl.h).
"""
from __future__ import annotations

from ...ir import ops
from . import arith as a
from .arith import dout_input as _dout, set_dx as _set_dx, set_out as _set_out, x_input as _x
from .helpers import reduce_to_shape


def exp(ctx):
    _set_out(ctx, a.exp(_x(ctx)))


def exp_grad(ctx):
    _set_dx(ctx, a.mul(_dout(ctx), ctx.input("Out", "out")))


def log(ctx):
    _set_out(ctx, a.log(_x(ctx)))


def log_grad(ctx):
    x = _x(ctx)
    _set_dx(ctx, a.mul(_dout(ctx), a.div(a.c(1, x), x)))


def abs(ctx):  # noqa: A001  (named after the Paddle op)
    _set_out(ctx, ops.Abs(_x(ctx)).output())


def abs_grad(ctx):
    """dout * sign(x); 0 at x == 0, as Paddle."""
    _set_dx(ctx, a.mul(_dout(ctx), a.sign(_x(ctx))))


def _pow_factor(ctx) -> float:
    """Legacy ``factor`` (or a constant FactorTensor), PIR ``y``; a C++ float in Paddle."""
    if ctx.has_input("FactorTensor"):
        return float(ctx.const_input("FactorTensor").reshape(-1)[0].item())
    return float(ctx.attr("factor", "y", default=1.0))


def pow(ctx):  # noqa: A001
    x = _x(ctx)
    _set_out(ctx, ops.Power(x, a.c(_pow_factor(ctx), x)).output())


def pow_grad(ctx):
    """dout * factor * x^(factor - 1)."""
    x, factor = _x(ctx), _pow_factor(ctx)
    scaled = a.mul(_dout(ctx), a.c(factor, x))
    _set_dx(ctx, a.mul(scaled, ops.Power(x, a.c(factor - 1, x)).output()))


def reciprocal(ctx):
    x = _x(ctx)
    _set_out(ctx, a.div(a.c(1, x), x))


def reciprocal_grad(ctx):
    """dout * -1 * out * out."""
    out = ctx.input("Out", "out")
    _set_dx(ctx, a.mul(a.mul(a.mul(_dout(ctx), a.c(-1, out)), out), out))


def sqrt(ctx):
    _set_out(ctx, ops.Sqrt(_x(ctx)).output())


def sqrt_grad(ctx):
    """0.5 * dout / out."""
    out = ctx.input("Out", "out")
    _set_dx(ctx, a.div(a.mul(a.c(0.5, out), _dout(ctx)), out))


def rsqrt(ctx):
    x = _x(ctx)
    _set_out(ctx, a.div(a.c(1, x), ops.Sqrt(x).output()))


def rsqrt_grad(ctx):
    """-0.5 * dout * out^3."""
    out = ctx.input("Out", "out")
    _set_dx(ctx, a.mul(a.mul(a.mul(a.mul(a.c(-0.5, out), _dout(ctx)), out), out), out))


def sign(ctx):
    """No gradient: Paddle's sign has none (L1Decay applies it to a parameter's value)."""
    _set_out(ctx, a.sign(_x(ctx)))


def where(ctx):
    cond, x, y = ctx.input("Condition", "condition"), _x(ctx), ctx.input("Y", "y")
    _set_out(ctx, a.select(cond, x, y))


def where_grad(ctx):
    """dout where the condition picked the operand, 0 elsewhere; summed over broadcast axes."""
    cond, x, y, dout = ctx.input("Condition", "condition"), _x(ctx), ctx.input("Y", "y"), _dout(ctx)
    zero = a.c(0, dout)
    if ctx.has_output("X@GRAD", "x_grad"):
        _set_dx(ctx, reduce_to_shape(a.select(cond, dout, zero), x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        ctx.set_output(("Y@GRAD", "y_grad"), reduce_to_shape(a.select(cond, zero, dout), y.shape))


def mean_all(ctx):
    """PIR ``mean_all``: the mean of every element, a 0-D tensor (legacy ``mean``)."""
    _set_out(ctx, ops.ReduceMean(_x(ctx), axes=[]).output())


def mean_all_grad(ctx):
    _set_dx(ctx, ops.ReduceMeanBackprop(_x(ctx), _dout(ctx), axes=[]).output())


# --- gradient clipping --------------------------------------------------------------------------------
def _clip_bounds(ctx, x):
    """Legacy attrs min/max or Min/Max tensors; PIR min/max operands (pd_op.full). Paddle converts
    them to the data type before comparing."""
    bounds = []
    for attr, slot in (("min", "Min"), ("max", "Max")):
        if ctx.has_input(slot, attr):
            value = ctx.const_input(slot, attr).reshape(-1)[0].item()
        else:
            value = ctx.attr(attr)
        bounds.append(a.c(value, x))
    return bounds


def clip(ctx):
    """x < min ? min : (x > max ? max : x)."""
    x = _x(ctx)
    lo, hi = _clip_bounds(ctx, x)
    _set_out(ctx, a.select(a.lt(x, lo), lo, a.select(a.gt(x, hi), hi, x)))


def clip_grad(ctx):
    """dout where min <= x <= max (the bounds pass the gradient), else 0."""
    x, dout = _x(ctx), _dout(ctx)
    lo, hi = _clip_bounds(ctx, x)
    inside = ops.LogicalAnd(a.ge(x, lo), a.le(x, hi)).output()
    _set_dx(ctx, a.select(inside, dout, a.c(0, dout)))


def _sum_of_squares(x):
    return ops.ReduceSum(a.mul(x, x), axes=[], keep_dims=False).output()


def squared_l2_norm(ctx):
    """sum(x^2) over every element, shaped [1] as Paddle's."""
    _set_out(ctx, ops.Reshape(_sum_of_squares(_x(ctx)), shape=[1]).output())


def squared_l2_norm_grad(ctx):
    """(dout * x) * 2, dout being the single-element gradient of the norm."""
    x, dout = _x(ctx), _dout(ctx)
    if dout.type.rank:
        dout = ops.Reshape(dout, shape=[]).output()
    _set_dx(ctx, a.mul(a.mul(dout, x), a.c(2, x)))


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
