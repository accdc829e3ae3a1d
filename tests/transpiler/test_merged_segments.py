"""Ops left to Paddle off the engine's path do not cut a segment: the plan runs them before or after
one segment (``segments._merged_order``), and the program trains as Paddle's executor trains it.

``logcumsumexp`` has no converter. Beside the path it reads a feed (the plan runs it before the
segment); as a metric it reads the logits and nothing reads it back (after the segment, which holds
the backward and the update). On the path it still makes two segments."""
import numpy as np
import paddle
import pytest

import paddle_ngraph
from paddle_ngraph.transpiler.engine_op import is_engine_op

import fallback_models as fm
from harness import IRS, assert_trained_close, ir_guard

STEPS, BATCH = 3, 8


def build(beside: bool, metric: bool, on_path: bool = False, auc: bool = False):
    """x -> Linear -> ReLU -> [logcumsumexp on the path] -> Linear (+ mean of logcumsumexp(x) beside the
    path) -> cross-entropy; the metric logcumsumexp(logits), or with ``auc`` Paddle's own AUC metric
    of two classes (its statistics persistable); SGD. (main, startup, loss, metric)."""
    classes = 2 if auc else fm.CLASSES
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, fm.FEATURES], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.nn.functional.relu(paddle.nn.Linear(fm.FEATURES, fm.HIDDEN)(x))
        if on_path:
            h = paddle.logcumsumexp(h, axis=1)
        shift = paddle.mean(paddle.logcumsumexp(x, axis=1), axis=1, keepdim=True) if beside else None
        logits = paddle.nn.Linear(fm.HIDDEN, classes)(h)
        if shift is not None:
            logits = logits + shift
        loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, y))
        watched = paddle.logcumsumexp(logits, axis=1) if metric else loss
        if auc:
            watched = paddle.static.auc(paddle.nn.functional.softmax(logits), y)[0]
        paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss, watched


def train(ir, transpile=None, rank=0, nranks=1, seed=1, **kind):
    """(op types after transpile, losses, metrics, parameters) of STEPS steps."""
    xs, ys = fm.data(STEPS, BATCH)
    if kind.get("auc"):
        ys = ys % 2
    with ir_guard(ir):
        paddle.seed(seed)
        main, startup, loss, metric = build(**kind)

        def parameters(scope):
            return {n: np.array(scope.find_var(n).get_tensor()) for n in fm.parameter_names(main)}

        losses, params, fetched = fm.run_steps(main, startup, loss, xs, ys, parameters, transpile, rank, nranks,
                                               fetch=[metric])
        types = [op.name() if ir == "pir" else op.type for op in main.global_block().ops]
    return types, losses, [values[0] for values in fetched], params


def check_equal_to_paddle(ir, backend, **kind):
    _, ref_losses, ref_metrics, ref_params = train(ir, **kind)
    types, losses, metrics, params = train(ir, transpile={"backend": backend}, **kind)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(metrics, ref_metrics):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for name in ref_params:
        assert_trained_close(params[name], ref_params[name], "sgd", name, lr=0.1)
    return types


def positions(types, name):
    return [i for i, t in enumerate(types) if t.rpartition(".")[2] == name]


@pytest.mark.parametrize("ir", IRS)
def test_an_op_beside_the_path_runs_before_the_one_segment(ir, backend):
    types = check_equal_to_paddle(ir, backend, beside=True, metric=False)
    engines = [i for i, t in enumerate(types) if is_engine_op(t)]
    assert len(engines) == 1, types
    assert positions(types, "logcumsumexp")[0] < engines[0], types


@pytest.mark.parametrize("ir", IRS)
def test_a_metric_of_the_forward_runs_after_the_one_segment(ir, backend):
    types = check_equal_to_paddle(ir, backend, beside=False, metric=True)
    engines = [i for i, t in enumerate(types) if is_engine_op(t)]
    assert len(engines) == 1, types
    assert positions(types, "logcumsumexp")[0] > engines[0], types


@pytest.mark.parametrize("ir", IRS)
def test_paddles_auc_metric_runs_after_the_one_segment(ir):
    """Paddle's own metric op (no converter; two in legacy, the batch's and the global one), which
    updates its persistable statistics every step: after the forward, backward and update."""
    types = check_equal_to_paddle(ir, "CPU", beside=False, metric=False, auc=True)
    engines = [i for i, t in enumerate(types) if is_engine_op(t)]
    assert len(engines) == 1, types
    assert positions(types, "auc") and min(positions(types, "auc")) > engines[0], types


@pytest.mark.parametrize("ir", IRS)
def test_both_at_once_and_the_plan_says_so(ir):
    types = check_equal_to_paddle(ir, "CPU", beside=True, metric=True)
    assert sum(map(is_engine_op, types)) == 1, types
    with ir_guard(ir):
        main, *_ = build(beside=True, metric=True)
        left = paddle_ngraph.unsupported_ops(main)
    assert [(r["op_type"].rpartition(".")[2], r["count"]) for r in left] == [("logcumsumexp", 2)]


@pytest.mark.parametrize("ir", IRS)
def test_an_op_on_the_path_still_cuts_the_program(ir):
    """Its output is read by the rest of the forward, its input made by the first layer: it can move
    neither way (and its gradient, in Paddle too, cuts the backward)."""
    types = check_equal_to_paddle(ir, "CPU", beside=False, metric=False, on_path=True)
    assert sum(map(is_engine_op, types)) == 3, types


@pytest.mark.distributed
def test_two_ranks_equal_one_process_on_the_whole_batch():
    """The one segment averages every gradient, with the Paddle ops moved around it."""
    from ranks import run_ranks

    ranks = run_ranks(_train_on_this_rank, 2).results
    for ir in IRS:
        _, ref_losses, ref_metrics, ref_params = train(ir, beside=True, metric=True)
        got = [rank[ir] for rank in ranks]
        np.testing.assert_allclose(np.mean([g["losses"] for g in got], axis=0), ref_losses, rtol=1e-5, atol=1e-6)
        for name, ref in ref_params.items():
            assert np.array_equal(got[0]["params"][name], got[1]["params"][name]), f"{ir} {name}: ranks differ"
            assert_trained_close(got[0]["params"][name], ref, "sgd", name, lr=0.1, norm_tol=1e-5, elementwise=False)
        assert all(g["engines"] == 1 for g in got)



def _train_on_this_rank():
    import os

    paddle.enable_static()
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    out = {}
    for ir in IRS:
        # Each rank starts from its own initialization: transpile broadcasts rank 0's.
        types, losses, _, params = train(ir, transpile={"backend": "CPU"}, rank=rank, nranks=size, seed=1 + rank,
                                         beside=True, metric=True)
        out[ir] = {"losses": losses.tolist(), "params": params, "engines": sum(map(is_engine_op, types))}
    return out
