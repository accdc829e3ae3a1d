"""Elementwise arithmetic, comparisons, logical ops and unary math, with their grads.

elementwise_* (legacy) and add/subtract/multiply/divide/... (PIR); equal, less_than, ... and
logical_* (boolean results, no gradients); exp, log, abs, pow, reciprocal, sqrt, rsqrt, sign,
square, where, scale, increment, sum (add_n) and clip. Formulas and operand order follow
Paddle's CPU kernels (phi activation_functor.h, clip_kernel_impl.h).
"""
from __future__ import annotations

from ...ir import ops
from . import arith as a
from .arith import dout_input as _dout, set_dx as _set_dx, set_out as _set_out, x_input as _x
from .helpers import align_for_axis, constant, reduce_to_shape
from .registry import converter


_BINARY = {
    "add": ops.Add, "sub": ops.Subtract, "subtract": ops.Subtract, "mul": ops.Multiply, "multiply": ops.Multiply,
    "div": ops.Divide, "divide": ops.Divide, "max": ops.Maximum, "maximum": ops.Maximum,
    "min": ops.Minimum, "minimum": ops.Minimum, "pow": ops.Power, "elementwise_pow": ops.Power,
}


def _kind(op_type: str) -> str:
    return op_type.replace("pd_op.", "").replace("elementwise_", "").rstrip("_").removesuffix("_grad")


@converter(
    "elementwise_add", "pd_op.add", "elementwise_sub", "pd_op.subtract", "elementwise_mul", "pd_op.multiply",
    "elementwise_div", "pd_op.divide", "elementwise_max", "pd_op.maximum", "elementwise_min", "pd_op.minimum",
    "elementwise_pow", "pd_op.elementwise_pow",
    # PIR's in-place forms (the result takes x's name): Paddle's backward accumulates a gradient read
    # twice with add_ under FLAGS_max_inplace_grad_add (its ResNet build-strategy test sets it).
    "pd_op.add_", "pd_op.subtract_", "pd_op.multiply_", "pd_op.divide_",
)
def elementwise(ctx):
    """All binary elementwise ops share this converter; ``_BINARY`` picks the IR op by name."""
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    y = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    ctx.set_output(("Out", "out"), _BINARY[_kind(ctx.op_type)](x, y).output())


@converter("elementwise_mod", "pd_op.remainder", "pd_op.remainder_", "elementwise_floordiv", "pd_op.floor_divide",
           "pd_op.floor_divide_")
def mod_floor_divide(ctx):
    """Paddle's remainder (Python's %: the result takes the divisor's sign, for integers and floats)
    and floor_divide (Python's //). int32/int64/float32/float64, as Paddle's CPU kernels; bool is
    refused (Paddle has no bool kernel either).

    Integer division by zero: Paddle's kernels raise InvalidArgumentError at run time; the engine
    cannot stop a step for a value it only sees while running, so it gives NumPy's answer instead
    (x // 0 == x % 0 == 0) rather than trapping the process, and MIN // -1 wraps to MIN (MIN % -1
    is 0) where C's division would trap. Float division by zero follows IEEE, as Paddle: x // 0 is
    a / b (inf or NaN), x % 0 is NaN."""
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    if x.dtype.name not in ("int32", "int64", "float32", "float64") or x.dtype != y.dtype:
        raise ctx.fail(f"supports int32/int64/float32/float64 operands of one dtype, got {x.dtype} and {y.dtype}")
    y = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    op = ops.FloorDivide if "floor" in ctx.op_type else ops.Mod
    out = op(x, y).output()
    ctx.set_output(("Out", "out"), out)
    if ctx.op_type.endswith("_"):
        # PIR's in-place forms update X (as increment_): later readers of X see the result.
        ctx.session.bind(ctx.input_name("X", "x"), out, ctx)


@converter("elementwise_add_grad", "pd_op.add_grad")
def elementwise_add_grad(ctx):
    _add_sub_grad(ctx, negate_y=False)


@converter("elementwise_sub_grad", "pd_op.subtract_grad")
def elementwise_sub_grad(ctx):
    _add_sub_grad(ctx, negate_y=True)


