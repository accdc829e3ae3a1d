"""matmul_v2 (legacy) / matmul (PIR), the fluid matmul (v1, with alpha) and mul
(PIR matmul_with_flatten), with their gradients."""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from .helpers import constant, reduce_to_shape
from .registry import converter


def _flags(ctx):
    return bool(ctx.attr("trans_x", "transpose_x", default=False)), bool(ctx.attr("trans_y", "transpose_y", default=False))


def _rows(x: Output, y: Output, tx: bool) -> int | None:
    """The row count of x seen as one 2-D matrix, where op(x) @ op(y) is one product over those
    rows: x of rank >= 3, not transposed, of a static shape, and y 2-D (a Linear applied to a
    [batch, steps, features] input). One GEMM instead of a batch of small ones, and for y's
    gradient one GEMM instead of a batch of outer products summed over the batch (94 of 118 us of
    the backward of Paddle's parallel_dygraph_sparse_embedding model)."""
    if tx or y.type.rank != 2 or x.type.rank < 3 or any(int(d) < 0 for d in x.shape):
        return None
    return int(np.prod(x.shape[:-1]))


@converter("matmul_v2", "pd_op.matmul")
def matmul_v2(ctx):
    tx, ty = _flags(ctx)
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    rows = _rows(x, y, tx)
    if rows is not None:
        flat = ops.MatMul(ops.Reshape(x, shape=[rows, x.shape[-1]]).output(), y, transpose_b=ty).output()
        ctx.set_output(("Out", "out"), ops.Reshape(flat, shape=[*x.shape[:-1], flat.shape[-1]]).output())
        return
    ctx.set_output(("Out", "out"), ops.MatMul(x, y, transpose_a=tx, transpose_b=ty).output())


@converter("matmul_v2_grad", "pd_op.matmul_grad")
def matmul_v2_grad(ctx):
    tx, ty = _flags(ctx)
    _set_matmul_grads(ctx, ctx.input("X", "x"), ctx.input("Y", "y"), ctx.input("Out@GRAD", "out_grad"), tx, ty)


def _set_matmul_grads(ctx, x: Output, y: Output, dout: Output, tx: bool, ty: bool):
    dx, dy = _matmul_grads(x, y, dout, tx, ty)
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), dx)
    if ctx.has_output("Y@GRAD", "y_grad"):
        ctx.set_output(("Y@GRAD", "y_grad"), dy)


def _matmul_grads(x: Output, y: Output, dout: Output, tx: bool, ty: bool) -> tuple[Output, Output]:
    """Gradients of op(x) @ op(y) with batch broadcasting.

    As in the forward, a 1-D x is a [1, K] row and a 1-D y a [K, 1] column, whose size-1
    dim the output lacks; their transpose flags do not apply.
    """
    x2, y2, dout_shape = x, y, list(dout.shape)
    if y.type.rank == 1:
        y2, ty = ops.Reshape(y, shape=[y.shape[0], 1]).output(), False
        dout_shape.append(1)
    if x.type.rank == 1:
        x2, tx = ops.Reshape(x, shape=[1, x.shape[0]]).output(), False
        dout_shape.insert(len(dout_shape) - 1, 1)
    dout2 = _reshape_to(dout, dout_shape)
    rows = _rows(x2, y2, tx)
    if rows is not None:  # op(y) is [K, N]: products over x's rows at once
        x_flat = ops.Reshape(x2, shape=[rows, x2.shape[-1]]).output()
        dout_flat = ops.Reshape(dout2, shape=[rows, dout2.shape[-1]]).output()
        if ty:
            dx, dy = ops.MatMul(dout_flat, y2), ops.MatMul(dout_flat, x_flat, transpose_a=True)
        else:
            dx, dy = ops.MatMul(dout_flat, y2, transpose_b=True), ops.MatMul(x_flat, dout_flat, transpose_a=True)
        return _reshape_to(dx.output(), x.shape), _reshape_to(dy.output(), y.shape)
    # C = op(A) op(B); the four cases of which operand is transposed.
    if not tx and not ty:
        dx, dy = ops.MatMul(dout2, y2, transpose_b=True), ops.MatMul(x2, dout2, transpose_a=True)
    elif not tx and ty:
        dx, dy = ops.MatMul(dout2, y2), ops.MatMul(dout2, x2, transpose_a=True)
    elif tx and not ty:
        dx, dy = ops.MatMul(y2, dout2, transpose_b=True), ops.MatMul(x2, dout2)
    else:
        dx, dy = ops.MatMul(y2, dout2, transpose_a=True, transpose_b=True), ops.MatMul(dout2, x2, transpose_a=True, transpose_b=True)
    dx = _reshape_to(reduce_to_shape(dx.output(), x2.shape), x.shape)
    dy = _reshape_to(reduce_to_shape(dy.output(), y2.shape), y.shape)
    return dx, dy


