"""softmax, gelu, tanh, sigmoid, square, dropout and embedding (lookup_table), with their grads."""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from .helpers import constant


# --- activations ------------------------------------------------------------------------------------
def softmax(ctx):
    axis = int(ctx.attr("axis", default=-1))
    ctx.set_output(("Out", "out"), ops.Softmax(ctx.input("X", "x"), axis=axis).output())


def softmax_grad(ctx):
    axis = int(ctx.attr("axis", default=-1))
    grad = ops.SoftmaxBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad"), axis=axis)
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


def gelu(ctx):
    approximate = bool(ctx.attr("approximate", default=False))
    ctx.set_output(("Out", "out"), ops.Gelu(ctx.input("X", "x"), approximate=approximate).output())


def gelu_grad(ctx):
    approximate = bool(ctx.attr("approximate", default=False))
    grad = ops.GeluBackprop(ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad"), approximate=approximate)
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


def tanh(ctx):
    ctx.set_output(("Out", "out"), ops.Tanh(ctx.input("X", "x")).output())


def tanh_grad(ctx):
    grad = ops.TanhBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad"))
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


def sigmoid(ctx):
    ctx.set_output(("Out", "out"), ops.Sigmoid(ctx.input("X", "x")).output())


def sigmoid_grad(ctx):
    grad = ops.SigmoidBackprop(ctx.input("Out", "out"), ctx.input("Out@GRAD", "out_grad"))
    ctx.set_output(("X@GRAD", "x_grad"), grad.output())


def square(ctx):
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Multiply(x, x).output())


def square_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    twice = ops.Multiply(delta, constant(2, delta.dtype)).output()  # Paddle: dout * 2 * x
    ctx.set_output(("X@GRAD", "x_grad"), ops.Multiply(twice, x).output())


# --- dropout ------------------------------------------------------------------------------------------
def _dropout_prob(ctx) -> float:
    return float(ctx.attr_or_const_input(("dropout_prob",), ("p",), default=0.5))


def _upscale_in_train(ctx) -> bool:
    mode = ctx.attr("dropout_implementation", "mode", default="downgrade_in_infer")
    if mode not in ("downgrade_in_infer", "upscale_in_train"):
        raise ctx.fail(f"dropout_implementation {mode!r} is not supported")
    return mode == "upscale_in_train"


def _keep_prob(p: float, value: Output) -> Output:
    # Paddle computes 1.0f - p in float32 and then casts it to the data type.
    return constant(np.float32(1.0) - np.float32(p), value.dtype)


def _apply_mask(value: Output, mask: Output, p: float, upscale: bool) -> Output:
    """value * mask, divided by the keep probability in upscale_in_train mode.

    With p == 1 everything is dropped and Paddle returns zeros instead of dividing by 0.
    """
    kept = ops.Multiply(value, ops.Convert(mask, dtype=value.dtype.value).output()).output()
    if not upscale or p == 1.0:
        return kept
    return ops.Divide(kept, _keep_prob(p, value)).output()


def _apply_test_mode(value: Output, p: float, upscale: bool) -> Output:
    """At test time nothing is dropped; downgrade_in_infer scales by the keep probability instead."""
    return value if upscale else ops.Multiply(value, _keep_prob(p, value)).output()


def dropout(ctx):
    x, p, upscale = ctx.input("X", "x"), _dropout_prob(ctx), _upscale_in_train(ctx)
    if ctx.attr("is_test", default=False):
        ctx.set_output(("Out", "out"), _apply_test_mode(x, p, upscale))
        return
    if ctx.has_input("Seed", "seed_tensor"):
        raise ctx.fail("a seed given as a tensor is not supported")
    seed = int(ctx.attr("seed", default=0)) if ctx.attr("fix_seed", default=False) else None
    mask = ops.DropoutMask(x, prob=p, seed=seed).output()
    ctx.set_output(("Mask", "mask"), mask)
    ctx.set_output(("Out", "out"), _apply_mask(x, mask, p, upscale))


def dropout_grad(ctx):
    delta, p, upscale = ctx.input("Out@GRAD", "out_grad"), _dropout_prob(ctx), _upscale_in_train(ctx)
    if ctx.attr("is_test", default=False):
        grad = _apply_test_mode(delta, p, upscale)
    else:
        grad = _apply_mask(delta, ctx.input("Mask", "mask"), p, upscale)
    ctx.set_output(("X@GRAD", "x_grad"), grad)


# --- embedding: lookup_table_v2 / PIR embedding; lookup_table (v1) has ids with a trailing 1 ------------
def _padding_idx(ctx) -> int:
    return int(ctx.attr("padding_idx", default=-1))  # -1: no padding row, as in Paddle


def _ids(ctx, v1: bool) -> Output:
    ids = ctx.input("Ids", "x")
    if not v1:
        return ids
    if ids.type.rank < 2 or ids.shape[-1] not in (1, -1):
        raise ctx.fail(f"lookup_table ids must end in a dimension of size 1, got {ids.type}")
    return ops.Reshape(ids, shape=list(ids.shape[:-1])).output()


def _lookup(ctx, v1: bool):
    node = ops.EmbeddingLookup(ctx.input("W", "weight"), _ids(ctx, v1), padding_idx=_padding_idx(ctx))
    ctx.set_output(("Out", "out"), node.output())


def _lookup_grad(ctx, v1: bool):
    if ctx.attr("is_sparse", "sparse", default=False):
        raise ctx.fail("is_sparse=True (a SelectedRows gradient) is not supported")
    node = ops.EmbeddingLookupBackprop(ctx.input("W", "weight"), _ids(ctx, v1), ctx.input("Out@GRAD", "out_grad"),
                                       padding_idx=_padding_idx(ctx))
    ctx.set_output(("W@GRAD", "weight_grad"), node.output())


def lookup_table_v2(ctx):
    _lookup(ctx, v1=False)


def lookup_table_v2_grad(ctx):
    _lookup_grad(ctx, v1=False)


def lookup_table(ctx):
    _lookup(ctx, v1=True)


def lookup_table_grad(ctx):
    _lookup_grad(ctx, v1=True)
