"""Shape ops of Paddle's vision model zoo and of shape code, with their grads: flatten, squeeze,
unsqueeze, split, expand, expand_as, tile, pixel_shuffle/pixel_unshuffle, flip, index_select, roll.

All lower to data-movement primitives (Reshape, Transpose, Slice, Concat, Gather, Select),
and their grads to the inverse movement or to sums (ReduceSum, ScatterAdd). The grads of
flatten, squeeze and unsqueeze reshape back to X's shape as ``shape.reshape2_grad`` does; the
grad of split is a ``concat`` op in both IRs, and flip's grad is a ``flip`` op.
"""
from __future__ import annotations

import numpy as np

from ...ir import Output, ops
from ...ir.types import DType, normalize_axis
from .helpers import reduce_to_shape
from .shape import const_ints, reshape2_grad, set_list_output, zeros_like


# --- shared --------------------------------------------------------------------------------------------
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


def _axes(ctx, axes, rank: int, what: str) -> list[int]:
    out = [normalize_axis(int(a), rank) for a in axes]
    if any(not 0 <= a < rank for a in out):
        raise ctx.fail(f"{what} {list(axes)} out of range for rank {rank}")
    return out


def _set_out_and_xshape(ctx, out: Output, x: Output):
    """Legacy ``*2`` ops' XShape only carries X's shape to the grad: bound to X (as reshape2)."""
    ctx.set_output(("Out", "out"), out)
    ctx.set_output("XShape", x)


# --- flatten ---------------------------------------------------------------------------------------------
def flatten_contiguous_range(ctx):
    """flatten_contiguous_range (legacy), flatten (PIR): dims start_axis..stop_axis become one."""
    x = ctx.input("X", "x")
    rank = x.type.rank
    if rank == 0:
        _set_out_and_xshape(ctx, _reshape(ctx, x, [1]), x)  # Paddle flattens a 0-D tensor to [1]
        return
    start, stop = _axes(ctx, [ctx.attr("start_axis"), ctx.attr("stop_axis")], rank, "start_axis/stop_axis")
    if start > stop:
        raise ctx.fail(f"start_axis {start} is after stop_axis {stop}")
    dims = list(x.shape[:start]) + [_product(x.shape[start:stop + 1])] + list(x.shape[stop + 1:])
    _set_out_and_xshape(ctx, _reshape(ctx, x, dims), x)


def flatten2(ctx):
    """Legacy flatten2: a matrix of [prod(dims[:axis]), prod(dims[axis:])]."""
    x = ctx.input("X", "x")
    axis = int(ctx.attr("axis", default=1))
    if not 0 <= axis <= x.type.rank:
        raise ctx.fail(f"axis {axis} out of range [0, {x.type.rank}]")
    dims = [_product(x.shape[:axis]), _product(x.shape[axis:])]
    _set_out_and_xshape(ctx, _reshape(ctx, x, dims), x)


def flatten_contiguous_range_grad(ctx):
    """Also flatten2_grad: dout reshaped to X's shape (legacy: XShape, which stands for X)."""
    reshape2_grad(ctx)


# --- squeeze and unsqueeze ---------------------------------------------------------------------------------
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
        drop = set(_axes(ctx, axes, rank, "axes"))
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


def unsqueeze2(ctx):
    """unsqueeze2 (legacy; axes attribute or AxesTensor/AxesTensorList), unsqueeze (PIR; axis operand)."""
    x = ctx.input("X", "x")
    axes = const_ints(ctx, "axes", "AxesTensor", "AxesTensorList", "axis")
    _set_out_and_xshape(ctx, _reshape(ctx, x, _unsqueezed_dims(ctx, list(x.shape), axes)), x)


def squeeze2_grad(ctx):
    """dout reshaped to X's shape (legacy: XShape, which stands for X)."""
    reshape2_grad(ctx)


def unsqueeze2_grad(ctx):
    """dout reshaped to X's shape (legacy: XShape, which stands for X)."""
    reshape2_grad(ctx)


# --- split (its grad is a concat op) --------------------------------------------------------------------------
def split(ctx):
    """split (legacy: num or sections), split and split_with_num (PIR; sections and axis operands).
    One section may be -1: the rest of the dim. Outputs a list (set_list_output)."""
    x = ctx.input("X", "x")
    axis = _axes(ctx, [ctx.attr_or_const_input(("axis",), ("AxisTensor", "axis"), default=0)], x.type.rank, "axis")[0]
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


def expand_v2(ctx):
    """expand_v2 (legacy; shape attribute, Shape or expand_shapes_tensor), expand (PIR; shape operand)."""
    x = ctx.input("X", "x")
    ctx.set_output(("Out", "out"), _expand(ctx, x, const_ints(ctx, "shape", "Shape", "expand_shapes_tensor")))


