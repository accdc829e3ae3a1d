"""The native CumSum and ReduceProd kernels against the INTERPRETER, on one thread and on two, past the
sizes where they split their work (lane groups of a non-innermost axis, split reductions)."""
import numpy as np
import pytest

from paddle_ngraph.backends import get_backend
from paddle_ngraph.ir import Function, ops

rng = np.random.default_rng(5)
FLOATS = ["float32", "float64"]
INTS = ["int32", "int64"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape,axis", [((2, 70, 300), 1), ((300, 2, 70), 0), ((4, 9000), -1)])
def test_native_cumsum_matches_the_interpreter(dtype, shape, axis, threads):
    """The same additions in the same order: the same bits on any number of threads."""
    x = ops.Parameter(dtype=dtype, shape=shape, name="x")
    for exclusive, reverse in [(False, False), (True, True)]:
        f = Function([x], {"y": ops.CumSum(x.output(), axis=axis, exclusive=exclusive, reverse=reverse).output()})
        value = (rng.standard_normal(shape) * 10).astype(dtype)
        expected = get_backend("INTERPRETER").compile(f).call([value])[0]
        got = get_backend("CPU", threads=threads).compile(f).call([value])[0]
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape,axes", [((2, 70, 300), [1]), ((300, 2, 70), [0, 2]), ((40, 900), [1]),
                                        ((3, 40000), [])])
def test_native_prod_matches_the_interpreter(dtype, shape, axes, threads):
    """Floats multiply in double: the float32 product is the correctly rounded one, and differs from
    the interpreter's by the rounding NumPy's float32 product accumulates (at most one float32
    rounding per factor; ~4e-5 relative measured over 40,000 factors, so beyond a fixed 1e-5).
    Integers wrap as NumPy's do."""
    x = ops.Parameter(dtype=dtype, shape=shape, name="x")
    f = Function([x], {"y": ops.ReduceProd(x.output(), axes=axes, keep_dims=False).output()})
    if dtype in FLOATS:
        value = rng.uniform(0.999, 1.001, shape).astype(dtype)  # no underflow
    else:
        value = rng.integers(-3, 4, shape).astype(dtype)
    expected = get_backend("INTERPRETER").compile(f).call([value])[0]
    got = get_backend("CPU", threads=threads).compile(f).call([value])[0]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if dtype not in FLOATS:
        np.testing.assert_array_equal(got, expected)
        return
    factors = value.size // max(got.size, 1)
    exact = np.prod(value.astype(np.float64), axis=tuple(axes) or None)
    if dtype == "float32":
        np.testing.assert_allclose(got, exact.astype(np.float32), rtol=2 ** -23)
        np.testing.assert_allclose(got, expected, rtol=factors * 2 ** -24)
    else:
        np.testing.assert_allclose(got, expected, rtol=factors * 2 ** -53)
