"""The mixed-precision pass (precision: bf16): on real Paddle programs (an MLP, a conv net, a
transformer layer; PIR and legacy) it marks exactly the matmuls and convolutions -- forward and
both backward directions -- and changes nothing else; float64 ops stay unmarked; the op rejects
the mark on a non-float32 op; transpile and the dump tool run it."""
from collections import Counter

import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.errors import ConfigError, ValidationError
from paddle_ngraph.frontend import decode
from paddle_ngraph.ir import Function, from_json, ops, to_json, to_text
from paddle_ngraph.passes import PassManager
from paddle_ngraph.passes.mixed_precision import BF16_OPS, MixedPrecision, bf16_nodes, clear_bf16
from paddle_ngraph.zoo import build_program

paddle.enable_static()
MODELS = ("mnist_mlp", "lenet", "transformer_layer")


def guard(ir):
    return paddle.pir_utils.OldIrGuard() if ir == "legacy" else paddle.pir_utils.IrGuard()


def paddle_op_counts(program) -> Counter:
    """Paddle's matmul and conv ops of the program, forward and grad, without the PIR prefix."""
    kinds = Counter()
    for op in decode(program).ops:
        t = op.type.replace("pd_op.", "").replace("matmul_v2", "matmul")
        if t in ("matmul", "matmul_grad", "conv2d", "conv2d_grad"):
            kinds[t] += 1
    return kinds


def snapshot(function):
    return {n.id: (n.op_type, dict(n.attrs), [str(t) for t in n.output_types],
                   [(i.node.id, i.index) for i in n.inputs]) for n in function.ordered_nodes()
            if n.op_type != "Constant"}


@pytest.mark.parametrize("ir", ["pir", "legacy"])
@pytest.mark.parametrize("model", MODELS)
def test_marks_exactly_the_matmuls_and_convolutions_of_a_real_program(model, ir):
    with guard(ir):
        main, _, _, _ = build_program(model, "momentum", 0.01)
        function = paddle_ngraph.convert(main)
        paddle_ops = paddle_op_counts(main)
    before = snapshot(function)
    mixed = MixedPrecision("bf16")
    PassManager([mixed]).run(function)
    after = snapshot(function)

    compute = [n for n in function.ordered_nodes() if n.op_type in BF16_OPS]
    assert [n.name for n in compute] == mixed.marked  # every one of them is float32 in these models
    assert all(n.attrs["compute_precision"] == "bf16" for n in compute)
    marked = Counter(n.op_type for n in compute)
    # What Paddle's ops become: one Convolution per conv2d, one filter gradient per conv2d_grad
    # (every filter trains), a data gradient where the input needs one (not the first conv's
    # feed); a MatMul per matmul, one or two per matmul_grad (not for a feed's gradient).
    assert marked["Convolution"] == paddle_ops["conv2d"]
    assert marked["ConvolutionBackpropFilter"] == paddle_ops["conv2d_grad"]
    assert 1 <= marked["ConvolutionBackpropData"] <= paddle_ops["conv2d_grad"] or not paddle_ops["conv2d_grad"]
    low = paddle_ops["matmul"] + paddle_ops["matmul_grad"]
    assert low <= marked["MatMul"] <= low + paddle_ops["matmul_grad"]
    if model == "lenet":
        assert marked["ConvolutionBackpropData"] == paddle_ops["conv2d_grad"] - 1

    # Nothing else changed: same nodes, same edges, same types, same attributes but the mark.
    assert after.keys() == before.keys()
    for node_id, (op_type, attrs, types, inputs) in after.items():
        old = before[node_id]
        assert (op_type, types, inputs) == (old[0], old[2], old[3])
        if op_type in BF16_OPS:
            assert {**old[1], "compute_precision": "bf16"} == attrs
        else:
            assert attrs == old[1], f"{op_type} changed"
    assert PassManager([MixedPrecision("bf16")]).passes[0].run(function) is False  # idempotent


def matmul_function(dtype):
    a = ops.Parameter(dtype=dtype, shape=(2, 3), name="a")
    b = ops.Parameter(dtype=dtype, shape=(3, 4), name="b")
    return Function([a, b], {"out": ops.MatMul(a.output(), b.output(), name="mm").output()})


