"""``compute_precision="bf16"``: the reference semantics (INTERPRETER) and the CPU backend's float32
fallback.

- the rounding to bfloat16 is round-to-nearest-even on hand-picked bit patterns (ties both ways,
  NaN payloads in the low bits, inf, float32 max, subnormals, signed zero) and equals Paddle's own
  float32 -> bfloat16 cast on random bit patterns;
- a marked MatMul, MatMulBias, Convolution, ConvolutionBackpropData or ConvolutionBackpropFilter
  equals, bitwise, the unmarked op on the inputs rounded beforehand (the bias of MatMulBias not
  rounded); it matches Paddle's float32 op on those rounded inputs; it differs from plain float32
  by no more than bf16's rounding of the inputs allows;
- the CPU backend, without native bf16 here, runs a marked function in float32 (bitwise the
  unmarked results) and says why once per process.
"""
import logging
import subprocess
import sys

import numpy as np
import pytest

from paddle_ngraph.backends import get_backend
from paddle_ngraph.backends.cpu import precision
from paddle_ngraph.ir.bfloat16 import round_to_bf16
from paddle_ngraph.ir import Function, ops
from paddle_ngraph.passes.mixed_precision import MixedPrecision

# (float32 bits, the bfloat16 bits round-to-nearest-even gives), derived by hand.
RNE_CASES = [
    (0x3F800000, 0x3F80),  # 1.0, exact
    (0x3F808000, 0x3F80),  # tie between 0x3F80 (even) and 0x3F81: down to even
    (0x3F818000, 0x3F82),  # tie between 0x3F81 (odd) and 0x3F82: up to even
    (0x3F808001, 0x3F81),  # just above the tie: up
    (0x3F807FFF, 0x3F80),  # just below the tie: down
    (0xBF818000, 0xBF82),  # negative tie: magnitude rounds as for positive
    (0x7F7F0000, 0x7F7F),  # the largest bfloat16, exact
    (0x7F7F8000, 0x7F80),  # tie above it, odd: up, to inf
    (0x7F7FFFFF, 0x7F80),  # float32 max: inf
    (0xFF7FFFFF, 0xFF80),  # -float32 max: -inf
    (0x7F800000, 0x7F80),  # inf
    (0xFF800000, 0xFF80),  # -inf
    (0x00000000, 0x0000),  # +0
    (0x80000000, 0x8000),  # -0 keeps its sign
    (0x00000001, 0x0000),  # smallest float32 subnormal: to +0
    (0x00008000, 0x0000),  # subnormal tie, even: down to 0
    (0x00018000, 0x0002),  # subnormal tie, odd: up
    (0x0000C000, 0x0001),  # subnormal above the tie
    (0x007FFFFF, 0x0080),  # largest subnormal: up to the smallest normal
    (0x807F8000, 0x8080),  # negative subnormal tie, odd: up to -smallest normal
]
NANS = [0x7FC00000, 0x7F800001, 0x7F808000, 0xFFFFFFFF, 0xFF800001]  # quiet, signaling (payload low only), ...


def bits_to_f32(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def test_round_to_bf16_is_round_to_nearest_even_on_hand_picked_bit_patterns():
    inputs = bits_to_f32([b for b, _ in RNE_CASES])
    got = round_to_bf16(inputs).view(np.uint32)
    assert np.all(got & 0xFFFF == 0)  # a bfloat16 value: the low 16 bits are zero
    for (bits, expected), out in zip(RNE_CASES, got >> 16):
        assert out == expected, f"0x{bits:08X} -> 0x{int(out):04X}, expected 0x{expected:04X}"
    # A NaN stays a NaN, also one whose payload is only in the low bits (truncation or a plain
    # round-up would make 0x7F800001 inf).
    assert np.isnan(round_to_bf16(bits_to_f32(NANS))).all()
    assert round_to_bf16(np.float32(1.5).reshape(())).shape == ()


def test_round_to_bf16_equals_paddles_cast_on_random_bit_patterns(dynamic_mode):
    import paddle

    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    bits[:1000] &= 0x807FFFFF  # subnormals
    bits[1000:2000] = (bits[1000:2000] & 0xFFFF0000) | 0x8000  # exact ties
    values = bits.view(np.float32)
    ours = round_to_bf16(values)
    theirs = paddle.to_tensor(values).astype("bfloat16").astype("float32").numpy()
    nan = np.isnan(values)
    assert np.array_equal(np.isnan(ours), nan) and np.array_equal(np.isnan(theirs), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))


