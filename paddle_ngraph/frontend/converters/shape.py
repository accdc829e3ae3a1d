"""Ops that move, reshape or retype data: reshape, transpose, concat, stack, cast,
fill_zeros_like, with their grads; and PIR's ``builtin.split`` of list outputs."""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType, normalize_axis
from ..program_view import normalize
from .helpers import constant, paddle_dtype


# --- shared by the converters of this module and of indexing.py -----------------------------
def const_ints(ctx, attr: str, *slots) -> list[int]:
    """An int-list attribute that Paddle may take from tensors instead (legacy ``ShapeTensor``,
    PIR ``full_int_array`` operands or lists of ``full`` scalars). The first slot given wins
    over later ones and over the attribute, as in Paddle; its values must be constants."""
    for slot in slots:
        count = len(ctx.inputs(slot))
        if count:
            return [int(v) for i in range(count) for v in ctx.const_input(slot, index=i).reshape(-1)]
    return [int(v) for v in ctx.attr(attr)]


def zeros_like(x: Output) -> Output:
    return ops.BroadcastTo(constant(0, x.dtype), x).output()


def set_list_output(ctx, slots: tuple, values: list, inplace_of: tuple = ()):
    """Binds the elements of a list output (``concat_grad``'s ``X@GRAD``). Legacy programs name
    each element in the slot; PIR returns one vector value that ``builtin.split`` unpacks, so the
    elements are bound to the split's results. ``inplace_of``: the list input that the output
    overwrites in PIR (``lars_momentum_``'s ``param``): element i is also the new value of that
    input's i-th variable, which is how later ops and the state results see it."""
    view = ctx.session.view
    if view.ir != "pir":
        for i, value in enumerate(values):
            ctx.set_output(slots, value, index=i)
        return
    if inplace_of:
        for i, value in enumerate(values):
            ctx.session.bind(ctx.input_name(*inplace_of, index=i), value, ctx)
    # The vector itself, by the slot's position: an in-place result is named after its input.
    keys = list(ctx.op.outputs)
    key = next((normalize(n) for n in slots if normalize(n) in ctx.op.outputs), None)
    if key is None or ctx.op.native is None:
        return
    vector = ctx.op.native.results()[keys.index(key)]
    if not vector.initialized():
        return
    for user in vector.all_used_ops():
        if user.name() == "builtin.split":
            for element, value in zip(user.results(), values):
                if element.id in view.value_names:
                    ctx.session.bind(view.value_names[element.id], value, ctx)


def builtin_split(ctx):
    """PIR's unpacking of a vector: the converter of the op producing the vector binds the
    elements (``set_list_output``), so this only checks that it did."""
    missing = [n for n in ctx.op.output_names() if n not in ctx.session.env]
    if missing:
        raise ctx.fail(f"the converter of the op producing this vector did not unpack it into {', '.join(missing)}")


