"""pad3d (what nn.Pad2D/Pad3D and F.pad emit; Paddle pads 4-D inputs as 5-D) and pad, with grads.

Every mode is a Gather per padded axis with source indices computed here (see resample.py):
reflect, replicate and circular map each output position to an input position; constant mode
gathers the clamped (replicate) positions and then selects the pad value outside the input.
"""
from __future__ import annotations

import numpy as np

from ...ir import ops
from .helpers import constant
from .resample import resample, resample_grad
from .shape import const_ints


def _source_index(ctx, mode: str, size: int, before: int, after: int) -> np.ndarray:
    """Input position read by each output position along one axis (Paddle's pad3d kernels)."""
    out_size = size + before + after
    if out_size <= 0:
        raise ctx.fail(f"paddings ({before}, {after}) leave nothing of a dim of size {size}")
    i = np.arange(out_size) - before
    if mode == "reflect":
        if before >= size or after >= size:
            raise ctx.fail(f"reflect paddings ({before}, {after}) must be smaller than the dim ({size})")
        i = np.abs(i)
        return np.where(i >= size, 2 * (size - 1) - i, i)
    if mode == "circular":
        return np.mod(i, size)
    return np.clip(i, 0, size - 1)  # replicate, and constant before the mask


def _plan(ctx, x, pads_by_axis: dict, mode: str):
    """(stages, mask): mask (bool, broadcasting over the leading unpadded axes) is None unless
    constant mode pads something."""
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ctx.fail(f"pad mode {mode!r} is not supported")
    stages, masks = [], {}
    for axis, (before, after) in sorted(pads_by_axis.items()):
        if before == 0 and after == 0:
            continue
        size = x.shape[axis]
        if size < 0:
            raise ctx.fail(f"padding a dynamic dim (axis {axis} of {x.type}) is not supported")
        stages.append((axis, [(_source_index(ctx, mode, size, before, after), None)]))
        i = np.arange(size + before + after) - before
        masks[axis] = (i >= 0) & (i < size)
    if mode != "constant" or not masks or all(m.all() for m in masks.values()):
        return stages, None
    first = min(masks)
    out_shape = [x.shape[a] + sum(pads_by_axis.get(a, (0, 0))) for a in range(first, x.type.rank)]
    if min(out_shape) < 0:
        raise ctx.fail(f"constant padding needs static dims after axis {first}, got {x.type}")
    mask = np.ones(out_shape, dtype=bool)
    for axis, m in masks.items():
        mask &= m.reshape([-1] + [1] * (x.type.rank - 1 - axis))
    return stages, mask


def _padded(x, stages, mask, value):
    out = resample(x, stages)
    if mask is None:
        return out
    return ops.Select(ops.Constant(mask).output(), out, constant(value, x.dtype)).output()


def _crop(delta, pads_by_axis: dict):
    """The gradient of non-negative constant padding: the unpadded part of delta."""
    axes = sorted(a for a, (before, after) in pads_by_axis.items() if before or after)
    ends = [-pads_by_axis[a][1] if pads_by_axis[a][1] else delta.shape[a] for a in axes]
    return ops.Slice(delta, axes=axes, starts=[pads_by_axis[a][0] for a in axes], ends=ends).output() if axes else delta


def _padded_grad(x, delta, stages, mask):
    if mask is not None:  # the pad value does not depend on x
        delta = ops.Select(ops.Constant(mask).output(), delta, constant(0, x.dtype)).output()
    return resample_grad(x, delta, stages) if stages else delta


# --- pad3d: paddings [left, right, top, bottom, front, back] of W, H, D --------------------------------
def _pad3d_pads(ctx, x) -> tuple[dict, str]:
    if x.type.rank != 5:
        raise ctx.fail(f"pad3d needs a 5-D input, got {x.type}")
    layout = ctx.attr("data_format", default="NCDHW")
    if layout not in ("NCDHW", "NDHWC"):
        raise ctx.fail(f"data_format {layout!r} is not supported (NCDHW or NDHWC)")
    pads = const_ints(ctx, "paddings", "Paddings", "paddings")
    if len(pads) != 6:
        raise ctx.fail(f"paddings {pads} must have 6 values")
    d, h, w = (1, 2, 3) if layout == "NDHWC" else (2, 3, 4)
    return {w: (pads[0], pads[1]), h: (pads[2], pads[3]), d: (pads[4], pads[5])}, ctx.attr("mode", default="constant")


def pad3d(ctx):
    x = ctx.input("X", "x")
    by_axis, mode = _pad3d_pads(ctx, x)
    stages, mask = _plan(ctx, x, by_axis, mode)
    ctx.set_output(("Out", "out"), _padded(x, stages, mask, float(ctx.attr("value", "pad_value", default=0.0))))


def pad3d_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    by_axis, mode = _pad3d_pads(ctx, x)
    if mode == "constant" and min(p for pair in by_axis.values() for p in pair) >= 0:
        grad = _crop(delta, by_axis)
    else:
        grad = _padded_grad(x, delta, *_plan(ctx, x, by_axis, mode))
    ctx.set_output(("X@GRAD", "x_grad"), grad)


# --- pad: constant padding by [before_0, after_0, before_1, after_1, ...] ---------------------------------
def _pad_pads(ctx, rank: int) -> dict:
    pads = [int(p) for p in ctx.attr("paddings")]
    if len(pads) != 2 * rank or min(pads, default=0) < 0:
        raise ctx.fail(f"paddings {pads} must be 2 non-negative values per dim (rank {rank})")
    return {a: (pads[2 * a], pads[2 * a + 1]) for a in range(rank)}


def pad(ctx):
    x = ctx.input("X", "x")
    value = float(ctx.attr_or_const_input(("pad_value",), ("pad_value",), default=0.0))
    stages, mask = _plan(ctx, x, _pad_pads(ctx, x.type.rank), "constant")
    ctx.set_output(("Out", "out"), _padded(x, stages, mask, value))


def pad_grad(ctx):
    """Legacy pad_grad has no X input: the gradient is the unpadded part of Out@GRAD."""
    delta = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), _crop(delta, _pad_pads(ctx, delta.type.rank)))
