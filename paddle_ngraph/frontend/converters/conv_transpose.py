"""conv2d_transpose and depthwise_conv2d_transpose (both IRs), with their grads.

A transposed convolution is the data gradient of the convolution that maps its output back
to its input: Paddle's filter [C_in, C_out/groups, KH, KW] is that convolution's OIHW filter,
with the same strides, paddings, dilations and groups. So the forward is a
ConvolutionBackpropData, the input gradient a Convolution of the output gradient, and the
filter gradient a ConvolutionBackpropFilter with data and delta swapped.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType
from .conv import explicit_paddings, from_nchw, to_nchw
from .helpers import constant


def _attrs(ctx, x_nchw: Output, filters: Output) -> dict:
    """Paddle applies padding_algorithm (SAME/VALID) to the input's spatial dims."""
    strides = [int(s) for s in ctx.attr("strides", default=[1, 1])]
    dilations = [int(d) for d in ctx.attr("dilations", default=[1, 1])]
    begin, end, dilations = explicit_paddings(ctx, x_nchw.shape[2:], filters.shape[2:], strides, dilations)
    return dict(strides=strides, dilations=dilations, pads_begin=begin, pads_end=end,
                groups=int(ctx.attr("groups", default=1)))


def _ints(ctx, name: str) -> list[int]:
    """output_size / output_padding: an attribute, or (PIR output_size) a constant operand."""
    if ctx.has_input(name):
        return [int(v) for v in ctx.const_input(name).reshape(-1)]
    return [int(v) for v in ctx.attr(name, default=[])]


def _output_hw(ctx, x_nchw: Output, filters: Output, attrs: dict) -> list[int]:
    """Conv2DTransposeInferMeta: (in - 1) * stride - pads + dilation * (k - 1) + 1, then
    output_size (which may add up to stride - 1) or else output_padding."""
    if any(d < 0 for d in x_nchw.shape[2:]):
        raise ctx.fail(f"conv2d_transpose needs static spatial dims, got {x_nchw.type}")
    base = [(x_nchw.shape[2 + i] - 1) * attrs["strides"][i] - attrs["pads_begin"][i] - attrs["pads_end"][i]
            + attrs["dilations"][i] * (filters.shape[2 + i] - 1) + 1 for i in range(2)]
    size, padding = _ints(ctx, "output_size"), _ints(ctx, "output_padding")
    if size:
        size = size * 2 if len(size) == 1 else size
        if any(not b <= s < b + st for s, b, st in zip(size, base, attrs["strides"])):
            raise ctx.fail(f"output_size {size} must lie in [{base}, {base} + strides {attrs['strides']})")
        return size
    if padding:
        padding = padding * 2 if len(padding) == 1 else padding
        return [b + p for b, p in zip(base, padding)]
    return base


def _shaped_like(x: Output, channels: int, hw: list[int]) -> Output:
    """Some tensor of shape [N, channels, *hw] (N may be dynamic): ConvolutionBackpropData reads
    only the shape of its data input. Gathers of position 0 broadcast one element of x to it."""
    value = ops.Slice(x, axes=[1, 2, 3], starts=[0, 0, 0], ends=[1, 1, 1]).output()
    for axis, size in zip((1, 2, 3), [channels] + list(hw)):
        value = ops.Gather(value, constant(np.zeros(size), DType.int64), axis=axis).output()
    return value


def conv2d_transpose(ctx):
    """conv2d_transpose and depthwise_conv2d_transpose (legacy and PIR)."""
    x, filters = to_nchw(ctx, ctx.input("Input", "x")), ctx.input("Filter", "filter")
    attrs = _attrs(ctx, x, filters)
    out_channels = filters.shape[1] * attrs["groups"]
    shape_of_out = _shaped_like(x, out_channels, _output_hw(ctx, x, filters, attrs))
    out = ops.ConvolutionBackpropData(shape_of_out, filters, x, **attrs).output()
    ctx.set_output(("Output", "out"), from_nchw(ctx, out))


def conv2d_transpose_grad(ctx):
    x, filters = to_nchw(ctx, ctx.input("Input", "x")), ctx.input("Filter", "filter")
    delta = to_nchw(ctx, ctx.input("Output@GRAD", "out_grad"))
    attrs = _attrs(ctx, x, filters)
    if ctx.has_output("Input@GRAD", "x_grad"):
        ctx.set_output(("Input@GRAD", "x_grad"), from_nchw(ctx, ops.Convolution(delta, filters, **attrs).output()))
    if ctx.has_output("Filter@GRAD", "filter_grad"):
        grad = ops.ConvolutionBackpropFilter(delta, filters, x, **attrs).output()
        ctx.set_output(("Filter@GRAD", "filter_grad"), grad)
