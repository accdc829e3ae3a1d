"""nearest_interp_v2 and bilinear_interp_v2 (PIR nearest_interp, bilinear_interp), with their grads.

Both lower to Gathers along H and W with indices and weights computed here, in float32 as
Paddle's CPU kernel computes them (its ratios and lambdas are floats also for float64 data),
then a weighted sum; the grads are the ScatterAdds of the same taps (see resample.py).
"""
from __future__ import annotations

import numpy as np

from .resample import resample, resample_grad

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


def interp_v2(ctx):
    """nearest_interp_v2 and bilinear_interp_v2 (legacy), nearest_interp and bilinear_interp (PIR)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "output"), resample(x, _stages(ctx, x)))


def interp_v2_grad(ctx):
    x, delta = ctx.input("X", "x"), ctx.input("Out@GRAD", "output_grad")
    stages = _stages(ctx, x)
    ctx.set_output(("X@GRAD", "x_grad"), resample_grad(x, delta, stages) if stages else delta)
