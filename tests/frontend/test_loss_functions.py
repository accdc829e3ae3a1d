"""Every loss of paddle.nn.functional that Paddle runs on the CPU, as Paddle builds it, in both
IRs: (a) every op of the training program (forward and gradients) converts, nothing is left to
Paddle; (b) forward and gradients equal Paddle's executor, float32 and float64, on both
backends (tests/conftest.py).

PIR programs come from the F.* calls themselves. Legacy programs: Paddle 3.3.1's Python refuses
legacy Variables in most of these functions (it calls PIR-only ops such as ``sum``/``multiply``),
so a legacy case is either the F.* call where its legacy branch still works, or the ops that
branch appends, spelled with LayerHelper (``legacy`` below). Losses whose legacy branch Paddle
3.3.1 cannot build at all are PIR-only here (``LEGACY_UNBUILDABLE``); the legacy ops they would
be made of (elementwise, reductions) have their own tests.

F.ctc_loss is not here: its op, warpctc, is left to Paddle (no converter).
"""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_ngraph
from harness import IRS, check_against_paddle, ir_guard, static_op
from helpers import TOL, normal_sampler

rng = np.random.default_rng(7)
normal = normal_sampler(rng)
N, C = 6, 5
DTYPES = ["float32", "float64"]


# --- inputs -----------------------------------------------------------------------------------------------------
def probabilities(shape, dtype):
    return rng.uniform(0.05, 0.95, shape).astype(dtype)


def classes(shape, ignored=None):
    label = rng.integers(0, C, shape).astype("int64")
    if ignored is not None:
        label.reshape(-1)[:2] = ignored  # two ignored entries
    return label


def signs(shape, dtype):
    return np.where(rng.standard_normal(shape) > 0, 1.0, -1.0).astype(dtype)


def binary(shape, dtype):
    return rng.integers(0, 2, shape).astype(dtype)


# --- legacy ops through LayerHelper ----------------------------------------------------------------------------
def op(op_type, inputs, attrs=None, outputs=("Out",), dtype=None):
    """One legacy op appended through LayerHelper (static_op without a PIR call)."""
    return static_op(None, op_type, inputs, attrs or {}, outputs=outputs, dtype=dtype)


def softmax(x, axis=-1):
    return static_op(lambda: F.softmax(x, axis), "softmax", {"X": x}, {"axis": axis})


def legacy_cross_entropy(x, label, use_softmax=True, soft_label=False, ignore_index=-100, axis=-1):
    """F.cross_entropy's legacy op: softmax_with_cross_entropy, its Loss output."""
    attrs = dict(use_softmax=use_softmax, soft_label=soft_label, ignore_index=ignore_index, axis=axis,
                 numeric_stable_mode=True)
    return op("softmax_with_cross_entropy", {"Logits": x, "Label": label}, attrs, outputs=("Loss", "Softmax"))[0]


def reduce(x, how):
    return op("reduce_" + how, {"X": x}, {"dim": [], "reduce_all": True, "keep_dim": False})


def legacy_weighted_mean(loss, label, weight, ignore_index):
    """F.cross_entropy's legacy weighted mean: sum(w[label] * loss) / sum(w[label]), ignored
    labels weighing 0 (gather_nd of the weights at the labels, masked)."""
    code, name = (2, "int32") if label.dtype == paddle.int32 else (3, "int64")
    valid = op("not_equal", {"X": label, "Y": op("fill_any_like", {"X": label}, {"value": ignore_index, "dtype": code})},
               dtype="bool")
    mask = op("cast", {"X": valid}, {"in_dtype": 0, "out_dtype": code}, dtype=name)
    safe = op("elementwise_mul", {"X": mask, "Y": label}, {"axis": -1})
    picked = op("gather_nd", {"X": weight, "Index": safe}, dtype=weight.dtype)
    dtype_code = 5 if weight.dtype == paddle.float32 else 6
    picked = op("elementwise_mul", {"X": picked, "Y": op("cast", {"X": op("reshape2", {"X": valid}, {"shape": [-1]},
                                                                            outputs=("Out", "XShape"), dtype="bool")[0]},
                                                        {"in_dtype": 0, "out_dtype": dtype_code}, dtype=weight.dtype)},
                {"axis": -1})
    column = op("reshape2", {"X": picked}, {"shape": [-1, 1]}, outputs=("Out", "XShape"))[0]
    weighted = op("elementwise_mul", {"X": loss, "Y": column}, {"axis": -1})
    return op("elementwise_div", {"X": reduce(weighted, "sum"), "Y": reduce(column, "sum")}, {"axis": -1})


