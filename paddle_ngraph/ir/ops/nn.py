"""Neural-network ops: softmax and the fused softmax cross-entropy."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import DType, TensorType, dims_compatible, normalize_axis

__all__ = ["Softmax", "SoftmaxBackprop", "SoftmaxCrossEntropy", "SoftmaxCrossEntropyBackprop"]


@register_op
class Softmax(Node):
    op_type = "Softmax"
    attributes = {"axis": -1}
    num_inputs = 1

    def infer(self):
        t = self.input_type(0)
        self.check(t.dtype.is_float, f"needs a floating-point input, got {t}")
        return [t]


@register_op
class SoftmaxBackprop(Node):
    """Inputs (softmax output, output gradient)."""

    op_type = "SoftmaxBackprop"
    attributes = {"axis": -1}
    num_inputs = 2

    def infer(self):
        return [self.input_type(1)]


def _check_label(node: Node, logits: TensorType, label: TensorType, soft_label: bool, axis: int):
    if soft_label:
        node.check(label.dtype == logits.dtype and label.rank == logits.rank, f"soft label {label} must match logits {logits}")
    else:
        node.check(label.dtype in (DType.int64, DType.int32), f"hard label must be int64 or int32, got {label}")
        node.check(label.rank == logits.rank, f"label {label} must have the rank of logits {logits} (size 1 on axis)")
    for i, (a, b) in enumerate(zip(logits.shape, label.shape)):
        if i != axis:
            node.check(dims_compatible(a, b), f"label {label} does not match logits {logits} on dim {i}")


@register_op
class SoftmaxCrossEntropy(Node):
    """Inputs (logits, label). Outputs (softmax, loss); loss has size 1 on ``axis``."""

    op_type = "SoftmaxCrossEntropy"
    attributes = {"axis": -1, "soft_label": False, "ignore_index": -100}
    num_inputs = 2

    def infer(self):
        logits, label = self.input_type(0), self.input_type(1)
        self.check(logits.dtype.is_float, f"logits must be floating point, got {logits}")
        axis = normalize_axis(self.attrs["axis"], logits.rank)
        _check_label(self, logits, label, self.attrs["soft_label"], axis)
        loss_shape = list(logits.shape)
        loss_shape[axis] = 1
        return [logits, TensorType(logits.dtype, loss_shape)]


@register_op
class SoftmaxCrossEntropyBackprop(Node):
    """Inputs (softmax, label, loss gradient). Output: gradient of the logits."""

    op_type = "SoftmaxCrossEntropyBackprop"
    attributes = {"axis": -1, "soft_label": False, "ignore_index": -100}
    num_inputs = 3

    def infer(self):
        softmax, label, _ = (self.input_type(i) for i in range(3))
        axis = normalize_axis(self.attrs["axis"], softmax.rank)
        _check_label(self, softmax, label, self.attrs["soft_label"], axis)
        return [softmax]
