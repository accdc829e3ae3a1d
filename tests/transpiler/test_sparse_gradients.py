"""Sparse embedding gradients (selected rows): in one process they stay with Paddle; on several
ranks the engine computes them dense where that trains as Paddle's sparse kernels do, and a typed
ConfigError names the gradient and the op where it would not (transpiler/sparse_gradients.py).
Training on real ranks: tests/distributed/test_dp_sparse_embedding.py."""
import numpy as np
import pytest
import sparse_models as sm

import paddle_ngraph
from harness import assert_trained_close, ir_guard
from paddle_ngraph.backends import backend_for
from paddle_ngraph.errors import ConfigError
from paddle_ngraph.frontend import decode
from paddle_ngraph.frontend.program_view import DENSE
from paddle_ngraph.transpiler.engine_op import is_engine_op
from paddle_ngraph.transpiler.lowering import plan_program
from paddle_ngraph.transpiler.sparse_gradients import densify_sparse_gradients

GRAD = sm.TABLE + "@GRAD"


def legacy_view(opt: str, **kw):
    with ir_guard("legacy"):
        main, _, _ = sm.build(opt, **kw)
        return decode(main)


def test_pir_sparse_embedding_has_a_dense_gradient():
    """Paddle's PIR backward of Embedding(sparse=True) is a dense embedding_grad: nothing to densify."""
    with ir_guard("pir"):
        main, _, _ = sm.build("sgd")
        view = decode(main)
    assert any(op.type == "pd_op.embedding" and op.attrs.get("sparse") for op in view.ops)
    assert [op.type for op in view.ops if op.type.startswith("pd_op.embedding_grad")] == ["pd_op.embedding_grad"] * 3
    assert {info.kind for info in view.vars.values()} == {DENSE}
    assert densify_sparse_gradients(view, 2) == []


def test_legacy_gradient_is_densified_on_ranks_only():
    view = legacy_view("sgd")
    assert view.vars[GRAD].kind == "selected_rows"
    assert densify_sparse_gradients(view, 1) == []  # one process: left to Paddle, as before
    assert view.vars[GRAD].kind == "selected_rows"
    names = densify_sparse_gradients(view, 2)
    lookups = [op for op in view.ops if op.type == "lookup_table_v2_grad"]
    assert len(lookups) == sm.CONTEXT and GRAD in names
    assert set(names) == {GRAD, *(n for op in lookups for n in op.output_names())}
    for name in names:
        info = view.vars[name]
        assert (info.kind, info.declared_kind, info.shape) == (DENSE, "selected_rows", (sm.VOCAB, sm.EMBED))
    assert densify_sparse_gradients(view, 2) == []  # done once


@pytest.mark.parametrize("opt", ["sgd", "sgd_l2"])
def test_whole_program_on_the_engine_on_ranks(opt):
    """Planned for 2 ranks, nothing is left to Paddle; for 1 rank the sparse ops are, as before."""
    for nranks, left in ((2, set()), (1, {"lookup_table_v2_grad", "sum"})):
        view = legacy_view(opt)
        plan, _ = plan_program(view, paddle_ngraph.Config(), nranks, backend_for(paddle_ngraph.Config()))
        assert left <= {op.type for op in plan.fallback}
        if not left:
            assert plan.fallback == [] and len(plan.segments) == 1 and plan.unaveraged == []


@pytest.mark.parametrize("opt, why", [
    ("momentum", "Paddle's CPU Momentum for a selected-rows gradient differs from its dense Momentum"),
    ("nesterov", "Paddle's CPU Momentum for a selected-rows gradient differs from its dense Momentum"),
    ("momentum_l2", "Paddle's CPU Momentum for a selected-rows gradient differs from its dense Momentum"),
    ("adam", "Paddle's CPU Adam for a selected-rows gradient differs from its dense Adam"),
    ("adam_lazy", "lazy_mode=True moves only the rows of the batch's ids"),
    ("adagrad", "'adagrad' is not one of them"),
])
def test_refused_on_ranks_where_dense_differs(opt, why):
    view = legacy_view(opt)
    with pytest.raises(ConfigError) as raised:
        plan_program(view, paddle_ngraph.Config(), 2, backend_for(paddle_ngraph.Config()))
    message = str(raised.value)
    assert f"gradient '{GRAD}' of the sparse embedding table '{sm.TABLE}'" in message
    assert why in message and "on 2 ranks" in message
    assert "Use is_sparse=False" in message
    # One process: left to Paddle, no error.
    plan, _ = plan_program(legacy_view(opt), paddle_ngraph.Config(), 1, backend_for(paddle_ngraph.Config()))
    assert "lookup_table_v2_grad" in {op.type for op in plan.fallback}