def expand_v2_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), _sum_to_x(ctx, ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")))


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


def expand_as_v2_grad(ctx):
    ctx.set_output(("X@GRAD", "x_grad"), _sum_to_x(ctx, ctx.input("X", "x"), ctx.input("Out@GRAD", "out_grad")))


def _tile_spec(ctx, x: Output):
    """(x's dims, repeats), both padded with leading 1s to one rank."""
    repeats = const_ints(ctx, "repeat_times", "RepeatTimes", "repeat_times_tensor")
    if any(r < 1 for r in repeats):
        raise ctx.fail(f"repeat times {repeats} must be positive")
    rank = max(x.type.rank, len(repeats))
    return [1] * (rank - x.type.rank) + list(x.shape), [1] * (rank - len(repeats)) + repeats


def tile(ctx):
    """Each repeated dim d becomes [1, d], broadcast to [r, d] and merged into r*d."""
    x = ctx.input("X", "x")
    dims, repeats = _tile_spec(ctx, x)
    apart = [e for d, r in zip(dims, repeats) for e in ([1, d] if r != 1 else [d])]
    apart_target = [e for d, r in zip(dims, repeats) for e in ([r, d] if r != 1 else [d])]
    tiled = _broadcast(_reshape(ctx, x, apart), apart_target)
    ctx.set_output(("Out", "out"), _reshape(ctx, tiled, [d * r if d >= 0 else -1 for d, r in zip(dims, repeats)]))


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


def pixel_shuffle(ctx):
    out = _pixel_shuffle(ctx, ctx.input("X", "x"), _factor(ctx, "upscale_factor"), _channel_last(ctx))
    ctx.set_output(("Out", "out"), out)


def pixel_shuffle_grad(ctx):
    dx = _pixel_unshuffle(ctx, ctx.input("Out@GRAD", "out_grad"), _factor(ctx, "upscale_factor"), _channel_last(ctx))
    ctx.set_output(("X@GRAD", "x_grad"), dx)


def pixel_unshuffle(ctx):
    out = _pixel_unshuffle(ctx, ctx.input("X", "x"), _factor(ctx, "downscale_factor"), _channel_last(ctx))
    ctx.set_output(("Out", "out"), out)


def pixel_unshuffle_grad(ctx):
    dx = _pixel_shuffle(ctx, ctx.input("Out@GRAD", "out_grad"), _factor(ctx, "downscale_factor"), _channel_last(ctx))
    ctx.set_output(("X@GRAD", "x_grad"), dx)


# --- flip, index_select, roll ---------------------------------------------------------------------------------
def flip(ctx):
    """Also flip's grad (Paddle emits a flip of the output grad). Each axis is a Gather of the
    reversed indices; an axis named twice is flipped once, as in Paddle's kernel (a bitset)."""
    x = ctx.input("X", "x")
    out = x
    for axis in sorted(set(_axes(ctx, ctx.attr("axis"), x.type.rank, "axis"))):
        n = x.shape[axis]
        if n < 0:
            raise ctx.fail(f"cannot flip the dynamic dim {axis} of {x.type}")
        if n > 1:
            out = ops.Gather(out, ops.Constant(np.arange(n - 1, -1, -1, dtype=np.int64)).output(), axis=axis).output()
    ctx.set_output(("Out", "out"), out)


def _index_select_operands(ctx):
    x, index = ctx.input("X", "x"), ctx.input("Index", "index")
    if index.type.rank != 1 or index.dtype not in (DType.int32, DType.int64):
        raise ctx.fail(f"index must be a 1-D int32 or int64 tensor, got {index.type}")
    return x, index, _axes(ctx, [ctx.attr("dim", "axis", default=0)], x.type.rank, "dim")[0]


def index_select(ctx):
    x, index, axis = _index_select_operands(ctx)
    ctx.set_output(("Out", "out"), ops.Gather(x, index, axis=axis).output())


def index_select_grad(ctx):
    """Repeated indices accumulate, as in Paddle's kernel."""
    x, index, axis = _index_select_operands(ctx)
    dout = ctx.input("Out@GRAD", "out_grad")
    ctx.set_output(("X@GRAD", "x_grad"), ops.ScatterAdd(zeros_like(x), index, dout, axis=axis).output())


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
    for shift, axis in zip(shifts, _axes(ctx, axes, x.type.rank, "axis")):
        x = _roll_axis(ctx, x, shift, axis)
    return x


def roll(ctx):
    ctx.set_output(("Out", "out"), _roll(ctx, ctx.input("X", "x"), 1))


def roll_grad(ctx):
    """The grad rolls back: the same roll with negated shifts."""
    ctx.set_output(("X@GRAD", "x_grad"), _roll(ctx, ctx.input("Out@GRAD", "out_grad"), -1))
