"""Activations and their grads: relu, softmax, gelu, tanh, sigmoid, the hard activations of
Paddle's vision model zoo (relu6, hard_swish, hard_sigmoid, swish, silu), and the rest
(leaky_relu, elu, selu, ..., log_softmax, prelu) composed of elementwise primitives.

The zoo activations are written in the order of operations of Paddle's Eigen functors
(phi/kernels/funcs/activation_functor.h), so that float rounding matches; the masks of the
piecewise grads use the same strict comparisons as Paddle's grad functors.

Paddle 3.3.1's kernels take no attributes for relu6, hardswish and swish: they compute with
threshold 6, hardswish's threshold/scale/offset 6/6/3 and swish's beta 1, whatever a legacy
program's ``threshold``/``scale``/``offset``/``beta`` attributes say (checked against the
executor). We do the same, to match what Paddle runs.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from . import arith as a
from .arith import dout_input as _dout, out_input as _fwd_out, set_dx as _set_dx, set_out as _set_out, x_input as _x
from .helpers import constant
from .registry import converter


@converter("relu", "pd_op.relu")
def relu(ctx):
    ctx.set_output(("Out", "out"), ops.Relu(ctx.input("X", "x")).output())


@converter("relu_grad", "pd_op.relu_grad")
def relu_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), ops.ReluBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")).output())


# --- softmax, gelu, tanh, sigmoid: one IR op each -----------------------------------------------------
@converter("softmax", "pd_op.softmax")
def softmax(ctx):
    axis = int(ctx.attr("axis", default=-1))
    ctx.set_output(("Out", "out"), ops.Softmax(ctx.input("X", "x"), axis=axis).output())


@converter("softmax_grad", "pd_op.softmax_grad")
def softmax_grad(ctx):
    axis = int(ctx.attr("axis", default=-1))
    grad = ops.SoftmaxBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad"), axis=axis)
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


@converter("gelu", "pd_op.gelu")
def gelu(ctx):
    approximate = bool(ctx.attr("approximate", default=False))
    ctx.set_output(("Out", "out"), ops.Gelu(ctx.input("X", "x"), approximate=approximate).output())


@converter("gelu_grad", "pd_op.gelu_grad")
def gelu_grad(ctx):
    approximate = bool(ctx.attr("approximate", default=False))
    grad = ops.GeluBackprop(ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad"), approximate=approximate)
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


@converter("tanh", "pd_op.tanh")
def tanh(ctx):
    ctx.set_output(("Out", "out"), ops.Tanh(ctx.input("X", "x")).output())


@converter("tanh_grad", "pd_op.tanh_grad")
def tanh_grad(ctx):
    grad = ops.TanhBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad"))
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


@converter("sigmoid", "pd_op.sigmoid")
def sigmoid(ctx):
    ctx.set_output(("Out", "out"), ops.Sigmoid(ctx.input("X", "x")).output())


@converter("sigmoid_grad", "pd_op.sigmoid_grad")
def sigmoid_grad(ctx):
    grad = ops.SigmoidBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad"))
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


_RELU6_THRESHOLD = 6.0


_HARDSWISH = dict(threshold=6.0, scale=6.0, offset=3.0)


def _c(value, like: Output) -> Output:
    """A scalar of ``like``'s dtype; float attributes are float32 in Paddle, then cast to T."""
    return constant(np.float32(value), like.dtype)


def _where(mask: Output, value: Output, like: Output) -> Output:
    """value where mask, else 0 (Paddle multiplies by the mask cast to T)."""
    return ops.Select(mask, value, _c(0, like)).output()


def _finite_float_attr(ctx, name: str, default: float) -> float:
    value = ctx.attr(name, default=default)
    if not np.isfinite(value):
        raise ctx.fail(f"{name} must be finite, got {value}")
    return float(value)


# --- relu6: min(max(x, 0), 6) ---------------------------------------------------------------------------
@converter("relu6", "pd_op.relu6")
def relu6(ctx):
    x = ctx.input("X", "x")
    clipped = ops.Minimum(ops.Maximum(x, _c(0, x)).output(), _c(_RELU6_THRESHOLD, x)).output()
    ctx.set_output(("Out", "out"), clipped)