# --- the table: name -> (PIR build, legacy build or None, feeds(dtype)) ------------------------------------------
def ce_probabilities(reduction="mean", ignore_index=-100):
    def pir(x, y):
        return F.cross_entropy(F.softmax(x), y, use_softmax=False, reduction=reduction, ignore_index=ignore_index)

    def legacy(x, y):
        loss = legacy_cross_entropy(softmax(x), y, use_softmax=False, ignore_index=ignore_index)
        return loss if reduction == "none" else reduce(loss, reduction)
    return pir, legacy, lambda d: {"x": normal((N, C), d), "y": classes((N, 1), ignored=ignore_index)}


def ce_weighted(use_softmax, ignore_index):
    def pir(x, y, w):
        p = x if use_softmax else F.softmax(x)
        return F.cross_entropy(p, y, weight=w, use_softmax=use_softmax, ignore_index=ignore_index)

    def legacy(x, y, w):
        loss = legacy_cross_entropy(x if use_softmax else softmax(x), y, use_softmax=use_softmax,
                                    ignore_index=ignore_index)
        return legacy_weighted_mean(loss, y, w, ignore_index)
    return pir, legacy, lambda d: {"x": normal((N, C), d), "y": classes((N, 1), ignored=ignore_index),
                                   "w": rng.uniform(0.5, 2, (C,)).astype(d)}


def ce_soft(use_softmax):
    def pir(x, y):
        return F.cross_entropy(x if use_softmax else F.softmax(x), F.softmax(y), soft_label=True, use_softmax=use_softmax)

    def legacy(x, y):
        loss = legacy_cross_entropy(x if use_softmax else softmax(x), softmax(y), use_softmax=use_softmax,
                                    soft_label=True)
        return reduce(loss, "mean")
    return pir, legacy, lambda d: {"x": normal((N, C), d), "y": normal((N, C), d)}


def ce_axis1(use_softmax):
    def pir(x, y):
        return F.cross_entropy(x if use_softmax else F.softmax(x, 1), y, axis=1, use_softmax=use_softmax,
                               reduction="none")

    def legacy(x, y):
        return legacy_cross_entropy(x if use_softmax else softmax(x, 1), y, use_softmax=use_softmax, axis=1)
    return pir, legacy, lambda d: {"x": normal((2, C, 3), d), "y": classes((2, 1, 3))}


def same(call):
    """A loss whose F.* call builds in both IRs."""
    return call, call


def label_smooth_entry(prior):
    def pir(x, p=None):
        return F.label_smooth(F.softmax(x), prior_dist=p, epsilon=0.1)

    def legacy(x, p=None):
        inputs = {"X": softmax(x), **({"PriorDist": p} if p is not None else {})}
        return op("label_smooth", inputs, {"epsilon": 0.1})
    feeds = (lambda d: {"x": normal((N, C), d), "p": probabilities((1, C), d)}) if prior else \
        (lambda d: {"x": normal((N, C), d)})
    return pir, legacy, feeds


def far_label_logits(d):
    x, y = normal((N, C), d), classes((N, 1))
    rows = np.arange(0, N, 2)
    x[rows, y[rows, 0]] = x[rows].max(axis=1) - 100
    return {"x": x, "y": y}


def pairs(d):
    return {"x": normal((N, C), d), "y": normal((N, C), d)}


def triplets(d):
    return {"a": normal((N, C), d), "p": normal((N, C), d), "n": normal((N, C), d)}