def test_float64_ops_are_left_alone_and_the_op_refuses_the_mark_off_float32():
    function = matmul_function("float64")
    mixed = MixedPrecision("bf16")
    assert mixed.run(function) is False and mixed.marked == []
    a = ops.Parameter(dtype="float64", shape=(2, 3), name="a")
    with pytest.raises(ValidationError, match=r"node 'mm64' \(MatMul\): compute_precision 'bf16' needs float32 "
                                              r"inputs .* got float64"):
        ops.MatMul(a.output(), a.output(), transpose_b=True, compute_precision="bf16", name="mm64")
    x = ops.Parameter(dtype="float16", shape=(1, 1, 4, 4), name="x")
    w = ops.Parameter(dtype="float16", shape=(1, 1, 3, 3), name="w")
    with pytest.raises(ValidationError, match=r"'conv16' \(Convolution\): compute_precision 'bf16' needs float32"):
        ops.Convolution(x.output(), w.output(), compute_precision="bf16", name="conv16")
    f = ops.Parameter(dtype="float32", shape=(2, 2), name="f")
    with pytest.raises(ValidationError, match=r"'mm8' \(MatMul\): compute_precision 'int8' is not one of "
                                              r"default, bf16"):
        ops.MatMul(f.output(), f.output(), compute_precision="int8", name="mm8")


def test_the_mark_survives_serialization_and_shows_in_the_text_form():
    function = matmul_function("float32")
    assert "compute_precision" not in to_text(function)  # the default is not printed
    MixedPrecision().run(function)
    assert "mm = MatMul(a, b) {transpose_a=False, transpose_b=False, compute_precision='bf16'}" in to_text(function)
    again = from_json(to_json(function))
    assert [n.name for n in bf16_nodes(again)] == ["mm"]
    assert clear_bf16(again) == 1 and bf16_nodes(again) == []


def test_fusion_keeps_the_mark():
    from paddle_ngraph.backends.cpu.passes.fuse_matmul_bias import FuseMatMulBias

    a = ops.Parameter(dtype="float32", shape=(2, 3), name="a")
    b = ops.Parameter(dtype="float32", shape=(3, 4), name="b")
    bias = ops.Parameter(dtype="float32", shape=(4,), name="bias")
    product = ops.MatMul(a.output(), b.output(), name="mm")
    function = Function([a, b, bias], {"out": ops.Add(product.output(), bias.output()).output()})
    PassManager([MixedPrecision(), FuseMatMulBias()]).run(function)
    fused = [n for n in function.ordered_nodes() if n.op_type == "MatMulBias"]
    assert len(fused) == 1 and fused[0].attrs["compute_precision"] == "bf16"


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ConfigError, match="mixed_precision: precision 'fp16' is not one of fp32, bf16"):
        MixedPrecision("fp16")
    function = matmul_function("float32")
    assert MixedPrecision("fp32").run(function) is False and bf16_nodes(function) == []


@pytest.mark.parametrize("ir", ["pir", "legacy"])
def test_transpile_with_precision_bf16_marks_the_engine_function(ir):
    from paddle_ngraph.transpiler import engines

    with guard(ir):
        main, startup, _, loss = build_program("lenet", "sgd", 0.01)
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            paddle_ngraph.transpile(main, backend="INTERPRETER", precision="bf16", transport="null")
            function = engines()[-1].function
            x = np.random.default_rng(0).standard_normal((4, 1, 28, 28)).astype("float32")
            y = np.arange(4).reshape(4, 1).astype("int64")
            (value,) = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
    assert np.isfinite(value)
    marked = Counter(n.op_type for n in bf16_nodes(function))
    assert set(marked) == set(BF16_OPS) - {"MatMulBias"}
    assert sum(marked.values()) == sum(1 for n in function.ordered_nodes() if n.op_type in BF16_OPS)


def test_dump_tool_reports_the_bf16_nodes(capsys):
    from paddle_ngraph.tools.dump import main

    assert main(["paddle_ngraph.zoo:build_program", "--precision", "bf16", "--report"]) == 0
    out = capsys.readouterr().out
    assert "Precision: bf16: 5 node(s) round their inputs to bf16 and accumulate in float32 (MatMul x5)" in out
    assert main(["paddle_ngraph.zoo:build_program", "--precision", "bf16"]) == 0
    assert capsys.readouterr().out.count("compute_precision='bf16'") == 5
    assert main(["paddle_ngraph.zoo:build_program", "--report"]) == 0
    assert "Precision: fp32, every node computes in its inputs' dtype" in capsys.readouterr().out