def _add_sub_grad(ctx, negate_y: bool):
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    dout = ctx.input("Out@GRAD", "out_grad")
    y_aligned = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), reduce_to_shape(dout, x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        dy = ops.Negative(dout).output() if negate_y else dout
        dy = reduce_to_shape(dy, y_aligned.shape)
        if dy.shape != y.shape:
            dy = ops.Reshape(dy, shape=list(y.shape)).output()
        ctx.set_output(("Y@GRAD", "y_grad"), dy)


@converter("elementwise_mul_grad", "pd_op.multiply_grad")
def elementwise_mul_grad(ctx):
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    dout = ctx.input("Out@GRAD", "out_grad")
    y_aligned = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), reduce_to_shape(ops.Multiply(dout, y_aligned).output(), x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        dy = reduce_to_shape(ops.Multiply(dout, x).output(), y_aligned.shape)
        if dy.shape != y.shape:
            dy = ops.Reshape(dy, shape=list(y.shape)).output()
        ctx.set_output(("Y@GRAD", "y_grad"), dy)


@converter("sum", "pd_op.add_n")
def sum(ctx):  # noqa: A001  (named after the Paddle op)
    """Legacy ``sum`` / PIR ``add_n``: adds a list of tensors (gradient accumulation)."""
    values = ctx.inputs("X", "inputs")
    if not values:
        raise ctx.fail("needs at least one input")
    total = values[0]
    for v in values[1:]:
        total = ops.Add(total, v).output()
    ctx.set_output(("Out", "out"), total)


def _binary_grad(ctx, grad_x, grad_y):
    """Shared by the grads below. ``grad_x(x, y, dout)`` and ``grad_y`` build the gradients at
    the broadcast shape (y aligned for the legacy ``axis``); each is then summed back over the
    axes its operand was broadcast along. Only the requested gradients are built."""
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    dout = ctx.input("Out@GRAD", "out_grad")
    y_aligned = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), reduce_to_shape(grad_x(x, y_aligned, dout), x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        dy = reduce_to_shape(grad_y(x, y_aligned, dout), y_aligned.shape)
        if dy.shape != y.shape:
            dy = ops.Reshape(dy, shape=list(y.shape)).output()
        ctx.set_output(("Y@GRAD", "y_grad"), dy)


@converter("elementwise_div_grad", "pd_op.divide_grad")
def elementwise_div_grad(ctx):
    """dx = dout / y, dy = -dout * out / y (Paddle's order: out is the forward quotient)."""
    out = ctx.input("Out", "out")
    _binary_grad(ctx, lambda x, y, dout: ops.Divide(dout, y).output(),
                 lambda x, y, dout: ops.Divide(ops.Multiply(ops.Negative(dout).output(), out).output(), y).output())


def _winner_grad(wins, x, y, dout):
    """dout where this operand is the result, half of it on ties (Paddle splits ties evenly), else 0."""
    half = ops.Multiply(dout, constant(0.5, dout.dtype)).output()
    ties = ops.Select(ops.Equal(x, y).output(), half, constant(0, dout.dtype)).output()
    return ops.Select(wins, dout, ties).output()


@converter("elementwise_max_grad", "pd_op.maximum_grad")
def elementwise_max_grad(ctx):
    _binary_grad(ctx, lambda x, y, dout: _winner_grad(ops.Greater(x, y).output(), x, y, dout),
                 lambda x, y, dout: _winner_grad(ops.Less(x, y).output(), x, y, dout))


@converter("elementwise_min_grad", "pd_op.minimum_grad")
def elementwise_min_grad(ctx):
    _binary_grad(ctx, lambda x, y, dout: _winner_grad(ops.Less(x, y).output(), x, y, dout),
                 lambda x, y, dout: _winner_grad(ops.Greater(x, y).output(), x, y, dout))


@converter("elementwise_pow_grad", "pd_op.elementwise_pow_grad")
def elementwise_pow_grad(ctx):
    """dx = dout * y * x^(y-1), dy = dout * log(x) * x^y, in Paddle's order of operations."""
    def grad_x(x, y, dout):
        y_minus_one = ops.Subtract(y, constant(1, y.dtype)).output()
        return ops.Multiply(ops.Multiply(dout, y).output(), ops.Power(x, y_minus_one).output()).output()

    def grad_y(x, y, dout):
        return ops.Multiply(ops.Multiply(dout, ops.Log(x).output()).output(), ops.Power(x, y).output()).output()

    _binary_grad(ctx, grad_x, grad_y)


@converter("scale", "pd_op.scale")
def scale(ctx):
    """out = scale * x + bias, or scale * (x + bias) when not bias_after_scale. Also the
    gradient of scale (Paddle emits a scale by the same factor). PIR passes scale as an operand."""
    x = ctx.input("X", "x")
    factor = constant(ctx.attr_or_const_input(("scale",), ("ScaleTensor", "scale"), default=1.0), x.dtype)
    bias = constant(ctx.attr_or_const_input(("bias",), ("BiasTensor",), default=0.0), x.dtype)
    if ctx.attr("bias_after_scale", default=True):
        out = ops.Add(ops.Multiply(x, factor).output(), bias)
    else:
        out = ops.Multiply(ops.Add(x, bias).output(), factor)
    ctx.set_output(("Out", "out"), out.output())


@converter("increment", "pd_op.increment", "pd_op.increment_")
def increment(ctx):
    """Legacy ``step`` / PIR ``value``, in the dtype of X (counters are often int64)."""
    x = ctx.input("X", "x")
    out = ops.Add(x, constant(ctx.attr("step", "value", default=1.0), x.dtype)).output()
    ctx.set_output(("Out", "out"), out)
    if ctx.op_type.endswith("_"):
        # PIR increment_ updates X in place (paddle.increment returns X): later readers of X,
        # and the state result of a persistable counter, see the new value, as in legacy
        # programs where Out is named X.
        ctx.session.bind(ctx.input_name("X", "x"), out, ctx)


_COMPARISONS = {
    "equal": ops.Equal, "not_equal": ops.NotEqual, "less_than": ops.Less, "less_equal": ops.LessEqual,
    "greater_than": ops.Greater, "greater_equal": ops.GreaterEqual,
    "logical_and": ops.LogicalAnd, "logical_or": ops.LogicalOr,
}


@converter(
    "equal", "pd_op.equal", "not_equal", "pd_op.not_equal", "less_than", "pd_op.less_than",
    "less_equal", "pd_op.less_equal", "greater_than", "pd_op.greater_than", "greater_equal", "pd_op.greater_equal",
    "logical_and", "pd_op.logical_and", "logical_or", "pd_op.logical_or",
)
def compare(ctx):
    """All binary comparison and logical ops share this converter; ``_COMPARISONS`` picks the IR op by name.
    Legacy programs may carry the elementwise ``axis`` attribute."""
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    y = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    ctx.set_output(("Out", "out"), _COMPARISONS[ctx.op_type.removeprefix("pd_op.")](x, y).output())


@converter("logical_not", "pd_op.logical_not")
def logical_not(ctx):
    ctx.set_output(("Out", "out"), ops.LogicalNot(ctx.input("X", "x")).output())


@converter("exp", "pd_op.exp")
def exp(ctx):
    _set_out(ctx, a.exp(_x(ctx)))


@converter("exp_grad", "pd_op.exp_grad")
def exp_grad(ctx):
    _set_dx(ctx, a.mul(_dout(ctx), ctx.input("Out", "out")))


@converter("log", "pd_op.log")
def log(ctx):
    _set_out(ctx, a.log(_x(ctx)))


@converter("log_grad", "pd_op.log_grad")
def log_grad(ctx):
    x = _x(ctx)
    _set_dx(ctx, a.mul(_dout(ctx), a.div(a.c(1, x), x)))


@converter("abs", "pd_op.abs")
def abs(ctx):  # noqa: A001  (named after the Paddle op)
    _set_out(ctx, ops.Abs(_x(ctx)).output())


@converter("abs_grad", "pd_op.abs_grad")
def abs_grad(ctx):
    """dout * sign(x); 0 at x == 0, as Paddle."""
    _set_dx(ctx, a.mul(_dout(ctx), a.sign(_x(ctx))))


def _pow_factor(ctx) -> float:
    """Legacy ``factor`` (or a constant FactorTensor), PIR ``y``; a C++ float in Paddle."""
    if ctx.has_input("FactorTensor"):
        return float(ctx.const_input("FactorTensor").reshape(-1)[0].item())
    return float(ctx.attr("factor", "y", default=1.0))


@converter("pow", "pd_op.pow")
def pow(ctx):  # noqa: A001
    x = _x(ctx)
    _set_out(ctx, ops.Power(x, a.c(_pow_factor(ctx), x)).output())


@converter("pow_grad", "pd_op.pow_grad")
def pow_grad(ctx):
    """dout * factor * x^(factor - 1)."""
    x, factor = _x(ctx), _pow_factor(ctx)
    scaled = a.mul(_dout(ctx), a.c(factor, x))
    _set_dx(ctx, a.mul(scaled, ops.Power(x, a.c(factor - 1, x)).output()))


@converter("reciprocal", "pd_op.reciprocal")
def reciprocal(ctx):
    x = _x(ctx)
    _set_out(ctx, a.div(a.c(1, x), x))


@converter("reciprocal_grad", "pd_op.reciprocal_grad")
def reciprocal_grad(ctx):
    """dout * -1 * out * out."""
    out = ctx.input("Out", "out")
    _set_dx(ctx, a.mul(a.mul(a.mul(_dout(ctx), a.c(-1, out)), out), out))


@converter("sqrt", "pd_op.sqrt")
def sqrt(ctx):
    _set_out(ctx, ops.Sqrt(_x(ctx)).output())


@converter("sqrt_grad", "pd_op.sqrt_grad")
def sqrt_grad(ctx):
    """0.5 * dout / out."""
    out = ctx.input("Out", "out")
    _set_dx(ctx, a.div(a.mul(a.c(0.5, out), _dout(ctx)), out))


@converter("rsqrt", "pd_op.rsqrt")
def rsqrt(ctx):
    x = _x(ctx)
    _set_out(ctx, a.div(a.c(1, x), ops.Sqrt(x).output()))


@converter("rsqrt_grad", "pd_op.rsqrt_grad")
def rsqrt_grad(ctx):
    """-0.5 * dout * out^3."""
    out = ctx.input("Out", "out")
    _set_dx(ctx, a.mul(a.mul(a.mul(a.mul(a.c(-0.5, out), _dout(ctx)), out), out), out))


@converter("sign", "pd_op.sign")
def sign(ctx):
    """No gradient: Paddle's sign has none (L1Decay applies it to a parameter's value)."""
    _set_out(ctx, a.sign(_x(ctx)))


@converter("where", "pd_op.where")
def where(ctx):
    cond, x, y = ctx.input("Condition", "condition"), _x(ctx), ctx.input("Y", "y")
    _set_out(ctx, a.select(cond, x, y))


@converter("where_grad", "pd_op.where_grad")
def where_grad(ctx):
    """dout where the condition picked the operand, 0 elsewhere; summed over broadcast axes."""
    cond, x, y, dout = ctx.input("Condition", "condition"), _x(ctx), ctx.input("Y", "y"), _dout(ctx)
    zero = a.c(0, dout)
    if ctx.has_output("X@GRAD", "x_grad"):
        _set_dx(ctx, reduce_to_shape(a.select(cond, dout, zero), x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        ctx.set_output(("Y@GRAD", "y_grad"), reduce_to_shape(a.select(cond, zero, dout), y.shape))


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


@converter("clip", "pd_op.clip")
def clip(ctx):
    """x < min ? min : (x > max ? max : x)."""
    x = _x(ctx)
    lo, hi = _clip_bounds(ctx, x)
    _set_out(ctx, a.select(a.lt(x, lo), lo, a.select(a.gt(x, hi), hi, x)))


@converter("clip_grad", "pd_op.clip_grad")
def clip_grad(ctx):
    """dout where min <= x <= max (the bounds pass the gradient), else 0."""
    x, dout = _x(ctx), _dout(ctx)
    lo, hi = _clip_bounds(ctx, x)
    inside = ops.LogicalAnd(a.ge(x, lo), a.le(x, hi)).output()
    _set_dx(ctx, a.select(inside, dout, a.c(0, dout)))


@converter("square", "pd_op.square")
def square(ctx):
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Multiply(x, x).output())


@converter("square_grad", "pd_op.square_grad")
def square_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    twice = ops.Multiply(delta, constant(2, delta.dtype)).output()  # Paddle: dout * 2 * x
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(twice, x).output())
