"""Elementwise ops: arithmetic, comparisons, logical ops, unary math, select. All binary ops share
one type rule: NumPy broadcasting. The activations (ops/activation.py) build on the unary bases."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import DType, TensorType, broadcast_shapes

__all__ = []


class BinaryElementwise(Node):
    num_inputs = 2
    result_dtype: DType | None = None  # None: same as the inputs

    def infer(self):
        a, b = self.input_type(0), self.input_type(1)
        self.check(a.dtype == b.dtype, f"input dtypes differ: {a} and {b}")
        shape = broadcast_shapes(a.shape, b.shape)
        self.check(shape is not None, f"shapes {a} and {b} do not broadcast")
        return [TensorType(self.result_dtype or a.dtype, shape)]


class UnaryElementwise(Node):
    num_inputs = 1
    float_only = True

    def infer(self):
        t = self.input_type(0)
        if self.float_only:
            self.check(t.dtype.is_float, f"needs a floating-point input, got {t}")
        return [t]


class UnaryBackprop(Node):
    """Gradient of a unary op: inputs (forward value, output gradient)."""

    num_inputs = 2

    def infer(self):
        value, delta = self.input_type(0), self.input_type(1)
        self.check(value.dtype == delta.dtype, f"value {value} and gradient {delta} dtypes differ")
        self.check(broadcast_shapes(value.shape, delta.shape) is not None, f"value {value} and gradient {delta} differ")
        return [delta]


def _define(name, base, doc, **extra):
    cls = type(name, (base,), {"op_type": name, "__doc__": doc, **extra})
    register_op(cls)
    globals()[name] = cls
    __all__.append(name)
    return cls


for _name in ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power"]:
    _define(_name, BinaryElementwise, f"Elementwise {_name.lower()} with NumPy broadcasting.")


class NumericBinary(BinaryElementwise):
    """A binary op defined on numbers only (Paddle's kernels have no bool version)."""

    def infer(self):
        self.check(self.input_type(0).dtype != DType.bool, f"needs numeric inputs, got {self.input_type(0)}")
        return super().infer()


_define("Mod", NumericBinary, "Python-style modulo (the result takes the divisor's sign) with NumPy "
        "broadcasting: Paddle's remainder; integer x % 0 is 0.")
_define("FloorDivide", NumericBinary, "Quotient rounded toward minus infinity with NumPy broadcasting: "
        "Paddle's floor_divide; integer x // 0 is 0.")
for _name in ["Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"]:
    _define(_name, BinaryElementwise, f"Elementwise comparison {_name}; boolean result.", result_dtype=DType.bool)
for _name in ["LogicalAnd", "LogicalOr"]:
    _define(_name, BinaryElementwise, f"{_name} of boolean tensors.", result_dtype=DType.bool)
_define("LogicalNot", UnaryElementwise, "Logical not of a boolean tensor.", float_only=False)
for _name in ["Exp", "Log", "Sqrt"]:
    _define(_name, UnaryElementwise, f"Elementwise {_name.lower()}.")
_define("Negative", UnaryElementwise, "Elementwise negation.", float_only=False)
_define("Abs", UnaryElementwise, "Elementwise absolute value.", float_only=False)


@register_op
class Select(Node):
    """where(condition, a, b) with broadcasting."""

    op_type = "Select"
    num_inputs = 3

    def infer(self):
        c, a, b = (self.input_type(i) for i in range(3))
        self.check(c.dtype == DType.bool, f"condition must be bool, got {c}")
        self.check(a.dtype == b.dtype, f"branch dtypes differ: {a} and {b}")
        shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape) or (), b.shape)
        self.check(shape is not None, f"shapes {c}, {a}, {b} do not broadcast")
        return [TensorType(a.dtype, shape)]


__all__.append("Select")
