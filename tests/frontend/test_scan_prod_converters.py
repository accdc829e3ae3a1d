"""Converters of cumsum (+ cumsum_grad) and prod (legacy reduce_prod, + its grad) against Paddle's
executor in both IRs: forward outputs and the gradients of every float feed. Paddle's Python
cumsum has no exclusive/reverse arguments, so PIR programs call _C_ops.cumsum and legacy programs
append the raw op (harness.static_op), as they do for prod."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from harness import IRS, check_against_paddle, ir_guard, static_op
from paddle_ngraph.errors import RefusedOpError

rng = np.random.default_rng(11)
FLOATS = ["float32", "float64"]
INTS = ["int32", "int64"]


def tol(dtype):
    return {"rtol": 1e-5} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-12}


# --- cumsum --------------------------------------------------------------------------------------
def cumsum(x, axis, flatten, exclusive, reverse):
    attrs = {"axis": axis, "flatten": flatten, "exclusive": exclusive, "reverse": reverse}
    return static_op(lambda: paddle._C_ops.cumsum(x, axis, flatten, exclusive, reverse), "cumsum", {"X": x}, attrs)


CUMSUM_CASES = [  # (axis, flatten, exclusive, reverse)
    (1, False, False, False),
    (-1, False, True, False),
    (0, False, False, True),
    (-2, False, True, True),
    (-1, True, False, False),  # paddle.cumsum(x): the flattened input, 1-D
    (-1, True, True, True),
]


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis,flatten,exclusive,reverse", CUMSUM_CASES)
def test_cumsum(ir, dtype, axis, flatten, exclusive, reverse):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    check_against_paddle(lambda x: cumsum(x, axis, flatten, exclusive, reverse), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", INTS)
def test_cumsum_int(ir, dtype):
    x = rng.integers(-100, 100, (4, 6)).astype(dtype)
    check_against_paddle(lambda x: cumsum(x, 0, False, True, True), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("shape,flatten", [((), False), ((), True), ((1, 1), False), ((1, 1), True)])
def test_cumsum_of_one_element(ir, shape, flatten):
    """Paddle copies an input of one element, exclusive or not (its output 0-D, [1] or [1, 1])."""
    x = rng.standard_normal(shape).astype("float32")
    check_against_paddle(lambda x: cumsum(x, -1, flatten, True, False), {"x": x}, ir=ir)


@pytest.mark.parametrize("ir", IRS)
def test_cumsum_python_api(ir):
    """paddle.cumsum as a program writes it (axis=None flattens), trained through a product."""
    x = rng.standard_normal((3, 4)).astype("float32")
    check_against_paddle(lambda x: [paddle.cumsum(x), paddle.cumsum(x * x, axis=-1)], {"x": x}, ir=ir)


# --- prod ----------------------------------------------------------------------------------------
def prod(x, axis, keepdim):
    dims = {"dim": [] if axis is None else ([axis] if isinstance(axis, int) else axis), "keep_dim": keepdim,
            "reduce_all": axis is None}
    return static_op(lambda: paddle.prod(x, axis=axis, keepdim=keepdim), "reduce_prod", {"X": x}, dims)


PROD_CASES = [(1, False), (-1, True), (None, False), ([0, 2], True)]


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis,keepdim", PROD_CASES)
def test_prod(ir, dtype, axis, keepdim):
    x = (rng.uniform(0.5, 1.5, (3, 4, 5)) * rng.choice([-1, 1], (3, 4, 5))).astype(dtype)
    check_against_paddle(lambda x: prod(x, axis, keepdim), {"x": x}, ir=ir, **tol(dtype))


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [1, None])
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_prod_of_zeros(ir, dtype, axis):
    """Rows with no zero, one zero, two zeros and only zeros: Paddle's gradient is
    (dout * out) / x there, NaN at the zeros and 0 beside them, and so is ours."""
    x = rng.uniform(0.5, 2.0, (4, 5)).astype(dtype)
    x[1, 2] = 0
    x[2, [0, 3]] = 0
    x[3] = 0
    reference, _ = check_against_paddle(lambda x: prod(x, axis, False), {"x": x}, ir=ir, **tol(dtype))
    if axis == 1:  # the case the test is about did happen
        assert np.isnan(reference[1][1, 2]) and reference[1][1, 0] == 0 and np.all(np.isnan(reference[1][3]))


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", INTS)
def test_prod_int(ir, dtype):
    x = rng.integers(-4, 5, (3, 5)).astype(dtype)
    check_against_paddle(lambda x: prod(x, 1, False), {"x": x}, ir=ir)


def test_prod_with_an_out_dtype_is_refused_naming_the_op():
    """A legacy reduce_prod that casts inside (out_dtype, which only hand-built programs set) is
    left to Paddle."""
    with ir_guard("legacy"):
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            x = paddle.static.data("x", [3, 4], "float32")
            static_op(None, "reduce_prod", {"X": x}, {"dim": [1], "keep_dim": False, "reduce_all": False,
                                                      "out_dtype": 6}, dtype="float64")
        with pytest.raises(RefusedOpError, match=r"reduce_prod.*out_dtype 6"):
            paddle_ngraph.convert(main)
