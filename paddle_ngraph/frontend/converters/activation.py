"""Activations and their grads."""
from __future__ import annotations

import numpy as np

from ...ir import ops
from . import arith as a
from .arith import dout_input as _dout, out_input as _fwd_out, set_dx as _set_dx, set_out as _set_out, x_input as _x


def relu(ctx):
    ctx.set_output(("Out", "out"), ops.Relu(ctx.input("X", "x")).output())


def relu_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReluBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")).output())


# --- activations composed of primitives, each after Paddle's functor (phi activation_functor.h) -------
# Forward ops read X and bind Out; grads read what Paddle passes (X, or Out for the ones that
# depend on the output) and Out@GRAD, and bind X@GRAD.


def _float_attr(ctx, *names, default):
    # Used as stored: float attributes arrive already rounded to float32, double ones (PIR's
    # leaky_relu negative_slope) are used by Paddle's kernel at full precision.
    return float(ctx.attr(*names, default=default))


def _leaky_alpha(ctx):
    return _float_attr(ctx, "alpha", "negative_slope", default=0.02)


def leaky_relu(ctx):
    # max(x, alpha*x) for alpha < 1, else min: the same as Select(x > 0, ...) but exactly Paddle's.
    x, alpha = _x(ctx), _leaky_alpha(ctx)
    scaled = a.mul(a.c(alpha, x), x)
    _set_out(ctx, (ops.Maximum if alpha < 1 else ops.Minimum)(x, scaled).output())


def leaky_relu_grad(ctx):
    x, dout, alpha = _x(ctx), _dout(ctx), _leaky_alpha(ctx)
    # dout at x >= 0 (x == 0 included), alpha * dout below.
    _set_dx(ctx, a.select(a.ge(x, a.c(0, x)), dout, a.mul(dout, a.c(alpha, x))))


def elu(ctx):
    x, alpha = _x(ctx), _float_attr(ctx, "alpha", default=1.0)
    neg = a.mul(a.c(alpha, x), a.sub(a.exp(x), a.c(1, x)))
    _set_out(ctx, a.select(a.lt(x, a.c(0, x)), neg, x))


def elu_grad(ctx):
    dout, alpha = _dout(ctx), _float_attr(ctx, "alpha", default=1.0)
    if alpha >= 0:  # Paddle: dout where out > 0, else dout * (out + alpha)
        out = _fwd_out(ctx)
        grad = a.select(a.gt(out, a.c(0, out)), dout, a.mul(dout, a.add(out, a.c(alpha, out))))
    else:  # negative alpha: dout where x > 0, else dout * alpha * exp(x)
        x = _x(ctx)
        grad = a.select(a.gt(x, a.c(0, x)), dout, a.mul(a.mul(dout, a.c(alpha, x)), a.exp(x)))
    _set_dx(ctx, grad)


def _selu_attrs(ctx):
    return (_float_attr(ctx, "scale", default=1.0507009873554805),
            _float_attr(ctx, "alpha", default=1.6732632423543772))


def selu(ctx):
    x, (scale, alpha) = _x(ctx), _selu_attrs(ctx)
    neg = a.sub(a.mul(a.c(alpha, x), a.exp(x)), a.c(alpha, x))
    _set_out(ctx, a.mul(a.c(scale, x), a.select(a.le(x, a.c(0, x)), neg, x)))


def selu_grad(ctx):
    out, dout, (scale, alpha) = _fwd_out(ctx), _dout(ctx), _selu_attrs(ctx)
    la = float(np.float32(alpha) * np.float32(scale))  # Paddle keeps alpha * scale as a float
    factor = a.select(a.le(out, a.c(0, out)), a.add(out, a.c(la, out)), a.c(scale, out))
    _set_dx(ctx, a.mul(dout, factor))


def celu(ctx):
    x, alpha = _x(ctx), _float_attr(ctx, "alpha", default=1.0)
    neg = a.mul(a.c(alpha, x), a.sub(a.exp(a.div(x, a.c(alpha, x))), a.c(1, x)))
    _set_out(ctx, a.select(a.lt(x, a.c(0, x)), neg, x))


def celu_grad(ctx):
    x, dout, alpha = _x(ctx), _dout(ctx), _float_attr(ctx, "alpha", default=1.0)
    # Paddle's four masked terms reduce to: dout for x > 0, dout * exp(x / alpha) otherwise.
    _set_dx(ctx, a.select(a.gt(x, a.c(0, x)), dout, a.mul(dout, a.exp(a.div(x, a.c(alpha, x))))))


def _softplus_attrs(ctx):
    return _float_attr(ctx, "beta", default=1.0), _float_attr(ctx, "threshold", default=20.0)


