"""Ops that move or reshape data, with their grads: reshape, transpose, concat, stack, PIR's
``builtin.split`` of list outputs, and the shape ops of Paddle's vision model zoo and of shape
code: flatten, squeeze, unsqueeze, split, expand, expand_as, tile, pixel_shuffle/pixel_unshuffle,
flip, roll.

All lower to data-movement primitives (Reshape, Transpose, Slice, Concat, Gather, Select),
and their grads to the inverse movement or to sums (ReduceSum). The grads of flatten, squeeze
and unsqueeze reshape back to X's shape as ``reshape2_grad`` does; the grad of split is a
``concat`` op in both IRs, and flip's grad is a ``flip`` op.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType, normalize_axis
from ..program_view import normalize
from .helpers import constant, reduce_to_shape
from .registry import converter


# --- shared by the converters of this module and of other families (indexing, resample, tensor, optimizer) ---
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


@converter("builtin.split")
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


@converter("reshape2", "reshape", "pd_op.reshape")
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


@converter("reshape2_grad", "reshape_grad", "pd_op.reshape_grad")
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


@converter("transpose2", "transpose", "pd_op.transpose")
def transpose2(ctx):
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), ops.Transpose(x, perm=_perm(ctx, x.type.rank)).output())


@converter("transpose2_grad", "transpose_grad", "pd_op.transpose_grad")
def transpose2_grad(ctx):
    dout = ctx.input("Out@GRAD", "out_grad")
    inverse = [int(i) for i in np.argsort(_perm(ctx, dout.type.rank))]
    ctx.set_output(("X@GRAD", "x_grad"), ops.Transpose(dout, perm=inverse).output())


# --- concat and stack -----------------------------------------------------------------------------
def _concat_axis(ctx, rank: int) -> int:
    return normalize_axis(int(ctx.attr_or_const_input(("axis",), ("AxisTensor", "axis"), default=0)), rank)


@converter("concat", "pd_op.concat")
def concat(ctx):
    values = ctx.inputs("X", "x")
    if not values:
        raise ctx.fail("needs at least one input")
    ctx.set_output(("Out", "out"), ops.Concat(*values, axis=_concat_axis(ctx, values[0].type.rank)).output())


@converter("concat_grad", "pd_op.concat_grad")
def concat_grad(ctx):
    values, dout = ctx.inputs("X", "x"), ctx.input("Out@GRAD", "out_grad")
    axis = _concat_axis(ctx, dout.type.rank)
    sizes = [v.shape[axis] for v in values]
    if min(sizes) < 0:
        raise ctx.fail(f"inputs with a dynamic size along the concat axis {axis} are not supported")
    starts = np.cumsum([0] + sizes[:-1])
    grads = [ops.Slice(dout, axes=[axis], starts=[int(s)], ends=[int(s) + n]).output() for s, n in zip(starts, sizes)]
    set_list_output(ctx, ("X@GRAD", "x_grad"), grads)


@converter("stack", "pd_op.stack")
def stack(ctx):
    values = ctx.inputs("X", "x")
    if not values:
        raise ctx.fail("needs at least one input")
    ctx.set_output(("Y", "out"), ops.Stack(*values, axis=int(ctx.attr("axis", default=0))).output())


@converter("stack_grad", "pd_op.stack_grad")
def stack_grad(ctx):
    dout = ctx.input("Y@GRAD", "out_grad")
    axis = normalize_axis(int(ctx.attr("axis", default=0)), dout.type.rank)
    # Gathering a 0-D index removes the stacked axis, also when other dims are dynamic.
    grads = [ops.Gather(dout, constant(i, DType.int64), axis=axis).output() for i in range(dout.shape[axis])]
    set_list_output(ctx, ("X@GRAD", "x_grad"), grads)


# --- shared by the shape ops below -----------------------------------------------------------------------
def _product(dims) -> int:
    """Product of dims, -1 if one of them is dynamic."""
    return -1 if any(d < 0 for d in dims) else int(np.prod(dims, dtype=np.int64))


def _reshape(ctx, x: Output, dims: list) -> Output:
    """Reshape to ``dims``, where a negative dim is the (single) one left to infer."""
    dims = [-1 if d < 0 else int(d) for d in dims]
    if dims.count(-1) > 1:
        raise ctx.fail(f"cannot reshape {x.type} to {dims}: more than one dynamic dimension")
    if tuple(dims) == tuple(x.shape):
        return x
    return ops.Reshape(x, shape=dims).output()


def _broadcast(x: Output, target: list) -> Output:
    """x broadcast along its size-1 dims to ``target`` (same rank). A Select between x and itself
    under an all-true mask of the broadcast dims: an exact copy for any dtype, and the mask holds
    only the new extents (BroadcastTo would need a tensor of the whole target shape)."""
    mask_shape = [t if d == 1 and t != 1 else 1 for d, t in zip(x.shape, target)]
    if all(m == 1 for m in mask_shape):
        return x
    mask = ops.Constant(np.ones(mask_shape, dtype=bool)).output()
    return ops.Select(mask, x, x).output()


def checked_axes(ctx, axes, rank: int, what: str) -> list[int]:
    """``axes`` normalized to [0, rank); a conversion error naming ``what`` if one is out of range."""
    out = [normalize_axis(int(a), rank) for a in axes]
    if any(not 0 <= a < rank for a in out):
        raise ctx.fail(f"{what} {list(axes)} out of range for rank {rank}")
    return out


def _set_out_and_xshape(ctx, out: Output, x: Output):
    """Legacy ``*2`` ops' XShape only carries X's shape to the grad: bound to X (as reshape2)."""
    ctx.set_output(("Out", "out"), out)
    ctx.set_output("XShape", x)


# --- flatten ---------------------------------------------------------------------------------------------
# Shape-only ops (flatten, squeeze, unsqueeze); their grads reshape the output grad back to X's shape
# (legacy: from XShape, see XSHAPE_DIMS_ONLY).
@converter("flatten_contiguous_range", "pd_op.flatten")
def flatten_contiguous_range(ctx):
    """flatten_contiguous_range (legacy), flatten (PIR): dims start_axis..stop_axis become one."""
    x = ctx.input("X", "x")
    rank = x.type.rank
    if rank == 0:
        _set_out_and_xshape(ctx, _reshape(ctx, x, [1]), x)  # Paddle flattens a 0-D tensor to [1]
        return
    start, stop = checked_axes(ctx, [ctx.attr("start_axis"), ctx.attr("stop_axis")], rank, "start_axis/stop_axis")
    if start > stop:
        raise ctx.fail(f"start_axis {start} is after stop_axis {stop}")
    dims = list(x.shape[:start]) + [_product(x.shape[start:stop + 1])] + list(x.shape[stop + 1:])
    _set_out_and_xshape(ctx, _reshape(ctx, x, dims), x)


@converter("flatten2")
def flatten2(ctx):
    """Legacy flatten2: a matrix of [prod(dims[:axis]), prod(dims[axis:])]."""
    x = ctx.input("X", "x")
    axis = int(ctx.attr("axis", default=1))
    if not 0 <= axis <= x.type.rank:
        raise ctx.fail(f"axis {axis} out of range [0, {x.type.rank}]")
    dims = [_product(x.shape[:axis]), _product(x.shape[axis:])]
    _set_out_and_xshape(ctx, _reshape(ctx, x, dims), x)


@converter("flatten_contiguous_range_grad", "pd_op.flatten_grad", "flatten2_grad")
def flatten_contiguous_range_grad(ctx):
    """Also flatten2_grad: dout reshaped to X's shape (legacy: XShape, which stands for X)."""
    reshape2_grad(ctx)