def _reshape_to(value: Output, shape) -> Output:
    return value if tuple(value.shape) == tuple(shape) else ops.Reshape(value, shape=list(shape)).output()


# --- matmul (v1): out = alpha * op(X) @ op(Y) --------------------------------------------------------
def _v1_attrs(ctx):
    if int(ctx.attr("head_number", default=1)) != 1:
        raise ctx.fail(f"head_number={ctx.attr('head_number')} is not supported")
    return (bool(ctx.attr("transpose_X", default=False)), bool(ctx.attr("transpose_Y", default=False)),
            float(ctx.attr("alpha", default=1.0)))


def _scaled(value: Output, alpha: float) -> Output:
    return value if alpha == 1.0 else ops.Multiply(value, constant(alpha, value.dtype)).output()


@converter("matmul")
def matmul(ctx):
    tx, ty, alpha = _v1_attrs(ctx)
    out = ops.MatMul(ctx.input("X"), ctx.input("Y"), transpose_a=tx, transpose_b=ty).output()
    ctx.set_output("Out", _scaled(out, alpha))


@converter("matmul_grad")
def matmul_grad(ctx):
    tx, ty, alpha = _v1_attrs(ctx)
    _set_matmul_grads(ctx, ctx.input("X"), ctx.input("Y"), _scaled(ctx.input("Out@GRAD"), alpha), tx, ty)


# --- mul (PIR matmul_with_flatten): operands flattened to matrices at *_num_col_dims ------------------
def _num_col_dims(ctx):
    return int(ctx.attr("x_num_col_dims", default=1)), int(ctx.attr("y_num_col_dims", default=1))


def _as_matrix(value: Output, num_col_dims: int) -> Output:
    """Dims [0, num_col_dims) become the rows, the others the columns."""
    def size(dims):
        return -1 if any(d < 0 for d in dims) else int(np.prod(dims))
    return _reshape_to(value, [size(value.shape[:num_col_dims]), size(value.shape[num_col_dims:])])


@converter("mul", "pd_op.matmul_with_flatten")
def mul(ctx):
    x, y = ctx.input("X", "x"), ctx.input("Y", "y")
    xn, yn = _num_col_dims(ctx)
    out = ops.MatMul(_as_matrix(x, xn), _as_matrix(y, yn)).output()
    ctx.set_output(("Out", "out"), _reshape_to(out, list(x.shape[:xn]) + list(y.shape[yn:])))


@converter("mul_grad", "pd_op.matmul_with_flatten_grad")
def mul_grad(ctx):
    x, y, dout = ctx.input("X", "x"), ctx.input("Y", "y"), ctx.input("Out@GRAD", "out_grad")
    xn, yn = _num_col_dims(ctx)
    x2, y2, dout2 = _as_matrix(x, xn), _as_matrix(y, yn), _as_matrix(dout, xn)
    if ctx.has_output("X@GRAD", "x_grad"):
        ctx.set_output(("X@GRAD", "x_grad"), _reshape_to(ops.MatMul(dout2, y2, transpose_b=True).output(), x.shape))
    if ctx.has_output("Y@GRAD", "y_grad"):
        ctx.set_output(("Y@GRAD", "y_grad"), _reshape_to(ops.MatMul(x2, dout2, transpose_a=True).output(), y.shape))