@converter("relu6_grad", "pd_op.relu6_grad")
def relu6_grad(ctx):
    """dx = dout where 0 < out < 6 (both ends excluded, as Paddle's Relu6GradFunctor)."""
    out, dout = ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")
    inside = ops.LogicalAnd(ops.Greater(out, _c(0, out)).output(),
                            ops.Less(out, _c(_RELU6_THRESHOLD, out)).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), _where(inside, dout, dout))


# --- hardswish: min(max(x + offset, 0), threshold) * x / scale ------------------------------------------------
@converter("hard_swish", "pd_op.hardswish")
def hard_swish(ctx):
    x = ctx.input("X", "x")
    t, s, o = (_c(_HARDSWISH[k], x) for k in ("threshold", "scale", "offset"))
    clipped = ops.Minimum(ops.Maximum(ops.Add(x, o).output(), _c(0, x)).output(), t).output()
    ctx.set_output(("Out", "out"), ops.Divide(ops.Multiply(clipped, x).output(), s).output())


@converter("hard_swish_grad", "pd_op.hardswish_grad")
def hard_swish_grad(ctx):
    """dx = dout * ((2x + offset) / scale where 0 < x + offset < threshold; 0 below; 1 from the threshold up)."""
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    t, s, o = (_c(_HARDSWISH[k], x) for k in ("threshold", "scale", "offset"))
    shifted = ops.Add(x, o).output()
    slope = ops.Divide(ops.Add(ops.Multiply(_c(2, x), x).output(), o).output(), s).output()
    inner = _where(ops.Greater(shifted, _c(0, x)).output(), slope, x)
    local = ops.Select(ops.Less(shifted, t).output(), inner, _c(1, x)).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(dout, local).output())


# --- hardsigmoid: min(max(x * slope + offset, 0), 1) ------------------------------------------------------------
def _slope_offset(ctx):
    """Defaults of the op definitions (the Python API passes slope 0.1666667 explicitly)."""
    return _finite_float_attr(ctx, "slope", 0.2), _finite_float_attr(ctx, "offset", 0.5)


@converter("hard_sigmoid", "pd_op.hardsigmoid")
def hard_sigmoid(ctx):
    x = ctx.input("X", "x")
    slope, offset = _slope_offset(ctx)
    linear = ops.Add(ops.Multiply(x, _c(slope, x)).output(), _c(offset, x)).output()
    ctx.set_output(("Out", "out"), ops.Minimum(ops.Maximum(linear, _c(0, x)).output(), _c(1, x)).output())


@converter("hard_sigmoid_grad", "pd_op.hardsigmoid_grad")
def hard_sigmoid_grad(ctx):
    """dx = dout * slope where 0 < out < 1 (Paddle's HardSigmoidGradFunctor reads Out)."""
    out, dout = ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")
    slope, _ = _slope_offset(ctx)
    inside = ops.LogicalAnd(ops.Greater(out, _c(0, out)).output(), ops.Less(out, _c(1, out)).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), _where(inside, ops.Multiply(dout, _c(slope, out)).output(), out))


# --- swish (beta 1) and silu: both x * sigmoid(x), in two different orders of operations -------------------------
def _one_plus_exp_neg(x: Output) -> Output:
    return ops.Add(_c(1, x), ops.Exp(ops.Negative(x).output()).output()).output()


@converter("swish", "pd_op.swish")
def swish(ctx):
    """x / (1 + exp(-x)) (SwishFunctor with beta 1)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Divide(x, _one_plus_exp_neg(x)).output())


@converter("swish_grad", "pd_op.swish_grad")
def swish_grad(ctx):
    """s = 1 / (1 + exp(-x)), out = x * s, dx = dout * (out + s * (1 - out)) (SwishGradFunctor)."""
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    s = ops.Divide(_c(1, x), _one_plus_exp_neg(x)).output()
    out = ops.Multiply(x, s).output()
    s_term = ops.Multiply(s, ops.Subtract(_c(1, x), out).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(dout, ops.Add(out, s_term).output()).output())


@converter("silu", "pd_op.silu")
def silu(ctx):
    """x * (1 / (1 + exp(-x))) (SiluFunctor)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Multiply(x, ops.Divide(_c(1, x), _one_plus_exp_neg(x)).output()).output())


