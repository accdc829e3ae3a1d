"""Resampling along axes by precomputed taps, and the ops lowered to it: nearest_interp_v2 and
bilinear_interp_v2 (PIR nearest_interp, bilinear_interp), pad3d (what nn.Pad2D/Pad3D and F.pad
emit; Paddle pads 4-D inputs as 5-D) and pad, with their grads.

A stage ``(axis, taps)`` maps x to ``sum(gather(x, index, axis) * weight for index, weight in taps)``
(weight None: 1). Index and weight arrays are computed at conversion time, from static sizes, so
the graph holds only Gather, Multiply and Add; the gradient is the adjoint: a ScatterAdd per tap.

Interpolation computes its indices and weights in float32 as Paddle's CPU kernel does (its
ratios and lambdas are floats also for float64 data). Every pad mode is a Gather per padded
axis: reflect, replicate and circular map each output position to an input position; constant
mode gathers the clamped (replicate) positions and then selects the pad value outside the input.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType
from .helpers import constant
from .registry import converter
from .shape import const_ints, zeros_like


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


_f32 = np.float32


def _spatial_axes(ctx, rank: int) -> tuple[int, int]:
    layout = ctx.attr("data_layout", "data_format", default="NCHW")
    if rank != 4:
        raise ctx.fail(f"only 4-D inputs (2-D interpolation) are supported, got rank {rank}")
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ctx.fail(f"data layout {layout!r} is not supported (NCHW or NHWC)")
    return (1, 2) if layout == "NHWC" else (2, 3)


def _const_list(ctx, *names) -> list | None:
    values = ctx.inputs(*names)
    if not values:
        return None
    return [v for i in range(len(values)) for v in ctx.const_input(*names, index=i).reshape(-1).tolist()]


def _sizes(ctx, in_hw) -> tuple[list[int], list[float]]:
    """(out_hw, scale_hw) as Interpolate2DCPUFwd picks them: SizeTensor, else the scale (tensor or
    attribute) then OutSize over out_h/out_w. A scale <= 0 means none."""
    out = [int(ctx.attr("out_h", default=-1)), int(ctx.attr("out_w", default=-1))]
    scale = [-1.0, -1.0]
    size_list = _const_list(ctx, "SizeTensor", "size_tensor")
    if size_list:
        out = [int(s) for s in size_list[:2]]
    else:
        scale_tensor = _const_list(ctx, "Scale", "scale_tensor")
        attr = [float(s) for s in ctx.attr("scale", default=[])]
        if scale_tensor:
            scale = [float(scale_tensor[0]), float(scale_tensor[-1])] if len(scale_tensor) > 1 else [float(scale_tensor[0])] * 2
        elif len(attr) > 1:
            scale = attr[:2]
        if scale[0] > 0 and scale[1] > 0:
            out = [int(_f32(size) * _f32(s)) for size, s in zip(in_hw, scale)]
        out_size = _const_list(ctx, "OutSize", "out_size")
        if out_size:
            out = [int(s) for s in out_size[:2]]
    if min(out) <= 0:
        raise ctx.fail(f"output size {out} must be > 0")
    return out, scale


def _ratio(in_size: int, out_size: int, scale: float, align_corners: bool) -> np.float32:
    if out_size <= 1:
        return _f32(0)
    if align_corners:
        return _f32(in_size - 1) / _f32(out_size - 1)
    # 1 / scale in double, scale as the program holds it (legacy: float32, PIR: double)
    return _f32(1.0 / scale) if scale > 0 else _f32(in_size) / _f32(out_size)


def _nearest_taps(in_size, out_size, ratio, align_corners):
    k = np.arange(out_size)
    scaled = (ratio * k.astype(_f32)).astype(_f32)  # float * int, in float
    index = (scaled.astype(np.float64) + 0.5).astype(np.int64) if align_corners else scaled.astype(np.int64)
    return [(np.minimum(index, in_size - 1), None)]


def _linear_taps(in_size, out_size, ratio, align_corners, align_mode):
    k = np.arange(out_size)
    align_flag = align_mode == 0 and not align_corners
    centre = (ratio * (k + 0.5).astype(_f32) - _f32(0.5)).astype(_f32)  # in float, as Paddle 3 computes it
    scaled = (ratio * k.astype(_f32)).astype(_f32)
    low = np.maximum(centre.astype(np.int64) if align_flag else scaled.astype(np.int64), 0)  # truncation
    high = np.minimum(low + 1, in_size - 1)
    source = np.maximum(centre, _f32(0))
    lam = (source - low.astype(_f32)) if align_flag else (scaled - low.astype(_f32))
    lam = lam.astype(_f32)
    return [(low, _f32(1) - lam), (high, lam)]


def _stages(ctx, x):
    axes = _spatial_axes(ctx, x.type.rank)
    in_hw = [x.shape[a] for a in axes]
    if min(in_hw) < 0:
        raise ctx.fail(f"interpolation needs static spatial dims, got {x.type}")
    out_hw, scale = _sizes(ctx, in_hw)
    if out_hw == in_hw:
        return []  # Paddle copies the input
    method = ctx.attr("interp_method", default="bilinear")
    align_corners = bool(ctx.attr("align_corners", default=True))
    align_mode = int(ctx.attr("align_mode", default=1))
    stages = []
    for axis, n_in, n_out, s in zip(axes, in_hw, out_hw, scale):
        ratio = _ratio(n_in, n_out, s, align_corners)
        if method == "nearest":
            stages.append((axis, _nearest_taps(n_in, n_out, ratio, align_corners)))
        elif method == "bilinear":
            stages.append((axis, _linear_taps(n_in, n_out, ratio, align_corners, align_mode)))
        else:
            raise ctx.fail(f"interp_method {method!r} is not supported here")
    return stages


@converter("nearest_interp_v2", "pd_op.nearest_interp", "bilinear_interp_v2", "pd_op.bilinear_interp")
def interp_v2(ctx):
    """nearest_interp_v2 and bilinear_interp_v2 (legacy), nearest_interp and bilinear_interp (PIR)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "output"), resample(x, _stages(ctx, x)))


@converter(
    "nearest_interp_v2_grad", "pd_op.nearest_interp_grad", "bilinear_interp_v2_grad", "pd_op.bilinear_interp_grad",
)
def interp_v2_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Out@GRAD", "output_grad")
    stages = _stages(ctx, x)
    ctx.set_output(("X@GRAD", "x_grad"), resample_grad(x, delta, stages) if stages else delta)


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


@converter("pad3d", "pd_op.pad3d")
def pad3d(ctx):
    x = ctx.input("X", "x")
    by_axis, mode = _pad3d_pads(ctx, x)
    stages, mask = _plan(ctx, x, by_axis, mode)
    ctx.set_output(("Out", "out"), _padded(x, stages, mask, float(ctx.attr("value", "pad_value", default=0.0))))


@converter("pad3d_grad", "pd_op.pad3d_grad")
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


@converter("pad", "pd_op.pad")
def pad(ctx):
    x = ctx.input("X", "x")
    value = float(ctx.attr_or_const_input(("pad_value",), ("pad_value",), default=0.0))
    stages, mask = _plan(ctx, x, _pad_pads(ctx, x.type.rank), "constant")
    ctx.set_output(("Out", "out"), _padded(x, stages, mask, value))


@converter("pad_grad", "pd_op.pad_grad")
def pad_grad(ctx):
    """Legacy pad_grad has no X input: the gradient is the unpadded part of Out@GRAD."""
    delta = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), _crop(delta, _pad_pads(ctx, delta.type.rank)))
