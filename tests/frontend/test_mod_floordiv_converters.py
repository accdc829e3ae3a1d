"""Converters of modulo and floor division (legacy elementwise_mod / elementwise_floordiv, PIR
remainder / floor_divide) against Paddle's executor in both IRs: Python's % and // for integers and
floats, operands of both signs, broadcasting, the operators and the legacy axis. Forward only:
Paddle 3.3.1's legacy remainder_grad has no CPU kernel (its executor fails on it) and PIR gives
remainder and floor_divide no gradient."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from harness import IRS, check_against_paddle, ir_guard, run_function, static_op
from paddle_ngraph.errors import RefusedOpError

rng = np.random.default_rng(5)
DTYPES = ["int32", "int64", "float32", "float64"]


def operands(dtype, x_shape=(4, 6), y_shape=(6,)):
    """Dividends and divisors of both signs; some dividends exact multiples of their divisor (a zero
    remainder), integer divisors never 0 (Paddle raises there)."""
    if dtype.startswith("int"):
        x = rng.integers(-50, 50, x_shape)
        y = rng.integers(1, 9, y_shape) * rng.choice([-1, 1], y_shape)
    else:
        x = rng.uniform(-20, 20, x_shape)
        y = rng.uniform(0.3, 5, y_shape) * rng.choice([-1, 1], y_shape)
    x, y = x.astype(dtype), y.astype(dtype)
    x.reshape(-1)[:3] = (np.broadcast_to(y, x_shape).reshape(-1)[:3] * np.array([3, -2, 0])).astype(dtype)
    return x, y


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_operators(ir, dtype):
    """x % y, x // y and the functions, broadcast over the last dim and as [4, 1] against [6]."""
    x, y = operands(dtype)
    col = x[:, :1].copy()

    def build(x, y, col):
        return [x % y, x // y, paddle.remainder(x, y), paddle.floor_divide(x, y), col % y, col // y, y // col]

    reference, ours = check_against_paddle(build, {"x": x, "y": y, "col": col}, ir=ir, grads=False)
    for i, (ref, got) in enumerate(zip(reference, ours)):  # signed zeros included
        assert np.asarray(ref).tobytes() == got.tobytes(), f"output {i} differs from Paddle's bits"


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_division_by_zero(ir, dtype):
    """IEEE, as Paddle: x // 0 is x / 0 (inf, -inf or NaN), x % 0 is NaN."""
    x = np.array([3.5, -2.0, 0.0, 7.0], dtype)
    y = np.array([0.0, 0.0, 0.0, -0.0], dtype)
    reference, _ = check_against_paddle(lambda x, y: [x % y, x // y], {"x": x, "y": y}, ir=ir, grads=False)
    assert np.isnan(reference[0]).all() and np.isinf(reference[1][[0, 1, 3]]).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type", ["elementwise_mod", "elementwise_floordiv"])
def test_legacy_axis(dtype, op_type):
    """A legacy op whose Y lines up with X's leading dim (axis=0)."""
    x, _ = operands(dtype, (4, 6))
    y, _ = operands(dtype, (4,), (4,))
    y[y == 0] = 3
    check_against_paddle(lambda x, y: static_op(None, op_type, {"X": x, "Y": y}, {"axis": 0}),
                         {"x": x, "y": y}, ir="legacy", grads=False)


def convert_one(ir, op, dtype):
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()):
            x = paddle.static.data("x", [5], dtype)
            y = paddle.static.data("y", [5], dtype)
            out = op(x, y)
        return paddle_ngraph.convert(main, fetch_list=[out])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_division_by_zero_and_overflow_do_not_stop_the_process(ir, dtype):
    """Paddle raises on an integer divisor of 0 (and C's division traps on MIN // -1); the engine
    gives NumPy's floor_divide and mod there, as documented in the converter."""
    info = np.iinfo(dtype)
    x = np.array([7, -7, 0, info.min, info.min], dtype)
    y = np.array([0, 0, 0, -1, 3], dtype)
    for op, expected in ((lambda a, b: a // b, np.floor_divide), (lambda a, b: a % b, np.mod)):
        function = convert_one(ir, op, dtype)
        got = next(iter(run_function(function, {"x": x, "y": y}).values()))
        with np.errstate(divide="ignore", over="ignore"):
            np.testing.assert_array_equal(got, expected(x, y))


@pytest.mark.parametrize("op_type", ["elementwise_mod", "elementwise_floordiv"])
def test_float16_is_refused_naming_the_op(op_type):
    """A legacy program may hold a float16 op (Paddle's PIR API accepts only int32/int64/float32/
    float64 and complex, which programs we convert cannot hold)."""
    op = lambda a, b: static_op(None, op_type, {"X": a, "Y": b}, {"axis": -1})  # noqa: E731
    with pytest.raises(RefusedOpError, match=rf"{op_type}.*float16"):
        convert_one("legacy", op, "float16")


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_pir_in_place_forms(dtype):
    """remainder_ and floor_divide_ (PIR's in-place ops, which _C_ops builds; paddle.remainder_
    builds the plain op in a static program): z read after both updated it. Only that is compared:
    Paddle's executor gives values of the in-place results that depend on its buffer reuse (fetched
    directly, or read by a later op, they come out as another op's output)."""
    x, y = operands(dtype)
    built = []

    def build(x, y):
        z = x * 1
        paddle._C_ops.remainder_(z, y)
        paddle._C_ops.floor_divide_(z, y)
        built.extend(op.name() for op in paddle.static.default_main_program().global_block().ops)
        return z + 1

    check_against_paddle(build, {"x": x, "y": y}, ir="pir", grads=False)
    assert {"pd_op.remainder_", "pd_op.floor_divide_"} <= set(built)