@converter("silu_grad", "pd_op.silu_grad")
def silu_grad(ctx):
    """e = exp(-x), d = 1 + e, dx = dout * ((1 / d) * (1 + x * e / d)) (SiluGradFunctor)."""
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    e = ops.Exp(ops.Negative(x).output()).output()
    d = ops.Add(_c(1, x), e).output()
    tail = ops.Add(_c(1, x), ops.Divide(ops.Multiply(x, e).output(), d).output()).output()
    local = ops.Multiply(ops.Divide(_c(1, x), d).output(), tail).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(dout, local).output())


# --- activations composed of primitives, each after Paddle's functor (phi activation_functor.h) -------
# Forward ops read X and bind Out; grads read what Paddle passes (X, or Out for the ones that
# depend on the output) and Out@GRAD, and bind X@GRAD.


def _float_attr(ctx, *names, default):
    # Used as stored: float attributes arrive already rounded to float32, double ones (PIR's
    # leaky_relu negative_slope) are used by Paddle's kernel at full precision.
    return float(ctx.attr(*names, default=default))


def _leaky_alpha(ctx):
    return _float_attr(ctx, "alpha", "negative_slope", default=0.02)


@converter("leaky_relu", "pd_op.leaky_relu")
def leaky_relu(ctx):
    # max(x, alpha*x) for alpha < 1, else min: the same as Select(x > 0, ...) but exactly Paddle's.
    x, alpha = _x(ctx), _leaky_alpha(ctx)
    scaled = a.mul(a.c(alpha, x), x)
    _set_out(ctx, (ops.Maximum if alpha < 1 else ops.Minimum)(x, scaled).output())


@converter("leaky_relu_grad", "pd_op.leaky_relu_grad")
def leaky_relu_grad(ctx):
    x, dout, alpha = _x(ctx), _dout(ctx), _leaky_alpha(ctx)
    # dout at x >= 0 (x == 0 included), alpha * dout below.
    _set_dx(ctx, a.select(a.ge(x, a.c(0, x)), dout, a.mul(dout, a.c(alpha, x))))


@converter("elu", "pd_op.elu")
def elu(ctx):
    x, alpha = _x(ctx), _float_attr(ctx, "alpha", default=1.0)
    neg = a.mul(a.c(alpha, x), a.sub(a.exp(x), a.c(1, x)))
    _set_out(ctx, a.select(a.lt(x, a.c(0, x)), neg, x))


@converter("elu_grad", "pd_op.elu_grad")
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


@converter("selu", "pd_op.selu")
def selu(ctx):
    x, (scale, alpha) = _x(ctx), _selu_attrs(ctx)
    neg = a.sub(a.mul(a.c(alpha, x), a.exp(x)), a.c(alpha, x))
    _set_out(ctx, a.mul(a.c(scale, x), a.select(a.le(x, a.c(0, x)), neg, x)))


@converter("selu_grad", "pd_op.selu_grad")
def selu_grad(ctx):
    out, dout, (scale, alpha) = _fwd_out(ctx), _dout(ctx), _selu_attrs(ctx)
    la = float(np.float32(alpha) * np.float32(scale))  # Paddle keeps alpha * scale as a float
    factor = a.select(a.le(out, a.c(0, out)), a.add(out, a.c(la, out)), a.c(scale, out))
    _set_dx(ctx, a.mul(dout, factor))


@converter("celu", "pd_op.celu")
def celu(ctx):
    x, alpha = _x(ctx), _float_attr(ctx, "alpha", default=1.0)
    neg = a.mul(a.c(alpha, x), a.sub(a.exp(a.div(x, a.c(alpha, x))), a.c(1, x)))
    _set_out(ctx, a.select(a.lt(x, a.c(0, x)), neg, x))


@converter("celu_grad", "pd_op.celu_grad")
def celu_grad(ctx):
    x, dout, alpha = _x(ctx), _dout(ctx), _float_attr(ctx, "alpha", default=1.0)
    # Paddle's four masked terms reduce to: dout for x > 0, dout * exp(x / alpha) otherwise.
    _set_dx(ctx, a.select(a.gt(x, a.c(0, x)), dout, a.mul(dout, a.exp(a.div(x, a.c(alpha, x))))))


def _softplus_attrs(ctx):
    return _float_attr(ctx, "beta", default=1.0), _float_attr(ctx, "threshold", default=20.0)


