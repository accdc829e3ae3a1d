"""Neural-network ops: convolution, pooling, normalization, LRN, dropout, embedding, cross-entropy.

Layouts are nGraph's: data is NCHW and filters are OIHW. Converters transpose
other data layouts (NHWC) around these ops. Backprop ops take the forward
inputs they need plus the output gradient ("delta"), as nGraph's do.
"""
from __future__ import annotations

import numpy as np

from ..node import Node, register_op
from ..types import DType, TensorType, dims_compatible
from .precision import ATTRIBUTE as _PRECISION, check_compute_precision

__all__ = [
    "Convolution", "ConvolutionBackpropData", "ConvolutionBackpropFilter",
    "MaxPool", "AvgPool", "MaxPoolBackprop", "AvgPoolBackprop",
    "BatchNormTraining", "BatchNormInference", "BatchNormTrainingBackprop", "BatchNormInferenceBackprop",
    "BatchNormSums", "BatchNormTrainingFromSums", "BatchNormBackpropSums", "BatchNormTrainingBackpropFromSums",
    "LayerNorm", "LayerNormBackprop", "LRN", "LRNBackprop", "DropoutMask",
    "EmbeddingLookup", "EmbeddingLookupBackprop", "CrossEntropy", "CrossEntropyBackprop",
]


def _check_same_dtype(node: Node, *types: TensorType):
    first = types[0]
    node.check(first.dtype.is_float, f"needs floating-point inputs, got {first}")
    for t in types[1:]:
        node.check(t.dtype == first.dtype, f"input dtypes differ: {first} and {t}")


def _check_pairs(node: Node, *names: str):
    """Spatial attributes hold one value per spatial dim (H, W)."""
    for name in names:
        node.check(len(node.attrs[name]) == 2, f"attribute {name}={list(node.attrs[name])} needs 2 values (H, W)")


def _window_count(node: Node, size: int, window: int, stride: int, pad_begin: int, pad_end: int,
                  dilation: int = 1, ceil_mode: bool = False) -> int:
    """Number of window positions along one dim (Paddle's ConvOutputSize / PoolOutputSize); -1 if dynamic."""
    node.check(stride > 0 and dilation > 0 and window > 0, f"window {window}, stride {stride}, dilation {dilation} must be > 0")
    node.check(pad_begin >= 0 and pad_end >= 0, f"paddings ({pad_begin}, {pad_end}) must be >= 0")
    if size < 0:
        return -1
    span = size + pad_begin + pad_end - (dilation * (window - 1) + 1)
    node.check(span >= 0, f"window {window} (dilation {dilation}) does not fit in size {size} with paddings ({pad_begin}, {pad_end})")
    return (span + (stride - 1 if ceil_mode else 0)) // stride + 1


