"""Activations and their backprops: relu, tanh, sigmoid, gelu (elementwise, typed as
``UnaryElementwise``), and softmax over an axis."""
from __future__ import annotations

from ..node import Node, register_op
from .elementwise import UnaryBackprop, UnaryElementwise

__all__ = [
    "Relu",
    "Tanh",
    "Sigmoid",
    "Gelu",
    "ReluBackprop",
    "TanhBackprop",
    "SigmoidBackprop",
    "GeluBackprop",
    "Softmax",
    "SoftmaxBackprop",
]


@register_op
class Relu(UnaryElementwise):
    """Elementwise max(x, 0)."""

    op_type = "Relu"


@register_op
class Tanh(UnaryElementwise):
    """Elementwise tanh."""

    op_type = "Tanh"


@register_op
class Sigmoid(UnaryElementwise):
    """Elementwise 1 / (1 + exp(-x))."""

    op_type = "Sigmoid"


@register_op
class Gelu(UnaryElementwise):
    """GELU, exact (erf) or tanh approximation."""

    op_type = "Gelu"
    attributes = {"approximate": False}


# Backprops take the forward value they need: Relu/Tanh/Sigmoid their output, Gelu its input.
@register_op
class ReluBackprop(UnaryBackprop):
    """dx = dy * (out > 0)."""

    op_type = "ReluBackprop"


@register_op
class TanhBackprop(UnaryBackprop):
    """dx = dy * (1 - out^2)."""

    op_type = "TanhBackprop"


@register_op
class SigmoidBackprop(UnaryBackprop):
    """dx = dy * out * (1 - out)."""

    op_type = "SigmoidBackprop"


@register_op
class GeluBackprop(UnaryBackprop):
    """dx = dy * gelu'(x)."""

    op_type = "GeluBackprop"
    attributes = {"approximate": False}


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