LOSSES = {
    "cross_entropy_probabilities": ce_probabilities(),
    "cross_entropy_probabilities_none": ce_probabilities("none"),
    "cross_entropy_probabilities_sum_ignore": ce_probabilities("sum", ignore_index=2),
    "cross_entropy_probabilities_soft": ce_soft(use_softmax=False),
    "cross_entropy_probabilities_weighted_ignore": ce_weighted(use_softmax=False, ignore_index=1),
    "cross_entropy_probabilities_axis1": ce_axis1(use_softmax=False),
    "cross_entropy_soft": ce_soft(use_softmax=True),
    "cross_entropy_weighted": ce_weighted(use_softmax=True, ignore_index=-100),
    "cross_entropy_weighted_ignore": ce_weighted(use_softmax=True, ignore_index=3),
    "cross_entropy_axis1": ce_axis1(use_softmax=True),
    # Label logits 100 below their row's maximum: Paddle clips the shifted logit at -64.
    "cross_entropy_far_label_logits": (lambda x, y: F.cross_entropy(x, y, reduction="none"),
                                       lambda x, y: legacy_cross_entropy(x, y), far_label_logits),
    "nll_loss": (*same(lambda x, y: F.nll_loss(x, y)), lambda d: {"x": normal((N, C), d), "y": classes((N,))}),
    # ignore_index -100: Paddle 3.3.1's own legacy float64 nll_loss with a non-negative ignore_index
    # (and ignored labels) corrupts its heap ("malloc(): invalid size").
    "log_softmax_nll_loss": (*same(lambda x, y: F.nll_loss(F.log_softmax(x), y)),
                             lambda d: {"x": normal((N, C), d), "y": classes((N,), ignored=-100)}),
    "label_smooth": label_smooth_entry(prior=False),
    "label_smooth_prior": label_smooth_entry(prior=True),
    "binary_cross_entropy": (*same(lambda x, y: F.binary_cross_entropy(x, y)),
                             lambda d: {"x": probabilities((N, C), d), "y": probabilities((N, C), d)}),
    "binary_cross_entropy_weight": (lambda x, y, w: F.binary_cross_entropy(x, y, weight=w, reduction="sum"), None,
                                    lambda d: {"x": probabilities((N, C), d), "y": probabilities((N, C), d),
                                               "w": probabilities((N, C), d)}),
    "binary_cross_entropy_with_logits": (*same(lambda x, y: F.binary_cross_entropy_with_logits(x, y)),
                                         lambda d: {"x": normal((N, C), d, 3.0), "y": probabilities((N, C), d)}),
    "binary_cross_entropy_with_logits_weights": (
        lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw), None,
        lambda d: {"x": normal((N, C), d, 3.0), "y": probabilities((N, C), d), "w": probabilities((N, C), d),
                   "pw": rng.uniform(0.5, 3, (C,)).astype(d)}),
    "mse_loss": (*same(lambda x, y: F.mse_loss(x, y)), pairs),
    "square_error_cost": (*same(lambda x, y: F.square_error_cost(x, y)), pairs),
    "l1_loss": (lambda x, y: F.l1_loss(x, y), None, pairs),
    "smooth_l1_loss": (*same(lambda x, y: F.smooth_l1_loss(x, y, delta=0.5)), pairs),
    "kl_div": (lambda x, y: F.kl_div(F.log_softmax(x), y, reduction="batchmean"), None,
               lambda d: {"x": normal((N, C), d), "y": probabilities((N, C), d)}),
    "margin_ranking_loss": (lambda x, y, s: F.margin_ranking_loss(x, y, s, margin=0.1), None,
                            lambda d: {"x": normal((N,), d), "y": normal((N,), d), "s": signs((N,), d)}),
    "cosine_embedding_loss": (lambda x, y, s: F.cosine_embedding_loss(x, y, s, margin=0.2), None,
                              lambda d: {"x": normal((N, C), d), "y": normal((N, C), d),
                                         "s": signs((N,), "int64")}),
    "triplet_margin_loss": (*same(lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=1.5)), triplets),
    "triplet_margin_loss_p1_swap": (lambda a, p, n: F.triplet_margin_loss(a, p, n, p=1.0, swap=True, reduction="sum"),
                                    None, triplets),
    "hinge_embedding_loss": (*same(lambda x, s: F.hinge_embedding_loss(x, s, margin=0.5)),
                             lambda d: {"x": normal((N, C), d), "s": signs((N, C), d)}),
    "soft_margin_loss": (lambda x, s: F.soft_margin_loss(x, s), None,
                         lambda d: {"x": normal((N, C), d), "s": signs((N, C), d)}),
    "multi_label_soft_margin_loss": (*same(lambda x, y: F.multi_label_soft_margin_loss(x, y)),
                                     lambda d: {"x": normal((N, C), d), "y": binary((N, C), d)}),
    "sigmoid_focal_loss": (lambda x, y: F.sigmoid_focal_loss(x, y), None,
                           lambda d: {"x": normal((N, C), d), "y": binary((N, C), d)}),
    "sigmoid_focal_loss_normalizer": (lambda x, y, z: F.sigmoid_focal_loss(x, y, normalizer=z, reduction="mean"), None,
                                      lambda d: {"x": normal((N, C), d), "y": binary((N, C), d),
                                                 "z": np.array([3.0], d)}),
    "log_loss": (*same(lambda x, y: F.log_loss(x, y)),
                 lambda d: {"x": probabilities((N, 1), d), "y": binary((N, 1), d)}),
}
# Paddle's CPU log_loss kernel is float32 only.
FLOAT32_ONLY = {"log_loss"}
# In legacy mode Paddle 3.3.1's Python for these calls PIR-only ops (multiply, sum, abs, exp, sigmoid, minimum).
LEGACY_UNBUILDABLE = {name for name, (_, legacy, _) in LOSSES.items() if legacy is None}


