"""Ops that pick elements by index or position (slice, gather, top-k, embedding lookup), their
scatter inverses, and accuracy."""
from __future__ import annotations

from ..node import Node, register_op
from ..types import DType, TensorType, dims_compatible, normalize_axis
from .checks import checked_axis

__all__ = [
    "Slice",
    "ReplaceSlice",
    "Gather",
    "ScatterAdd",
    "ScatterElementsAdd",
    "TopK",
    "Accuracy",
    "EmbeddingLookup",
    "EmbeddingLookupBackprop",
]


@register_op
class Slice(Node):
    """Slice along ``axes`` with Python semantics for negative and out-of-range bounds."""

    op_type = "Slice"
    attributes = {"axes": (), "starts": (), "ends": ()}
    num_inputs = 1

    def infer(self):
        src = self.input_type(0)
        shape = list(src.shape)
        axes, starts, ends = self.attrs["axes"], self.attrs["starts"], self.attrs["ends"]
        self.check(len(axes) == len(starts) == len(ends),
                   f"axes, starts and ends differ in length ({len(axes)}, {len(starts)}, {len(ends)})")
        seen = set()
        for axis, start, end in zip(axes, starts, ends):
            axis = normalize_axis(axis, src.rank)
            self.check(0 <= axis < src.rank, f"axis {axis} out of range for {src}")
            # Slicing an axis twice has no one meaning (the kernels would apply only the last).
            self.check(axis not in seen, f"axis {axis} is sliced twice (axes {list(axes)})")
            seen.add(axis)
            if shape[axis] >= 0:
                shape[axis] = len(range(*slice(start, end).indices(shape[axis])))
        return [TensorType(src.dtype, shape)]


_INDEX_DTYPES = (DType.int32, DType.int64)


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
        return [TensorType(x.dtype, _gathered_shape(x, index, checked_axis(self, self.attrs["axis"], x.rank)))]


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
        expected = _gathered_shape(data, index, checked_axis(self, self.attrs["axis"], data.rank))
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
        checked_axis(self, self.attrs["axis"], data.rank)
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
        axis = checked_axis(self, self.attrs["axis"], x.rank)
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
