"""pool2d (max and avg, both IRs) and its grad.

PIR passes the kernel size as a ``full_int_array`` operand, legacy as the ``ksize``
attribute. Global pooling is adaptive pooling to 1x1, which needs no static size.
"""
from __future__ import annotations

from ...ir import ops
from .conv import explicit_paddings, from_nchw, to_nchw
from .registry import converter


def _pool_attrs(ctx, data_nchw) -> tuple[str, dict]:
    kind = ctx.attr("pooling_type")
    if kind not in ("max", "avg"):
        raise ctx.fail(f"pooling_type {kind!r} is not supported (max or avg)")
    if ctx.has_input("kernel_size"):
        window = [int(k) for k in ctx.const_input("kernel_size").reshape(-1)]
    else:
        window = [int(k) for k in ctx.attr("ksize", "kernel_size")]
    strides = [int(s) for s in ctx.attr("strides", default=[1, 1])]
    adaptive = bool(ctx.attr("adaptive", default=False))
    if ctx.attr("global_pooling", default=False):
        window, adaptive = [1, 1], True
    if adaptive:  # Paddle ignores paddings for global and adaptive pooling
        begin, end = [0, 0], [0, 0]
    else:
        begin, end, _ = explicit_paddings(ctx, data_nchw.shape[2:], window, strides)
    attrs = dict(window=window, strides=strides, pads_begin=begin, pads_end=end,
                 ceil_mode=bool(ctx.attr("ceil_mode", default=False)), adaptive=adaptive)
    if kind == "avg":
        attrs["exclusive"] = bool(ctx.attr("exclusive", default=True))
    return kind, attrs


@converter("pool2d", "pd_op.pool2d")
def pool2d(ctx):
    data = to_nchw(ctx, ctx.input("X", "x"))
    kind, attrs = _pool_attrs(ctx, data)
    op = ops.MaxPool if kind == "max" else ops.AvgPool
    ctx.set_output(("Out", "out"), from_nchw(ctx, op(data, **attrs).output()))


@converter("pool2d_grad", "pd_op.pool2d_grad")
def pool2d_grad(ctx):
    data = to_nchw(ctx, ctx.input("X", "x"))
    delta = to_nchw(ctx, ctx.input("Out@GRAD", "out_grad"))
    kind, attrs = _pool_attrs(ctx, data)
    op = ops.MaxPoolBackprop if kind == "max" else ops.AvgPoolBackprop
    ctx.set_output(("X@GRAD", "x_grad"), from_nchw(ctx, op(data, delta, **attrs).output()))
