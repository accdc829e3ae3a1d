"""The CPU backend's float64 products (OpenBLAS: MatMul, and convolution as im2col + GEMM) against the
INTERPRETER, on one thread and on two (whole tasks per thread, or every product shared by the team),
over the geometries their plans distinguish."""
import numpy as np
import pytest

from paddle_ngraph.backends import get_backend
from paddle_ngraph.ir import Function, ops

# float64 sums in another order: ~1e-16 relative per term.
TIGHT = dict(rtol=1e-11, atol=1e-11)


def compare(f, inputs, threads):
    expected = get_backend("INTERPRETER").compile(f).call(inputs)
    got = get_backend("CPU", threads=threads).compile(f).call(inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, e, **TIGHT)


@pytest.mark.parametrize("threads", [1, 2])
# Above 2 MFLOP (the one-thread threshold) unless noted, so that threads=2 runs the shared paths.
@pytest.mark.parametrize("a_shape, b_shape, ta, tb", [
    ((67, 259), (259, 75), False, False),        # odd sizes; one product, the team splits its rows
    ((259, 67), (259, 75), True, False),
    ((67, 259), (75, 259), False, True),
    ((259, 67), (75, 259), True, True),
    ((3, 600), (600, 700), False, False),        # few rows: the team splits the columns
    ((9, 33, 80), (80, 97), False, False),       # batched, b broadcast: whole products per thread
    ((2, 1, 40, 50), (5, 40, 60), True, False),  # batched broadcast on both sides, a transposed
    ((4, 61, 150), (4, 57, 150), False, True),
    ((50,), (6, 50, 70), False, False),          # a 1-D operand (row vector); small
    ((80, 50), (50,), False, False),             # a 1-D operand (column vector); small
    ((5, 0), (0, 7), False, False),              # a sum over nothing: zeros
])
def test_float64_matmul_matches_the_interpreter(a_shape, b_shape, ta, tb, threads):
    a = ops.Parameter(dtype="float64", shape=a_shape, name="a")
    b = ops.Parameter(dtype="float64", shape=b_shape, name="b")
    f = Function([a, b], {"c": ops.MatMul(a.output(), b.output(), transpose_a=ta, transpose_b=tb).output()})
    rng = np.random.default_rng(2)
    compare(f, [rng.standard_normal(a_shape), rng.standard_normal(b_shape)], threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("m, k, n", [(33, 70, 90), (8, 576, 1024), (300, 64, 40)])
def test_float64_fused_matmul_bias_matches_the_interpreter(m, k, n, relu, threads):
    """MatMul + bias Add (+ Relu), which the backend fuses into MatMulBias: small (one thread), and
    shared by the team along columns (a Linear layer's forward at batch 8) or rows, where the bias
    is added by rows once the whole product is there."""
    x = ops.Parameter(dtype="float64", shape=(m, k), name="x")
    w = ops.Parameter(dtype="float64", shape=(k, n), name="w")
    bias = ops.Parameter(dtype="float64", shape=(n,), name="bias")
    out = ops.Add(ops.MatMul(x.output(), w.output()).output(), bias.output()).output()
    if relu:
        out = ops.Relu(out).output()
    f = Function([x, w, bias], {"y": out})
    rng = np.random.default_rng(3)
    compare(f, [rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal(n)], threads)


# (data NCHW, filters OIHW, attributes): the cases ConvGemm's plan tells apart, above 2 MFLOP (the
# one-thread threshold) unless noted.
CONVS = [
    ((2, 16, 19, 17), (24, 16, 3, 3), dict()),                                  # odd sizes; one task, shared
    ((3, 32, 21, 20), (32, 32, 3, 2), dict(strides=(2, 3), pads_begin=(1, 0), pads_end=(2, 1))),
    ((2, 24, 16, 16), (32, 12, 3, 3), dict(groups=2, dilations=(2, 1), pads_begin=(2, 1), pads_end=(2, 1))),
    ((8, 32, 16, 16), (64, 1, 3, 3), dict(groups=32, pads_begin=(1, 1), pads_end=(1, 1))),  # depthwise, x2
    ((8, 48, 22, 22), (48, 1, 5, 5), dict(groups=48, strides=(2, 2), pads_begin=(2, 2), pads_end=(2, 2))),
    ((5, 96, 9, 7), (40, 96, 1, 1), dict()),                                    # 1x1 over 5 images: gathered
    ((1, 96, 13, 15), (64, 96, 1, 1), dict()),                                  # 1x1, one image: no unfolding
    ((6, 64, 14, 14), (96, 64, 1, 1), dict(strides=(2, 2))),                    # strided 1x1 (projection)
    ((2, 3, 33, 33), (16, 3, 7, 7), dict(strides=(2, 2), pads_begin=(3, 3), pads_end=(3, 3))),  # a stem
    ((2, 3, 4, 4), (2, 3, 5, 5), dict(pads_begin=(1, 1), pads_end=(1, 1))),     # window wider than the data; small
    ((7, 32, 48, 48), (32, 32, 3, 3), dict(pads_begin=(1, 1), pads_end=(1, 1))),  # col over 32 MB: 2 chunks
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("data_shape, filters_shape, attrs", CONVS)
def test_float64_convolution_and_backprops_match_the_interpreter(data_shape, filters_shape, attrs, threads):
    x = ops.Parameter(dtype="float64", shape=data_shape, name="x")
    w = ops.Parameter(dtype="float64", shape=filters_shape, name="w")
    y = ops.Convolution(x.output(), w.output(), **attrs).output()
    dy = ops.Parameter(dtype="float64", shape=tuple(y.type.shape), name="dy")
    dx = ops.ConvolutionBackpropData(x.output(), w.output(), dy.output(), **attrs).output()
    dw = ops.ConvolutionBackpropFilter(x.output(), w.output(), dy.output(), **attrs).output()
    f = Function([x, w, dy], {"y": y, "dx": dx, "dw": dw})
    rng = np.random.default_rng(4)
    compare(f, [rng.standard_normal(data_shape), rng.standard_normal(filters_shape),
                rng.standard_normal(tuple(y.type.shape))], threads)
