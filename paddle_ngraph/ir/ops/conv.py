"""Convolution and its two backprops (data, filter).

Layouts are nGraph's: data is NCHW and filters are OIHW. Converters transpose other data
layouts (NHWC) around these ops. Backprop ops take the forward inputs they need plus the
output gradient ("delta"), as nGraph's do.
"""
from __future__ import annotations

from ..node import Node, register_op
from ..types import TensorType, dims_compatible
from .checks import check_same_float_dtype, check_spatial_pairs, window_count
from .precision import ATTRIBUTE as _PRECISION, check_compute_precision

__all__ = ["Convolution", "ConvolutionBackpropData", "ConvolutionBackpropFilter"]


class _ConvBase(Node):
    attributes = {"strides": (1, 1), "dilations": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0), "groups": 1,
                  **_PRECISION}

    def conv_output_type(self, data: TensorType, filters: TensorType) -> TensorType:
        """Checks data NCHW against filters OIHW and returns the forward output type."""
        a = self.attrs
        check_spatial_pairs(self, "strides", "dilations", "pads_begin", "pads_end")
        check_same_float_dtype(self, data, filters)
        check_compute_precision(self, data.dtype)
        self.check(data.rank == 4 and filters.rank == 4, f"data {data} and filters {filters} must be 4-D (NCHW, OIHW)")
        groups = int(a["groups"])
        out_channels, in_per_group = filters.shape[0], filters.shape[1]
        self.check(groups >= 1 and out_channels % groups == 0, f"{out_channels} output channels do not split into {groups} groups")
        self.check(dims_compatible(data.shape[1], in_per_group * groups),
                   f"data has {data.shape[1]} channels, filters {filters} with groups={groups} expect {in_per_group * groups}")
        spatial = [window_count(self, data.shape[2 + i], filters.shape[2 + i], a["strides"][i], a["pads_begin"][i],
                                 a["pads_end"][i], a["dilations"][i]) for i in range(2)]
        return TensorType(data.dtype, [data.shape[0], out_channels] + spatial)


@register_op
class Convolution(_ConvBase):
    """2-D convolution of data (NCHW) with filters (O, C/groups, KH, KW); explicit paddings."""

    op_type = "Convolution"
    num_inputs = 2

    def infer(self):
        return [self.conv_output_type(self.input_type(0), self.input_type(1))]


class _ConvBackprop(_ConvBase):
    """Inputs (data, filters, delta); delta has the type of the forward output."""

    num_inputs = 3

    def check_delta(self):
        data, filters, delta = (self.input_type(i) for i in range(3))
        expected = self.conv_output_type(data, filters)
        self.check(delta.dtype == data.dtype and delta.rank == 4
                   and all(dims_compatible(a, b) for a, b in zip(delta.shape, expected.shape)),
                   f"delta {delta} does not match the convolution output {expected}")
        return data, filters


@register_op
class ConvolutionBackpropData(_ConvBackprop):
    op_type = "ConvolutionBackpropData"

    def infer(self):
        return [self.check_delta()[0]]


@register_op
class ConvolutionBackpropFilter(_ConvBackprop):
    op_type = "ConvolutionBackpropFilter"

    def infer(self):
        return [self.check_delta()[1]]
