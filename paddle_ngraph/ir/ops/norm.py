"""Normalizations and their backprops: batch normalization (also over the batch of several ranks,
from per-rank sums), layer normalization, local response normalization. Data is NCHW."""
from __future__ import annotations

import numpy as np

from ..node import Node, register_op
from ..types import DType, TensorType, dims_compatible
from .checks import check_same_float_dtype

__all__ = [
    "BatchNormTraining",
    "BatchNormInference",
    "BatchNormTrainingBackprop",
    "BatchNormInferenceBackprop",
    "BatchNormSums",
    "BatchNormTrainingFromSums",
    "BatchNormBackpropSums",
    "BatchNormTrainingBackpropFromSums",
    "LayerNorm",
    "LayerNormBackprop",
    "LRN",
    "LRNBackprop",
]


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
        check_same_float_dtype(self, x, *params)
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