@pytest.mark.parametrize("opt", ["momentum", "adam"])
def test_one_process_trains_as_paddle(opt):
    """One process keeps the sparse ops with Paddle and trains as Paddle does."""
    feeds = sm.data(3, 8)
    with ir_guard("legacy"):
        ref_losses, ref = sm.train(opt, feeds)
        losses, got = sm.train(opt, feeds, transpile={})
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for name in ref:
        assert_trained_close(got[name], ref[name], opt, name, lr=sm.LR)


def test_rows_of_a_selected_rows_gradient_as_a_tensor():
    """What a legacy gradient clip reads of a sparse gradient: ``get_tensor_from_selected_rows`` of
    its merged rows, declared with the table's shape but one row per distinct id at run time. The
    engine reads it with a dynamic first dim (it refused the step: "shape [3, 8], the program
    declares [50, 8]") and computes on it as Paddle does."""
    import paddle
    from paddle.nn.clip import get_tensor_from_selected_rows, merge_selected_rows

    ids = np.array([[1], [7], [7], [9]], "int64")
    results = []
    with ir_guard("legacy"):
        for ours in (False, True):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
                words = paddle.static.data("ids", [-1, 1], "int64")
                table = paddle.ParamAttr(name="table", initializer=paddle.nn.initializer.Normal(0.0, 0.5))
                emb = paddle.static.nn.embedding(words, size=[50, 8], is_sparse=True, param_attr=table)
                loss = paddle.mean(paddle.static.nn.fc(paddle.reshape(emb, [-1, 8]), 1))
                grads = dict((p.name, g) for p, g in paddle.static.append_backward(loss))
                rows = get_tensor_from_selected_rows(merge_selected_rows(grads["table"]))
                norm = paddle.mean(paddle.square(paddle.scale(rows, 3.0)))
            assert decode(main).vars[rows.name].shape == (-1, 8)
            with paddle.static.scope_guard(paddle.static.Scope()):
                exe = paddle.static.Executor(paddle.CPUPlace())
                paddle.seed(3)
                exe.run(startup)
                if ours:
                    paddle_ngraph.transpile(main)
                    assert any(is_engine_op(op.type) and rows.name in op.input_arg_names
                               for op in main.global_block().ops)
                results.append(exe.run(main, feed={"ids": ids}, fetch_list=[loss, norm]))
    for got, ref in zip(results[1], results[0]):
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_refused_when_another_op_reads_the_selected_rows():
    """An op other than a sum or an update reading the gradient (as a clip's merge_selected_rows would)."""
    from paddle_ngraph.frontend.program_view import OPTIMIZE, OpView, VarInfo

    view = legacy_view("sgd")
    view.vars["merged"] = VarInfo("merged", None, (), kind="selected_rows")
    view.ops.append(OpView("merge_selected_rows", 0, len(view.ops), OPTIMIZE, inputs={"x": [GRAD]},
                           outputs={"out": ["merged"]}))
    with pytest.raises(ConfigError, match=f"op 'merge_selected_rows'.*gradient '{GRAD}'.*reads it as selected rows") \
            as refused:
        densify_sparse_gradients(view, 2)
    assert "or SGD" not in str(refused.value)  # SGD already; the update is not what differs


@pytest.mark.parametrize("opt, equal", [("sgd", True), ("sgd_l2", True), ("momentum", False), ("adam", False)])
def test_paddle_sparse_update_against_its_dense_update(opt, equal, monkeypatch):
    """Why only SGD is served: Paddle's own training with is_sparse=True equals its is_sparse=False
    training for SGD, and not for Momentum and Adam (a vocabulary of 2074 with ids all over it).
    Should a Paddle release make them equal, this test says so and EQUAL_UPDATES can grow."""
    monkeypatch.setattr(sm, "VOCAB", 2074)
    monkeypatch.setattr(sm, "IDS_USED", 2074)
    feeds = sm.data(2, 32)
    with ir_guard("legacy"):
        _, sparse = sm.train(opt, feeds, sparse=True)
        _, dense = sm.train(opt, feeds, sparse=False)
    difference = float(np.abs(sparse[sm.TABLE] - dense[sm.TABLE]).max())
    assert (difference <= 1e-6) == equal, difference