@converter("softplus", "pd_op.softplus")
def softplus(ctx):
    """x where beta * x > threshold (no overflow), else log(1 + exp(beta * x)) / beta."""
    x, (beta, threshold) = _x(ctx), _softplus_attrs(ctx)
    xb = a.mul(a.c(beta, x), x)
    soft = a.div(a.log(a.add(a.c(1, x), a.exp(xb))), a.c(beta, x))
    _set_out(ctx, a.select(a.gt(xb, a.c(threshold, x)), x, soft))


@converter("softplus_grad", "pd_op.softplus_grad")
def softplus_grad(ctx):
    x, dout, (beta, threshold) = _x(ctx), _dout(ctx), _softplus_attrs(ctx)
    xb = a.mul(a.c(beta, x), x)
    soft = a.div(dout, a.add(a.c(1, x), a.exp(a.neg(xb))))
    _set_dx(ctx, a.select(a.gt(xb, a.c(threshold, x)), dout, soft))


@converter("softsign", "pd_op.softsign")
def softsign(ctx):
    x = _x(ctx)
    _set_out(ctx, a.div(x, a.add(a.c(1, x), ops.Abs(x).output())))


@converter("softsign_grad", "pd_op.softsign_grad")
def softsign_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    denom = a.add(a.c(1, x), ops.Abs(x).output())
    _set_dx(ctx, a.mul(dout, a.div(a.c(1, x), a.mul(denom, denom))))


def _mish_softplus(ctx, x):
    threshold = _float_attr(ctx, "threshold", "lambda", default=20.0)  # PIR names it lambda
    return a.select(a.gt(x, a.c(threshold, x)), x, a.log(a.add(a.c(1, x), a.exp(x))))


@converter("mish", "pd_op.mish")
def mish(ctx):
    x = _x(ctx)
    _set_out(ctx, a.mul(x, ops.Tanh(_mish_softplus(ctx, x)).output()))


@converter("mish_grad", "pd_op.mish_grad")
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


@converter("brelu", "pd_op.hardtanh")
def hardtanh(ctx):
    """Legacy ``brelu`` / PIR ``hardtanh``: min(max(x, t_min), t_max)."""
    x, (t_min, t_max) = _x(ctx), _hardtanh_attrs(ctx)
    _set_out(ctx, ops.Minimum(ops.Maximum(x, a.c(t_min, x)).output(), a.c(t_max, x)).output())


@converter("brelu_grad", "pd_op.hardtanh_grad")
def hardtanh_grad(ctx):
    x, dout, (t_min, t_max) = _x(ctx), _dout(ctx), _hardtanh_attrs(ctx)
    inside = ops.LogicalAnd(a.gt(x, a.c(t_min, x)), a.lt(x, a.c(t_max, x))).output()
    _set_dx(ctx, a.select(inside, dout, a.c(0, dout)))  # 0 at the bounds themselves


def _hardshrink_kept(ctx, x):
    threshold = _float_attr(ctx, "threshold", default=0.5)
    return ops.LogicalOr(a.le(x, a.c(-threshold, x)), a.ge(x, a.c(threshold, x))).output()


@converter("hard_shrink", "pd_op.hardshrink")
def hardshrink(ctx):
    """Legacy ``hard_shrink``: x where |x| >= threshold (bounds kept), else 0."""
    x = _x(ctx)
    _set_out(ctx, a.select(_hardshrink_kept(ctx, x), x, a.c(0, x)))


@converter("hard_shrink_grad", "pd_op.hardshrink_grad")
def hardshrink_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    _set_dx(ctx, a.select(_hardshrink_kept(ctx, x), dout, a.c(0, dout)))


def _softshrink_lambda(ctx):
    return _float_attr(ctx, "lambda", "threshold", default=0.5)  # PIR names it threshold


@converter("softshrink", "pd_op.softshrink")
def softshrink(ctx):
    x, lam = _x(ctx), _softshrink_lambda(ctx)
    below = a.select(a.lt(x, a.c(-lam, x)), a.add(x, a.c(lam, x)), a.c(0, x))
    _set_out(ctx, a.select(a.gt(x, a.c(lam, x)), a.sub(x, a.c(lam, x)), below))


