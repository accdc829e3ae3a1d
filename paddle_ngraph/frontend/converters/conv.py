"""conv2d and depthwise_conv2d, conv2d_transpose and depthwise_conv2d_transpose (both IRs), with
their grads.

The IR convolution is NCHW; NHWC programs are transposed around it. Paddle's filters are OIHW
in either layout, and depthwise_conv2d is a grouped conv2d.

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
from .helpers import constant
from .registry import converter


_TO_NCHW, _FROM_NCHW = (0, 3, 1, 2), (0, 2, 3, 1)


def is_nhwc(ctx) -> bool:
    layout = ctx.attr("data_format", default="NCHW")
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ctx.fail(f"data_format {layout!r} is not supported (NCHW or NHWC)")
    return layout == "NHWC"


def to_nchw(ctx, value: Output) -> Output:
    return ops.Transpose(value, perm=_TO_NCHW).output() if is_nhwc(ctx) else value


def from_nchw(ctx, value: Output) -> Output:
    return ops.Transpose(value, perm=_FROM_NCHW).output() if is_nhwc(ctx) else value


def explicit_paddings(ctx, in_hw, window, strides, dilations=(1, 1)):
    """(pads_begin, pads_end, dilations) after Paddle's UpdatePaddingAndDilation.

    ``paddings`` is [ph, pw] or [top, bottom, left, right]; padding_algorithm SAME pads
    so that out = ceil(in / stride) and resets dilations to 1; VALID pads nothing.
    """
    algorithm = ctx.attr("padding_algorithm", default="EXPLICIT")
    pads = [int(p) for p in ctx.attr("paddings", default=[0, 0])]
    if algorithm == "VALID":
        return [0, 0], [0, 0], list(dilations)
    if algorithm == "SAME":
        if any(d < 0 for d in in_hw):
            raise ctx.fail("padding_algorithm SAME needs static spatial dims")
        begin, end = [], []
        for size, k, s in zip(in_hw, window, strides):
            total = max((-(-size // s) - 1) * s + k - size, 0)
            begin.append(total // 2)
            end.append(total - total // 2)
        return begin, end, [1, 1]
    if algorithm != "EXPLICIT":
        raise ctx.fail(f"padding_algorithm {algorithm!r} is not supported")
    if len(pads) == 2:
        return pads, pads, list(dilations)
    if len(pads) == 4:
        return [pads[0], pads[2]], [pads[1], pads[3]], list(dilations)
    raise ctx.fail(f"paddings {pads} must have 2 or 4 values")


def _conv_attrs(ctx, data_nchw: Output, filters: Output) -> dict:
    strides = [int(s) for s in ctx.attr("strides", default=[1, 1])]
    dilations = [int(d) for d in ctx.attr("dilations", default=[1, 1])]
    begin, end, dilations = explicit_paddings(ctx, data_nchw.shape[2:], filters.shape[2:], strides, dilations)
    return dict(strides=strides, dilations=dilations, pads_begin=begin, pads_end=end,
                groups=int(ctx.attr("groups", default=1)))


@converter("conv2d", "pd_op.conv2d", "depthwise_conv2d", "pd_op.depthwise_conv2d")
def conv2d(ctx):
    """conv2d and depthwise_conv2d (legacy and PIR)."""
    data, filters = to_nchw(ctx, ctx.input("Input", "input")), ctx.input("Filter", "filter")
    out = ops.Convolution(data, filters, **_conv_attrs(ctx, data, filters)).output()
    ctx.set_output(("Output", "out"), from_nchw(ctx, out))


@converter("conv2d_grad", "pd_op.conv2d_grad", "depthwise_conv2d_grad", "pd_op.depthwise_conv2d_grad")
def conv2d_grad(ctx):
    data, filters = to_nchw(ctx, ctx.input("Input", "input")), ctx.input("Filter", "filter")
    delta = to_nchw(ctx, ctx.input("Output@GRAD", "out_grad"))
    attrs = _conv_attrs(ctx, data, filters)
    if ctx.has_output("Input@GRAD", "input_grad"):
        grad = ops.ConvolutionBackpropData(data, filters, delta, **attrs).output()
        ctx.set_output(("Input@GRAD", "input_grad"), from_nchw(ctx, grad))
    if ctx.has_output("Filter@GRAD", "filter_grad"):
        ctx.set_output(("Filter@GRAD", "filter_grad"), ops.ConvolutionBackpropFilter(data, filters, delta, **attrs).output())


def _transpose_attrs(ctx, x_nchw: Output, filters: Output) -> dict:
    """Paddle applies padding_algorithm (SAME/VALID) to the input's spatial dims."""
    strides = [int(s) for s in ctx.attr("strides", default=[1, 1])]
    dilations = [int(d) for d in ctx.attr("dilations", default=[1, 1])]
    begin, end, dilations = explicit_paddings(ctx, x_nchw.shape[2:], filters.shape[2:], strides, dilations)
    return dict(strides=strides, dilations=dilations, pads_begin=begin, pads_end=end,
                groups=int(ctx.attr("groups", default=1)))


def _int_list(ctx, name: str) -> list[int]:
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
    size, padding = _int_list(ctx, "output_size"), _int_list(ctx, "output_padding")
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


@converter(
    "conv2d_transpose", "pd_op.conv2d_transpose", "depthwise_conv2d_transpose", "pd_op.depthwise_conv2d_transpose",
)
def conv2d_transpose(ctx):
    """conv2d_transpose and depthwise_conv2d_transpose (legacy and PIR)."""
    x, filters = to_nchw(ctx, ctx.input("Input", "x")), ctx.input("Filter", "filter")
    attrs = _transpose_attrs(ctx, x, filters)
    out_channels = filters.shape[1] * attrs["groups"]
    shape_of_out = _shaped_like(x, out_channels, _output_hw(ctx, x, filters, attrs))
    out = ops.ConvolutionBackpropData(shape_of_out, filters, x, **attrs).output()
    ctx.set_output(("Output", "out"), from_nchw(ctx, out))


@converter(
    "conv2d_transpose_grad", "pd_op.conv2d_transpose_grad",
    "depthwise_conv2d_transpose_grad", "pd_op.depthwise_conv2d_transpose_grad",
)
def conv2d_transpose_grad(ctx):
    x, filters = to_nchw(ctx, ctx.input("Input", "x")), ctx.input("Filter", "filter")
    delta = to_nchw(ctx, ctx.input("Output@GRAD", "out_grad"))
    attrs = _transpose_attrs(ctx, x, filters)
    if ctx.has_output("Input@GRAD", "x_grad"):
        ctx.set_output(("Input@GRAD", "x_grad"), from_nchw(ctx, ops.Convolution(delta, filters, **attrs).output()))
    if ctx.has_output("Filter@GRAD", "filter_grad"):
        grad = ops.ConvolutionBackpropFilter(delta, filters, x, **attrs).output()
        ctx.set_output(("Filter@GRAD", "filter_grad"), grad)
