"""Converters of the index and extremum ops (argmax/argmin, one_hot, index_sample,
take_along_axis; max/min, amax/amin, all/any, logsumexp) against Paddle's executor in both IRs:
forward outputs and the gradients of every float feed. Paddle 3.3.1's Python APIs refuse legacy
Variables for most of these, so the legacy programs append the raw op (harness.static_op)."""
import numpy as np
import paddle
import pytest

from harness import IRS, check_against_paddle, static_op

rng = np.random.default_rng(3)
FLOATS = ["float32", "float64"]
VAR_TYPE = {"int32": 2, "int64": 3, "float32": 5, "float64": 6}


def tol(dtype):
    return {"rtol": 1e-5} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-12}


def with_ties(shape, dtype):
    """Small integers as floats: extrema repeat, so the gradient's share among ties is checked."""
    return rng.integers(-3, 4, shape).astype(dtype)


# --- max, min, amax, amin ------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["max", "min", "amax", "amin"])
@pytest.mark.parametrize("axis,keepdim", [(1, False), (None, False), ([0, 2], True), (-1, True)])
def test_extremum(ir, dtype, op, axis, keepdim):
    x = with_ties((3, 4, 5), dtype)
    dims = {"dim": [] if axis is None else ([axis] if isinstance(axis, int) else axis), "keep_dim": keepdim,
            "reduce_all": axis is None}
    check_against_paddle(lambda x: static_op(lambda: getattr(paddle, op)(x, axis=axis, keepdim=keepdim),
                                             "reduce_" + op, {"X": x}, dims), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
def test_max_int64(ir):
    x = rng.integers(-50, 50, (4, 6)).astype("int64")
    check_against_paddle(lambda x: static_op(lambda: paddle.max(x, axis=0), "reduce_max", {"X": x},
                                             {"dim": [0], "keep_dim": False, "reduce_all": False}), {"x": x}, ir=ir)


# --- all, any ------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("op", ["all", "any"])
@pytest.mark.parametrize("axis,keepdim", [(1, False), (None, False), (0, True)])
def test_all_any(ir, op, axis, keepdim):
    x = rng.standard_normal((4, 3)).astype("float32")
    x[1] = 1.0   # a row that is all True, and a column ...
    x[:, 2] = -1.0  # ... that is all False

    def build(x):
        positive = x > 0
        dims = {"dim": [] if axis is None else [axis], "keep_dim": keepdim, "reduce_all": axis is None}
        flags = static_op(lambda: getattr(paddle, op)(positive, axis=axis, keepdim=keepdim), "reduce_" + op,
                          {"X": positive}, dims, dtype="bool")
        return paddle.cast(flags, "float32")

    check_against_paddle(build, {"x": x}, ir=ir, grads=False)


# --- logsumexp -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis,keepdim", [([1], False), (None, False), ([0, 2], True)])
def test_logsumexp(ir, dtype, axis, keepdim):
    x = (rng.standard_normal((3, 4, 5)) * 4).astype(dtype)
    attrs = {"axis": axis or [], "keepdim": keepdim, "reduce_all": axis is None}
    check_against_paddle(lambda x: static_op(lambda: paddle.logsumexp(x, axis=axis, keepdim=keepdim), "logsumexp",
                                             {"X": x}, attrs), {"x": x}, ir=ir, **tol(dtype))


# --- argmax, argmin ------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdim,dtype", [(1, False, "int64"), (0, True, "int32"), (-1, False, "int32")])
def test_arg_extremum(ir, op, axis, keepdim, dtype):
    x = with_ties((4, 6), "float32")  # ties: the first index wins in both
    attrs = {"axis": axis, "keepdims": keepdim, "flatten": False, "dtype": VAR_TYPE[dtype]}
    check_against_paddle(lambda x: static_op(lambda: getattr(paddle, op)(x, axis=axis, keepdim=keepdim, dtype=dtype),
                                             "arg_" + op[3:], {"X": x}, attrs, dtype=dtype), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
def test_argmax_flattened(ir):
    x = rng.standard_normal((3, 4)).astype("float32")
    attrs = {"axis": 0, "keepdims": False, "flatten": True, "dtype": 3}
    check_against_paddle(lambda x: static_op(lambda: paddle.argmax(x), "arg_max", {"X": x}, attrs, dtype="int64"),
                         {"x": x}, ir=ir)


# --- one_hot -------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_one_hot(ir, dtype):
    ids = rng.integers(0, 7, (4, 3)).astype(dtype)
    attrs = {"depth": 7, "dtype": 5, "allow_out_of_range": False}
    check_against_paddle(lambda ids: static_op(lambda: paddle.nn.functional.one_hot(ids, 7), "one_hot_v2",
                                               {"X": ids}, attrs, dtype="float32"), {"ids": ids}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
def test_one_hot_trains_through_a_matmul(ir):
    """The usual use: one-hot labels times probabilities (the gradient flows to the float input)."""
    ids = rng.integers(0, 5, (6,)).astype("int64")
    p = rng.standard_normal((6, 5)).astype("float32")

    def build(ids, p):
        hot = static_op(lambda: paddle.nn.functional.one_hot(ids, 5), "one_hot_v2", {"X": ids},
                        {"depth": 5, "dtype": 5, "allow_out_of_range": False}, dtype="float32")
        return p * hot

    check_against_paddle(build, {"ids": ids, "p": p}, ir=ir)


# --- index_sample, take_along_axis ---------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_index_sample(ir, dtype, index_dtype):
    x = rng.standard_normal((4, 6)).astype(dtype)
    index = rng.integers(0, 6, (4, 5)).astype(index_dtype)  # 5 of 6 columns: repeats accumulate
    check_against_paddle(lambda x, index: static_op(lambda: paddle.index_sample(x, index), "index_sample",
                                                    {"X": x, "Index": index}), {"x": x, "index": index},
                         ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis,index_shape", [(1, (3, 2, 5)), (0, (6, 4, 5)), (2, (3, 4, 1))])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_take_along_axis(ir, dtype, axis, index_shape, index_dtype):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    index = rng.integers(0, x.shape[axis], index_shape).astype(index_dtype)
    check_against_paddle(
        lambda x, index: static_op(lambda: paddle.take_along_axis(x, index, axis=axis), "take_along_axis",
                                   {"Input": x, "Index": index}, {"Axis": axis}, outputs=("Result",)),
        {"x": x, "index": index}, ir=ir, **tol(dtype))
