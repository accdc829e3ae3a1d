"""Ops that pick elements by index or position, with their grads: slice, gather, gather_nd, index_select,
take_along_axis, index_sample, one_hot, argmax/argmin,
top_k/top_k_v2 (topk in PIR), accuracy, the embedding lookups (lookup_table_v2 / PIR embedding,
lookup_table) and tril_triu (PIR tril, triu: what nn.Transformer's
generate_square_subsequent_mask emits, a Select with a constant mask of the last two dims).
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType, normalize_axis
from .helpers import constant, paddle_dtype
from .registry import converter
from .shape import checked_axes, const_ints, zeros_like


# --- slice --------------------------------------------------------------------------------------
def _slice_spec(ctx, rank: int):
    """(axes, starts, ends, decrease_axis), from attributes or constant tensors."""
    axes = [normalize_axis(int(a), rank) for a in ctx.attr("axes")]
    starts = const_ints(ctx, "starts", "StartsTensor", "StartsTensorList", "starts")
    ends = const_ints(ctx, "ends", "EndsTensor", "EndsTensorList", "ends")
    if not len(axes) == len(starts) == len(ends):
        raise ctx.fail(f"axes {axes}, starts {starts} and ends {ends} differ in length")
    decrease = sorted(normalize_axis(int(a), rank) for a in ctx.attr("decrease_axis", default=[]))
    return axes, starts, ends, decrease


@converter("slice", "pd_op.slice")
def slice(ctx):  # noqa: A001  (named after the Paddle op)
    x = ctx.input("Input", "input")
    axes, starts, ends, decrease = _slice_spec(ctx, x.type.rank)
    out = ops.Slice(x, axes=axes, starts=starts, ends=ends).output()
    if decrease:
        if any(out.shape[a] != 1 for a in decrease):
            raise ctx.fail(f"decrease_axis {decrease} must select dims of size 1, the slice is {out.type}")
        out = ops.Reshape(out, shape=[d for i, d in enumerate(out.shape) if i not in decrease]).output()
    ctx.set_output(("Out", "out"), out)


@converter("slice_grad", "pd_op.slice_grad")
def slice_grad(ctx):
    x, dout = ctx.input("Input", "input"), ctx.input("Out@GRAD", "out_grad")
    axes, starts, ends, decrease = _slice_spec(ctx, x.type.rank)
    if decrease:  # restore the size-1 dims the forward slice removed
        shape = list(dout.shape)
        for a in decrease:
            shape.insert(a, 1)
        dout = ops.Reshape(dout, shape=shape).output()
    grad = ops.ReplaceSlice(zeros_like(x), dout, axes=axes, starts=starts, ends=ends).output()
    ctx.set_output(("Input@GRAD", "input_grad"), grad)


# --- gather ---------------------------------------------------------------------------------------
def _gather_operands(ctx):
    """(x, index, axis). Paddle also takes an index of shape [N, 1], which we flatten."""
    x, index = ctx.input("X", "x"), ctx.input("Index", "index")
    if index.type.rank == 2 and index.shape[1] == 1:
        index = ops.Reshape(index, shape=[-1]).output()
    axis = int(ctx.attr_or_const_input(("axis",), ("Axis", "axis"), default=0))
    return x, index, axis


@converter("gather", "pd_op.gather")
def gather(ctx):
    x, index, axis = _gather_operands(ctx)
    ctx.set_output(("Out", "out"), ops.Gather(x, index, axis=axis).output())


@converter("gather_grad", "pd_op.gather_grad")
def gather_grad(ctx):
    x, index, axis = _gather_operands(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ScatterAdd(zeros_like(x), index, dout, axis=axis).output())


# --- gather_nd: index [..., k] picks x's slices x[i0, ..., ik-1] ----------------------------------------------
def _gather_nd_operands(ctx):
    """(x, flat row index, x with its first k dims merged, output shape): Gather on the merged rows
    at the row-major offsets of the k-tuples, the same elements Paddle's loop picks."""
    x, index = ctx.input("X", "x"), ctx.input("Index", "index")
    if index.dtype not in (DType.int32, DType.int64) or index.type.rank < 1:
        raise ctx.fail(f"index must be an int32 or int64 tensor of rank >= 1, got {index.type}")
    k = index.shape[-1]
    if k < 1 or k > x.type.rank or any(d < 0 for d in x.shape[:k]):
        raise ctx.fail(f"index {index.type} must end in a static 1 <= k <= rank of x {x.type}, over static dims")
    leading, rest = list(index.shape[:-1]), list(x.shape[k:])
    if sum(d < 0 for d in leading) > 1 or any(d < 0 for d in rest):
        raise ctx.fail(f"at most one dynamic dim in index {index.type}, none in the slices of x {x.type}")
    rows = ops.Reshape(x, shape=[int(np.prod(x.shape[:k]))] + rest).output()
    offset = None
    for j in range(k):  # sum of index[..., j] * stride_j
        column = index if k == 1 else ops.Slice(index, axes=[index.type.rank - 1], starts=[j], ends=[j + 1]).output()
        stride = int(np.prod(x.shape[j + 1:k]))
        term = column if stride == 1 else ops.Multiply(column, constant(stride, index.dtype)).output()
        offset = term if offset is None else ops.Add(offset, term).output()
    return x, ops.Reshape(offset, shape=[-1]).output(), rows, leading + rest


