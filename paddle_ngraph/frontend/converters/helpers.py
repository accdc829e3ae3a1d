"""Shared pieces of converters: broadcasting rules, gradient reduction, dtypes."""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType


def paddle_dtype(value) -> DType:
    """Paddle dtype in any of its spellings (VarType int, DataType, 'float32', paddle.float32)."""
    if isinstance(value, DType):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        # legacy VarType.Type codes (framework.proto)
        legacy = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32", 6: "float64",
                  20: "uint8", 21: "int8", 22: "bfloat16"}
        return DType(legacy[int(value)])
    text = str(value).lower().replace("paddle.", "").replace("datatype.", "").replace("vartype.", "")
    text = text.split(":")[0].strip("<> ")
    aliases = {"fp32": "float32", "fp64": "float64", "fp16": "float16", "bf16": "bfloat16", "float": "float32"}
    return DType(aliases.get(text, text))


def align_for_axis(x: Output, y: Output, axis: int) -> Output:
    """Legacy elementwise ``axis``: Y's dims line up with X's starting at ``axis``."""
    if axis == -1 or y.type.rank == 0 or axis == x.type.rank - y.type.rank:
        return y
    trailing = x.type.rank - axis - y.type.rank
    if trailing <= 0:
        return y
    return ops.Reshape(y, shape=list(y.shape) + [1] * trailing).output()


def reduce_to_shape(grad: Output, target_shape: tuple) -> Output:
    """Sums ``grad`` over the axes along which a tensor of ``target_shape`` was broadcast."""
    g_rank, t_rank = grad.type.rank, len(target_shape)
    lead = list(range(g_rank - t_rank))
    value = grad
    if lead:
        value = ops.ReduceSum(value, axes=lead, keep_dims=False).output()
    inner = [i for i, (t, g) in enumerate(zip(target_shape, value.shape)) if t == 1 and g != 1]
    if inner:
        value = ops.ReduceSum(value, axes=inner, keep_dims=True).output()
    return value


def constant(value, dtype: DType) -> Output:
    return ops.Constant(value, dtype=dtype).output()
