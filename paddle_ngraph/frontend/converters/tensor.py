"""Tensor creation, retyping and copies: fill_constant/full, full_int_array, full_like, assign,
assign_value, cast, fill_zeros_like, shape (shape64 in PIR) and full_with_tensor (a full of a
shape tensor: sigmoid_focal_loss's ones); and dropout, whose random mask is created here.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType
from .helpers import constant, paddle_dtype
from .registry import converter
from .shape import const_ints, zeros_like


@converter("fill_constant", "pd_op.full")
def fill_constant(ctx):
    """Legacy fill_constant takes its shape from ``ShapeTensor`` or ``ShapeTensorList`` and its value
    from ``ValueTensor`` where given (over the attributes, as in Paddle): a shape must be known at
    conversion time, a value may be computed (``paddle.full(shape, tensor)``)."""
    dtype = paddle_dtype(ctx.attr("dtype"))
    if ctx.has_input("ShapeTensor") or ctx.has_input("ShapeTensorList"):
        shape = const_ints(ctx, "shape", "ShapeTensor", "ShapeTensorList")
    else:
        shape = [int(d) for d in ctx.attr("shape")]
    if any(d < 0 for d in shape):
        raise ctx.fail(f"shape {shape} is not known at conversion time")
    if ctx.has_input("ValueTensor"):
        value = ctx.input("ValueTensor")
        if any(d != 1 for d in value.shape):
            raise ctx.fail(f"ValueTensor must hold one element, got {value.type}")
        if value.type.rank:
            value = ops.Reshape(value, shape=[]).output()
        if value.dtype != dtype:
            value = ops.Convert(value, dtype=dtype.value).output()
        like = ops.Constant(np.zeros(shape, dtype.numpy)).output()
        ctx.set_output(("Out", "out"), ops.BroadcastTo(value, like).output())
        return
    value = ctx.attr("value", default=0.0)
    text = ctx.attr("str_value", default="")
    if text:
        value = float(text)
    ctx.set_output(("Out", "out"), ops.Constant(np.full(shape, value, dtype=dtype.numpy)).output())


@converter("pd_op.full_int_array")
def full_int_array(ctx):
    dtype = paddle_dtype(ctx.attr("dtype", default="int64"))
    ctx.set_output(("Out", "out"), ops.Constant(np.asarray(ctx.attr("value"), dtype=dtype.numpy).reshape(-1)).output())


def _like_dtype(attr, x: Output) -> DType:
    """The dtype a ``*_like`` op makes: its attribute, or X's where the attribute says "X's dtype":
    legacy fill_any_like's -1 (the zero grad of an unused split output), PIR's ``DataType.UNDEFINED``
    (the zero gradients Paddle's backward makes for the slots of a tensor array, as Paddle's
    FullLikeInferMeta takes X's dtype for it)."""
    if attr in (-1, None) or str(attr).lower().split(".")[-1] == "undefined":
        return x.dtype
    return paddle_dtype(attr)


@converter("fill_any_like", "pd_op.full_like")
def full_like(ctx):
    x = ctx.input("X", "x")
    dtype = _like_dtype(ctx.attr("dtype", default=-1), x)
    if ctx.has_input("value"):
        value = ctx.const_input("value").reshape(-1)[0]
    else:
        value = ctx.attr("value")
    scalar = ops.Constant(np.asarray(value, dtype=dtype.numpy)).output()
    like = x if x.dtype == dtype else ops.Convert(x, dtype=dtype.value).output()
    ctx.set_output(("Out", "out"), ops.BroadcastTo(scalar, like).output())


@converter("assign", "pd_op.assign")
def assign(ctx):
    ctx.set_output(("Out", "out"), ctx.input("X", "x"))


_ASSIGN_VALUE_FIELDS = ("fp32_values", "fp64_values", "int32_values", "int64_values", "bool_values", "values")


@converter("assign_value", "pd_op.assign_value", "pd_op.assign_value_")
def assign_value(ctx):
    dtype = paddle_dtype(ctx.attr("dtype"))
    shape = [int(d) for d in ctx.attr("shape")]
    for field in _ASSIGN_VALUE_FIELDS:
        values = ctx.attr(field, default=None)
        if values:
            break
    else:
        values = []
    # Legacy programs store paddle Scalar objects; PIR plain numbers.
    values = [v.value() if hasattr(v, "value") and callable(v.value) else v for v in values]
    ctx.set_output(("Out", "out"), ops.Constant(np.asarray(values, dtype=dtype.numpy).reshape(shape)).output())


# --- shapes as tensors ----------------------------------------------------------------------------------------
_SHAPE_OPS = ("shape", "pd_op.shape", "pd_op.shape64")


@converter(*_SHAPE_OPS)
def shape(ctx):
    """A constant: the IR has no run-time shape, so a dynamic dimension refuses (the op then runs
    in Paddle; full_with_tensor still converts, see below)."""
    x = ctx.input("Input", "input")
    if not x.type.is_static:
        raise ctx.fail(f"the shape of {x.type} is not known at conversion time")
    dtype = "int64" if ctx.op_type == "pd_op.shape64" else "int32"
    ctx.set_output(("Out", "out"), ops.Constant(np.asarray(x.shape, dtype=dtype)).output())


def _shape_source(ctx, slot: str) -> Output | None:
    """The tensor whose shape op made input ``slot``, if a shape op made it."""
    name = ctx.input_name(slot)
    view = ctx.session.view
    producer = next((op for op in view.ops if op.block == ctx.op.block and name in op.output_names()), None)
    if producer is None or producer.type not in _SHAPE_OPS:
        return None
    return ctx.session.value(producer.input_names()[0], ctx)


@converter("pd_op.full_with_tensor")
def full_with_tensor(ctx):
    """value broadcast to a shape given as a tensor: a constant one, or the shape of a tensor
    (paddle.shape(x), dynamic dims included), which is a broadcast to that tensor."""
    dtype = paddle_dtype(ctx.attr("dtype"))
    value = ctx.input("value")
    if value.type.rank:
        if any(d != 1 for d in value.shape):
            raise ctx.fail(f"value must hold one element, got {value.type}")
        value = ops.Reshape(value, shape=[]).output()
    if value.dtype != dtype:
        value = ops.Convert(value, dtype=dtype.value).output()
    source = _shape_source(ctx, "shape")
    if source is not None:
        like = source if source.dtype == dtype else ops.Convert(source, dtype=dtype.value).output()
        ctx.set_output(("Out", "out"), ops.BroadcastTo(value, like).output())
        return
    dims = [int(d) for d in ctx.const_input("shape").reshape(-1)]
    ctx.set_output(("Out", "out"), ops.BroadcastTo(value, ops.Constant(np.zeros(dims, dtype.numpy)).output()).output())


# --- retyping and zeros ------------------------------------------------------------------------------
@converter("cast", "pd_op.cast")
def cast(ctx):
    """Also the gradient of cast: Paddle emits a cast back to the input dtype."""
    x = ctx.input("X", "x")
    dtype = paddle_dtype(ctx.attr("out_dtype", "dtype"))
    ctx.set_output(("Out", "out"), x if x.dtype == dtype else ops.Convert(x, dtype=dtype.value).output())


@converter("fill_zeros_like")
def fill_zeros_like(ctx):
    ctx.set_output(("Out", "out"), zeros_like(ctx.input("X", "x")))


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


@converter("dropout", "pd_op.dropout")
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


@converter("dropout_grad", "pd_op.dropout_grad")
def dropout_grad(ctx):
    delta, p, upscale = ctx.input("Out@GRAD", "out_grad"), _dropout_prob(ctx), _upscale_in_train(ctx)
    if ctx.attr("is_test", default=False):
        grad = _apply_test_mode(delta, p, upscale)
    else:
        grad = _apply_mask(delta, ctx.input("Mask", "mask"), p, upscale)
    ctx.set_output(("X@GRAD", "x_grad"), grad)