@converter("gather_nd", "pd_op.gather_nd")
def gather_nd(ctx):
    _, offset, rows, shape = _gather_nd_operands(ctx)
    ctx.set_output(("Out", "out"), ops.Reshape(ops.Gather(rows, offset, axis=0).output(), shape=shape).output())


@converter("gather_nd_grad", "pd_op.gather_nd_grad")
def gather_nd_grad(ctx):
    """Repeated index tuples accumulate, as in Paddle's ScatterNdAdd."""
    x, offset, rows, _ = _gather_nd_operands(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    updates = ops.Reshape(dout, shape=[-1] + list(rows.shape[1:])).output()
    grad = ops.ScatterAdd(zeros_like(rows), offset, updates, axis=0).output()
    ctx.set_output(("X@GRAD", "x_grad"), ops.Reshape(grad, shape=list(x.shape)).output())


# --- top-k and accuracy -----------------------------------------------------------------------------
def _top_k_axis(ctx) -> int:
    return int(ctx.attr("axis", default=-1))  # top_k (v1) has no axis: always the last


@converter("top_k_v2", "top_k", "pd_op.topk")
def top_k_v2(ctx):
    """top_k_v2 and top_k (legacy), topk (PIR). ``sorted=False`` still gives sorted results;
    Paddle's order is then unspecified, so only the set of values matches."""
    node = ops.TopK(ctx.input("X", "x"), k=int(ctx.attr_or_const_input(("k",), ("K", "k"))), axis=_top_k_axis(ctx),
                    largest=bool(ctx.attr("largest", default=True)), sorted=bool(ctx.attr("sorted", default=True)))
    ctx.set_output(("Out", "out"), node.output(0))
    ctx.set_output(("Indices", "indices"), node.output(1))


@converter("top_k_v2_grad", "top_k_grad", "pd_op.topk_grad")
def top_k_v2_grad(ctx):
    x, indices, dout = ctx.input("X", "x"), ctx.input("Indices", "indices"), ctx.input("Out@GRAD", "out_grad")
    grad = ops.ScatterElementsAdd(zeros_like(x), indices, dout, axis=_top_k_axis(ctx)).output()
    ctx.set_output(("X@GRAD", "x_grad"), grad)


@converter("accuracy", "pd_op.accuracy")
def accuracy(ctx):
    """The ``Out`` input (top-k values) only gives Paddle the shape; the indices decide."""
    node = ops.Accuracy(ctx.input("Indices", "indices"), ctx.input("Label", "label"))
    for i, slot in enumerate([("Accuracy", "accuracy"), ("Correct", "correct"), ("Total", "total")]):
        ctx.set_output(slot, node.output(i))


def _index_select_operands(ctx):
    x, index = ctx.input("X", "x"), ctx.input("Index", "index")
    if index.type.rank != 1 or index.dtype not in (DType.int32, DType.int64):
        raise ctx.fail(f"index must be a 1-D int32 or int64 tensor, got {index.type}")
    return x, index, checked_axes(ctx, [ctx.attr("dim", "axis", default=0)], x.type.rank, "dim")[0]


@converter("index_select", "pd_op.index_select")
def index_select(ctx):
    x, index, axis = _index_select_operands(ctx)
    ctx.set_output(("Out", "out"), ops.Gather(x, index, axis=axis).output())


@converter("index_select_grad", "pd_op.index_select_grad")
def index_select_grad(ctx):
    """Repeated indices accumulate, as in Paddle's kernel."""
    x, index, axis = _index_select_operands(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ScatterAdd(zeros_like(x), index, dout, axis=axis).output())


# --- embedding: lookup_table_v2 / PIR embedding; lookup_table (v1) has ids with a trailing 1 ------------
def _padding_idx(ctx) -> int:
    return int(ctx.attr("padding_idx", default=-1))  # -1: no padding row, as in Paddle


def _ids(ctx, v1: bool) -> Output:
    ids = ctx.input("Ids", "x")
    if not v1:
        return ids
    if ids.type.rank < 2 or ids.shape[-1] not in (1, -1):
        raise ctx.fail(f"lookup_table ids must end in a dimension of size 1, got {ids.type}")
    return ops.Reshape(ids, shape=list(ids.shape[:-1])).output()


def _lookup(ctx, v1: bool):
    node = ops.EmbeddingLookup(ctx.input("W", "weight"), _ids(ctx, v1), padding_idx=_padding_idx(ctx))
    ctx.set_output(("Out", "out"), node.output())


def _lookup_grad(ctx, v1: bool):
    """A sparse lookup's gradient (selected rows) is converted only where the transpiler made it a
    dense variable (several ranks: transpiler/sparse_gradients.py). Its dense form then keeps the
    gradient of the ``padding_idx`` rows, as Paddle's selected rows do (its dense gradient zeroes them)."""
    grad = ctx.output_info("W@GRAD", "weight_grad")
    sparse = grad is not None and grad.declared_kind is not None
    if not sparse and ctx.attr("is_sparse", "sparse", default=False):
        raise ctx.fail("is_sparse=True (a SelectedRows gradient) is not supported")
    node = ops.EmbeddingLookupBackprop(ctx.input("W", "weight"), _ids(ctx, v1), ctx.input("Out@GRAD", "out_grad"),
                                       padding_idx=-1 if sparse else _padding_idx(ctx))
    ctx.set_output(("W@GRAD", "weight_grad"), node.output())


@converter("lookup_table_v2", "pd_op.embedding")
def lookup_table_v2(ctx):
    _lookup(ctx, v1=False)


@converter("lookup_table_v2_grad", "pd_op.embedding_grad")
def lookup_table_v2_grad(ctx):
    _lookup_grad(ctx, v1=False)


@converter("lookup_table")
def lookup_table(ctx):
    _lookup(ctx, v1=True)


@converter("lookup_table_grad")
def lookup_table_grad(ctx):
    _lookup_grad(ctx, v1=True)


def _keep(ctx, x):
    """The kept elements of the last two dims: i - j >= -diagonal (tril) or <= -diagonal (triu)."""
    if x.type.rank < 2 or min(x.shape[-2:]) < 0:
        raise ctx.fail(f"needs an input of rank >= 2 with static last two dims, got {x.type}")
    lower = ctx.attr("lower") if ctx.has_attr("lower") else ctx.op_type.endswith(("tril", "tril_grad"))
    diagonal = int(ctx.attr("diagonal", default=0))
    rows, cols = x.shape[-2:]
    mask = np.tril(np.ones((rows, cols), bool), diagonal) if lower else np.triu(np.ones((rows, cols), bool), diagonal)
    return ops.Constant(mask).output()


@converter("tril_triu", "pd_op.tril", "pd_op.triu")
def tril_triu(ctx):
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Select(_keep(ctx, x), x, constant(0, x.dtype)).output())


