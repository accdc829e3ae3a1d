"""conv2d and depthwise_conv2d (both IRs), with their grads.

The IR convolution is NCHW; NHWC programs are transposed around it. Paddle's
filters are OIHW in either layout, and depthwise_conv2d is a grouped conv2d.
"""
from __future__ import annotations

from ...ir import Output, ops

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


def conv2d(ctx):
    """conv2d and depthwise_conv2d (legacy and PIR)."""
    data, filters = to_nchw(ctx, ctx.input("Input", "input")), ctx.input("Filter", "filter")
    out = ops.Convolution(data, filters, **_conv_attrs(ctx, data, filters)).output()
    ctx.set_output(("Output", "out"), from_nchw(ctx, out))


def conv2d_grad(ctx):
    data, filters = to_nchw(ctx, ctx.input("Input", "input")), ctx.input("Filter", "filter")
    delta = to_nchw(ctx, ctx.input("Output@GRAD", "out_grad"))
    attrs = _conv_attrs(ctx, data, filters)
    if ctx.has_output("Input@GRAD", "input_grad"):
        grad = ops.ConvolutionBackpropData(data, filters, delta, **attrs).output()
        ctx.set_output(("Input@GRAD", "input_grad"), from_nchw(ctx, grad))
    if ctx.has_output("Filter@GRAD", "filter_grad"):
        ctx.set_output(("Filter@GRAD", "filter_grad"), ops.ConvolutionBackpropFilter(data, filters, delta, **attrs).output())