def softplus(ctx):
    """x where beta * x > threshold (no overflow), else log(1 + exp(beta * x)) / beta."""
    x, (beta, threshold) = _x(ctx), _softplus_attrs(ctx)
    xb = a.mul(a.c(beta, x), x)
    soft = a.div(a.log(a.add(a.c(1, x), a.exp(xb))), a.c(beta, x))
    _set_out(ctx, a.select(a.gt(xb, a.c(threshold, x)), x, soft))


def softplus_grad(ctx):
    x, dout, (beta, threshold) = _x(ctx), _dout(ctx), _softplus_attrs(ctx)
    xb = a.mul(a.c(beta, x), x)
    soft = a.div(dout, a.add(a.c(1, x), a.exp(a.neg(xb))))
    _set_dx(ctx, a.select(a.gt(xb, a.c(threshold, x)), dout, soft))


def softsign(ctx):
    x = _x(ctx)
    _set_out(ctx, a.div(x, a.add(a.c(1, x), ops.Abs(x).output())))


def softsign_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    denom = a.add(a.c(1, x), ops.Abs(x).output())
    _set_dx(ctx, a.mul(dout, a.div(a.c(1, x), a.mul(denom, denom))))


def _mish_softplus(ctx, x):
    threshold = _float_attr(ctx, "threshold", "lambda", default=20.0)  # PIR names it lambda
    return a.select(a.gt(x, a.c(threshold, x)), x, a.log(a.add(a.c(1, x), a.exp(x))))


def mish(ctx):
    x = _x(ctx)
    _set_out(ctx, a.mul(x, ops.Tanh(_mish_softplus(ctx, x)).output()))


def mish_grad(ctx):
    """dout * (tanh(sp) + x * (1 - tanh(sp)^2) * (1 - exp(-sp))), sp = softplus(x)."""
    x, dout = _x(ctx), _dout(ctx)
    sp = _mish_softplus(ctx, x)
    gsp = a.sub(a.c(1, x), a.exp(a.neg(sp)))
    tsp = ops.Tanh(sp).output()
    inner = a.mul(a.mul(x, a.sub(a.c(1, x), a.mul(tsp, tsp))), gsp)
    _set_dx(ctx, a.mul(dout, a.add(tsp, inner)))


def _hardtanh_attrs(ctx):
    return _float_attr(ctx, "t_min", default=-1.0), _float_attr(ctx, "t_max", default=1.0)


def hardtanh(ctx):
    """Legacy ``brelu`` / PIR ``hardtanh``: min(max(x, t_min), t_max)."""
    x, (t_min, t_max) = _x(ctx), _hardtanh_attrs(ctx)
    _set_out(ctx, ops.Minimum(ops.Maximum(x, a.c(t_min, x)).output(), a.c(t_max, x)).output())


def hardtanh_grad(ctx):
    x, dout, (t_min, t_max) = _x(ctx), _dout(ctx), _hardtanh_attrs(ctx)
    inside = ops.LogicalAnd(a.gt(x, a.c(t_min, x)), a.lt(x, a.c(t_max, x))).output()
    _set_dx(ctx, a.select(inside, dout, a.c(0, dout)))  # 0 at the bounds themselves


def _hardshrink_kept(ctx, x):
    threshold = _float_attr(ctx, "threshold", default=0.5)
    return ops.LogicalOr(a.le(x, a.c(-threshold, x)), a.ge(x, a.c(threshold, x))).output()


def hardshrink(ctx):
    """Legacy ``hard_shrink``: x where |x| >= threshold (bounds kept), else 0."""
    x = _x(ctx)
    _set_out(ctx, a.select(_hardshrink_kept(ctx, x), x, a.c(0, x)))


def hardshrink_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    _set_dx(ctx, a.select(_hardshrink_kept(ctx, x), dout, a.c(0, dout)))


def _softshrink_lambda(ctx):
    return _float_attr(ctx, "lambda", "threshold", default=0.5)  # PIR names it threshold


def softshrink(ctx):
    x, lam = _x(ctx), _softshrink_lambda(ctx)
    below = a.select(a.lt(x, a.c(-lam, x)), a.add(x, a.c(lam, x)), a.c(0, x))
    _set_out(ctx, a.select(a.gt(x, a.c(lam, x)), a.sub(x, a.c(lam, x)), below))


def softshrink_grad(ctx):
    x, dout, lam = _x(ctx), _dout(ctx), _softshrink_lambda(ctx)
    outside = ops.LogicalOr(a.gt(x, a.c(lam, x)), a.lt(x, a.c(-lam, x))).output()
    _set_dx(ctx, a.select(outside, dout, a.c(0, dout)))


def tanh_shrink(ctx):
    x = _x(ctx)
    _set_out(ctx, a.sub(x, ops.Tanh(x).output()))


def tanh_shrink_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    t = ops.Tanh(x).output()
    _set_dx(ctx, a.mul(dout, a.mul(t, t)))