# --- bilinear_tensor_product (legacy) / bilinear (PIR): out[b, k] = x[b] W[k] y[b] + bias[k] ---------
def _bilinear_inputs(ctx):
    x, y, w = ctx.input("X", "x"), ctx.input("Y", "y"), ctx.input("Weight", "weight")
    if x.type.rank != 2 or y.type.rank != 2 or w.type.rank != 3 or any(d < 0 for d in w.shape):
        raise ctx.fail(f"needs x [B, I], y [B, J] and a static weight [K, I, J], got {x.type}, {y.type}, {w.type}")
    return x, y, w


def _bilinear_side(left: Output, w: Output, perm: list, size: int, outer: int) -> Output:
    """[B, K, size]: left [B, n] times each W[k] (permuted so that left's dimension comes first):
    one GEMM against W as [n, K * size] (Paddle's kernel makes one GEMM per k)."""
    k = w.shape[0]
    flat = ops.Reshape(ops.Transpose(w, perm=perm).output(), shape=[outer, k * size]).output()
    return ops.Reshape(ops.MatMul(left, flat).output(), shape=[-1, k, size]).output()


@converter("bilinear_tensor_product", "pd_op.bilinear")
def bilinear(ctx):
    x, y, w = _bilinear_inputs(ctx)
    k, i, j = w.shape
    xw = _bilinear_side(x, w, [1, 0, 2], j, i)                       # [B, K, J]: x W[k]
    out = ops.ReduceSum(ops.Multiply(xw, ops.Reshape(y, shape=[-1, 1, j]).output()).output(), axes=[2]).output()
    if ctx.has_input("Bias", "bias"):
        out = ops.Add(out, ops.Reshape(ctx.input("Bias", "bias"), shape=[1, k]).output()).output()
    ctx.set_output(("Out", "out"), out)


@converter("bilinear_tensor_product_grad", "pd_op.bilinear_grad")
def bilinear_grad(ctx):
    """dx[b] = sum_k dout[b, k] W[k] y[b]; dy[b] = sum_k dout[b, k] x[b] W[k];
    dW[k] = sum_b dout[b, k] x[b]^T y[b]; dbias[k] = sum_b dout[b, k]."""
    x, y, w = _bilinear_inputs(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    k, i, j = w.shape
    scale = ops.Reshape(dout, shape=[-1, k, 1]).output()             # [B, K, 1]
    if ctx.has_output("X@GRAD", "x_grad"):
        yw = _bilinear_side(y, w, [2, 0, 1], i, j)                   # [B, K, I]: W[k] y
        ctx.set_output(("X@GRAD", "x_grad"), ops.ReduceSum(ops.Multiply(yw, scale).output(), axes=[1]).output())
    if ctx.has_output("Y@GRAD", "y_grad"):
        xw = _bilinear_side(x, w, [1, 0, 2], j, i)                   # [B, K, J]: x W[k]
        ctx.set_output(("Y@GRAD", "y_grad"), ops.ReduceSum(ops.Multiply(xw, scale).output(), axes=[1]).output())
    if ctx.has_output("Weight@GRAD", "weight_grad"):
        scaled_x = ops.Reshape(ops.Multiply(scale, ops.Reshape(x, shape=[-1, 1, i]).output()).output(),
                               shape=[-1, k * i]).output()           # [B, K * I]
        dw = ops.MatMul(scaled_x, y, transpose_a=True).output()      # [K * I, J]
        ctx.set_output(("Weight@GRAD", "weight_grad"), ops.Reshape(dw, shape=[k, i, j]).output())
    if ctx.has_output("Bias@GRAD", "bias_grad"):
        ctx.set_output(("Bias@GRAD", "bias_grad"), ops.ReduceSum(dout, axes=[0], keep_dims=True).output())
