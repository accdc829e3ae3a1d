"""matmul_v2 (legacy) / matmul (PIR) and the gradient."""
from __future__ import annotations

from ...ir import ops
from .helpers import reduce_to_shape


def _flags(ctx):
    return bool(ctx.attr("trans_x", "transpose_x", default=False)), bool(ctx.attr("trans_y", "transpose_y", default=False))


def matmul_v2(ctx):
    tx, ty = _flags(ctx)
    ctx.set_output(("Out", "out"), ops.MatMul(ctx.input("X", "x"), ctx.input("Y", "y"), transpose_a=tx, transpose_b=ty).output())


def matmul_v2_grad(ctx):
    x, y, dout = ctx.input("X", "x"), ctx.input("Y", "y"), ctx.input("Out@GRAD", "out_grad")
    tx, ty = _flags(ctx)
    if x.type.rank < 2 or y.type.rank < 2:
        raise ctx.fail("gradient of a matmul with a 1-D operand is not supported yet")
    # C = op(A) op(B); the four cases of which operand is transposed.
    if not tx and not ty:
        dx, dy = ops.MatMul(dout, y, transpose_b=True), ops.MatMul(x, dout, transpose_a=True)
    elif not tx and ty:
        dx, dy = ops.MatMul(dout, y), ops.MatMul(dout, x, transpose_a=True)
    elif tx and not ty:
        dx, dy = ops.MatMul(y, dout, transpose_b=True), ops.MatMul(x, dout)
    else:
        dx, dy = ops.MatMul(y, dout, transpose_a=True, transpose_b=True), ops.MatMul(dout, x, transpose_a=True, transpose_b=True)
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), reduce_to_shape(dx.output(), x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        ctx.set_output(("Y@GRAD", "y_grad"), reduce_to_shape(dy.output(), y.shape))