def _thresholded_attrs(ctx):
    return _float_attr(ctx, "threshold", default=1.0), _float_attr(ctx, "value", default=0.0)


def thresholded_relu(ctx):
    x, (threshold, value) = _x(ctx), _thresholded_attrs(ctx)
    _set_out(ctx, a.select(a.gt(x, a.c(threshold, x)), x, a.c(value, x)))


def thresholded_relu_grad(ctx):
    x, dout, (threshold, _) = _x(ctx), _dout(ctx), _thresholded_attrs(ctx)
    _set_dx(ctx, a.select(a.gt(x, a.c(threshold, x)), dout, a.c(0, dout)))


def _logsigmoid_parts(x):
    """Paddle's stable form: t = max(-x, 0); exp(-t) and exp(-x - t)."""
    t = ops.Maximum(a.neg(x), a.c(0, x)).output()
    return t, a.exp(a.neg(t)), a.exp(a.sub(a.neg(x), t))


def logsigmoid(ctx):
    t, e1, e2 = _logsigmoid_parts(_x(ctx))
    _set_out(ctx, a.sub(a.neg(t), a.log(a.add(e1, e2))))


def logsigmoid_grad(ctx):
    _, e1, e2 = _logsigmoid_parts(_x(ctx))
    _set_dx(ctx, a.mul(_dout(ctx), a.div(e2, a.add(e1, e2))))


def log_softmax(ctx):
    """(x - max) clipped below at -64 (as Paddle's CPU kernel), minus log of the sum of its exp."""
    x = _x(ctx)
    axis = int(ctx.attr("axis", default=-1))
    if x.type.rank == 0:
        _set_out(ctx, a.c(0, x))  # Paddle: 0 for a 0-D input
        return
    shifted = a.sub(x, ops.ReduceMax(x, axes=[axis], keep_dims=True).output())
    shifted = ops.Maximum(shifted, a.c(-64, x)).output()
    total = ops.ReduceSum(a.exp(shifted), axes=[axis], keep_dims=True).output()
    _set_out(ctx, a.sub(shifted, a.log(total)))


def log_softmax_grad(ctx):
    """dx = dout - exp(out) * sum(dout) along the axis."""
    out, dout = _fwd_out(ctx), _dout(ctx)
    axis = int(ctx.attr("axis", default=-1))
    if out.type.rank == 0:
        _set_dx(ctx, a.c(0, dout))
        return
    total = ops.ReduceSum(dout, axes=[axis], keep_dims=True).output()
    _set_dx(ctx, a.sub(dout, a.mul(a.exp(out), total)))


# --- prelu: alpha is one value (all), one per channel (channel) or one per element (element) -------
def _prelu_alpha(ctx, x):
    """Alpha reshaped to broadcast against x, and the axes of x it was broadcast along."""
    alpha = ctx.input("Alpha", "alpha")
    mode = ctx.attr("mode", default="all")
    rank = x.type.rank
    if mode == "all":
        return ops.Reshape(alpha, shape=[1] * rank).output(), list(range(rank))
    if mode == "channel":
        fmt = ctx.attr("data_format", default="NCHW")
        if fmt not in ("NCHW", "NHWC", "NCL", "NLC", "NCDHW", "NDHWC"):
            raise ctx.fail(f"data_format {fmt!r} is not supported")
        channel = 1 if fmt.startswith("NC") else rank - 1
        shape = [1] * rank
        shape[channel] = -1
        return ops.Reshape(alpha, shape=shape).output(), [i for i in range(rank) if i != channel]
    if mode == "element":
        return ops.Reshape(alpha, shape=[1] + [-1 if d < 0 else d for d in x.shape[1:]]).output(), [0]
    raise ctx.fail(f"mode {mode!r} is not supported (all, channel, element)")


def prelu(ctx):
    x = _x(ctx)
    alpha, _ = _prelu_alpha(ctx, x)
    _set_out(ctx, a.select(a.gt(x, a.c(0, x)), x, a.mul(alpha, x)))


def prelu_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    alpha, axes = _prelu_alpha(ctx, x)
    positive = a.gt(x, a.c(0, x))
    _set_dx(ctx, a.select(positive, dout, a.mul(alpha, dout)))
    if ctx.has_output("Alpha@GRAD", "alpha_grad"):
        # Paddle sums x * dout over the elements sharing an alpha, where x <= 0.
        per_element = a.select(positive, a.c(0, x), a.mul(x, dout))
        summed = ops.ReduceSum(per_element, axes=axes, keep_dims=True).output()
        raw = ctx.input("Alpha", "alpha")
        ctx.set_output(("Alpha@GRAD", "alpha_grad"), ops.Reshape(summed, shape=list(raw.shape)).output())
