"""relu6, hardswish (hard_swish), hardsigmoid (hard_sigmoid), swish and silu, with their grads:
the activations of Paddle's vision model zoo (MobileNet v2/v3, ShuffleNet v2 swish).

Each is a composition of elementwise primitives written in the order of operations of Paddle's
Eigen functors (phi/kernels/funcs/activation_functor.h), so that float rounding matches; the
masks of the piecewise grads use the same strict comparisons as Paddle's grad functors.

Paddle 3.3.1's kernels take no attributes for relu6, hardswish and swish: they compute with
threshold 6, hardswish's threshold/scale/offset 6/6/3 and swish's beta 1, whatever a legacy
program's ``threshold``/``scale``/``offset``/``beta`` attributes say (checked against the
executor). We do the same, to match what Paddle runs.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from .helpers import constant

_RELU6_THRESHOLD = 6.0
_HARDSWISH = dict(threshold=6.0, scale=6.0, offset=3.0)


def _c(value, like: Output) -> Output:
    """A scalar of ``like``'s dtype; float attributes are float32 in Paddle, then cast to T."""
    return constant(np.float32(value), like.dtype)


def _where(mask: Output, value: Output, like: Output) -> Output:
    """value where mask, else 0 (Paddle multiplies by the mask cast to T)."""
    return ops.Select(mask, value, _c(0, like)).output()


def _float_attr(ctx, name: str, default: float) -> float:
    value = ctx.attr(name, default=default)
    if not np.isfinite(value):
        raise ctx.fail(f"{name} must be finite, got {value}")
    return float(value)


# --- relu6: min(max(x, 0), 6) ---------------------------------------------------------------------------
def relu6(ctx):
    x = ctx.input("X", "x")
    clipped = ops.Minimum(ops.Maximum(x, _c(0, x)).output(), _c(_RELU6_THRESHOLD, x)).output()
    ctx.set_output(("Out", "out"), clipped)


def relu6_grad(ctx):
    """dx = dout where 0 < out < 6 (both ends excluded, as Paddle's Relu6GradFunctor)."""
    out, dout = ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")
    inside = ops.LogicalAnd(ops.Greater(out, _c(0, out)).output(),
                            ops.Less(out, _c(_RELU6_THRESHOLD, out)).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), _where(inside, dout, dout))


# --- hardswish: min(max(x + offset, 0), threshold) * x / scale ------------------------------------------------
def hard_swish(ctx):
    x = ctx.input("X", "x")
    t, s, o = (_c(_HARDSWISH[k], x) for k in ("threshold", "scale", "offset"))
    clipped = ops.Minimum(ops.Maximum(ops.Add(x, o).output(), _c(0, x)).output(), t).output()
    ctx.set_output(("Out", "out"), ops.Divide(ops.Multiply(clipped, x).output(), s).output())


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
    return _float_attr(ctx, "slope", 0.2), _float_attr(ctx, "offset", 0.5)


def hard_sigmoid(ctx):
    x = ctx.input("X", "x")
    slope, offset = _slope_offset(ctx)
    linear = ops.Add(ops.Multiply(x, _c(slope, x)).output(), _c(offset, x)).output()
    ctx.set_output(("Out", "out"), ops.Minimum(ops.Maximum(linear, _c(0, x)).output(), _c(1, x)).output())


def hard_sigmoid_grad(ctx):
    """dx = dout * slope where 0 < out < 1 (Paddle's HardSigmoidGradFunctor reads Out)."""
    out, dout = ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad")
    slope, _ = _slope_offset(ctx)
    inside = ops.LogicalAnd(ops.Greater(out, _c(0, out)).output(), ops.Less(out, _c(1, out)).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), _where(inside, ops.Multiply(dout, _c(slope, out)).output(), out))


# --- swish (beta 1) and silu: both x * sigmoid(x), in two different orders of operations -------------------------
def _one_plus_exp_neg(x: Output) -> Output:
    return ops.Add(_c(1, x), ops.Exp(ops.Negative(x).output()).output()).output()


def swish(ctx):
    """x / (1 + exp(-x)) (SwishFunctor with beta 1)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Divide(x, _one_plus_exp_neg(x)).output())


def swish_grad(ctx):
    """s = 1 / (1 + exp(-x)), out = x * s, dx = dout * (out + s * (1 - out)) (SwishGradFunctor)."""
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    s = ops.Divide(_c(1, x), _one_plus_exp_neg(x)).output()
    out = ops.Multiply(x, s).output()
    s_term = ops.Multiply(s, ops.Subtract(_c(1, x), out).output()).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(dout, ops.Add(out, s_term).output()).output())


def silu(ctx):
    """x * (1 / (1 + exp(-x))) (SiluFunctor)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Multiply(x, ops.Divide(_c(1, x), _one_plus_exp_neg(x)).output()).output())


def silu_grad(ctx):
    """e = exp(-x), d = 1 + e, dx = dout * ((1 / d) * (1 + x * e / d)) (SiluGradFunctor)."""
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    e = ops.Exp(ops.Negative(x).output()).output()
    d = ops.Add(_c(1, x), e).output()
    tail = ops.Add(_c(1, x), ops.Divide(ops.Multiply(x, e).output(), d).output()).output()
    local = ops.Multiply(ops.Divide(_c(1, x), d).output(), tail).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(dout, local).output())
