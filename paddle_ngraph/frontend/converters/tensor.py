"""Tensor creation: fill_constant/full, full_like, full_int_array, assign."""
from __future__ import annotations

import numpy as np

from ...ir import ops
from .helpers import paddle_dtype


def fill_constant(ctx):
    if ctx.has_input("ShapeTensor", "ShapeTensorList", "ValueTensor"):
        raise ctx.fail("shape or value given as tensors is not supported")
    dtype = paddle_dtype(ctx.attr("dtype"))
    value = ctx.attr("value", default=0.0)
    text = ctx.attr("str_value", default="")
    if text:
        value = float(text)
    shape = [int(d) for d in ctx.attr("shape")]
    ctx.set_output(("Out", "out"), ops.Constant(np.full(shape, value, dtype=dtype.numpy)).output())


def full_int_array(ctx):
    dtype = paddle_dtype(ctx.attr("dtype", default="int64"))
    ctx.set_output(("Out", "out"), ops.Constant(np.asarray(ctx.attr("value"), dtype=dtype.numpy).reshape(-1)).output())


def full_like(ctx):
    x = ctx.input("X", "x")
    # Legacy fill_any_like says dtype -1 for "X's dtype" (the zero grad of an unused split output).
    dtype = x.dtype if ctx.attr("dtype", default=-1) in (-1, None) else paddle_dtype(ctx.attr("dtype"))
    if ctx.has_input("value"):
        value = ctx.const_input("value").reshape(-1)[0]
    else:
        value = ctx.attr("value")
    scalar = ops.Constant(np.asarray(value, dtype=dtype.numpy)).output()
    like = x if x.dtype == dtype else ops.Convert(x, dtype=dtype.value).output()
    ctx.set_output(("Out", "out"), ops.BroadcastTo(scalar, like).output())


def assign(ctx):
    ctx.set_output(("Out", "out"), ctx.input("X", "x"))


_ASSIGN_VALUE_FIELDS = ("fp32_values", "fp64_values", "int32_values", "int64_values", "bool_values", "values")


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
