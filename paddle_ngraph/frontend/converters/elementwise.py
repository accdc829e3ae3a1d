"""elementwise_* (legacy) and add/subtract/multiply/divide/... (PIR), with their grads."""
from __future__ import annotations

from ...ir import ops
from .helpers import align_for_axis, reduce_to_shape

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
