"""Losses and their backprops: softmax cross-entropy (fused) and cross-entropy on probabilities."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import DType, TensorType, dims_compatible, normalize_axis

__all__ = ["SoftmaxCrossEntropy", "SoftmaxCrossEntropyBackprop", "CrossEntropy", "CrossEntropyBackprop"]


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