# --- reshape ----------------------------------------------------------------------------------
def _reshape_target(x_shape: tuple, shape: list[int]) -> list[int]:
    """Paddle's target shape: 0 copies the input dim at that index, one -1 is inferred.

    The -1 is resolved here when it does not depend on a dynamic dim: copied dims cancel
    out, so that [0, -1] of a [?, 3, 4] input is [?, 12], with a single unknown left.
    """
    out = [x_shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 not in shape:
        return out
    copied = {i for i, d in enumerate(shape) if d == 0}
    rest_in = [d for i, d in enumerate(x_shape) if i not in copied]
    rest_out = [d for i, d in enumerate(out) if i not in copied and shape[i] != -1]
    if min(rest_in + rest_out, default=0) >= 0 and np.prod(rest_out) > 0:
        out[shape.index(-1)] = int(np.prod(rest_in)) // int(np.prod(rest_out))
    return out


def reshape2(ctx):
    """reshape2 and reshape (legacy), reshape (PIR).

    reshape2's XShape output only carries the shape of X to the legacy grad. We bind it to X
    itself: the shape we inferred for X can be static where the declared one is not (a shape
    given as tensors).
    """
    x = ctx.input("X", "x")
    shape = _reshape_target(x.shape, const_ints(ctx, "shape", "ShapeTensor", "Shape"))
    ctx.set_output(("Out", "out"), ops.Reshape(x, shape=shape).output())
    ctx.set_output("XShape", x)


def reshape2_grad(ctx):
    """reshape_grad reads X (legacy reshape, PIR); reshape2_grad XShape, which stands for X."""
    dims = list(ctx.input("X", "x").shape) if ctx.has_input("X", "x") else x_dims_of_xshape(ctx)
    ctx.set_output(("X@GRAD", "x_grad"), ops.Reshape(ctx.input("Out@GRAD", "out_grad"), shape=dims).output())


# Legacy grad ops whose XShape input only carries X's dims to the converter (x_dims_of_xshape): the
# transpiler does not hand such a variable to the engine (Paddle leaves it without data).
XSHAPE_DIMS_ONLY = frozenset({"reshape2_grad", "squeeze2_grad", "unsqueeze2_grad", "flatten_contiguous_range_grad",
                              "flatten2_grad", "transpose2_grad"})


def x_dims_of_xshape(ctx) -> list[int]:
    """X's dims, from a legacy grad op's XShape input. Where this engine converted the forward op, its
    converter bound XShape to X itself; where Paddle runs the forward op (left to it, in another segment),
    XShape is Paddle's own variable, declared with the dims [0] + X's dims (and no data)."""
    name = ctx.input_name("XShape")
    bound = ctx.session.env.get(name)
    if bound is not None and not (bound.node.op_type == "Parameter" and bound.node.name == name):
        return list(bound.shape)
    info = ctx.session.view.vars.get(name)
    if info is None or not info.shape or info.shape[0] != 0:
        raise ctx.fail(f"XShape '{name}' is neither made by a converted op nor declared as [0] + X's dims")
    return list(info.shape[1:])


# --- transpose --------------------------------------------------------------------------------
def _perm(ctx, rank: int) -> list[int]:
    return [normalize_axis(int(p), rank) for p in ctx.attr("axis", "perm")]


def transpose2(ctx):
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Transpose(x, perm=_perm(ctx, x.type.rank)).output())


def transpose2_grad(ctx):
    dout = ctx.input("Out@GRAD", "out_grad")
    inverse = [int(i) for i in np.argsort(_perm(ctx, dout.type.rank))]
    ctx.set_output(("X@GRAD", "x_grad"), ops.Transpose(dout, perm=inverse).output())


# --- concat and stack -----------------------------------------------------------------------------
def _concat_axis(ctx, rank: int) -> int:
    return normalize_axis(int(ctx.attr_or_const_input(("axis",), ("AxisTensor", "axis"), default=0)), rank)


def concat(ctx):
    values = ctx.inputs("X", "x")
    if not values:
        raise ctx.fail("needs at least one input")
    ctx.set_output(("Out", "out"), ops.Concat(*values, axis=_concat_axis(ctx, values[0].type.rank)).output())


def concat_grad(ctx):
    values, dout = ctx.inputs("X", "x"), ctx.input("Out@GRAD", "out_grad")
    axis = _concat_axis(ctx, dout.type.rank)
    sizes = [v.shape[axis] for v in values]
    if min(sizes) < 0:
        raise ctx.fail(f"inputs with a dynamic size along the concat axis {axis} are not supported")
    starts = np.cumsum([0] + sizes[:-1])
    grads = [ops.Slice(dout, axes=[axis], starts=[int(s)], ends=[int(s) + n]).output() for s, n in zip(starts, sizes)]
    set_list_output(ctx, ("X@GRAD", "x_grad"), grads)


def stack(ctx):
    values = ctx.inputs("X", "x")
    if not values:
        raise ctx.fail("needs at least one input")
    ctx.set_output(("Y", "out"), ops.Stack(*values, axis=int(ctx.attr("axis", default=0))).output())


def stack_grad(ctx):
    dout = ctx.input("Y@GRAD", "out_grad")
    axis = normalize_axis(int(ctx.attr("axis", default=0)), dout.type.rank)
    # Gathering a 0-D index removes the stacked axis, also when other dims are dynamic.
    grads = [ops.Gather(dout, constant(i, DType.int64), axis=axis).output() for i in range(dout.shape[axis])]
    set_list_output(ctx, ("X@GRAD", "x_grad"), grads)


# --- retyping and shape-only ops ---------------------------------------------------------------------
def cast(ctx):
    """Also the gradient of cast: Paddle emits a cast back to the input dtype."""
    x = ctx.input("X", "x")
    dtype = paddle_dtype(ctx.attr("out_dtype", "dtype"))
    ctx.set_output(("Out", "out"), x if x.dtype == dtype else ops.Convert(x, dtype=dtype.value).output())


def fill_zeros_like(ctx):
    ctx.set_output(("Out", "out"), zeros_like(ctx.input("X", "x")))
