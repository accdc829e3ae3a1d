"""slice, gather, top_k/top_k_v2 (topk in PIR) with their grads, and accuracy."""
from __future__ import annotations

from ...ir import ops
from ...ir.types import normalize_axis
from .shape import const_ints, zeros_like


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


def slice(ctx):  # noqa: A001  (named after the Paddle op)
    x = ctx.input("Input", "input")
    axes, starts, ends, decrease = _slice_spec(ctx, x.type.rank)
    out = ops.Slice(x, axes=axes, starts=starts, ends=ends).output()
    if decrease:
        if any(out.shape[a] != 1 for a in decrease):
            raise ctx.fail(f"decrease_axis {decrease} must select dims of size 1, the slice is {out.type}")
        out = ops.Reshape(out, shape=[d for i, d in enumerate(out.shape) if i not in decrease]).output()
    ctx.set_output(("Out", "out"), out)


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


def gather(ctx):
    x, index, axis = _gather_operands(ctx)
    ctx.set_output(("Out", "out"), ops.Gather(x, index, axis=axis).output())


def gather_grad(ctx):
    x, index, axis = _gather_operands(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ScatterAdd(zeros_like(x), index, dout, axis=axis).output())


# --- top-k and accuracy -----------------------------------------------------------------------------
def _top_k_axis(ctx) -> int:
    return int(ctx.attr("axis", default=-1))  # top_k (v1) has no axis: always the last


def top_k_v2(ctx):
    """top_k_v2 and top_k (legacy), topk (PIR). ``sorted=False`` still gives sorted results;
    Paddle's order is then unspecified, so only the set of values matches."""
    node = ops.TopK(ctx.input("X", "x"), k=int(ctx.attr_or_const_input(("k",), ("K", "k"))), axis=_top_k_axis(ctx),
                    largest=bool(ctx.attr("largest", default=True)), sorted=bool(ctx.attr("sorted", default=True)))
    ctx.set_output(("Out", "out"), node.output(0))
    ctx.set_output(("Indices", "indices"), node.output(1))


def top_k_v2_grad(ctx):
    x, indices, dout = ctx.input("X", "x"), ctx.input("Indices", "indices"), ctx.input("Out@GRAD", "out_grad")
    grad = ops.ScatterElementsAdd(zeros_like(x), indices, dout, axis=_top_k_axis(ctx)).output()
    ctx.set_output(("X@GRAD", "x_grad"), grad)


def accuracy(ctx):
    """The ``Out`` input (top-k values) only gives Paddle the shape; the indices decide."""
    node = ops.Accuracy(ctx.input("Indices", "indices"), ctx.input("Label", "label"))
    for i, slot in enumerate([("Accuracy", "accuracy"), ("Correct", "correct"), ("Total", "total")]):
        ctx.set_output(slot, node.output(i))
