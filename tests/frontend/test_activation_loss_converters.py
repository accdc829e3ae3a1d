"""Activations, unary math, losses and gradient-clipping ops: forward and gradients against
Paddle's executor in both IRs (legacy programs append the op through LayerHelper, since
Paddle 3's Python APIs refuse legacy Variables), on both backends (tests/conftest.py)."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from harness import IRS, check_against_paddle, static_op
from helpers import TOL, normal_sampler, op_types as op_names

rng = np.random.default_rng(0)
normal = normal_sampler(rng)
DTYPES = ["float32", "float64"]


def with_values(x, values):
    """x with its first elements replaced by ``values`` (boundary points of piecewise functions)."""
    x = x.copy()
    x.reshape(-1)[:len(values)] = values
    return x


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
    "stanh": (lambda x: paddle.stanh(x), "stanh", {"scale_a": 0.67, "scale_b": 1.7159}, [0.0]),
    "stanh_attrs": (lambda x: paddle.stanh(x, 1.3, 0.4), "stanh", {"scale_a": 1.3, "scale_b": 0.4}, [0.0]),
    "thresholded_relu": (lambda x: F.thresholded_relu(x, 0.5, 0.2), "thresholded_relu",
                         {"threshold": 0.5, "value": 0.2}, [0.5]),
    "logsigmoid": (lambda x: F.log_sigmoid(x), "logsigmoid", {}, [0.0, -30.0, 30.0]),
    "exp": (paddle.exp, "exp", {}, []),
    "abs": (paddle.abs, "abs", {}, [0.0]),
    "pow": (lambda x: paddle.pow(x, 3.0), "pow", {"factor": 3.0}, [0.0]),
    "sign": (paddle.sign, "sign", {}, [0.0]),
    "clip": (lambda x: paddle.clip(x, -0.5, 0.7), "clip", {"min": -0.5, "max": 0.7}, [-0.5, 0.7]),
}
PIR_NAMES = {"brelu": "hardtanh", "hard_shrink": "hardshrink"}
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
    # The op under test is the one Paddle emits (PIR renames brelu and hard_shrink).
    expected = legacy_type if ir == "legacy" else "pd_op." + PIR_NAMES.get(legacy_type, legacy_type)
    assert expected in op_names(build, {"x": x}, ir)
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_positive_domain_math(ir, dtype, name):
    pir_call, legacy_type, attrs = POSITIVE[name]
    x = (np.abs(normal((3, 7), dtype)) + 0.1).astype(dtype)
    check_against_paddle(unary(pir_call, legacy_type, attrs), {"x": x}, ir=ir, **TOL[dtype])


# --- log_softmax, prelu -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_log_softmax(ir, dtype, axis):
    x = normal((3, 4, 5), dtype, scale=3.0)
    x[0, 0, 0] = -90.0  # more than 64 below the row's max: Paddle's kernel clips the shifted logit at -64
    build = unary(lambda x: F.log_softmax(x, axis), "log_softmax", {"axis": axis})
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,data_format,xshape,wshape", [
    ("all", "NCHW", (2, 3, 4, 4), (1,)),
    ("channel", "NCHW", (2, 3, 4, 4), (3,)),
    ("channel", "NHWC", (2, 4, 4, 3), (3,)),
    ("element", "NCHW", (2, 3, 4), (1, 3, 4)),
])
def test_prelu(ir, dtype, mode, data_format, xshape, wshape):
    x = with_values(normal(xshape, dtype), [0.0])
    w = normal(wshape, dtype, scale=0.3)

    def build(x, w):
        return static_op(lambda: paddle._C_ops.prelu(x, w, data_format, mode), "prelu", {"X": x, "Alpha": w},
                         {"mode": mode, "data_format": data_format})

    check_against_paddle(build, {"x": x, "w": w}, ir=ir, **TOL[dtype])


# --- gradient clipping ops -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_squared_l2_norm(ir, dtype):
    x = normal((4, 5), dtype)
    build = unary(lambda x: paddle._C_ops.squared_l2_norm(x), "squared_l2_norm")
    check_against_paddle(build, {"x": x}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("max_norm", [0.5, 100.0])  # clipped, and left alone
def test_clip_by_norm(ir, max_norm):
    """float32 only: Paddle's CPU kernel has no float64. No grad op exists."""
    x = normal((4, 5))
    build = unary(lambda x: paddle._C_ops.clip_by_norm(x, max_norm), "clip_by_norm", {"max_norm": max_norm})
    check_against_paddle(build, {"x": x}, ir=ir, grads=False)


