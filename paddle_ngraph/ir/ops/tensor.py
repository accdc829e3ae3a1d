"""Graph inputs, constants, dtype conversion, and the random dropout mask."""
from __future__ import annotations

import numpy as np

from ..bfloat16 import to_bfloat16
from ..node import Node, register_op
from ..types import DType, TensorType

__all__ = ["Parameter", "Constant", "Convert", "DropoutMask"]


@register_op
class Parameter(Node):
    """A graph input. ``role`` says what it holds: feed, parameter, state or constant input."""

    op_type = "Parameter"
    attributes = {"dtype": "float32", "shape": (), "role": "feed"}
    num_inputs = 0

    def infer(self):
        return [TensorType(self.attrs["dtype"], self.attrs["shape"])]


@register_op
class Constant(Node):
    """``dtype`` None: the value's NumPy dtype. A bfloat16 constant keeps its bits in ``value``
    (uint16) and says so in ``dtype``: a uint16 value given for it is taken as those bits, any
    other is rounded to bfloat16 as Paddle's conversion does."""

    op_type = "Constant"
    attributes = {"value": None, "dtype": None}
    num_inputs = 0

    def __init__(self, value, dtype=None, name=None):
        dtype = None if dtype is None else DType.parse(dtype)
        if dtype is DType.bfloat16:
            array = np.asarray(value)
            array = array.copy() if array.dtype == np.uint16 else to_bfloat16(array)
            super().__init__(name=name, value=array, dtype=dtype.value)
            return
        array = np.asarray(value, dtype=None if dtype is None else dtype.numpy)
        super().__init__(name=name, value=array)

    def infer(self):
        value = self.attrs["value"]
        dtype = DType.bfloat16 if self.attrs["dtype"] == DType.bfloat16.value else DType.from_numpy(value.dtype)
        return [TensorType(dtype, value.shape)]


@register_op
class Convert(Node):
    op_type = "Convert"
    attributes = {"dtype": "float32"}
    num_inputs = 1

    def infer(self):
        return [TensorType(self.attrs["dtype"], self.input_type(0).shape)]


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