@converter("softshrink_grad", "pd_op.softshrink_grad")
def softshrink_grad(ctx):
    x, dout, lam = _x(ctx), _dout(ctx), _softshrink_lambda(ctx)
    outside = ops.LogicalOr(a.gt(x, a.c(lam, x)), a.lt(x, a.c(-lam, x))).output()
    _set_dx(ctx, a.select(outside, dout, a.c(0, dout)))


@converter("tanh_shrink", "pd_op.tanh_shrink")
def tanh_shrink(ctx):
    x = _x(ctx)
    _set_out(ctx, a.sub(x, ops.Tanh(x).output()))


@converter("tanh_shrink_grad", "pd_op.tanh_shrink_grad")
def tanh_shrink_grad(ctx):
    x, dout = _x(ctx), _dout(ctx)
    t = ops.Tanh(x).output()
    _set_dx(ctx, a.mul(dout, a.mul(t, t)))


# --- stanh: scale_b * tanh(scale_a * x), in the order of Paddle's STanhFunctor -----------------------------------
def _stanh_scales(ctx):
    return _float_attr(ctx, "scale_a", default=0.67), _float_attr(ctx, "scale_b", default=1.7159)


@converter("stanh", "pd_op.stanh")
def stanh(ctx):
    x, (scale_a, scale_b) = _x(ctx), _stanh_scales(ctx)
    _set_out(ctx, a.mul(a.c(scale_b, x), ops.Tanh(a.mul(a.c(scale_a, x), x)).output()))


@converter("stanh_grad", "pd_op.stanh_grad")
def stanh_grad(ctx):
    """dx = dout * a * b * (1 - tanh(a x)^2) (STanhGradFunctor reads X)."""
    x, dout, (scale_a, scale_b) = _x(ctx), _dout(ctx), _stanh_scales(ctx)
    t = ops.Tanh(a.mul(a.c(scale_a, x), x)).output()
    slope = a.mul(a.mul(a.c(scale_a, x), a.c(scale_b, x)), a.sub(a.c(1, x), a.mul(t, t)))
    _set_dx(ctx, a.mul(dout, slope))


def _thresholded_attrs(ctx):
    return _float_attr(ctx, "threshold", default=1.0), _float_attr(ctx, "value", default=0.0)


@converter("thresholded_relu", "pd_op.thresholded_relu")
def thresholded_relu(ctx):
    x, (threshold, value) = _x(ctx), _thresholded_attrs(ctx)
    _set_out(ctx, a.select(a.gt(x, a.c(threshold, x)), x, a.c(value, x)))


@converter("thresholded_relu_grad", "pd_op.thresholded_relu_grad")
def thresholded_relu_grad(ctx):
    x, dout, (threshold, _) = _x(ctx), _dout(ctx), _thresholded_attrs(ctx)
    _set_dx(ctx, a.select(a.gt(x, a.c(threshold, x)), dout, a.c(0, dout)))


def _logsigmoid_parts(x):
    """Paddle's stable form: t = max(-x, 0); exp(-t) and exp(-x - t)."""
    t = ops.Maximum(a.neg(x), a.c(0, x)).output()
    return t, a.exp(a.neg(t)), a.exp(a.sub(a.neg(x), t))


@converter("logsigmoid", "pd_op.logsigmoid")
def logsigmoid(ctx):
    t, e1, e2 = _logsigmoid_parts(_x(ctx))
    _set_out(ctx, a.sub(a.neg(t), a.log(a.add(e1, e2))))


@converter("logsigmoid_grad", "pd_op.logsigmoid_grad")
def logsigmoid_grad(ctx):
    _, e1, e2 = _logsigmoid_parts(_x(ctx))
    _set_dx(ctx, a.mul(_dout(ctx), a.div(e2, a.add(e1, e2))))


@converter("log_softmax", "pd_op.log_softmax")
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


@converter("log_softmax_grad", "pd_op.log_softmax_grad")
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


@converter("prelu", "pd_op.prelu")
def prelu(ctx):
    x = _x(ctx)
    alpha, _ = _prelu_alpha(ctx, x)
    _set_out(ctx, a.select(a.gt(x, a.c(0, x)), x, a.mul(alpha, x)))


@converter("prelu_grad", "pd_op.prelu_grad")
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
