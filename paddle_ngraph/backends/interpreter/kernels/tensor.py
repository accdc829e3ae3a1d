"""Kernels of the tensor ops (ir/ops/tensor.py): Constant, Convert, DropoutMask."""
from __future__ import annotations

import numpy as np

from ....ir import bfloat16
from ....ir.types import DType
from .registry import kernel, output_dtype


@kernel("Constant")
def _constant(node, args, transport):
    return [node.attrs["value"]]


@kernel("Convert")
def _convert(node, args, transport):
    # bfloat16 travels as its bits: widen them to read the values, round to make them.
    source, target = node.inputs[0].type.dtype, node.output_types[0].dtype
    x = bfloat16.widen(args[0]) if source is DType.bfloat16 else args[0]
    if target is DType.bfloat16:
        return [x.copy() if source is DType.bfloat16 else bfloat16.to_bfloat16(x)]
    with np.errstate(invalid="ignore"):  # NaN or inf to an integer: the C cast's value, as Paddle
        return [x.astype(output_dtype(node))]


# --- dropout ----------------------------------------------------------------------------------------
_DROPOUT_RNG = np.random.default_rng()


@kernel("DropoutMask")
def _dropout_mask(node, args, transport):
    seed = node.attrs["seed"]
    rng = _DROPOUT_RNG if seed is None else np.random.default_rng(int(seed))
    # Paddle drops an element when its uniform draw is below the probability.
    return [(rng.random(args[0].shape) >= float(node.attrs["prob"])).astype(np.uint8)]
