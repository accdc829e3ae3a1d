"""Indexing ops (gather, top-k, slices) and their scatter inverses, stack, and accuracy."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import DType, TensorType, dims_compatible, normalize_axis
from .core import Slice

__all__ = ["Gather", "ScatterAdd", "ScatterElementsAdd", "ReplaceSlice", "Stack", "TopK", "Accuracy"]

_INDEX_DTYPES = (DType.int32, DType.int64)


def _axis(node: Node, axis: int, rank: int) -> int:
    """``axis`` normalized to [0, rank); fails naming the node when out of range."""
    normalized = normalize_axis(int(axis), rank)
    node.check(0 <= normalized < rank, f"axis {axis} out of range for rank {rank}")
    return normalized


def _gathered_shape(x: TensorType, index: TensorType, axis: int) -> list:
    """Shape of gathering ``index`` along ``axis``: a 0-D index removes the axis."""
    shape = list(x.shape)
    if index.rank == 0:
        del shape[axis]
    else:
        shape[axis] = index.shape[0]
    return shape


def _check_index(node: Node, index: TensorType):
    node.check(index.dtype in _INDEX_DTYPES, f"index must be int32 or int64, got {index}")
    node.check(index.rank <= 1, f"index must be 0-D or 1-D, got {index}")


def _check_same_shape(node: Node, what: str, got: TensorType, expected: list):
    node.check(len(got.shape) == len(expected) and all(dims_compatible(a, b) for a, b in zip(got.shape, expected)),
               f"{what} is {got}, expected shape {expected}")


@register_op
class Gather(Node):
    """Inputs (x, index). The slices of x at ``index`` (0-D or 1-D) along ``axis``, like Paddle's gather."""

    op_type = "Gather"
    attributes = {"axis": 0}
    num_inputs = 2

    def infer(self):
        x, index = self.input_type(0), self.input_type(1)
        _check_index(self, index)
        return [TensorType(x.dtype, _gathered_shape(x, index, _axis(self, self.attrs["axis"], x.rank)))]


@register_op
class ScatterAdd(Node):
    """Inputs (data, index, updates). Adds the slices of updates into data at ``index`` along
    ``axis``; repeated indices accumulate. The inverse of Gather, hence its gradient."""

    op_type = "ScatterAdd"
    attributes = {"axis": 0}
    num_inputs = 3

    def infer(self):
        data, index, updates = (self.input_type(i) for i in range(3))
        _check_index(self, index)
        self.check(updates.dtype == data.dtype, f"updates {updates} and data {data} dtypes differ")
        expected = _gathered_shape(data, index, _axis(self, self.attrs["axis"], data.rank))
        _check_same_shape(self, "updates", updates, expected)
        return [data]


@register_op
class ScatterElementsAdd(Node):
    """Inputs (data, indices, updates), indices and updates of one shape and of data's rank.
    Adds updates[i] into data at indices[i] along ``axis`` (ONNX ScatterElements, reduction add):
    the inverse of take-along-axis, hence the gradient of TopK."""

    op_type = "ScatterElementsAdd"
    attributes = {"axis": -1}
    num_inputs = 3

    def infer(self):
        data, indices, updates = (self.input_type(i) for i in range(3))
        _axis(self, self.attrs["axis"], data.rank)
        self.check(indices.dtype in _INDEX_DTYPES, f"indices must be int32 or int64, got {indices}")
        self.check(indices.rank == data.rank, f"indices {indices} must have the rank of data {data}")
        self.check(updates.dtype == data.dtype, f"updates {updates} and data {data} dtypes differ")
        _check_same_shape(self, "updates", updates, list(indices.shape))
        return [data]


@register_op
class ReplaceSlice(Node):
    """Inputs (data, update). data with the slice ``axes/starts/ends`` (as in Slice) replaced by
    update (nGraph's ReplaceSlice); the gradient of Slice is a ReplaceSlice of zeros."""

    op_type = "ReplaceSlice"
    attributes = {"axes": (), "starts": (), "ends": ()}
    num_inputs = 2

    def infer(self):
        data, update = self.input_type(0), self.input_type(1)
        self.check(update.dtype == data.dtype, f"update {update} and data {data} dtypes differ")
        sliced = Slice.infer(self)[0]  # Slice's rule reads only input 0 and these attributes
        _check_same_shape(self, "update", update, list(sliced.shape))
        return [data]


@register_op
class Stack(Node):
    """Stacks same-typed inputs along a new axis ``axis`` (in [-(rank+1), rank])."""

    op_type = "Stack"
    attributes = {"axis": 0}

    def infer(self):
        self.check(len(self.inputs) >= 1, "needs at least one input")
        first = self.input_type(0)
        for i in range(1, len(self.inputs)):
            t = self.input_type(i)
            self.check(t.dtype == first.dtype and t.rank == first.rank
                       and all(dims_compatible(a, b) for a, b in zip(t.shape, first.shape)),
                       f"input {i} is {t}, input 0 is {first}")
        axis = _axis(self, self.attrs["axis"], first.rank + 1)
        shape = list(first.shape)
        shape.insert(axis, len(self.inputs))
        return [TensorType(first.dtype, shape)]


@register_op
class TopK(Node):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices.

    Results are sorted (best first) whatever ``sorted`` says; among equal values the lower
    index comes first (Paddle's CPU kernel leaves the order of ties unspecified).
    """

    op_type = "TopK"
    attributes = {"k": 1, "axis": -1, "largest": True, "sorted": True}
    num_inputs = 1

    def infer(self):
        x = self.input_type(0)
        self.check(x.rank >= 1, f"needs an input of rank >= 1, got {x}")
        axis = _axis(self, self.attrs["axis"], x.rank)
        k = int(self.attrs["k"])
        self.check(k >= 1, f"k must be >= 1, got {k}")
        self.check(x.shape[axis] < 0 or k <= x.shape[axis], f"k={k} exceeds dim {axis} of {x}")
        shape = list(x.shape)
        shape[axis] = k
        return [TensorType(x.dtype, shape), TensorType(DType.int64, shape)]


@register_op
class Accuracy(Node):
    """Inputs (top-k indices [N, k], label [N, 1] or [N]). Outputs, as Paddle's accuracy:
    the fraction of rows whose label is among their indices (float32), that count and N (int32)."""

    op_type = "Accuracy"
    num_inputs = 2

    def infer(self):
        indices, label = self.input_type(0), self.input_type(1)
        self.check(indices.dtype in _INDEX_DTYPES and indices.rank == 2, f"indices must be integer [N, k], got {indices}")
        column = label.rank == 1 or (label.rank == 2 and dims_compatible(label.shape[1], 1))
        self.check(label.dtype in _INDEX_DTYPES and column, f"label must be integer [N, 1] or [N], got {label}")
        self.check(dims_compatible(label.shape[0], indices.shape[0]), f"label {label} and indices {indices} differ in N")
        return [TensorType(DType.float32, ()), TensorType(DType.int32, ()), TensorType(DType.int32, ())]