@converter("tril_triu_grad", "pd_op.tril_grad", "pd_op.triu_grad")
def tril_triu_grad(ctx):
    delta = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.Select(_keep(ctx, delta), delta, constant(0, delta.dtype)).output())


# --- argmax, argmin ---------------------------------------------------------------------------------
@converter("arg_max", "arg_min", "pd_op.argmax", "pd_op.argmin")
def arg_extremum(ctx):
    """The first index of the largest (smallest) value: TopK with k=1 (ties: the lower index)."""
    x = ctx.input("X", "x")
    axis = int(ctx.attr_or_const_input(("axis",), ("axis",), default=0))
    if ctx.attr("flatten", default=False):
        x, axis = ops.Reshape(x, shape=[-1]).output(), 0
    if x.type.rank == 0:
        raise ctx.fail("a 0-D input has no axis to search")
    axis = normalize_axis(axis, x.type.rank)
    largest = ctx.op_type.endswith("max")
    index = ops.TopK(x, k=1, axis=axis, largest=largest, sorted=True).output(1)
    if not ctx.attr("keepdims", default=False) or ctx.attr("flatten", default=False):
        index = ops.Reshape(index, shape=[d for i, d in enumerate(index.shape) if i != axis]).output()
    dtype = ctx.attr("dtype", default=-1)
    dtype = DType.int64 if dtype in (-1, None) else paddle_dtype(dtype)
    ctx.set_output(("Out", "out"), index if dtype == DType.int64 else ops.Convert(index, dtype=dtype.value).output())