# --- losses ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("delta", [1.0, 0.3])
def test_huber_loss(ir, dtype, delta):
    x, y = normal((4, 5), dtype), normal((4, 5), dtype)
    y[0, :2] = x[0, :2] + [delta, -delta]  # on the boundary of the quadratic zone

    def build(x, y):
        out = static_op(lambda: paddle._C_ops.huber_loss(x, y, delta)[0], "huber_loss", {"X": x, "Y": y},
                        {"delta": delta}, outputs=("Out", "Residual"))
        return out[0] if ir == "legacy" else out  # legacy: [Out, Residual]

    check_against_paddle(build, {"x": x, "y": y}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pos_weight", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 1])
def test_sigmoid_cross_entropy_with_logits(ir, dtype, pos_weight, ignore_index):
    x = with_values(normal((4, 5), dtype, scale=3.0), [0.0, -40.0, 40.0])
    label = rng.uniform(0, 1, (4, 5)).astype(dtype)
    label[1, :2] = 1.0  # equal to ignore_index=1: loss and gradient 0
    feeds = {"x": x, "label": label}
    if pos_weight:
        feeds["pw"] = rng.uniform(0.5, 3, (4, 5)).astype(dtype)

    def build(x, label, pw=None):
        inputs = {"X": x, "Label": label, **({"pos_weight": pw} if pw is not None else {})}
        return static_op(lambda: paddle._C_ops.sigmoid_cross_entropy_with_logits(x, label, pw, False, ignore_index),
                         "sigmoid_cross_entropy_with_logits", inputs,
                         {"normalize": False, "ignore_index": ignore_index})

    check_against_paddle(build, feeds, ir=ir, **TOL[dtype])


def test_sigmoid_cross_entropy_with_logits_normalize():
    """normalize=True (legacy fluid only): divided by the number of labels that are not ignored."""
    x, label = normal((4, 5)), rng.uniform(0, 1, (4, 5)).astype("float32")
    label[0, :3] = -1.0

    def build(x, label):
        return static_op(None, "sigmoid_cross_entropy_with_logits", {"X": x, "Label": label},
                         {"normalize": True, "ignore_index": -1})

    check_against_paddle(build, {"x": x, "label": label}, ir="legacy")


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bce_loss(ir, dtype):
    x = rng.uniform(0.02, 0.98, (4, 5)).astype(dtype)
    x[0, :2] = [0.0, 1.0]  # log clamped at -100 (the grad's denominator at 1e-12 would overflow: no grads)
    label = rng.uniform(0, 1, (4, 5)).astype(dtype)

    def build(x, label):
        return static_op(lambda: paddle._C_ops.bce_loss(x, label), "bce_loss", {"X": x, "Label": label})

    check_against_paddle(build, {"x": x, "label": label}, ir=ir, grads=False, **TOL[dtype])
    check_against_paddle(build, {"x": x[1:], "label": label[1:]}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "batchmean", "mean", "sum"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kldiv_loss(ir, dtype, reduction, log_target):
    x = normal((4, 5), dtype)
    target = normal((4, 5), dtype) if log_target else with_values(rng.uniform(0, 1, (4, 5)).astype(dtype), [0.0, -0.5])

    def build(x, target):
        return static_op(lambda: paddle._C_ops.kldiv_loss(x, target, reduction, log_target), "kldiv_loss",
                         {"X": x, "Target": target}, {"reduction": reduction, "log_target": log_target},
                         outputs=("Loss",))

    check_against_paddle(build, {"x": x, "target": target}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
def test_log_loss(ir, dtype="float32"):  # Paddle's CPU kernel is float32 only
    pred, label = rng.uniform(0.05, 0.95, (6, 1)).astype(dtype), rng.integers(0, 2, (6, 1)).astype(dtype)

    def build(pred, label):
        return static_op(lambda: paddle._C_ops.log_loss(pred, label, 1e-4), "log_loss",
                         {"Predicted": pred, "Labels": label}, {"epsilon": 1e-4}, outputs=("Loss",))

    check_against_paddle(build, {"pred": pred, "label": label}, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("spatial", [False, True])
def test_nll_loss(ir, dtype, reduction, weighted, spatial):
    shape, lshape = ((2, 4, 3, 3), (2, 3, 3)) if spatial else ((6, 4), (6,))
    x = normal(shape, dtype)
    label = rng.integers(0, 4, lshape).astype("int64")
    label.reshape(-1)[:2] = -100  # ignored
    feeds = {"x": x, "label": label}
    if weighted:
        feeds["w"] = rng.uniform(0.5, 2, (4,)).astype(dtype)

    def build(x, label, w=None):
        inputs = {"X": x, "Label": label, **({"Weight": w} if w is not None else {})}
        out = static_op(lambda: paddle._C_ops.nll_loss(x, label, w, -100, reduction)[0], "nll_loss", inputs,
                        {"ignore_index": -100, "reduction": reduction}, outputs=("Out", "Total_weight"))
        return out[0] if ir == "legacy" else out  # legacy: [Out, Total_weight]

    check_against_paddle(build, feeds, ir=ir, **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("spatial", [False, True])
def test_nll_loss_label_out_of_range_fails_as_paddle(ir, spatial, backend):
    """Paddle's kernel raises on a label outside [0, C) (other than ignore_index); the one-hot
    selection the converter builds would pick nothing and return a loss: it fails too, naming the
    check and the label."""
    import paddle_ngraph
    from paddle_ngraph.errors import ExecutionError

    from harness import ir_guard, run_function

    shape, lshape = ((2, 4, 3, 3), (2, 3, 3)) if spatial else ((6, 4), (6,))
    x = normal(shape, "float32")
    label = rng.integers(0, 4, lshape).astype("int64")
    label.reshape(-1)[0] = -100  # ignored: fine
    with ir_guard(ir):
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            xv = paddle.static.data("x", list(shape), "float32")
            lv = paddle.static.data("label", list(lshape), "int64")
            out = F.nll_loss(xv, lv)
        exe = paddle.static.Executor(paddle.CPUPlace())
        function = paddle_ngraph.convert(main, fetch_list=[out])
        [ours] = [v for k, v in run_function(function, {"x": x, "label": label}, backend).items() if k.startswith("fetch:")]
        np.testing.assert_allclose(ours, exe.run(main, feed={"x": x, "label": label}, fetch_list=[out])[0], rtol=1e-5, atol=1e-6)
        for bad in (4, -1):
            wrong = label.copy()
            wrong.reshape(-1)[1] = bad
            with pytest.raises(ValueError, match="out of bounds"):
                exe.run(main, feed={"x": x, "label": wrong}, fetch_list=[out])
            with pytest.raises(ExecutionError, match=rf"nll_loss_label_check.*label( {bad})? out of range \[0, 4\)"):
                run_function(function, {"x": x, "label": wrong}, backend)


@pytest.mark.parametrize("dtype", DTYPES)
def test_where(dtype):
    x, y = normal((3, 4), dtype), normal((4,), dtype)
    check_against_paddle(lambda x, y: paddle.where(x > y, x, y), {"x": x, "y": y}, ir="pir", **TOL[dtype])


# --- paddle.nn losses (PIR: their Python APIs refuse legacy Variables) --------------------------------------------
NN_LOSSES = {
    "L1Loss": (lambda x, y: paddle.nn.L1Loss()(x, y), "float"),
    "MSELoss": (lambda x, y: paddle.nn.MSELoss()(x, y), "float"),
    "SmoothL1Loss": (lambda x, y: paddle.nn.SmoothL1Loss(delta=0.5)(x, y), "float"),
    "SmoothL1Loss_sum": (lambda x, y: paddle.nn.SmoothL1Loss("sum")(x, y), "float"),
    "BCELoss": (lambda x, y: paddle.nn.BCELoss()(F.sigmoid(x), y), "prob"),
    "BCEWithLogitsLoss": (lambda x, y: paddle.nn.BCEWithLogitsLoss()(x, y), "prob"),
    "BCEWithLogitsLoss_pos_weight": (lambda x, y: paddle.nn.BCEWithLogitsLoss(
        pos_weight=paddle.full([5], 2.5, x.dtype))(x, y), "prob"),
    "KLDivLoss": (lambda x, y: paddle.nn.KLDivLoss("batchmean")(F.log_softmax(x), F.softmax(y)), "float"),
    "NLLLoss": (lambda x, y: paddle.nn.NLLLoss()(F.log_softmax(x), y), "class"),
    "CrossEntropyLoss_soft": (lambda x, y: paddle.nn.CrossEntropyLoss(soft_label=True)(x, F.softmax(y)), "float"),
    "MarginRankingLoss": (lambda x, y: paddle.nn.MarginRankingLoss(0.1)(x, y, paddle.sign(y)), "float"),
    "HingeEmbeddingLoss": (lambda x, y: paddle.nn.HingeEmbeddingLoss()(x, paddle.sign(y)), "float"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(NN_LOSSES))
def test_nn_loss_layers(dtype, name):
    build, label_kind = NN_LOSSES[name]
    x = normal((6, 5), dtype)
    label = {"float": normal((6, 5), dtype), "prob": rng.uniform(0, 1, (6, 5)).astype(dtype),
             "class": rng.integers(0, 5, (6,)).astype("int64")}[label_kind]
    check_against_paddle(build, {"x": x, "y": label}, ir="pir", **TOL[dtype])


@pytest.mark.parametrize("ir", IRS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_clips_shifted_logits_at_minus_64(ir, dtype):
    """Paddle's softmax clips logits - max at -64: probabilities of e^-64, hard-label losses of 64
    (what a diverging model's loss shows)."""
    x = np.array([[100.0, 0.0, 1.0], [70.0, 0.0, 65.0], [0.5, -0.25, 0.0]], dtype=dtype)
    y = np.array([[1], [2], [0]], dtype="int64")
    tol = dict(rtol=1e-6, atol=1e-30) if dtype == "float32" else dict(rtol=1e-12, atol=1e-40)
    check_against_paddle(lambda x, y: F.cross_entropy(x, y, reduction="none"), {"x": x, "y": y}, ir=ir, **tol)
