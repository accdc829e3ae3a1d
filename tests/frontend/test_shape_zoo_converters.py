"""Converters of the ops Paddle's vision model zoo and shape code need (flatten, squeeze, unsqueeze,
split, relu6, hardswish, hardsigmoid, swish, silu, expand, expand_as, tile, pixel_shuffle,
pixel_unshuffle, flip, index_select, roll), forward and gradients against Paddle's executor in
both IRs."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_ngraph
from harness import IRS, check_against_paddle, ir_guard, run_function, static_op
from helpers import TOL, normal_sampler, op_types_with_gradients as op_types
from paddle_ngraph.errors import ConversionError

rng = np.random.default_rng(0)
normal = normal_sampler(rng)
DTYPES = ["float32", "float64"]


def expect_ops(build, feeds, ir, legacy: set, pir: set):
    types = op_types(build, feeds, ir)
    wanted = legacy if ir == "legacy" else pir
    assert wanted <= types, f"{sorted(wanted - types)} not among {sorted(types)}"


# --- activations ----------------------------------------------------------------------------------------
def piecewise_input(shape, dtype, points):
    """Random values with the breakpoints of a piecewise activation planted in them."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    flat = x.reshape(-1)
    flat[:len(points)] = np.asarray(points, dtype=dtype)
    return x


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_relu6(ir, dtype):
    x = piecewise_input((4, 5, 6), dtype, [0.0, 6.0, -0.0, 5.999, 6.001, 1e-7, -1e-7, 100.0])
    expect_ops(F.relu6, {"x": x}, ir, {"relu6", "relu6_grad"}, {"pd_op.relu6", "pd_op.relu6_grad"})
    check_against_paddle(F.relu6, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hardswish(ir, dtype):
    # breakpoints at x + 3 == 0 and x + 3 == 6
    x = piecewise_input((4, 5, 6), dtype, [-3.0, 3.0, -2.999, 2.999, 3.001, -3.001, 0.0, 10.0, -10.0])
    expect_ops(F.hardswish, {"x": x}, ir, {"hard_swish", "hard_swish_grad"},
               {"pd_op.hardswish", "pd_op.hardswish_grad"})
    check_against_paddle(F.hardswish, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", ["legacy"])
def test_hard_swish_legacy_attributes_are_ignored_like_paddle(ir):
    """Paddle 3.3.1's hard_swish kernel computes with 6/6/3 whatever the legacy attributes say;
    so does the converter (compared with the executor, not with the attributes' meaning)."""
    x = piecewise_input((3, 7), "float32", [-3.0, 3.0, -2.0, 2.0, 4.0])
    attrs = {"threshold": 4.0, "scale": 5.0, "offset": 2.0}
    check_against_paddle(lambda x: static_op(None, "hard_swish", {"X": x}, attrs), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("slope,offset", [(0.1666667, 0.5), (0.2, 0.5), (0.5, 0.25), (1.0, 0.0)])
def test_hardsigmoid(ir, dtype, slope, offset):
    # breakpoints where x * slope + offset is 0 and 1
    low, high = -offset / slope, (1 - offset) / slope
    x = piecewise_input((4, 5, 6), dtype, [low, high, low + 1e-3, high - 1e-3, 0.0, 50.0, -50.0])
    build = lambda x: F.hardsigmoid(x, slope=slope, offset=offset)  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"hard_sigmoid", "hard_sigmoid_grad"},
               {"pd_op.hardsigmoid", "pd_op.hardsigmoid_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["swish", "silu"])
def test_swish_silu(ir, dtype, name):
    x = piecewise_input((4, 5, 6), dtype, [0.0, -30.0, 30.0, -80.0, 80.0, 1e-6])
    build = getattr(F, name)
    expect_ops(build, {"x": x}, ir, {name, f"{name}_grad"}, {f"pd_op.{name}", f"pd_op.{name}_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_activations_in_a_chain(ir):
    """The MobileNet v3 squeeze-excite pattern: x * hardsigmoid(conv(x)), hardswish after."""
    x, w = normal((2, 4, 5, 5)), normal((4, 4, 1, 1))

    def build(x, w):
        gate = F.hardsigmoid(F.conv2d(x, w), slope=0.2, offset=0.5)
        return F.hardswish(x * gate) + F.relu6(x) + F.silu(x)

    check_against_paddle(build, {"x": x, "w": w}, ir=ir, rtol=1e-5, atol=1e-5)


# --- flatten, squeeze, unsqueeze --------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("start,stop", [(1, -1), (0, 2), (1, 2), (-2, -1), (2, 2), (0, -1)])
def test_flatten(ir, dtype, start, stop):
    x = normal((2, 3, 4, 5), dtype)
    build = lambda x: paddle.flatten(x, start, stop)  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"flatten_contiguous_range", "flatten_contiguous_range_grad"},
               {"pd_op.flatten", "pd_op.flatten_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_flatten_layer(ir):
    """paddle.nn.Flatten as the zoo uses it (a dynamic batch: test_chain_with_dynamic_batch)."""
    check_against_paddle(lambda x: paddle.nn.Flatten()(x), {"x": normal((3, 2, 2, 2))}, ir=ir)


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_flatten2_legacy(axis):
    x = normal((2, 3, 4, 5))
    build = lambda x: static_op(None, "flatten2", {"X": x}, {"axis": axis}, outputs=("Out", "XShape"))[0]  # noqa: E731
    check_against_paddle(build, {"x": x}, ir="legacy")


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, [1], [-1], [1, 3], [0, 1], [2]])
def test_squeeze(ir, dtype, axis):
    """Named axes of a size other than 1 stay, as in Paddle ([0, 1] and [2])."""
    x = normal((2, 1, 3, 1), dtype)
    build = lambda x: paddle.squeeze(x, axis)  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"squeeze2", "squeeze2_grad"}, {"pd_op.squeeze", "pd_op.squeeze_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, -1, [0, 2], [-1, -1], [3, 0], [1, -2, 0], [3, 0, 5]])
def test_unsqueeze(ir, dtype, axis):
    """Axes are inserted one after another (Paddle's order), negative ones counted from the rank reached."""
    x = normal((2, 3, 4), dtype)
    build = lambda x: paddle.unsqueeze(x, axis)  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"unsqueeze2", "unsqueeze2_grad"}, {"pd_op.unsqueeze", "pd_op.unsqueeze_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


# --- split (grad: concat) ------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sections,axis", [(2, 1), ([1, 3], 1), ([2, -1, 1], -1), (3, 0), ([1, 1, 4], 2)])
def test_split(ir, dtype, sections, axis):
    x = normal((3, 4, 6), dtype)
    build = lambda x: paddle.split(x, sections, axis=axis)  # noqa: E731
    pir_op = "pd_op.split_with_num" if isinstance(sections, int) else "pd_op.split"
    expect_ops(build, {"x": x}, ir, {"split", "concat"}, {pir_op, "pd_op.concat"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_split_one_output_used(ir):
    """Only one part reaches the loss: the other part's grad is filled with zeros by Paddle."""
    x = normal((2, 6))
    check_against_paddle(lambda x: paddle.split(x, [2, 4], axis=1)[1] * 2.0, {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", [None, "float64", "int32"])
def test_full_like_dtype(ir, dtype):
    """full_like keeps X's dtype unless told (legacy fill_any_like says -1 for "X's dtype")."""
    x = normal((2, 3))
    check_against_paddle(lambda x: paddle.full_like(x, 2.0, dtype=dtype) + 0, {"x": x}, ir=ir, grads=False)



@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_full_like_undefined_dtype_pir(dtype):
    """PIR's full_like with DataType.UNDEFINED (as Paddle's backward emits for the zero gradient of a
    tensor array's element) makes X's dtype, as Paddle's FullLikeInferMeta does."""
    from paddle.base import core

    x = normal((2, 3)).astype(dtype)
    check_against_paddle(lambda x: paddle._C_ops.full_like(x, 2.0, core.DataType.UNDEFINED, paddle.CPUPlace()) + 0,
                         {"x": x}, ir="pir", grads=False)

# --- expand, expand_as, tile ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xshape,shape", [((1, 3), (4, 3)), ((3, 1), (2, 3, 5)), ((2, 1, 3), (-1, 4, -1)),
                                          ((3,), (2, 2, 3)), ((2, 3), (2, 3))])
def test_expand(ir, dtype, xshape, shape):
    x = normal(xshape, dtype)
    build = lambda x: paddle.expand(x, list(shape))  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"expand_v2", "expand_v2_grad"}, {"pd_op.expand", "pd_op.expand_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("xshape,yshape", [((1, 3), (4, 3)), ((3, 1), (2, 3, 5)), ((5,), (5,))])
def test_expand_as(ir, xshape, yshape):
    x, y = normal(xshape), normal(yshape)

    def build(x, y):
        return static_op(lambda: paddle.expand_as(x, y), "expand_as_v2", {"X": x, "Y": y},
                         {"target_shape": list(yshape)})

    check_against_paddle(build, {"x": x, "y": y}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES + ["int64"])
@pytest.mark.parametrize("xshape,repeats", [((2, 3), [2, 1]), ((2, 3), [3]), ((2, 3), [2, 1, 3]), ((2, 1, 3), [1, 4, 2]),
                                            ((4,), [1])])
def test_tile(ir, dtype, xshape, repeats):
    x = normal(xshape, dtype) if dtype != "int64" else rng.integers(-5, 5, xshape).astype("int64")
    build = lambda x: paddle.tile(x, repeats)  # noqa: E731
    if dtype != "int64":
        expect_ops(build, {"x": x}, ir, {"tile", "tile_grad"}, {"pd_op.tile", "pd_op.tile_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL.get(dtype, {}))


@pytest.mark.parametrize("ir", IRS)
def test_expand_bool(ir):
    """Masks are expanded too; the Select-based broadcast copies any dtype."""
    x = rng.integers(0, 2, (1, 3)).astype(bool)
    check_against_paddle(lambda x: paddle.expand(x, [4, 3]), {"x": x}, ir=ir)


# --- pixel_shuffle / pixel_unshuffle ----------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("factor,fmt", [(2, "NCHW"), (3, "NCHW"), (2, "NHWC"), (1, "NCHW")])
def test_pixel_shuffle(ir, dtype, factor, fmt):
    c = 2 * factor * factor
    x = normal((2, c, 3, 4) if fmt == "NCHW" else (2, 3, 4, c), dtype)
    build = lambda x: F.pixel_shuffle(x, factor, data_format=fmt)  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"pixel_shuffle", "pixel_shuffle_grad"},
               {"pd_op.pixel_shuffle", "pd_op.pixel_shuffle_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("factor,fmt", [(2, "NCHW"), (3, "NCHW"), (2, "NHWC")])
def test_pixel_unshuffle(ir, dtype, factor, fmt):
    x = normal((2, 3, 2 * factor, 3 * factor) if fmt == "NCHW" else (2, 2 * factor, 3 * factor, 3), dtype)
    build = lambda x: F.pixel_unshuffle(x, factor, data_format=fmt)  # noqa: E731
    expect_ops(build, {"x": x}, ir, {"pixel_unshuffle", "pixel_unshuffle_grad"},
               {"pd_op.pixel_unshuffle", "pd_op.pixel_unshuffle_grad"})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


# --- flip, index_select, roll -------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, [1, 2], [-1], [0, 1, 2], [1, -2]])
def test_flip(ir, dtype, axis):
    x = normal((2, 3, 4), dtype)
    build = lambda x: paddle.flip(x, axis)  # noqa: E731
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,index", [(0, [1, 0, 1]), (1, [3, 3, 0, 2, 3]), (-1, [0]), (2, [1, 0])])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_index_select(ir, dtype, axis, index, index_dtype):
    """Repeated indices: their grads accumulate."""
    x = normal((2, 4, 3), dtype)
    index = np.asarray(index, dtype=index_dtype)
    if axis == 2:
        index = index[index < 3]
    build = lambda x, index: paddle.index_select(x, index, axis=axis)  # noqa: E731
    expect_ops(build, {"x": x, "index": index}, ir, {"index_select", "index_select_grad"},
               {"pd_op.index_select", "pd_op.index_select_grad"})
    check_against_paddle(build, {"x": x, "index": index}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shifts,axis", [(1, 0), ([1, -2], [1, 2]), (5, None), (-7, None), ([3, 3], [1, 1]), (4, -1)])
def test_roll(ir, dtype, shifts, axis):
    x = normal((2, 3, 4), dtype)
    s = [shifts] if isinstance(shifts, int) else shifts
    a = [] if axis is None else ([axis] if isinstance(axis, int) else axis)

    def build(x):
        return static_op(lambda: paddle.roll(x, shifts, axis), "roll", {"X": x}, {"shifts": s, "axis": a})

    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


# --- errors ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
def test_squeeze_of_a_dynamic_axis_is_refused(ir):
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            x = paddle.static.data("x", [-1, 3], "float32")
            paddle.squeeze(x, [0])
        with pytest.raises(ConversionError, match="dynamic"):
            paddle_ngraph.convert(main)


# --- a chain of these ops on a dynamic batch ----------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
def test_chain_with_dynamic_batch(ir):
    """The batch stays -1 through every op (one dynamic dim is left for each reshape to infer)."""
    feeds = {"x": normal((3, 8, 4, 6))}
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 8, 4, 6], "float32")
            x.stop_gradient = False
            y = paddle.squeeze(paddle.unsqueeze(F.hardswish(x), [1, 3]), [1])          # [-1, 8, 1, 4, 6]
            a, b = paddle.split(paddle.flatten(y, 2, 3), [2, 2], axis=2)               # [-1, 8, 2, 6] each
            a = paddle.tile(F.relu6(a), [1, 1, 2, 1])                                 # [-1, 8, 4, 6]
            b = paddle.expand(F.silu(b)[:, :, :1, :], [-1, 8, 4, 6])
            z = paddle.flip(a + b, [1]) * F.hardsigmoid(x)
            z = F.pixel_unshuffle(F.pixel_shuffle(z, 2), 2)
            z = static_op(lambda: paddle.roll(z, [1, -1], [1, 3]), "roll", {"X": z}, {"shifts": [1, -1], "axis": [1, 3]})
            z = paddle.index_select(F.swish(z), paddle.assign(np.array([5, 0, 5], "int64")), axis=1)
            loss = static_op(lambda: paddle.mean(z), "mean", {"X": z})
            fetch = [loss, z] + paddle.static.gradients([loss], [x])
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        reference = exe.run(main, feed=feeds, fetch_list=fetch)
        function = paddle_ngraph.convert(main, fetch_list=fetch)
        by_name = {k[len("fetch:"):]: v for k, v in run_function(function, feeds).items() if k.startswith("fetch:")}
        view = paddle_ngraph.frontend.decode(main)
        ours = [by_name[view.name_of(h)] for h in fetch]
    assert function.parameters[0].output_types[0].shape == (-1, 8, 4, 6)
    for got, ref in zip(ours, reference):
        np.testing.assert_allclose(got, ref, **TOL["float32"])