def cases():
    for name in sorted(LOSSES):
        for dtype in DTYPES:
            if dtype == "float64" and name in FLOAT32_ONLY:
                continue
            for ir in IRS:
                if ir == "legacy" and name in LEGACY_UNBUILDABLE:
                    continue
                yield pytest.param(name, dtype, ir, id=f"{name}-{dtype}-{ir}")


def builder(name, ir):
    pir, legacy, _ = LOSSES[name]
    return pir if ir == "pir" else legacy


def training_program(build, ir, feeds):
    """The loss ``build`` makes, with the gradients of its floating-point inputs, as Paddle builds it."""
    with ir_guard(ir):
        main = paddle.static.Program()
        with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, paddle.static.Program()):
            xs = {n: paddle.static.data(n, list(v.shape), str(v.dtype)) for n, v in feeds.items()}
            for n, v in feeds.items():
                xs[n].stop_gradient = not np.issubdtype(v.dtype, np.floating)
            out = build(**xs)
            total = static_op(lambda: paddle.sum(out), "reduce_sum", {"X": out},
                              {"dim": [], "reduce_all": True, "keep_dim": False})
            paddle.static.gradients([total], [v for v in xs.values() if not v.stop_gradient])
    return main


@pytest.mark.parametrize("name,dtype,ir", cases())
def test_loss_runs_entirely_on_the_engine(name, dtype, ir):
    feeds = LOSSES[name][2](dtype)
    main = training_program(builder(name, ir), ir, feeds)
    with ir_guard(ir):
        assert paddle_ngraph.unsupported_ops(main) == []
        paddle_ngraph.convert(main)  # a converter's refusal raises RefusedOpError


@pytest.mark.parametrize("name,dtype,ir", cases())
def test_loss_matches_paddle(name, dtype, ir):
    feeds = LOSSES[name][2](dtype)
    check_against_paddle(builder(name, ir), feeds, ir=ir, **TOL[dtype])


# Paddle's nll_loss kernel reads int64 labels only: with int32 ones Paddle itself fails (legacy at
# build time, PIR at run time).
INT64_LABELS_ONLY = {"nll_loss", "log_softmax_nll_loss"}


def int32_label_cases():
    for name in sorted(LOSSES):
        feeds = LOSSES[name][2]("float32")
        if name in INT64_LABELS_ONLY or not any(v.dtype == np.int64 for v in feeds.values()):
            continue
        for ir in IRS:
            if not (ir == "legacy" and name in LEGACY_UNBUILDABLE):
                yield pytest.param(name, ir, id=f"{name}-{ir}")


@pytest.mark.parametrize("name,ir", int32_label_cases())
def test_loss_with_int32_labels_matches_paddle(name, ir):
    """Every loss taking class (or sign) labels takes them int32 as Paddle does."""
    feeds = {k: v.astype("int32") if v.dtype == np.int64 else v for k, v in LOSSES[name][2]("float32").items()}
    check_against_paddle(builder(name, ir), feeds, ir=ir, **TOL["float32"])


def test_ctc_loss_is_left_to_paddle():
    """warpctc has no converter: it runs in Paddle, the rest of the program on the engine."""
    feeds = {"lp": normal((7, 2, C)), "lab": rng.integers(1, C, (2, 3)).astype("int32"),
             "il": np.array([7, 6], "int64"), "ll": np.array([3, 2], "int64")}
    main = training_program(lambda lp, lab, il, ll: F.ctc_loss(lp, lab, il, ll), "pir", feeds)
    with ir_guard("pir"):
        assert {u["op_type"] for u in paddle_ngraph.unsupported_ops(main)} == {"pd_op.warpctc", "pd_op.warpctc_grad"}