# --- the ops -------------------------------------------------------------------------------------
def build(op, shapes: list, marked: bool, **attrs) -> Function:
    params = [ops.Parameter(dtype="float32", shape=s, name=f"in{k}") for k, s in enumerate(shapes)]
    node = getattr(ops, op)(*(p.output() for p in params), name="op", **attrs)
    function = Function(params, {"out": node.output()})
    if marked:
        MixedPrecision().run(function)
        assert node.attrs["compute_precision"] == "bf16"
    return function


def run(function, inputs, backend="INTERPRETER"):
    return np.array(get_backend(backend).compile(function).call(inputs)[0], copy=True)


CONV = dict(strides=(2, 1), pads_begin=(1, 0), pads_end=(1, 2), dilations=(1, 2), groups=2)
CASES = {
    "matmul": ("MatMul", [(3, 40, 50), (50, 30)], {}),
    "matmul_transposed": ("MatMul", [(50, 40), (2, 30, 50)], dict(transpose_a=True, transpose_b=True)),
    "matmul_bias_relu": ("MatMulBias", [(40, 50), (50, 30), (30,)], dict(activation="relu")),
    "conv": ("Convolution", [(2, 4, 11, 12), (6, 2, 3, 3)], CONV),
    "conv_backprop_data": ("ConvolutionBackpropData", [(2, 4, 11, 12), (6, 2, 3, 3), (2, 6, 6, 10)], CONV),
    "conv_backprop_filter": ("ConvolutionBackpropFilter", [(2, 4, 11, 12), (6, 2, 3, 3), (2, 6, 6, 10)], CONV),
}


def case_inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    # Values over a few binades, so that most inputs are not bfloat16 values already.
    return [(rng.standard_normal(s) * np.exp2(rng.integers(-3, 4, s))).astype(np.float32) for s in shapes]


def product_inputs(op):
    """The positions of the inputs the products read (the bias of MatMulBias is added after)."""
    return {"MatMulBias": (0, 1)}.get(op, None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreter_bf16_op_is_the_float32_op_on_inputs_rounded_beforehand(case):
    op, shapes, attrs = CASES[case]
    inputs = case_inputs(shapes)
    rounded = [round_to_bf16(x) if product_inputs(op) is None or k in product_inputs(op) else x
               for k, x in enumerate(inputs)]
    got = run(build(op, shapes, True, **attrs), inputs)
    want = run(build(op, shapes, False, **attrs), rounded)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # the same kernel, the same sums


def abs_product(op, shapes, attrs, inputs):
    """The op on |inputs| in float64: the scale of each output's sum of products."""
    function = build(op, shapes, False, **attrs)
    return run(function, [np.abs(x) for x in inputs]).astype(np.float64)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bf16_differs_from_float32_by_no_more_than_the_rounding_of_the_inputs(case):
    op, shapes, attrs = CASES[case]
    inputs = case_inputs(shapes, seed=1)
    bf16 = run(build(op, shapes, True, **attrs), inputs).astype(np.float64)
    fp32 = run(build(op, shapes, False, **attrs), inputs).astype(np.float64)
    if op == "MatMulBias":  # compare the products: the ReLU cuts both at 0, the bias is not rounded
        inputs_nb = inputs[:2]
        scale = abs_product("MatMul", shapes[:2], {}, inputs_nb) + np.abs(inputs[2])
    else:
        scale = abs_product(op, shapes, attrs, inputs)
    # bfloat16 has 8 significant bits: each rounded input is within u = 2^-8 relative of the
    # input, so each product within 2u + u^2; the float32 sums add a few 2^-24. Bound: 1.01 * 2^-7
    # of the sum of |products| (measured here: up to about 0.75 of it).
    error = np.abs(bf16 - fp32)
    assert np.all(error <= 1.01 * 2.0 ** -7 * scale + 1e-30), float(np.max(error / np.maximum(scale, 1e-30)))
    relative = float(np.max(error / np.maximum(scale, 1e-30)))
    assert 2.0 ** -14 < relative, f"bf16 and float32 agree to {relative:.2g}: no rounding happened?"


def _paddle_op(case, inputs):
    """Paddle's float32 result of the case (dygraph), the backward ones through autograd."""
    import paddle
    import paddle.nn.functional as F

    op, shapes, attrs = CASES[case]
    t = [paddle.to_tensor(x, stop_gradient=False) for x in inputs]
    if op == "MatMul":
        return paddle.matmul(t[0], t[1], transpose_x=attrs.get("transpose_a", False),
                             transpose_y=attrs.get("transpose_b", False)).numpy()
    if op == "MatMulBias":
        return F.relu(paddle.matmul(t[0], t[1]) + t[2]).numpy()
    padding = [[0, 0], [0, 0], [attrs["pads_begin"][0], attrs["pads_end"][0]],
               [attrs["pads_begin"][1], attrs["pads_end"][1]]]
    out = F.conv2d(t[0], t[1], stride=list(attrs["strides"]), padding=padding, dilation=list(attrs["dilations"]),
                   groups=attrs["groups"])
    if op == "Convolution":
        return out.numpy()
    data_grad, filter_grad = paddle.grad([out], [t[0], t[1]], grad_outputs=[t[2]])
    return (data_grad if op == "ConvolutionBackpropData" else filter_grad).numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreter_bf16_op_matches_paddle_float32_on_inputs_rounded_by_paddle(case, dynamic_mode):
    import paddle

    op, shapes, attrs = CASES[case]
    inputs = case_inputs(shapes, seed=2)
    rounds = product_inputs(op) or range(len(inputs))
    by_paddle = [paddle.to_tensor(x).astype("bfloat16").astype("float32").numpy() if k in rounds else x
                 for k, x in enumerate(inputs)]
    want = _paddle_op(case, by_paddle)
    got = run(build(op, shapes, True, **attrs), inputs)
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * scale)