# --- squeeze and unsqueeze ---------------------------------------------------------------------------------
@converter("squeeze2", "pd_op.squeeze")
def squeeze2(ctx):
    """squeeze2 (legacy; axes attribute), squeeze (PIR; axis operand). No axes: every size-1 dim;
    named axes whose size is not 1 stay, as in Paddle."""
    x = ctx.input("X", "x")
    shape, rank = list(x.shape), x.type.rank
    axes = const_ints(ctx, "axes", "axis")
    if rank == 0:
        _set_out_and_xshape(ctx, x, x)
        return
    if not axes:
        if any(d < 0 for d in shape):
            raise ctx.fail(f"squeezing every size-1 dim of {x.type} depends on its dynamic dims")
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = set(checked_axes(ctx, axes, rank, "axes"))
        dynamic = sorted(a for a in drop if shape[a] < 0)
        if dynamic:
            raise ctx.fail(f"axes {dynamic} of {x.type} are dynamic: whether they are squeezed depends on their size")
        drop = {a for a in drop if shape[a] == 1}
    _set_out_and_xshape(ctx, _reshape(ctx, x, [d for i, d in enumerate(shape) if i not in drop]), x)


def _unsqueezed_dims(ctx, in_dims: list, axes: list) -> list:
    """Paddle's GetUnsqueezeShape: axes are inserted one after another; a negative axis counts
    from the end of the rank reached so far, and earlier new dims move right past a later one."""
    rank_out, cur_rank = len(in_dims) + len(axes), len(in_dims)
    marks = [0] * rank_out  # 1: a new dim
    for axis in axes:
        cur = axis + cur_rank + 1 if axis < 0 else axis
        if not 0 <= cur <= cur_rank:
            raise ctx.fail(f"axis {axis} out of range for rank {cur_rank}")
        for i in range(cur_rank, cur - 1, -1):
            if marks[i] == 1:
                marks[i + 1], marks[i] = 1, 0
        marks[cur] = 1
        cur_rank += 1
    rest = iter(in_dims)
    return [1 if m else next(rest) for m in marks]


