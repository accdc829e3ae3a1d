"""Converters of the tensor, shape, indexing, comparison ops, the elementwise grads and lamb,
against Paddle's executor in both IRs (forward outputs and the gradients of every float feed)."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
import harness
from harness import IRS, check_against_paddle, ir_guard, run_function, scope_value, static_op
from paddle_ngraph.backends import get_backend
from paddle_ngraph.frontend import OpView, ProgramView, VarInfo
from paddle_ngraph.ir.types import DType

rng = np.random.default_rng(0)
FLOATS = ["float32", "float64"]


def tol(dtype):
    return {"rtol": 1e-5} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-12}


def legacy_op(op_type, inputs, attrs, outputs):
    """Appends a raw legacy op whose outputs have their own dtypes ({slot: dtype})."""
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper(op_type)
    outs = {slot: helper.create_variable_for_type_inference(dtype) for slot, dtype in outputs.items()}
    helper.append_op(type=op_type, inputs={k: v if isinstance(v, list) else [v] for k, v in inputs.items()},
                     outputs=outs, attrs=attrs)
    return [outs[s] for s in outputs]


def distinct(shape, dtype):
    """Distinct values (top-k ties are not compared), shuffled."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) - 5).astype(dtype)


# --- reshape, transpose ------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,target", [((2, 3, 4), [0, -1]), ((2, 3, 4), [4, -1, 2]), ((6,), [2, 3]),
                                          ((2, 3, 4), [24]), ((2, 3, 4), [0, 0, 2, 2])])
def test_reshape2(ir, dtype, shape, target):
    x = rng.standard_normal(shape).astype(dtype)
    check_against_paddle(lambda x: paddle.reshape(x, target), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
def test_reshape2_int64(ir):
    x = rng.integers(-5, 5, (2, 3, 4)).astype("int64")
    check_against_paddle(lambda x: paddle.reshape(x, [-1, 4]), {"x": x}, ir=ir)


def _reshape_by_tensor_list(x):
    """The shape list holds a tensor; the outer reshape gives the result back the static shape
    the harness needs, and its legacy grad must not read the dynamic declared shape of its input."""
    return paddle.reshape(paddle.reshape(x, [paddle.full([], 4, "int32"), -1]), [2, 12])


def test_reshape2_shape_as_tensor_list_legacy():
    check_against_paddle(_reshape_by_tensor_list, {"x": rng.standard_normal((2, 3, 4)).astype("float32")}, ir="legacy")


def test_reshape2_shape_as_tensor_list_pir():
    """PIR packs such a list with cast and stack ops of constants, folded at conversion time
    (frontend/constant_folding.py)."""
    check_against_paddle(_reshape_by_tensor_list, {"x": rng.standard_normal((2, 3, 4)).astype("float32")}, ir="pir")


def test_reshape2_dynamic_batch():
    """A -1 batch copied with 0: the -1 of the target is resolved from the static dims."""
    x = rng.standard_normal((5, 3, 4)).astype("float32")
    with ir_guard("pir"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            out = paddle.reshape(paddle.static.data("x", [-1, 3, 4], "float32"), [0, -1])
        ref, = paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"x": x}, fetch_list=[out])
        function = paddle_ngraph.convert(main, fetch_list=[out])
    assert function.results[next(iter(function.results))].shape == (-1, 12)
    got, = run_function(function, {"x": x}).values()
    np.testing.assert_array_equal(got, ref)


def test_reshape_and_transpose_v1_legacy():
    """The old reshape/transpose ops (no XShape); their grads read X."""
    x = rng.standard_normal((2, 3, 4)).astype("float32")

    def build(x):
        r = static_op(None, "reshape", {"X": x}, {"shape": [0, -1]})
        return static_op(None, "transpose", {"X": r}, {"axis": [1, 0]})

    check_against_paddle(build, {"x": x}, ir="legacy")


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("perm", [[1, 0, 2], [2, 0, 1], [-1, 0, 1]])
def test_transpose2(ir, dtype, perm):
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    check_against_paddle(lambda x: paddle.transpose(x, perm), {"x": x}, ir=ir, **tol(dtype))


