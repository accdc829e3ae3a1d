"""LarsMomentumUpdate on both backends against Paddle's own CPU kernel (run eagerly), bit for bit.

Paddle's norms are Eigen sums (backends/interpreter/kernels/eigen_sum.py); both backends add in
Eigen's order, so the results are equal, not merely close: sizes around the packet, the
unrolled pair of packets and the leaf of Eigen's tree (8192 floats, 4096 doubles) check it.
"""
import numpy as np
import paddle
import pytest

from paddle_ngraph.backends import get_backend
from paddle_ngraph.backends.interpreter.kernels.eigen_sum import eigen_sum_squares
from paddle_ngraph.ir import Function, ops

SIZES = [1, 3, 8, 15, 17, 33, 1000, 4095, 4097, 8191, 8193, 16000, 40000, 300001]
ATTRS = dict(mu=0.9, lars_coeff=0.001, lars_weight_decay=0.0005, epsilon=1e-7, rescale_grad=0.5)


def paddle_lars(param, grad, velocity, lr, attrs):
    """Paddle's lars_momentum kernel, through the eager legacy op the dygraph optimizer calls."""
    with paddle.base.dygraph.guard(paddle.CPUPlace()):
        p, g, v, rate = (paddle.to_tensor(a) for a in (param, grad, velocity, lr))
        paddle._legacy_C_ops.lars_momentum(
            [p], [g], [v], [rate], [p], [v], "mu", attrs["mu"], "lars_coeff", attrs["lars_coeff"],
            "lars_weight_decay", [attrs["lars_weight_decay"]], "multi_precision", False,
            "epsilon", attrs["epsilon"], "rescale_grad", attrs["rescale_grad"])
        return p.numpy(), v.numpy()


def ours(backend, param, grad, velocity, lr, attrs):
    inputs = [ops.Parameter(name=n, dtype=str(a.dtype), shape=a.shape) for n, a in
              zip(("p", "g", "lr", "v"), (param, grad, lr, velocity))]
    update = ops.LarsMomentumUpdate(*(i.output() for i in inputs), name="lars", **attrs)
    function = Function(inputs, {"p": update.output(0), "v": update.output(1)})
    outs = get_backend(backend).compile(function).call([param, grad, lr, velocity])
    return [np.array(o) for o in outs]


def case(n, dtype, seed=0):
    rng = np.random.default_rng(seed + n)
    return (rng.standard_normal(n).astype(dtype), (0.01 * rng.standard_normal(n)).astype(dtype),
            rng.standard_normal(n).astype(dtype), np.array([0.1], dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", ["INTERPRETER", "CPU"])
def test_equals_paddle_bit_for_bit(backend, dtype):
    for n in SIZES:
        param, grad, velocity, lr = case(n, dtype)
        expected = paddle_lars(param, grad, velocity, lr, ATTRS)
        got = ours(backend, param, grad, velocity, lr, ATTRS)
        for name, g, e in zip(("param", "velocity"), got, expected):
            assert g.dtype == e.dtype
            np.testing.assert_array_equal(g, e, err_msg=f"{name}, {n} elements, {dtype}, {backend}")


@pytest.mark.parametrize("backend", ["INTERPRETER", "CPU"])
@pytest.mark.parametrize("which", ["excluded", "zero_param", "zero_grad"])
def test_plain_momentum_branch(backend, which):
    """lars_weight_decay 0 (a parameter excluded from weight decay), or a zero norm: the local
    learning rate is lr itself."""
    param, grad, velocity, lr = case(37, "float32", seed=1)
    attrs = dict(ATTRS)
    if which == "excluded":
        attrs["lars_weight_decay"] = 0.0
    elif which == "zero_param":
        param[:] = 0
    else:
        grad[:] = 0
    expected = paddle_lars(param, grad, velocity, lr, attrs)
    got = ours(backend, param, grad, velocity, lr, attrs)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    decay = np.float32(attrs["lars_weight_decay"])
    v = velocity * np.float32(0.9) + lr[0] * (np.float32(0.5) * grad + decay * param)
    np.testing.assert_array_equal(got[1], v)


def test_eigen_order_is_not_numpys():
    """The reason for eigen_sum_squares: NumPy's pairwise sum differs in the last bit on about
    half of such inputs (8 to 11 of these 20 at each size)."""
    for n in (15, 1000, 40000):
        xs = [np.random.default_rng(seed).standard_normal(n).astype("float32") for seed in range(20)]
        assert sum(eigen_sum_squares(x) != np.sum(x * x) for x in xs) >= 5
        for x in xs:
            np.testing.assert_allclose(eigen_sum_squares(x), np.sum(x.astype("float64") ** 2), rtol=1e-5)
