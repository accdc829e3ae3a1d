"""Resampling along axes by precomputed taps: the shared core of interpolate and pad.

A stage ``(axis, taps)`` maps x to ``sum(gather(x, index, axis) * weight for index, weight in taps)``
(weight None: 1). Index and weight arrays are computed at conversion time, from static sizes, so
the graph holds only Gather, Multiply and Add; the gradient is the adjoint: a ScatterAdd per tap.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType
from .helpers import constant
from .shape import zeros_like


def _weight(weight: np.ndarray, axis: int, rank: int, dtype: DType) -> Output:
    """One weight per position along ``axis``, shaped to broadcast over the later axes."""
    return constant(np.asarray(weight).reshape([-1] + [1] * (rank - 1 - axis)), dtype)


def _index(index: np.ndarray) -> Output:
    return constant(index, DType.int64)


def resample(x: Output, stages) -> Output:
    for axis, taps in stages:
        total = None
        for index, weight in taps:
            term = ops.Gather(x, _index(index), axis=axis).output()
            if weight is not None:
                term = ops.Multiply(term, _weight(weight, axis, x.type.rank, x.dtype)).output()
            total = term if total is None else ops.Add(total, term).output()
        x = total
    return x


def resample_grad(x: Output, delta: Output, stages) -> Output:
    """The gradient of ``resample(x, stages)`` given the gradient ``delta`` of its result."""
    # Zeros shaped like the input of each stage (dims may be dynamic, so gathered from zeros_like(x)).
    zeros = [zeros_like(x)]
    for axis, taps in stages[:-1]:
        zeros.append(ops.Gather(zeros[-1], _index(taps[0][0]), axis=axis).output())
    grad = delta
    for (axis, taps), acc in reversed(list(zip(stages, zeros))):
        for index, weight in taps:
            update = grad if weight is None else ops.Multiply(grad, _weight(weight, axis, x.type.rank, x.dtype)).output()
            acc = ops.ScatterAdd(acc, _index(index), update, axis=axis).output()
        grad = acc
    return grad
