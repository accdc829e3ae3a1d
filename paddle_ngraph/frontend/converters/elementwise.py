"""elementwise_* (legacy) and add/subtract/multiply/divide/... (PIR), with their grads."""
from __future__ import annotations

from ...ir import ops
from .helpers import align_for_axis, constant, reduce_to_shape

_BINARY = {
    "add": ops.Add, "sub": ops.Subtract, "subtract": ops.Subtract, "mul": ops.Multiply, "multiply": ops.Multiply,
    "div": ops.Divide, "divide": ops.Divide, "max": ops.Maximum, "maximum": ops.Maximum,
    "min": ops.Minimum, "minimum": ops.Minimum, "pow": ops.Power, "elementwise_pow": ops.Power,
}


def _kind(op_type: str) -> str:
    return op_type.replace("pd_op.", "").replace("elementwise_", "").rstrip("_").removesuffix("_grad")


def elementwise(ctx):
    """All binary elementwise ops share this converter; the table picks the op by name."""
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    y = align_for_axis(x, y, int(ctx.attr("axis", default=-1)))
    ctx.set_output(("Out", "out"), _BINARY[_kind(ctx.op_type)](x, y).output())


def elementwise_add_grad(ctx):
    _add_sub_grad(ctx, negate_y=False)


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


def elementwise_max_grad(ctx):
    _binary_grad(ctx, lambda x, y, dout: _winner_grad(ops.Greater(x, y).output(), x, y, dout),
                 lambda x, y, dout: _winner_grad(ops.Less(x, y).output(), x, y, dout))


def elementwise_min_grad(ctx):
    _binary_grad(ctx, lambda x, y, dout: _winner_grad(ops.Less(x, y).output(), x, y, dout),
                 lambda x, y, dout: _winner_grad(ops.Greater(x, y).output(), x, y, dout))


def elementwise_pow_grad(ctx):
    """dx = dout * y * x^(y-1), dy = dout * log(x) * x^y, in Paddle's order of operations."""
    def grad_x(x, y, dout):
        y_minus_one = ops.Subtract(y, constant(1, y.dtype)).output()
        return ops.Multiply(ops.Multiply(dout, y).output(), ops.Power(x, y_minus_one).output()).output()

    def grad_y(x, y, dout):
        return ops.Multiply(ops.Multiply(dout, ops.Log(x).output()).output(), ops.Power(x, y).output()).output()

    _binary_grad(ctx, grad_x, grad_y)


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