# --- the CPU backend -----------------------------------------------------------------------------
@pytest.fixture
def notices(monkeypatch):
    """The warnings of the ``paddle_ngraph`` logger, with the once-per-process flag reset."""
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("paddle_ngraph")
    handler = Collect(level=logging.WARNING)
    logger.addHandler(handler)
    monkeypatch.setattr(precision, "_told", False)
    yield records
    logger.removeHandler(handler)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpu_backend_runs_bf16_in_float32_bitwise_and_says_why_once(case, notices):
    op, shapes, attrs = CASES[case]
    inputs = case_inputs(shapes, seed=3)
    fp32 = run(build(op, shapes, False, **attrs), inputs, "CPU")
    assert notices == []
    marked = build(op, shapes, True, **attrs)
    got = run(marked, inputs, "CPU")
    again = run(build(op, shapes, True, **attrs), inputs, "CPU")  # a second compile: no second notice
    assert np.array_equal(got.view(np.uint32), fp32.view(np.uint32))
    assert np.array_equal(again.view(np.uint32), fp32.view(np.uint32))
    assert [r.getMessage() for r in notices] == [precision.float32_reason()]
    assert marked.results["out"].node.attrs["compute_precision"] == "bf16"  # the caller's function keeps it


def test_the_reason_names_the_missing_instructions_and_this_cpu(tmp_path):
    model, flags = precision.cpu_info()
    supported, _ = precision.native_bf16_support()
    with open("/proc/cpuinfo") as f:
        first = f.read().split("\n\n")[0]
    assert supported == any(f" {flag}" in first for flag in ("avx512_bf16", "amx_bf16"))
    if not supported:
        assert precision.float32_reason() == f"precision bf16 needs avx512_bf16 (this CPU: {model}): running in float32"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
                       "processor\t: 1\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert precision.native_bf16_support(str(cpuinfo)) == (True, "Some Xeon")
    assert precision.float32_reason(str(cpuinfo)) == ("precision bf16: the CPU backend's bf16 kernels are not "
                                                      "implemented yet: running in float32")
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2 avx512f\n")
    assert precision.float32_reason(str(cpuinfo)) == ("precision bf16 needs avx512_bf16 (this CPU: AMD EPYC 7B13): "
                                                      "running in float32")
    assert precision.cpu_info(str(tmp_path / "missing")) == ("unknown", set())


TWO_PROGRAMS = """
import paddle, numpy as np
paddle.enable_static()
import paddle_ngraph
from paddle_ngraph.zoo import build_program
for model in ("mnist_mlp", "lenet"):
    main, startup, _, loss = build_program(model, "sgd", 0.01)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    paddle_ngraph.transpile(main, backend="CPU", precision="bf16", transport="null")
    x = np.zeros((2, 784) if model == "mnist_mlp" else (2, 1, 28, 28), "float32")
    exe.run(main, feed={"x": x, "y": np.zeros((2, 1), "int64")}, fetch_list=[loss])
print("done")
"""


def test_transpiling_two_programs_for_the_cpu_backend_prints_the_notice_once():
    from paddle_ngraph.quiet import quiet_env

    proc = subprocess.run([sys.executable, "-c", TWO_PROGRAMS], capture_output=True, text=True, timeout=300,
                          env=quiet_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("done")
    lines = [line for line in proc.stderr.splitlines() if "precision bf16" in line]
    assert lines == [f"[paddle_ngraph] WARNING {precision.float32_reason()}"], proc.stderr[-3000:]