# --- one_hot -------------------------------------------------------------------------------------------
@converter("one_hot_v2", "pd_op.one_hot")
def one_hot(ctx):
    """x[..., None] == arange(depth), as float32 (Paddle's one_hot_v2 output). Ids outside
    [0, depth) give rows of zeros (Paddle's CPU kernel raises for them unless
    ``allow_out_of_range``)."""
    ids = ctx.input("X", "x")
    depth = int(ctx.attr_or_const_input(("depth",), ("depth_tensor", "num_classes")))
    if ids.dtype not in (DType.int32, DType.int64) or depth < 1:
        raise ctx.fail(f"ids must be int32 or int64 and depth >= 1, got {ids.type} and depth {depth}")
    classes = ops.Constant(np.arange(depth, dtype=ids.dtype.numpy)).output()
    column = ops.Reshape(ids, shape=list(ids.shape) + [1]).output()
    dtype = paddle_dtype(ctx.attr("dtype", default=5)) if ctx.op_type == "one_hot_v2" else DType.float32
    hot = ops.Convert(ops.Equal(column, classes).output(), dtype=dtype.value).output()
    ctx.set_output(("Out", "out"), hot)


# --- take_along_axis, index_sample: x's elements at index along one axis ----------------------------
def _along_axis_offsets(ctx, x, index, axis: int):
    """The row-major offsets in x (flattened) of x[i0, .., index[i0, .., i_axis, ..], ..]: index
    along ``axis``, the position of each element in the other axes (index and x of one rank; index
    no larger than x in them)."""
    if index.dtype not in (DType.int32, DType.int64) or index.type.rank != x.type.rank:
        raise ctx.fail(f"index must be an int32 or int64 tensor of x's rank, got {index.type} for x {x.type}")
    if any(d < 0 for d in (*x.shape, *index.shape)):
        raise ctx.fail(f"needs static shapes, got x {x.type} and index {index.type}")
    if any(i != axis and n > m for i, (n, m) in enumerate(zip(index.shape, x.shape))):
        raise ctx.fail(f"index {index.type} is larger than x {x.type} outside axis {axis}")
    strides = np.cumprod([1] + list(x.shape[::-1]))[:-1][::-1]
    positions = np.zeros(index.shape, dtype=index.dtype.numpy)
    for i, stride in enumerate(strides):
        if i != axis:
            shape = [1] * index.type.rank
            shape[i] = index.shape[i]
            positions = positions + (np.arange(index.shape[i]) * int(stride)).reshape(shape).astype(positions.dtype)
    along = index if strides[axis] == 1 else ops.Multiply(index, constant(int(strides[axis]), index.dtype)).output()
    offsets = ops.Add(along, ops.Constant(positions).output()).output()
    return ops.Reshape(offsets, shape=[-1]).output()


def _take_along(ctx, x, index, axis: int):
    offsets = _along_axis_offsets(ctx, x, index, axis)
    flat = ops.Reshape(x, shape=[-1]).output()
    return ops.Reshape(ops.Gather(flat, offsets, axis=0).output(), shape=list(index.shape)).output()


def _take_along_grad(ctx, x, index, dout, axis: int):
    """Repeated indices accumulate (Paddle's scatter-add in take_along_axis_grad / index_sample_grad)."""
    offsets = _along_axis_offsets(ctx, x, index, axis)
    flat = zeros_like(ops.Reshape(x, shape=[-1]).output())
    grad = ops.ScatterAdd(flat, offsets, ops.Reshape(dout, shape=[-1]).output(), axis=0).output()
    return ops.Reshape(grad, shape=list(x.shape)).output()


def _index_sample_operands(ctx):
    x, index = ctx.input("X", "x"), ctx.input("Index", "index")
    if x.type.rank != 2 or index.type.rank != 2:
        raise ctx.fail(f"x and index must be 2-D, got {x.type} and {index.type}")
    return x, index


@converter("index_sample", "pd_op.index_sample")
def index_sample(ctx):
    x, index = _index_sample_operands(ctx)
    ctx.set_output(("Out", "out"), _take_along(ctx, x, index, axis=1))


@converter("index_sample_grad", "pd_op.index_sample_grad")
def index_sample_grad(ctx):
    x, index = _index_sample_operands(ctx)
    ctx.set_output(("X@GRAD", "x_grad"), _take_along_grad(ctx, x, index, ctx.input("Out@GRAD", "out_grad"), axis=1))


def _take_along_axis_operands(ctx):
    x, index = ctx.input("Input", "arr"), ctx.input("Index", "indices")
    axis = normalize_axis(int(ctx.attr("Axis", "axis")), x.type.rank)
    return x, index, axis


@converter("take_along_axis", "pd_op.take_along_axis")
def take_along_axis(ctx):
    x, index, axis = _take_along_axis_operands(ctx)
    ctx.set_output(("Result", "out"), _take_along(ctx, x, index, axis))


@converter("take_along_axis_grad", "pd_op.take_along_axis_grad")
def take_along_axis_grad(ctx):
    x, index, axis = _take_along_axis_operands(ctx)
    dout = ctx.input("Result@GRAD", "out_grad")
    ctx.set_output(("Input@GRAD", "arr_grad"), _take_along_grad(ctx, x, index, dout, axis))
