"""Under ``mpirun -np 2``, ``unsupported_ops(program)`` is the plan ``transpile`` executes on each
rank: for a legacy sparse embedding trained with SGD, none of the ops (the gradient is computed
dense on the engine; one process leaves its gradient and update to Paddle:
tests/transpiler/test_unsupported_ops_ranks.py); for one with a LoD sequence op the same ops as
the engines' plan (Paddle's dist_ctr pattern)."""
import os
import sys

import pytest

from ranks import run_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "transpiler"))

pytestmark = pytest.mark.distributed


def lod_program():
    """ids (LoD level 1) -> sparse embedding -> sequence_pool(sum) -> fc -> softmax cross-entropy, SGD."""
    import paddle

    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        ids = paddle.static.data("ids", [-1], "int64", lod_level=1)
        label = paddle.static.data("label", [-1, 1], "int64")
        emb = paddle.static.nn.embedding(ids, [20, 4], is_sparse=True)
        pooled = paddle.static.nn.sequence_lod.sequence_pool(emb, pool_type="sum")
        pred = paddle.static.nn.fc(pooled, 2, activation="softmax")
        loss = paddle.mean(paddle.nn.functional.cross_entropy(pred, label, use_softmax=False))
        paddle.optimizer.SGD(0.1).minimize(loss)
    return main, startup


def plans_on_this_rank():
    import paddle

    import paddle_ngraph
    import fallback_models as fm
    import sparse_models as sm
    from harness import ir_guard

    paddle.enable_static()
    out = {}
    for label in ("sparse", "lod"):
        with ir_guard("legacy"):
            main, startup = sm.build("sgd")[:2] if label == "sparse" else lod_program()
            out[label] = (paddle_ngraph.unsupported_ops(main), fm.executed_plan(main, startup))
    return out


def test_unsupported_ops_is_the_plan_executed_on_each_rank():
    for plans in run_ranks(plans_on_this_rank, 2).results:
        for label, (reported, executed) in plans.items():
            assert reported == executed, label
        assert plans["sparse"][0] == []
        assert {r["op_type"] for r in plans["lod"][0]} == {"lookup_table_v2", "sequence_pool", "sequence_pool_grad"}