# --- concat, stack ------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(ir, dtype, axis):
    shapes = {0: [(1, 3, 2), (2, 3, 2), (3, 3, 2)], 1: [(2, 1, 2), (2, 3, 2), (2, 2, 2)],
              -1: [(2, 3, 1), (2, 3, 2), (2, 3, 3)]}[axis]
    feeds = {f"x{i}": rng.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)}
    check_against_paddle(lambda **xs: paddle.concat(list(xs.values()), axis=axis), feeds, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
def test_concat_int64(ir):
    feeds = {"a": rng.integers(0, 9, (2, 3)).astype("int64"), "b": rng.integers(0, 9, (1, 3)).astype("int64")}
    check_against_paddle(lambda a, b: paddle.concat([a, b]), feeds, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stack(ir, dtype, axis):
    feeds = {f"x{i}": rng.standard_normal((2, 3)).astype(dtype) for i in range(3)}
    check_against_paddle(lambda **xs: paddle.stack(list(xs.values()), axis=axis), feeds, ir=ir, **tol(dtype))


# --- slice, gather ------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axes,starts,ends", [([0, 1], [1, -3], [2, 100]), ([2], [0], [-1]), ([1, 2], [2, 1], [3, 4]),
                                              ([0], [-100], [100])])
def test_slice(ir, dtype, axes, starts, ends):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    check_against_paddle(lambda x: paddle.slice(x, axes=axes, starts=starts, ends=ends), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
def test_slice_decrease_axis(ir):
    """Indexing emits slice with decrease_axis: the integer-indexed dims are removed."""
    x = rng.standard_normal((3, 4, 5)).astype("float32")
    check_against_paddle(lambda x: [x[1, :, 1:3], x[:, 2, 4]], {"x": x}, ir=ir)


def test_slice_start_as_tensor_legacy():
    """StartsTensorList of fill_constant results (PIR stacks them: see the reshape test above).
    Paddle declares the sliced dim dynamic; the reshape gives the harness a static shape."""
    x = rng.standard_normal((3, 4)).astype("float32")
    check_against_paddle(lambda x: paddle.reshape(paddle.slice(x, axes=[0, 1], starts=[paddle.full([1], 1, "int64"), 0],
                                                               ends=[3, 2]), [2, 2]), {"x": x}, ir="legacy")


@pytest.mark.parametrize("ir", IRS)
def test_slice_int64(ir):
    x = rng.integers(0, 9, (3, 4)).astype("int64")
    check_against_paddle(lambda x: paddle.slice(x, axes=[1], starts=[1], ends=[3]), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_gather(ir, dtype, axis, index_dtype):
    x = rng.standard_normal((3, 4)).astype(dtype)
    index = np.array([2, 0, 2, 1], dtype=index_dtype)  # a repeated index accumulates in the grad
    check_against_paddle(lambda x, i: paddle.gather(x, i, axis=axis), {"x": x, "i": index}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("index", [np.array(2, dtype="int64"), np.array([[1], [1], [0]], dtype="int64")])
def test_gather_0d_and_column_index(ir, index):
    x = rng.standard_normal((3, 4)).astype("float32")
    check_against_paddle(lambda x, i: paddle.gather(x, i, axis=0), {"x": x, "i": index}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
def test_gather_int64(ir):
    x = rng.integers(0, 9, (4, 3)).astype("int64")
    check_against_paddle(lambda x, i: paddle.gather(x, i), {"x": x, "i": np.array([3, 1], dtype="int64")}, ir=ir)


# --- cast, scale, increment, fill_zeros_like -------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("src,dst", [("float32", "float64"), ("float64", "float32"), ("float32", "float32"),
                                     ("float32", "int64"), ("int64", "float32"), ("float32", "bool")])
def test_cast(ir, src, dst):
    x = (rng.standard_normal((3, 4)) * 3).astype(src)
    x.flat[0] = 0
    check_against_paddle(lambda x: paddle.cast(x, dst), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale,bias,after", [(2.0, 1.0, True), (2.0, 1.0, False), (-0.5, 0.0, True)])
def test_scale(ir, dtype, scale, bias, after):
    x = rng.standard_normal((3, 4)).astype(dtype)
    check_against_paddle(lambda x: paddle.scale(x, scale, bias, bias_after_scale=after), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("scale,bias", [(3.0, 2.0), (2.5, 0.5)])
def test_scale_int64(ir, scale, bias):
    """Paddle casts scale and bias to the integer dtype first (2.5 -> 2)."""
    x = rng.integers(-5, 5, (3, 4)).astype("int64")
    check_against_paddle(lambda x: paddle.scale(x, scale, bias), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype,step", [("int64", 1.0), ("int64", 3.0), ("float32", 0.5)])
def test_increment(ir, dtype, step):
    x = np.array([7], dtype=dtype)
    check_against_paddle(lambda x: paddle.increment(x, step), {"x": x}, ir=ir, grads=False)


def test_increment_out_of_place_pir():
    x = np.array([7], dtype="int64")
    check_against_paddle(lambda x: paddle._C_ops.increment(x, 2.0), {"x": x}, ir="pir", grads=False)


@pytest.mark.parametrize("ir", IRS)
def test_full_of_a_tensor_value(ir):
    """paddle.full with a computed fill value (legacy fill_constant's ValueTensor, PIR's
    full_with_tensor): the value is the tensor's, not the attribute's."""
    x = rng.standard_normal((3, 4)).astype("float32")
    check_against_paddle(lambda x: x * paddle.full([3, 4], fill_value=paddle.mean(x) + 2.0), {"x": x}, ir=ir)


def test_full_of_a_constant_shape_tensor_legacy():
    """fill_constant's ShapeTensorList of constants (fill_constant results): a shape known at conversion."""
    x = rng.standard_normal((2, 3)).astype("float32")
    check_against_paddle(lambda x: x + paddle.full([paddle.full([1], 2, "int32"), 3], 0.5), {"x": x}, ir="legacy")


def test_full_of_a_run_time_shape_stays_with_paddle():
    """fill_constant of a batch-sized shape (paddle.shape(h)[0], as Paddle's simnet test model builds
    its margin): the shape is not known at conversion, so the op stays with Paddle (not an error)."""
    with ir_guard("legacy"):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [-1, 4], "float32")
            margin = paddle.full([paddle.shape(x)[0], 1], 0.5, "float32")
            loss = paddle.mean(x * margin)
        refused = {u["op_type"] for u in paddle_ngraph.unsupported_ops(main)}
    assert "fill_constant" in refused


def test_fill_zeros_like():
    """Paddle 3 no longer registers fill_zeros_like (older saved programs have it): a hand-made view."""
    view = ProgramView(ir="legacy", vars={"x": VarInfo("x", DType.int64, (2, 3), is_data=True),
                                          "y": VarInfo("y", DType.int64, (2, 3))},
                       ops=[OpView("fill_zeros_like", 0, 0, "forward", inputs={"x": ["x"]}, outputs={"out": ["y"]})])
    function = paddle_ngraph.convert(view, fetch_list=["y"])
    got, = get_backend(harness.DEFAULT_BACKEND).compile(function).call([np.ones((2, 3), dtype="int64")])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.zeros((2, 3)))


# --- top_k, accuracy ------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k,axis,largest", [(1, -1, True), (2, -1, True), (3, 0, True), (2, 1, False), (4, -1, False)])
def test_top_k_v2(ir, dtype, k, axis, largest):
    x = distinct((4, 5), dtype)
    check_against_paddle(lambda x: list(paddle.topk(x, k, axis=axis, largest=largest)), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
def test_top_k_v2_int64(ir):
    x = distinct((3, 6), "int64")
    check_against_paddle(lambda x: list(paddle.topk(x, 2)), {"x": x}, ir=ir)


def test_top_k_v1_legacy():
    x = distinct((3, 5), "float32")
    check_against_paddle(lambda x: legacy_op("top_k", {"X": x}, {"k": 2}, {"Out": "float32", "Indices": "int64"}),
                         {"x": x}, ir="legacy")


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("k", [1, 2])
def test_accuracy(ir, k):
    """paddle.static.accuracy: top_k with sorted=False, then accuracy."""
    x = distinct((6, 4), "float32")
    label = np.array([[0], [1], [2], [3], [1], [0]], dtype="int64")
    check_against_paddle(lambda x, label: paddle.static.accuracy(x, label, k=k), {"x": x, "label": label},
                         ir=ir, grads=False)


@pytest.mark.parametrize("ir", IRS)
def test_accuracy_correct_and_total(ir):
    x = distinct((5, 4), "float64")
    label = np.array([[0], [1], [2], [3], [1]], dtype="int64")

    def build(x, label):
        values, indices = paddle.topk(x, 2)
        return static_op(lambda: list(paddle._C_ops.accuracy(values, indices, label)), "accuracy",
                         {"Out": values, "Indices": indices, "Label": label}, outputs=("Accuracy", "Correct", "Total"))

    check_against_paddle(build, {"x": x, "label": label}, ir=ir, grads=False)


# --- comparisons and logical ops ---------------------------------------------------------------------------
COMPARISONS = ["equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal"]


def _binary_bool_op(name, x, y):
    return static_op(lambda: getattr(paddle, name)(x, y), name, {"X": x, "Y": y}, {"axis": -1}, dtype="bool")


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("yshape", [(3, 4), (4,)])
def test_comparisons(ir, dtype, yshape):
    x = rng.integers(0, 3, (3, 4)).astype(dtype)  # small integers: many ties
    y = rng.integers(0, 3, yshape).astype(dtype)
    check_against_paddle(lambda x, y: [_binary_bool_op(name, x, y) for name in COMPARISONS], {"x": x, "y": y},
                         ir=ir, grads=False)


@pytest.mark.parametrize("ir", IRS)
def test_logical_ops(ir):
    a, b = rng.integers(0, 2, (3, 4)).astype(bool), rng.integers(0, 2, (4,)).astype(bool)

    def build(a, b):
        not_a = static_op(lambda: paddle.logical_not(a), "logical_not", {"X": a}, dtype="bool")
        return [_binary_bool_op("logical_and", a, b), _binary_bool_op("logical_or", a, b), not_a]

    check_against_paddle(build, {"a": a, "b": b}, ir=ir, grads=False)


# --- grads of divide, maximum, minimum, pow ------------------------------------------------------------------
def _elementwise(name, legacy_type, x, y, axis=-1):
    return static_op(lambda: getattr(paddle, name)(x, y), legacy_type, {"X": x, "Y": y}, {"axis": axis})


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xshape,yshape", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 4), (1, 4)), ((4,), (3, 4))])
@pytest.mark.parametrize("name,legacy_type", [("divide", "elementwise_div"), ("maximum", "elementwise_max"),
                                              ("minimum", "elementwise_min"), ("pow", "elementwise_pow")])
def test_elementwise_grads(ir, dtype, xshape, yshape, name, legacy_type):
    x = rng.uniform(0.5, 2.0, xshape).astype(dtype)
    y = rng.uniform(0.5, 2.0, yshape).astype(dtype)
    if name in ("maximum", "minimum"):  # ties, where Paddle splits the gradient
        x.flat[0], y.flat[0] = 1.0, 1.0
    check_against_paddle(lambda x, y: _elementwise(name, legacy_type, x, y), {"x": x, "y": y}, ir=ir, **tol(dtype))


def test_elementwise_div_grad_legacy_axis():
    """Legacy axis=0: y of shape (3,) lines up with the first dim of x. (Paddle 3's max, min
    and pow grad kernels reject such an axis themselves.)"""
    x = rng.uniform(0.5, 2.0, (3, 4)).astype("float32")
    y = rng.uniform(0.5, 2.0, (3,)).astype("float32")
    check_against_paddle(lambda x, y: static_op(None, "elementwise_div", {"X": x, "Y": y}, {"axis": 0}),
                         {"x": x, "y": y}, ir="legacy")


# --- lamb ------------------------------------------------------------------------------------------------------
def _train_program(always_adapt):
    """A linear model y = x w + b with a squared loss, minimized by Lamb; b is excluded from
    the weight decay (so its trust ratio is 1 unless always_adapt)."""
    x = paddle.static.data("x", [8, 3], "float32")
    target = paddle.static.data("target", [8, 2], "float32")
    w = paddle.static.create_parameter([3, 2], "float32", name="w")
    b = paddle.static.create_parameter([2], "float32", name="b", is_bias=True)
    y = static_op(lambda: paddle.matmul(x, w), "matmul_v2", {"X": x, "Y": w}) + b
    d = y - target
    loss = static_op(lambda: paddle.mean(d * d), "reduce_mean", {"X": d * d},
                     {"dim": [], "reduce_all": True, "keep_dim": False})
    paddle.optimizer.Lamb(0.1, lamb_weight_decay=0.05, always_adapt=always_adapt,
                          exclude_from_weight_decay_fn=lambda p: p.name == "b").minimize(loss)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("always_adapt", [False, True])
def test_lamb_trains_like_paddle(ir, always_adapt):
    feeds = {"x": rng.standard_normal((8, 3)).astype("float32"),
             "target": rng.standard_normal((8, 2)).astype("float32")}
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
            _train_program(always_adapt)
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        function = paddle_ngraph.convert(main)
        assert any(n.op_type == "LambUpdate" for n in function.ordered_nodes())
        state = {p.name: scope_value(p.name) for p in function.parameters if p.name not in feeds}
        for _ in range(5):
            exe.run(main, feed=feeds)
        expected = {name: scope_value(name) for name in state}
    executable = get_backend(harness.DEFAULT_BACKEND).compile(function)
    for _ in range(5):
        outs = executable.call([feeds[p.name] if p.name in feeds else state[p.name] for p in function.parameters])
        # copies: a backend's outputs may be views of its arena, valid until its next call
        state.update({k[len("state:"):]: np.array(v) for k, v in zip(function.results, outs) if k.startswith("state:")})
    assert {"w", "b", "w_moment1_0", "b_beta2_pow_acc_0"} <= set(state)
    for name, value in expected.items():
        np.testing.assert_allclose(state[name], value, rtol=1e-5, atol=1e-6, err_msg=f"{name} ({ir})")
