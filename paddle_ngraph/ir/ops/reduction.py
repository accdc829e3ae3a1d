"""Reductions over a set of axes (an empty ``axes`` reduces over every axis), and the running sum
along one axis (CumSum)."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import DType, TensorType, normalize_axis

__all__ = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]


class Reduction(Node):
    attributes = {"axes": (), "keep_dims": False}
    num_inputs = 1

    def reduced_axes(self) -> list[int]:
        rank = self.input_type(0).rank
        axes = [normalize_axis(int(a), rank) for a in self.attrs["axes"]] or list(range(rank))
        for a in axes:
            self.check(0 <= a < max(rank, 1), f"axis {a} out of range for rank {rank}")
        return sorted(set(axes))

    def infer(self):
        t = self.input_type(0)
        axes = set(self.reduced_axes())
        if self.attrs["keep_dims"]:
            shape = [1 if i in axes else d for i, d in enumerate(t.shape)]
        else:
            shape = [d for i, d in enumerate(t.shape) if i not in axes]
        return [TensorType(t.dtype, shape)]


for _name in __all__:
    _cls = type(_name, (Reduction,), {"op_type": _name, "__doc__": f"{_name} over ``axes``."})
    register_op(_cls)
    globals()[_name] = _cls


class ReductionBackprop(Node):
    """Inputs (x, gradient of the reduction); the output has the type of x."""

    attributes = {"axes": (), "keep_dims": False}
    num_inputs = 2
    reduced_axes = Reduction.reduced_axes

    def infer(self):
        x = self.input_type(0)
        self.reduced_axes()
        self.check(self.input_type(1).dtype == x.dtype, f"gradient dtype differs from {x}")
        return [x]


@register_op
class ReduceMeanBackprop(ReductionBackprop):
    """Spreads the gradient evenly over the reduced axes of x.

    The divisor is counted at run time, so a dynamic batch dimension is fine.
    """

    op_type = "ReduceMeanBackprop"


@register_op
class ReduceSumBackprop(ReductionBackprop):
    """Broadcasts the gradient back over the reduced axes of x."""

    op_type = "ReduceSumBackprop"


__all__ += ["ReduceMeanBackprop", "ReduceSumBackprop"]


_CUMSUM_DTYPES = (DType.float32, DType.float64, DType.int32, DType.int64)  # Paddle's CPU kernel's, but int16


@register_op
class CumSum(Node):
    """The running sum of x along ``axis``, of x's type. ``exclusive``: element i sums the elements
    before it (the first is 0); ``reverse``: the sums run from the end of the axis. Sums are
    accumulated in x's dtype, element after element (Paddle's and NumPy's order)."""

    op_type = "CumSum"
    attributes = {"axis": -1, "exclusive": False, "reverse": False}
    num_inputs = 1

    def infer(self):
        t = self.input_type(0)
        self.check(t.rank >= 1, f"needs an input of rank >= 1, got {t}")
        self.check(t.dtype in _CUMSUM_DTYPES, f"needs a float32, float64, int32 or int64 input, got {t}")
        axis = int(self.attrs["axis"])
        self.check(-t.rank <= axis < t.rank, f"axis {axis} out of range for rank {t.rank}")
        return [t]


__all__ += ["CumSum"]