# --- convolution ----------------------------------------------------------------------------------
class _ConvBase(Node):
    attributes = {"strides": (1, 1), "dilations": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0), "groups": 1,
                  **_PRECISION}

    def conv_output_type(self, data: TensorType, filters: TensorType) -> TensorType:
        """Checks data NCHW against filters OIHW and returns the forward output type."""
        a = self.attrs
        _check_pairs(self, "strides", "dilations", "pads_begin", "pads_end")
        _check_same_dtype(self, data, filters)
        check_compute_precision(self, data.dtype)
        self.check(data.rank == 4 and filters.rank == 4, f"data {data} and filters {filters} must be 4-D (NCHW, OIHW)")
        groups = int(a["groups"])
        out_channels, in_per_group = filters.shape[0], filters.shape[1]
        self.check(groups >= 1 and out_channels % groups == 0, f"{out_channels} output channels do not split into {groups} groups")
        self.check(dims_compatible(data.shape[1], in_per_group * groups),
                   f"data has {data.shape[1]} channels, filters {filters} with groups={groups} expect {in_per_group * groups}")
        spatial = [_window_count(self, data.shape[2 + i], filters.shape[2 + i], a["strides"][i], a["pads_begin"][i],
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


# --- pooling -----------------------------------------------------------------------------------
class _PoolBase(Node):
    """``window`` is the kernel size; with ``adaptive`` it is the output size (bins of near-equal size)."""

    attributes = {"window": (1, 1), "strides": (1, 1), "pads_begin": (0, 0), "pads_end": (0, 0),
                  "ceil_mode": False, "adaptive": False}

    def pool_output_type(self, data: TensorType) -> TensorType:
        a = self.attrs
        _check_pairs(self, "window", "strides", "pads_begin", "pads_end")
        self.check(data.dtype.is_float, f"needs a floating-point input, got {data}")
        self.check(data.rank == 4, f"data {data} must be 4-D (NCHW)")
        if a["adaptive"]:
            self.check(all(w > 0 for w in a["window"]), f"adaptive output size {list(a['window'])} must be > 0")
            spatial = list(a["window"])
        else:
            spatial = [_window_count(self, data.shape[2 + i], a["window"][i], a["strides"][i], a["pads_begin"][i],
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


# --- batch normalization -----------------------------------------------------------------------
class _BatchNormBase(Node):
    attributes = {"epsilon": 1e-5, "channel_axis": 1}

    def check_channels(self, data: TensorType, *per_channel: TensorType) -> int:
        axis = int(self.attrs["channel_axis"])
        self.check(data.rank >= 2 and 0 <= axis < data.rank, f"channel_axis {axis} out of range for {data}")
        self.check(data.dtype.is_float, f"needs a floating-point input, got {data}")
        channels = data.shape[axis]
        for t in per_channel:
            self.check(t.rank == 1 and dims_compatible(t.shape[0], channels),
                       f"per-channel input {t} does not match {channels} channels of {data}")
            self.check(t.dtype == per_channel[0].dtype and t.dtype.is_float, f"per-channel inputs differ in dtype: {t}")
        return channels


@register_op
class BatchNormTraining(_BatchNormBase):
    """Inputs (x, scale, bias, running_mean, running_variance); normalizes with the batch statistics.

    Outputs (y, mean_out, variance_out, saved_mean, saved_inv_std): the running statistics
    updated as ``running * momentum + batch * (1 - momentum)`` (biased batch variance),
    and the batch mean and 1/sqrt(variance + epsilon) that Paddle saves for the backward.
    """

    op_type = "BatchNormTraining"
    attributes = {**_BatchNormBase.attributes, "momentum": 0.9}
    num_inputs = 5

    def infer(self):
        x, scale, bias, mean, variance = (self.input_type(i) for i in range(5))
        self.check_channels(x, scale, bias, mean, variance)
        return [x, mean, variance, mean, variance]


@register_op
class BatchNormInference(_BatchNormBase):
    """Inputs (x, scale, bias, mean, variance); normalizes with the given (running) statistics."""

    op_type = "BatchNormInference"
    num_inputs = 5

    def infer(self):
        x, scale, bias, mean, variance = (self.input_type(i) for i in range(5))
        self.check_channels(x, scale, bias, mean, variance)
        return [x]


class _BatchNormBackprop(_BatchNormBase):
    """Inputs (x, scale, mean, variance-like, delta); outputs (dx, dscale, dbias)."""

    num_inputs = 5

    def infer(self):
        x, scale, mean, spread, delta = (self.input_type(i) for i in range(5))
        self.check_channels(x, scale, mean, spread)
        self.check(delta.dtype == x.dtype and delta.rank == x.rank
                   and all(dims_compatible(a, b) for a, b in zip(delta.shape, x.shape)), f"delta {delta} does not match x {x}")
        return [x, scale, scale]


@register_op
class BatchNormTrainingBackprop(_BatchNormBackprop):
    """Inputs (x, scale, saved_mean, saved_inv_std, delta): the batch statistics depend on x."""

    op_type = "BatchNormTrainingBackprop"


@register_op
class BatchNormInferenceBackprop(_BatchNormBackprop):
    """Inputs (x, scale, mean, variance, delta): the statistics are constants (use_global_stats)."""

    op_type = "BatchNormInferenceBackprop"


# --- batch normalization over several ranks (sync_batch_norm) ------------------------------------
# The training-mode batch norm split where the ranks must agree: each rank sums its part of the
# batch per channel, an AllReduce(sum) of the sums (a converter puts it between the two nodes) gives
# the global batch's, and the second node normalizes with them. Sums travel as float64, with the
# element count as third row: Paddle's sync_batch_norm allreduces [sum(x), sum(x^2), count] the same
# way; in float64 var = sum(x^2)/n - mean^2 loses nothing a float32 two-pass variance keeps.
SUMS_DTYPE = DType.float64


def _sums_type(channels: int) -> TensorType:
    return TensorType(SUMS_DTYPE, [3, channels])


def _check_sums(node: Node, sums: TensorType, channels: int):
    node.check(sums.dtype == SUMS_DTYPE and sums.rank == 2 and dims_compatible(sums.shape[0], 3)
               and dims_compatible(sums.shape[1], channels),
               f"sums {sums} must be float64[3, {channels}] (the rows sum, sum of squares or products, count)")


@register_op
class BatchNormSums(_BatchNormBase):
    """Input x; output float64 [3, C]: per channel sum(x), sum(x * x) and the element count."""

    op_type = "BatchNormSums"
    num_inputs = 1

    def infer(self):
        x = self.input_type(0)
        return [_sums_type(self.check_channels(x))]


@register_op
class BatchNormTrainingFromSums(_BatchNormBase):
    """Inputs (x, scale, bias, running_mean, running_variance, sums): BatchNormTraining with the
    batch statistics of ``sums`` (BatchNormSums of the whole batch, all ranks summed):
    mean = sum / n, variance = sum_sq / n - mean^2 (biased, as Paddle's running variance),
    computed in float64 and rounded once. Same outputs as BatchNormTraining."""

    op_type = "BatchNormTrainingFromSums"
    attributes = {**_BatchNormBase.attributes, "momentum": 0.9}
    num_inputs = 6

    def infer(self):
        x, scale, bias, mean, variance, sums = (self.input_type(i) for i in range(6))
        _check_sums(self, sums, self.check_channels(x, scale, bias, mean, variance))
        return [x, mean, variance, mean, variance]


@register_op
class BatchNormBackpropSums(_BatchNormBase):
    """Inputs (x, saved_mean, saved_inv_std, delta); outputs (sums, dscale, dbias): sums is float64
    [3, C] with per channel sum(delta), sum(delta * x_hat) and the element count; dscale and dbias
    are the first two rows rounded to the data type: this rank's parameter gradients, which the
    gradient AllReduce averages as any other."""

    op_type = "BatchNormBackpropSums"
    num_inputs = 4

    def infer(self):
        x, mean, inv_std, delta = (self.input_type(i) for i in range(4))
        channels = self.check_channels(x, mean, inv_std)
        self.check(delta.dtype == x.dtype and delta.rank == x.rank
                   and all(dims_compatible(a, b) for a, b in zip(delta.shape, x.shape)), f"delta {delta} does not match x {x}")
        return [_sums_type(channels), mean, mean]


@register_op
class BatchNormTrainingBackpropFromSums(_BatchNormBase):
    """Inputs (x, scale, saved_mean, saved_inv_std, delta, sums); output dx, with the sums of the
    whole batch (BatchNormBackpropSums, all ranks summed):
    dx = scale * inv_std / n * (delta * n - sum(delta) - x_hat * sum(delta * x_hat))."""

    op_type = "BatchNormTrainingBackpropFromSums"
    num_inputs = 6

    def infer(self):
        x, scale, mean, inv_std, delta, sums = (self.input_type(i) for i in range(6))
        _check_sums(self, sums, self.check_channels(x, scale, mean, inv_std))
        self.check(delta.dtype == x.dtype and delta.rank == x.rank
                   and all(dims_compatible(a, b) for a, b in zip(delta.shape, x.shape)), f"delta {delta} does not match x {x}")
        return [x]


# --- layer normalization -------------------------------------------------------------------------
class _LayerNormBase(Node):
    attributes = {"begin_norm_axis": 1, "epsilon": 1e-5}

    def check_layer_norm(self, x: TensorType, *params: TensorType) -> TensorType:
        """Checks x against its scale/bias; returns the type of the statistics."""
        begin = int(self.attrs["begin_norm_axis"])
        self.check(0 <= begin < x.rank, f"begin_norm_axis {begin} out of range for {x}")
        _check_same_dtype(self, x, *params)
        norm = x.shape[begin:]
        size = -1 if any(d < 0 for d in norm) else int(np.prod(norm))
        for t in params:
            self.check(t.rank == 1 and dims_compatible(t.shape[0], size),
                       f"scale/bias {t} must be 1-D with the {size} normalized elements of {x}")
        return TensorType(x.dtype, x.shape[:begin])


@register_op
class LayerNorm(_LayerNormBase):
    """Inputs (x, scale, bias), normalized over dims [begin_norm_axis, rank); scale and bias are
    flattened over those dims. Outputs (y, mean, variance), the statistics shaped x.shape[:begin]."""

    op_type = "LayerNorm"
    num_inputs = 3

    def infer(self):
        x = self.input_type(0)
        stats = self.check_layer_norm(x, self.input_type(1), self.input_type(2))
        return [x, stats, stats]


@register_op
class LayerNormBackprop(_LayerNormBase):
    """Inputs (x, scale, mean, variance, delta); outputs (dx, dscale, dbias)."""

    op_type = "LayerNormBackprop"
    num_inputs = 5

    def infer(self):
        x, scale, mean, variance, delta = (self.input_type(i) for i in range(5))
        stats = self.check_layer_norm(x, scale)
        for t in (mean, variance):
            self.check(t.dtype == x.dtype and t.rank == stats.rank
                       and all(dims_compatible(a, b) for a, b in zip(t.shape, stats.shape)),
                       f"statistic {t} does not match {stats}")
        self.check(delta.dtype == x.dtype and delta.rank == x.rank, f"delta {delta} does not match x {x}")
        return [x, scale, scale]


# --- local response normalization ------------------------------------------------------------------
class _LRNBase(Node):
    """Paddle's lrn: mid = k + alpha * sum of x^2 over the ``size`` (odd) channels centred on each channel."""

    attributes = {"size": 5, "k": 2.0, "alpha": 1e-4, "beta": 0.75}

    def check_lrn(self, x: TensorType):
        self.check(x.dtype.is_float and x.rank == 4, f"needs a 4-D (NCHW) floating-point input, got {x}")
        size = int(self.attrs["size"])
        self.check(size > 0 and size % 2 == 1, f"size {size} must be odd and > 0")


@register_op
class LRN(_LRNBase):
    """Input x (NCHW). Outputs (out, mid): out = x * mid^-beta."""

    op_type = "LRN"
    num_inputs = 1

    def infer(self):
        x = self.input_type(0)
        self.check_lrn(x)
        return [x, x]


@register_op
class LRNBackprop(_LRNBase):
    """Inputs (x, out, mid, delta)."""

    op_type = "LRNBackprop"
    num_inputs = 4

    def infer(self):
        types = [self.input_type(i) for i in range(4)]
        self.check_lrn(types[0])
        for t in types[1:]:
            self.check(t.dtype == types[0].dtype and t.rank == 4, f"input {t} does not match x {types[0]}")
        return [types[0]]


# --- dropout ---------------------------------------------------------------------------------------
@register_op
class DropoutMask(Node):
    """A uint8 keep-mask shaped like the input: each element is 1 with probability 1 - ``prob``.

    The only random op: ``seed`` fixes the mask (every run draws the same), None draws anew.
    """

    op_type = "DropoutMask"
    attributes = {"prob": 0.5, "seed": None}
    num_inputs = 1

    def infer(self):
        p = float(self.attrs["prob"])
        self.check(0.0 <= p <= 1.0, f"prob {p} must be in [0, 1]")
        return [TensorType(DType.uint8, self.input_type(0).shape)]


# --- embedding -------------------------------------------------------------------------------------
def _check_embedding(node: Node, weight: TensorType, ids: TensorType):
    node.check(weight.rank == 2 and weight.dtype.is_float, f"weight {weight} must be a 2-D floating-point table")
    node.check(ids.dtype in (DType.int64, DType.int32), f"ids must be int64 or int32, got {ids}")


@register_op
class EmbeddingLookup(Node):
    """Inputs (weight [V, D], ids); output ids.shape + [D]. Rows of ``padding_idx`` (-1: none) read as zeros."""

    op_type = "EmbeddingLookup"
    attributes = {"padding_idx": -1}
    num_inputs = 2

    def infer(self):
        weight, ids = self.input_type(0), self.input_type(1)
        _check_embedding(self, weight, ids)
        return [TensorType(weight.dtype, list(ids.shape) + [weight.shape[1]])]


@register_op
class EmbeddingLookupBackprop(Node):
    """Inputs (weight, ids, delta); the dense weight gradient (row ``padding_idx`` stays zero)."""

    op_type = "EmbeddingLookupBackprop"
    attributes = {"padding_idx": -1}
    num_inputs = 3

    def infer(self):
        weight, ids, delta = (self.input_type(i) for i in range(3))
        _check_embedding(self, weight, ids)
        self.check(delta.dtype == weight.dtype and delta.rank == ids.rank + 1,
                   f"delta {delta} does not match ids {ids} and weight {weight}")
        return [weight]


# --- cross-entropy on probabilities ----------------------------------------------------------------------
def _check_cross_entropy(node: Node, x: TensorType, label: TensorType):
    soft = node.attrs["soft_label"]
    node.check(x.dtype.is_float and x.rank >= 1, f"x must be floating point, got {x}")
    node.check(label.rank == x.rank, f"label {label} must have the rank of x {x}")
    if soft:
        node.check(label.dtype == x.dtype, f"soft label {label} must have the dtype of x {x}")
    else:
        node.check(label.dtype in (DType.int64, DType.int32), f"hard label must be int64 or int32, got {label}")
        node.check(dims_compatible(label.shape[-1], 1), f"hard label {label} must have size 1 in the last dim")
    for i in range(x.rank - 1):
        node.check(dims_compatible(x.shape[i], label.shape[i]), f"label {label} does not match x {x} on dim {i}")


@register_op
class CrossEntropy(Node):
    """Inputs (x: probabilities over the last dim, label). Loss has size 1 in the last dim.

    Hard labels also output match_x, x at the label (0 where the label is ``ignore_index``).
    """

    op_type = "CrossEntropy"
    attributes = {"soft_label": False, "ignore_index": -100}
    num_inputs = 2

    def infer(self):
        x, label = self.input_type(0), self.input_type(1)
        _check_cross_entropy(self, x, label)
        loss = TensorType(x.dtype, list(x.shape[:-1]) + [1])
        return [loss] if self.attrs["soft_label"] else [loss, loss]


@register_op
class CrossEntropyBackprop(Node):
    """Inputs (x, label, loss gradient); output: gradient of x."""

    op_type = "CrossEntropyBackprop"
    attributes = {"soft_label": False, "ignore_index": -100}
    num_inputs = 3

    def infer(self):
        x, label, delta = (self.input_type(i) for i in range(3))
        _check_cross_entropy(self, x, label)
        self.check(delta.dtype == x.dtype and delta.rank == x.rank, f"loss gradient {delta} does not match x {x}")
        return [x]
