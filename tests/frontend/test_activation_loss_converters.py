"""Activations, unary math, losses and gradient-clipping ops: forward and gradients against
Paddle's executor in both IRs (legacy programs append the op through LayerHelper, since
Paddle 3's Python APIs refuse legacy Variables), on both backends (tests/conftest.py)."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from harness import IRS, check_against_paddle, ir_guard, static_op

rng = np.random.default_rng(0)
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}
DTYPES = ["float32", "float64"]


def normal(shape, dtype="float32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def with_values(x, values):
    """x with its first elements replaced by ``values`` (boundary points of piecewise functions)."""
    x = x.copy()
    x.reshape(-1)[:len(values)] = values
    return x


def op_names(build, feeds, ir):
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, paddle.static.Program()):
            build(**{n: paddle.static.data(n, list(v.shape), str(v.dtype)) for n, v in feeds.items()})
        if ir == "pir":
            return {op.name() for op in main.global_block().ops}
        return {op.type for op in main.global_block().ops}


def unary(pir_call, legacy_type, attrs=None):
    """A one-input op built by ``pir_call`` in PIR and by ``legacy_type`` with ``attrs`` in legacy."""
    return lambda x: static_op(lambda: pir_call(x), legacy_type, {"X": x}, attrs or {})


# name -> (pir call, legacy op type, legacy attrs, boundary values that must be in x)
ACTIVATIONS = {
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), "leaky_relu", {"alpha": 0.1}, [0.0]),
    "leaky_relu_big_alpha": (lambda x: F.leaky_relu(x, 1.5), "leaky_relu", {"alpha": 1.5}, [0.0]),
    "elu": (lambda x: F.elu(x, 0.5), "elu", {"alpha": 0.5}, [0.0]),
    "elu_negative_alpha": (lambda x: F.elu(x, -0.3), "elu", {"alpha": -0.3}, [0.0]),
    "selu": (lambda x: F.selu(x), "selu", {"scale": 1.0507009873554805, "alpha": 1.6732632423543772}, [0.0]),
    "selu_attrs": (lambda x: F.selu(x, 1.2, 0.7), "selu", {"scale": 1.2, "alpha": 0.7}, [0.0]),
    "celu": (lambda x: F.celu(x, 0.5), "celu", {"alpha": 0.5}, [0.0]),
    "softplus": (lambda x: F.softplus(x), "softplus", {"beta": 1.0, "threshold": 20.0}, [0.0, 25.0]),
    "softplus_beta": (lambda x: F.softplus(x, 2.0, 1.0), "softplus", {"beta": 2.0, "threshold": 1.0}, [0.5, 0.6]),
    "softsign": (lambda x: F.softsign(x), "softsign", {}, [0.0]),
    "mish": (lambda x: F.mish(x), "mish", {"threshold": 20.0}, [0.0, 21.0, -30.0]),
    "hardtanh": (lambda x: F.hardtanh(x), "brelu", {"t_min": -1.0, "t_max": 1.0}, [-1.0, 1.0]),
    "hardtanh_range": (lambda x: F.hardtanh(x, -0.5, 2.0), "brelu", {"t_min": -0.5, "t_max": 2.0}, [-0.5, 2.0]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.5), "hard_shrink", {"threshold": 0.5}, [0.5, -0.5, 0.0]),
    "softshrink": (lambda x: F.softshrink(x, 0.3), "softshrink", {"lambda": 0.3}, [0.3, -0.3, 0.0]),
    "tanhshrink": (lambda x: F.tanhshrink(x), "tanh_shrink", {}, [0.0]),
    "thresholded_relu": (lambda x: F.thresholded_relu(x, 0.5, 0.2), "thresholded_relu",
                         {"threshold": 0.5, "value": 0.2}, [0.5]),
    "logsigmoid": (lambda x: F.log_sigmoid(x), "logsigmoid", {}, [0.0, -30.0, 30.0]),
    "exp": (paddle.exp, "exp", {}, []),
    "abs": (paddle.abs, "abs", {}, [0.0]),
    "pow": (lambda x: paddle.pow(x, 3.0), "pow", {"factor": 3.0}, [0.0]),
    "sign": (paddle.sign, "sign", {}, [0.0]),
    "clip": (lambda x: paddle.clip(x, -0.5, 0.7), "clip", {"min": -0.5, "max": 0.7}, [-0.5, 0.7]),
}
POSITIVE = {
    "log": (paddle.log, "log", {}),
    "sqrt": (paddle.sqrt, "sqrt", {}),
    "rsqrt": (paddle.rsqrt, "rsqrt", {}),
    "reciprocal": (paddle.reciprocal, "reciprocal", {}),
    "pow_fraction": (lambda x: paddle.pow(x, 1.7), "pow", {"factor": 1.7}),
}


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(ir, dtype, name):
    pir_call, legacy_type, attrs, boundary = ACTIVATIONS[name]
    x = with_values(normal((3, 7), dtype, scale=2.0), boundary)
    build = unary(pir_call, legacy_type, attrs)
    expected = {"hardtanh": "brelu", "hardtanh_range": "brelu"}.get(name, legacy_type)
    assert any(t.removeprefix("pd_op.") in (expected, legacy_type, name.split("_")[0], "hardtanh", "hardshrink",
                                              "tanh_shrink", "pow")
               for t in op_names(build, {"x": x}, ir))
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_positive_domain_math(ir, dtype, name):
    pir_call, legacy_type, attrs = POSITIVE[name]
    x = (np.abs(normal((3, 7), dtype)) + 0.1).astype(dtype)
    check_against_paddle(unary(pir_call, legacy_type, attrs), {"x": x}, ir=ir, **TOL[dtype])