@converter("unsqueeze2", "pd_op.unsqueeze")
def unsqueeze2(ctx):
    """unsqueeze2 (legacy; axes attribute or AxesTensor/AxesTensorList), unsqueeze (PIR; axis operand)."""
    x = ctx.input("X", "x")
    axes = const_ints(ctx, "axes", "AxesTensor", "AxesTensorList", "axis")
    _set_out_and_xshape(ctx, _reshape(ctx, x, _unsqueezed_dims(ctx, list(x.shape), axes)), x)


@converter("squeeze2_grad", "pd_op.squeeze_grad")
def squeeze2_grad(ctx):
    """dout reshaped to X's shape (legacy: XShape, which stands for X)."""
    reshape2_grad(ctx)


@converter("unsqueeze2_grad", "pd_op.unsqueeze_grad")
def unsqueeze2_grad(ctx):
    """dout reshaped to X's shape (legacy: XShape, which stands for X)."""
    reshape2_grad(ctx)


# --- split ----------------------------------------------------------------------------------------------------
# No split_grad: split's grad is a concat op in both IRs (converted by ``concat``).
@converter("split", "pd_op.split", "pd_op.split_with_num")
def split(ctx):
    """split (legacy: num or sections), split and split_with_num (PIR; sections and axis operands).
    One section may be -1: the rest of the dim. Outputs a list (set_list_output)."""
    x = ctx.input("X", "x")
    axis = checked_axes(ctx, [ctx.attr_or_const_input(("axis",), ("AxisTensor", "axis"), default=0)], x.type.rank, "axis")[0]
    dim, num = x.shape[axis], int(ctx.attr("num", default=0))
    if num > 0:
        if dim < 0 or dim % num:
            raise ctx.fail(f"cannot split dim {axis} of {x.type} into {num} equal parts")
        sizes = [dim // num] * num
    else:
        sizes = const_ints(ctx, "sections", "SectionsTensorList", "sections")
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
            raise ctx.fail(f"sections {sizes}: at most one -1 and no other negative size")
        if -1 in sizes:
            if dim < 0:
                raise ctx.fail(f"a section of -1 needs a static dim {axis}, {x.type} has none")
            sizes[sizes.index(-1)] = dim - sum(s for s in sizes if s != -1)
        if (dim >= 0 and sum(sizes) != dim) or min(sizes, default=0) < 0:
            raise ctx.fail(f"sections {sizes} do not add up to dim {axis} of {x.type}")
    starts = np.cumsum([0] + sizes[:-1])
    parts = [ops.Slice(x, axes=[axis], starts=[int(s)], ends=[int(s) + n]).output() for s, n in zip(starts, sizes)]
    set_list_output(ctx, ("Out", "out"), parts)


# --- expand, expand_as and tile: broadcasts, whose grads sum ---------------------------------------------------
def _expand(ctx, x: Output, shape: list) -> Output:
    """x broadcast to ``shape``: new dims lead; -1 keeps x's dim; x's dims must be 1 or equal."""
    lead = len(shape) - x.type.rank
    if lead < 0:
        raise ctx.fail(f"target shape {shape} has fewer dims than {x.type}")
    dims = [1] * lead + list(x.shape)
    target = []
    for i, (d, t) in enumerate(zip(dims, shape)):
        if t == -1 and i >= lead:
            target.append(d)
        elif t < 1 or (d != 1 and d != t):
            raise ctx.fail(f"cannot expand {x.type} to {shape}: dim {i} ({d} to {t})")
        else:
            target.append(t)
    return _broadcast(_reshape(ctx, x, dims), target)


def _sum_to_x(ctx, x: Output, dout: Output) -> Output:
    """The grad of a broadcast: dout summed over the leading and the broadcast dims of x."""
    return _reshape(ctx, reduce_to_shape(dout, x.shape), list(x.shape))


# Broadcasts (expand, expand_as, tile), whose grads sum over the broadcast dims.
@converter("expand_v2", "pd_op.expand")
def expand_v2(ctx):
    """expand_v2 (legacy; shape attribute, Shape or expand_shapes_tensor), expand (PIR; shape operand)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), _expand(ctx, x, const_ints(ctx, "shape", "Shape", "expand_shapes_tensor")))


@converter("expand_v2_grad", "pd_op.expand_grad")
def expand_v2_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), _sum_to_x(ctx, ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")))


@converter("expand_as_v2", "pd_op.expand_as")
def expand_as_v2(ctx):
    """expand_as_v2 (legacy), expand_as (PIR): to Y's shape when Y is given (it may be dynamic
    where target_shape says -1), else to the target_shape attribute."""
    x = ctx.input("X", "x")
    if ctx.has_input("Y", "y"):
        y = ctx.input("Y", "y")
        lead = y.type.rank - x.type.rank
        if lead < 0:
            raise ctx.fail(f"cannot expand {x.type} to the shape of {y.type}: fewer dims")
        out = ops.BroadcastTo(_reshape(ctx, x, [1] * lead + list(x.shape)), y).output()
    else:
        out = _expand(ctx, x, [int(d) for d in ctx.attr("target_shape")])
    ctx.set_output(("Out", "out"), out)


@converter("expand_as_v2_grad", "pd_op.expand_as_grad")
def expand_as_v2_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), _sum_to_x(ctx, ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")))


def _tile_spec(ctx, x: Output):
    """(x's dims, repeats), both padded with leading 1s to one rank."""
    repeats = const_ints(ctx, "repeat_times", "RepeatTimes", "repeat_times_tensor")
    if any(r < 1 for r in repeats):
        raise ctx.fail(f"repeat times {repeats} must be positive")
    rank = max(x.type.rank, len(repeats))
    return [1] * (rank - x.type.rank) + list(x.shape), [1] * (rank - len(repeats)) + repeats


@converter("tile", "pd_op.tile")
def tile(ctx):
    """Each repeated dim d becomes [1, d], broadcast to [r, d] and merged into r*d."""
    x = ctx.input("X", "x")
    dims, repeats = _tile_spec(ctx, x)
    apart = [e for d, r in zip(dims, repeats) for e in ([1, d] if r != 1 else [d])]
    apart_target = [e for d, r in zip(dims, repeats) for e in ([r, d] if r != 1 else [d])]
    tiled = _broadcast(_reshape(ctx, x, apart), apart_target)
    ctx.set_output(("Out", "out"), _reshape(ctx, tiled, [d * r if d >= 0 else -1 for d, r in zip(dims, repeats)]))


@converter("tile_grad", "pd_op.tile_grad")
def tile_grad(ctx):
    """dout [r*d, ...] seen as [r, d, ...], summed over the r axes."""
    x, dout = ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")
    dims, repeats = _tile_spec(ctx, x)
    apart, sum_axes = [], []
    for d, r in zip(dims, repeats):
        if r != 1:
            sum_axes.append(len(apart))
            apart.append(r)
        apart.append(d)
    grad = _reshape(ctx, dout, apart)
    if sum_axes:
        grad = ops.ReduceSum(grad, axes=sum_axes, keep_dims=False).output()
    ctx.set_output(("X@GRAD", "x_grad"), _reshape(ctx, grad, list(x.shape)))


# --- pixel_shuffle / pixel_unshuffle: each is the other's grad --------------------------------------------------
def _channel_last(ctx) -> bool:
    fmt = ctx.attr("data_format", default="NCHW")
    if fmt not in ("NCHW", "NHWC"):
        raise ctx.fail(f"data_format {fmt!r} is not supported (NCHW or NHWC)")
    return fmt == "NHWC"


def _factor(ctx, name: str) -> int:
    factor = int(ctx.attr(name))
    if factor < 1:
        raise ctx.fail(f"{name} must be >= 1, got {factor}")
    return factor


def _spatial(ctx, x: Output, channel_last: bool):
    if x.type.rank != 4 or any(d < 0 for d in x.shape[1:]):
        raise ctx.fail(f"needs a 4-D input with static C, H, W, got {x.type}")
    n, a, b, c = x.shape
    return (n, a, b, c) if channel_last else (n, b, c, a)  # n, h, w, channels


def _pixel_shuffle(ctx, x: Output, r: int, channel_last: bool) -> Output:
    """[N, C*r*r, H, W] -> [N, C, H*r, W*r] as Paddle's kernel: [N, C, r, r, H, W] transposed by
    (0, 1, 4, 2, 5, 3); NHWC: [N, H, W, C, r, r] by the same permutation."""
    n, h, w, channels = _spatial(ctx, x, channel_last)
    if channels % (r * r):
        raise ctx.fail(f"channels {channels} of {x.type} are not a multiple of upscale_factor^2 = {r * r}")
    c = channels // (r * r)
    grouped = [n, h, w, c, r, r] if channel_last else [n, c, r, r, h, w]
    out = [n, h * r, w * r, c] if channel_last else [n, c, h * r, w * r]
    moved = ops.Transpose(_reshape(ctx, x, grouped), perm=[0, 1, 4, 2, 5, 3]).output()
    return _reshape(ctx, moved, out)


def _pixel_unshuffle(ctx, x: Output, r: int, channel_last: bool) -> Output:
    """[N, C, H, W] -> [N, C*r*r, H/r, W/r]: [N, C, H/r, r, W/r, r] transposed by (0, 1, 3, 5, 2, 4);
    NHWC: [N, H/r, r, W/r, r, C] by the same permutation."""
    n, h, w, c = _spatial(ctx, x, channel_last)
    if h % r or w % r:
        raise ctx.fail(f"H and W of {x.type} are not multiples of downscale_factor {r}")
    grouped = [n, h // r, r, w // r, r, c] if channel_last else [n, c, h // r, r, w // r, r]
    out = [n, h // r, w // r, c * r * r] if channel_last else [n, c * r * r, h // r, w // r]
    moved = ops.Transpose(_reshape(ctx, x, grouped), perm=[0, 1, 3, 5, 2, 4]).output()
    return _reshape(ctx, moved, out)


@converter("pixel_shuffle", "pd_op.pixel_shuffle")
def pixel_shuffle(ctx):
    out = _pixel_shuffle(ctx, ctx.input("X", "x"), _factor(ctx, "upscale_factor"), _channel_last(ctx))
    ctx.set_output(("Out", "out"), out)


@converter("pixel_shuffle_grad", "pd_op.pixel_shuffle_grad")
def pixel_shuffle_grad(ctx):
    dx = _pixel_unshuffle(ctx, ctx.input("Out@GRAD", "out_grad"), _factor(ctx, "upscale_factor"), _channel_last(ctx))
    ctx.set_output(("X@GRAD", "x_grad"), dx)


@converter("pixel_unshuffle", "pd_op.pixel_unshuffle")
def pixel_unshuffle(ctx):
    out = _pixel_unshuffle(ctx, ctx.input("X", "x"), _factor(ctx, "downscale_factor"), _channel_last(ctx))
    ctx.set_output(("Out", "out"), out)


@converter("pixel_unshuffle_grad", "pd_op.pixel_unshuffle_grad")
def pixel_unshuffle_grad(ctx):
    dx = _pixel_shuffle(ctx, ctx.input("Out@GRAD", "out_grad"), _factor(ctx, "downscale_factor"), _channel_last(ctx))
    ctx.set_output(("X@GRAD", "x_grad"), dx)


# --- flip, roll ------------------------------------------------------------------------------------------------
# No flip_grad: flip's grad is a flip op in both IRs.
@converter("flip", "pd_op.flip")
def flip(ctx):
    """Also flip's grad (Paddle emits a flip of the output grad). Each axis is a Gather of the
    reversed indices; an axis named twice is flipped once, as in Paddle's kernel (a bitset)."""
    x = ctx.input("X", "x")
    out = x
    for axis in sorted(set(checked_axes(ctx, ctx.attr("axis"), x.type.rank, "axis"))):
        n = x.shape[axis]
        if n < 0:
            raise ctx.fail(f"cannot flip the dynamic dim {axis} of {x.type}")
        if n > 1:
            out = ops.Gather(out, ops.Constant(np.arange(n - 1, -1, -1, dtype=np.int64)).output(), axis=axis).output()
    ctx.set_output(("Out", "out"), out)


def _roll_axis(ctx, x: Output, shift: int, axis: int) -> Output:
    """out[i] = x[(i - shift) mod n]: the last shift elements, then the others."""
    n = x.shape[axis]
    if n < 0:
        raise ctx.fail(f"cannot roll the dynamic dim {axis} of {x.type}")
    s = shift % n if n else 0
    if s == 0:
        return x
    tail = ops.Slice(x, axes=[axis], starts=[n - s], ends=[n]).output()
    head = ops.Slice(x, axes=[axis], starts=[0], ends=[n - s]).output()
    return ops.Concat(tail, head, axis=axis).output()


def _roll(ctx, x: Output, sign: int) -> Output:
    """roll (legacy; shifts attribute or ShiftsTensor), roll (PIR; shifts operand). Without
    axes x is rolled flattened; shifts of one axis named twice add up."""
    shifts = [sign * s for s in const_ints(ctx, "shifts", "ShiftsTensor", "shifts")]
    axes = [int(a) for a in ctx.attr("axis", default=[])]
    if not axes:
        if len(shifts) != 1:
            raise ctx.fail(f"without axis, shifts must hold one value, got {shifts}")
        flat = _roll_axis(ctx, _reshape(ctx, x, [_product(x.shape)]), shifts[0], 0)
        return _reshape(ctx, flat, list(x.shape))
    if len(shifts) != len(axes):
        raise ctx.fail(f"shifts {shifts} and axis {axes} differ in length")
    for shift, axis in zip(shifts, checked_axes(ctx, axes, x.type.rank, "axis")):
        x = _roll_axis(ctx, x, shift, axis)
    return x


@converter("roll", "pd_op.roll")
def roll(ctx):
    ctx.set_output(("Out", "out"), _roll(ctx, ctx.input("X", "x"), 1))


@converter("roll_grad", "pd_op.roll_grad")
def roll_grad(ctx):
    """The grad rolls back: the same roll with negated shifts."""
    ctx.set_output(("X@GRAD", "x_grad"), _roll(ctx, ctx.input("Out@GRAD", "out_grad"), -1))
