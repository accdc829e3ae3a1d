"""Max and average pooling, with their backprops. Data is NCHW, as for the convolution."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import TensorType, dims_compatible
from .checks import check_spatial_pairs, window_count

__all__ = ["MaxPool", "AvgPool", "MaxPoolBackprop", "AvgPoolBackprop"]


class _PoolBase(Node):
    """``window`` is the kernel size; with ``adaptive`` it is the output size (bins of near-equal size)."""

    attributes = {"window": (1, 1), "strides": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0),
                  "ceil_mode": False, "adaptive": False}

    def pool_output_type(self, data: TensorType) -> TensorType:
        a = self.attrs
        check_spatial_pairs(self, "window", "strides", "pads_begin", "pads_end")
        self.check(data.dtype.is_float, f"needs a floating-point input, got {data}")
        self.check(data.rank == 4, f"data {data} must be 4-D (NCHW)")
        if a["adaptive"]:
            self.check(all(w > 0 for w in a["window"]), f"adaptive output size {list(a['window'])} must be > 0")
            spatial = list(a["window"])
        else:
            spatial = [window_count(self, data.shape[2 + i], a["window"][i], a["strides"][i], a["pads_begin"][i],
                                     a["pads_end"][i], ceil_mode=a["ceil_mode"]) for i in range(2)]
        return TensorType(data.dtype, list(data.shape[:2]) + spatial)


class _PoolForward(_PoolBase):
    num_inputs = 1

    def infer(self):
        return [self.pool_output_type(self.input_type(0))]


class _PoolBackprop(_PoolBase):
    """Inputs (data, delta); output: gradient of the data."""

    num_inputs = 2

    def infer(self):
        data, delta = self.input_type(0), self.input_type(1)
        expected = self.pool_output_type(data)
        self.check(delta.dtype == data.dtype and delta.rank == 4
                   and all(dims_compatible(a, b) for a, b in zip(delta.shape, expected.shape)),
                   f"delta {delta} does not match the pooling output {expected}")
        return [data]


@register_op
class MaxPool(_PoolForward):
    op_type = "MaxPool"


@register_op
class MaxPoolBackprop(_PoolBackprop):
    """The gradient goes to the first maximum of each window, as in Paddle."""

    op_type = "MaxPoolBackprop"


_AVG_ATTRS = {**_PoolBase.attributes, "exclusive": True}


@register_op
class AvgPool(_PoolForward):
    """``exclusive``: divide by the number of non-padding elements, else by the padded window size."""

    op_type = "AvgPool"
    attributes = _AVG_ATTRS


@register_op
class AvgPoolBackprop(_PoolBackprop):
    op_type = "AvgPoolBackprop"
    attributes = _AVG_ATTRS
